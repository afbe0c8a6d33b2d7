/**
 * Back-off between webhook attempts: doubling from a base (30 s in production), capped at 720
 * times the base (6 h), with ±20% jitter so that receivers coming back are not hit by every
 * sender at once. 16 attempts span about 38 hours at the production base; a receiver's
 * Retry-After is respected when it asks for longer.
 */

export const MAX_ATTEMPTS = 16;
const CAP_FACTOR = 720;
const MAX_RETRY_AFTER_MS = 24 * 3_600_000;

/** The wait before attempt `attemptsDone + 1`. */
export function retryDelayMs(
  attemptsDone: number,
  baseMs: number,
  retryAfterMs: number | null,
  random: () => number = Math.random,
): number {
  const exponential = Math.min(baseMs * 2 ** Math.max(0, attemptsDone - 1), baseMs * CAP_FACTOR);
  const jittered = Math.round(exponential * (0.8 + 0.4 * random()));
  if (retryAfterMs === null) return jittered;
  return Math.max(jittered, Math.min(retryAfterMs, MAX_RETRY_AFTER_MS));
}
