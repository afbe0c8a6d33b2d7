/** The source of "now" in milliseconds since the epoch; tests inject their own to move time. */
export type Clock = () => number;

export const systemClock: Clock = () => Date.now();

/** D3: UTC, `YYYY-MM-DD HH:MM:SS`. */
export function formatTimestamp(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
}
