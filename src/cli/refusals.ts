/**
 * What the machine or a backend refused a command (a port in use, a database out of reach or
 * refusing the login, a host that does not resolve), told as one line rather than a stack.
 */

/** An error with a system code (EADDRINUSE, ECONNREFUSED, ENOTFOUND…) or a SQLSTATE (28P01…). */
export function isRefusal(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (/^(E[A-Z]+|[0-9A-Z]{5})$/.test(code) || isSqliteRefusal(code));
}

/** SQLite's codes (SQLITE_CANTOPEN, SQLITE_NOTADB, SQLITE_BUSY…): the file DATABASE_URL names. */
function isSqliteRefusal(code: string): boolean {
  return /^SQLITE_[A-Z_]+$/.test(code);
}

/**
 * What a refusal says. A name with two addresses (localhost: ::1 and 127.0.0.1) both refused is
 * an AggregateError with no message of its own: its errors' messages.
 */
export function refusalMessage(err: Error): string {
  const code = String((err as { code?: unknown }).code);
  if (isSqliteRefusal(code)) return `DATABASE_URL: the SQLite database refused: ${err.message || code} (${code})`;
  if (err.message) return err.message;
  const inner = err instanceof AggregateError ? err.errors.map((e: Error) => e.message).filter(Boolean) : [];
  return inner.length > 0 ? inner.join('; ') : String((err as { code?: unknown }).code);
}
