/**
 * Whether an error means a backing service (PostgreSQL, Redis, a locked SQLite file) is out of
 * reach rather than a bug: such a request fails fast with 503 and the service recovers by itself
 * when the backend returns (pg's pool reconnects, ioredis reconnects).
 */

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** PostgreSQL's connection exceptions (08) and a backend terminated or shut down (57P01-03). */
const CONNECTION_LOST_SQLSTATE = /^(08|57P0[1-3])/;

export function isBackendUnavailable(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    if (NETWORK_CODES.has(code)) return true;
    // PostgreSQL: connection exceptions (08), operator intervention (57P01-03: shutdown; 57014:
    // a statement cancelled at statement_timeout), a lock not had in time (55P03), insufficient
    // resources (53).
    if (CONNECTION_LOST_SQLSTATE.test(code) || /^53/.test(code) || code === '57014' || code === '55P03') return true;
    if (code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED') return true;
  }
  if (typeof message === 'string') {
    return /Connection terminated|timeout exceeded when trying to connect|Query read timeout|connection is closed|Connection is closed|Client has encountered a connection error/i.test(
      message,
    );
  }
  return false;
}

/**
 * Whether an error means the storage has no room left: SQLite's database or disk full
 * (`SQLITE_FULL`, also for a disk that met ENOSPC), PostgreSQL's `disk_full` (53100), a write
 * that met ENOSPC, Redis at its `maxmemory` with nothing to evict (OOM). Nothing was stored; the request is 503 and the operator is told.
 */
export function isStorageFull(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_FULL' || code === '53100' || code === 'ENOSPC' || redisReply(err, /^OOM /);
}

/** Whether `err` is a Redis error reply (ioredis's ReplyError) whose text matches `pattern`. */
function redisReply(err: unknown, pattern: RegExp): boolean {
  const { name, message } = (err ?? {}) as { name?: unknown; message?: unknown };
  return name === 'ReplyError' && typeof message === 'string' && pattern.test(message);
}

/**
 * Whether an error means the storage will not take writes or cannot do its I/O, a state only the
 * operator ends: SQLite's read-only database (`SQLITE_READONLY*`: a database file moved,
 * replaced or deleted under the server, a file opened read-only) or I/O error (`SQLITE_IOERR*`: a
 * failing disk or network file system), PostgreSQL's read-only transaction (25006: a server that
 * became a standby after a failover, or `default_transaction_read_only` set on it) or I/O error
 * (58030); Redis's READONLY (a replica after a failover) and MISCONF (it cannot save). The
 * statement did nothing; the request is 503 and the operator is told.
 */
export function isStorageRefusingWrites(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return redisReply(err, /^(READONLY|MISCONF) /);
  return /^SQLITE_(READONLY|IOERR)/.test(code) || code === '25006' || code === '58030';
}

/**
 * Whether a failure is the environment's (a backend out of reach, storage full or refusing
 * writes): the same for every request while it lasts, answered 503 and logged by kind
 * (http/error-log.ts), not a fault of the request or of ours.
 */
export function isEnvironmentFailure(err: unknown): boolean {
  return isBackendUnavailable(err) || isStorageFull(err) || isStorageRefusingWrites(err);
}

/**
 * Whether a failed statement was refused by PostgreSQL itself (an error with its SQLSTATE): it
 * then ended in a rollback, so nothing of it was written. A connection exception or a backend
 * terminated may come at any moment, and a lost connection or a client's time-out has no
 * SQLSTATE: such a statement may have committed.
 */
export function refusedByDatabase(err: unknown): boolean {
  const { code, severity } = (err ?? {}) as { code?: unknown; severity?: unknown };
  return (
    typeof severity === 'string' &&
    typeof code === 'string' &&
    /^[0-9A-Z]{5}$/.test(code) &&
    !CONNECTION_LOST_SQLSTATE.test(code)
  );
}
