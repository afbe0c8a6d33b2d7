/**
 * What the machine or a backend refused a command (a port in use, a database out of reach or
 * refusing the login, a host that does not resolve), told as one line rather than a stack.
 */
import { isBackendUnavailable } from '../storage/unavailable.js';

/** A refusal already told as the setting's (asDatabaseUrlRefusal): its message is the line. */
class NamedRefusal extends Error {}

/**
 * An error with a system code (EADDRINUSE, ECONNREFUSED, ENOTFOUND…) or a SQLSTATE (28P01…), or a
 * connection pg gave up without one (a host that never answers, a port where no PostgreSQL
 * speaks, TLS refused, no password for its login).
 */
export function isRefusal(err: unknown): boolean {
  if (err instanceof NamedRefusal) return true;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && (/^(E[A-Z]+|[0-9A-Z]{5})$/.test(code) || isSqliteRefusal(code))) return true;
  return isBackendUnavailable(err) || tlsOrLoginRefused(code, (err as { message?: unknown } | null)?.message);
}

/**
 * PostgreSQL's refusals of the connection DATABASE_URL describes, by SQLSTATE class: connection
 * exceptions (08), a login refused (28), no such database (3D), too many connections (53300),
 * the server shutting down (57P01-03). A statement refused otherwise (a
 * migration's fault, say) is not the setting's.
 */
const CONNECTION_SQLSTATE = /^(08|28|3D|53300|57P0[1-3])/;

/**
 * The connection's TLS refused (a certificate not trusted, or not for the host: Node's codes), or
 * a login pg cannot even try (SCRAM with no password in DATABASE_URL): no SQLSTATE, no E-code.
 */
const tlsOrLoginRefused = (code: unknown, message: unknown): boolean =>
  (typeof code === 'string' && /CERT|SELF_SIGNED|^UNABLE_TO_|^ERR_TLS_/.test(code)) ||
  (typeof message === 'string' && /does not support SSL|^SASL: |password must be a string/.test(message));

/** Whether `err` is the database DATABASE_URL names refusing to be reached, opened or logged into. */
function isDatabaseUrlRefusal(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string') {
    if (/^E[A-Z]+$/.test(code) || isSqliteRefusal(code) || CONNECTION_SQLSTATE.test(code)) return true;
    if (/^[0-9A-Z]{5}$/.test(code)) return false;
  }
  return isBackendUnavailable(err) || tlsOrLoginRefused(code, (err as { message?: unknown } | null)?.message);
}

/**
 * Runs `work`, the opening of the database (and its migrations); a refusal of the database it
 * meets is told as DATABASE_URL's (D2: the line names the setting), once, the error it replaces
 * kept as its cause. Any other failure (a fault of a migration's own) goes on as it is.
 */
export async function asDatabaseUrlRefusal<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (!isDatabaseUrlRefusal(err)) throw err;
    const message = refusalMessage(err as Error);
    throw message.startsWith('DATABASE_URL:') ? err : new NamedRefusal(`DATABASE_URL: ${message}`, { cause: err });
  }
}

/**
 * SQLite refusing the file DATABASE_URL names (it cannot be opened, is no database, is damaged,
 * read-only, full, locked by another process, failing on the disk), with any extended code. Any
 * other SQLite error (SQLITE_ERROR from a statement, a constraint) is a fault of fastpaste's own.
 */
function isSqliteRefusal(code: string): boolean {
  return /^SQLITE_(CANTOPEN|NOTADB|CORRUPT|READONLY|PERM|AUTH|FULL|BUSY|LOCKED|IOERR)(_[A-Z_]+)?$/.test(code);
}

/**
 * What a refusal says. A name with two addresses (localhost: ::1 and 127.0.0.1) both refused is
 * an AggregateError with no message of its own: its errors' messages.
 */
export function refusalMessage(err: Error): string {
  if (err instanceof NamedRefusal) return err.message;
  const code = String((err as { code?: unknown }).code);
  if (isSqliteRefusal(code)) return `DATABASE_URL: the SQLite database refused: ${err.message || code} (${code})`;
  if (err.message) return err.message;
  const inner = err instanceof AggregateError ? err.errors.map((e: Error) => e.message).filter(Boolean) : [];
  return inner.length > 0 ? inner.join('; ') : String((err as { code?: unknown }).code);
}
