/** Fixed UTC calendar windows (D20): the hour, the day and the month that contain an instant. */

export type WindowKind = 'hourly' | 'daily' | 'monthly';

export const WINDOW_KINDS: WindowKind[] = ['hourly', 'daily', 'monthly'];

export interface WindowBounds {
  start: number;
  end: number;
}

/** The window of that kind containing `now`; months roll over December to January too. */
export function windowAt(kind: WindowKind, now: number): WindowBounds {
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  switch (kind) {
    case 'hourly': {
      const start = Date.UTC(y, m, d.getUTCDate(), d.getUTCHours());
      return { start, end: start + 3_600_000 };
    }
    case 'daily': {
      const start = Date.UTC(y, m, d.getUTCDate());
      return { start, end: start + 86_400_000 };
    }
    case 'monthly':
      return { start: Date.UTC(y, m, 1), end: Date.UTC(y, m + 1, 1) };
  }
}
