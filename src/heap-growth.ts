/**
 * How far V8 lets old space grow past what its last mark-compact left live, set by the storage
 * the server runs on.
 *
 * On PostgreSQL, about 1.5 KB of every answer outlives two young collections (--trace-gc-nvp:
 * 95% of what survives one scavenge survives the next, against 9% on SQLite), so old space fills
 * with garbage at about 6 MB a second under load. V8's default factor then lets old space grow
 * to three or four times the ~25 MB that is live before it marks, and the server's peak RSS
 * through the benchmark was 183–187 MB. Growing by half instead keeps it at 124–133 MB for
 * about the same main-thread time in the collector (6.7% of the run's CPU with V8's default, 6.9%
 * with this). V8's own factor is lower on hosts with little memory, so the gain is smaller there. On SQLite nothing
 * per request is promoted and the peak is 130 MB either way, so V8's default stays (an earlier
 * measurement there found the lower factor slowed /raw).
 *
 * The flag cannot be given in NODE_OPTIONS, so the server sets it itself, before it opens
 * storage; V8 reads it whenever it recomputes the limit after a mark-compact.
 */
import { setFlagsFromString } from 'node:v8';

/** Old space may grow to 1.5 times what is live before the next mark-compact. */
export const POSTGRES_HEAP_GROWING_PERCENT = 50;

/** A node flag that sets the factor itself (V8 takes `_` for `-` in its names, and one dash). */
const SETS_GROWTH = /^--?heap[-_]growing[-_]percent(=|$)/;

/**
 * The V8 flags the server sets for the database at `databaseUrl`; none when node was started
 * with its own `--heap-growing-percent` (in `execArgv`), which stands.
 */
export function heapFlagsFor(databaseUrl: string, execArgv: readonly string[] = process.execArgv): string[] {
  if (databaseUrl.startsWith('sqlite:') || execArgv.some((arg) => SETS_GROWTH.test(arg))) return [];
  return [`--heap-growing-percent=${POSTGRES_HEAP_GROWING_PERCENT}`];
}

/** Sets heapFlagsFor(databaseUrl) in this process's V8. */
export function tuneHeapFor(databaseUrl: string): void {
  for (const flag of heapFlagsFor(databaseUrl)) setFlagsFromString(flag);
}
