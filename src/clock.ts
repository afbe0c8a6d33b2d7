/** The source of "now" in milliseconds since the epoch; tests inject their own to move time. */
export type Clock = () => number;

export const systemClock: Clock = () => Date.now();

/** D3: UTC, `YYYY-MM-DD HH:MM:SS`. */
export function formatTimestamp(ms: number): string {
  // A list of 20 pastes formats 40 of these: the date is looked up by day (Date and its ISO
  // string cost about 200 ns each time), the time of day is arithmetic.
  const day = Math.floor(ms / DAY_MS);
  let date = DATES.get(day);
  if (date === undefined) {
    if (DATES.size >= 10_000) DATES.clear();
    date = new Date(day * DAY_MS).toISOString().slice(0, 10);
    DATES.set(day, date);
  }
  const seconds = Math.floor((ms - day * DAY_MS) / 1000);
  const h = Math.floor(seconds / 3600);
  const m = Math.floor(seconds / 60) % 60;
  const s = seconds % 60;
  return `${date} ${h < 10 ? '0' : ''}${h}:${m < 10 ? '0' : ''}${m}:${s < 10 ? '0' : ''}${s}`;
}

const DAY_MS = 86_400_000;
/** 'YYYY-MM-DD' by day number since the epoch. */
const DATES = new Map<number, string>();
