/** Expiry values and their lengths (D5); `never` is null (D4). */

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

export const EXPIRY_LENGTHS = {
  '10m': 10 * MINUTE,
  '30m': 30 * MINUTE,
  '1h': HOUR,
  '3h': 3 * HOUR,
  '6h': 6 * HOUR,
  '12h': 12 * HOUR,
  '1d': DAY,
  '2d': 2 * DAY,
  '3d': 3 * DAY,
  '1w': 7 * DAY,
  '2w': 14 * DAY,
  '1m': 30 * DAY,
  never: null,
} as const satisfies Record<string, number | null>;

export type Expiry = keyof typeof EXPIRY_LENGTHS;

export const EXPIRY_VALUES = Object.keys(EXPIRY_LENGTHS) as Expiry[];

export const DEFAULT_EXPIRY: Expiry = '1d';

export function isExpiry(value: string): value is Expiry {
  return Object.hasOwn(EXPIRY_LENGTHS, value);
}

/**
 * When a paste made (or re-timed) at `now` expires; null for `never`. Counted from the whole
 * second of `now`: D3 reports times to the second, so the instant a paste goes (D12: 404 at
 * `expires_at`) is the instant its `expires_at` says, not up to 999 ms after it, and
 * `expires_at` is `created_at` (or the update's second) plus the length exactly.
 */
export function expiresAt(expiry: Expiry, now: number): number | null {
  const length = EXPIRY_LENGTHS[expiry];
  return length === null ? null : Math.floor(now / 1000) * 1000 + length;
}

/** D12: a paste is gone from the instant its `expires_at` is reached. */
export function isExpired(expiresAtMs: number | null, now: number): boolean {
  return expiresAtMs !== null && expiresAtMs <= now;
}
