/**
 * The PostgreSQL pool's sessions, checked out and given back so that one left on a server that
 * takes no writes, or one a statement went unanswered on, is closed rather than kept.
 *
 * A failover seldom ends cleanly for a pool: connections made while the old primary was being
 * demoted, or through an address that still led to it, stay open on a server that answers every
 * write with 25006 (a read-only transaction); a session whose role had
 * `default_transaction_read_only` when it began keeps it after the setting is lifted. pg-pool
 * keeps a client that the server answered, so such a session would answer 503 for as long as it
 * is busy enough not to time out idle, which under load is forever. Here the server's 25006 on
 * a session (whichever path sent the statement: Kysely's queries, a named statement, a turn's
 * read) marks it, and the check-out gives it back to the pool with an error, so that the pool
 * closes it and the next request connects anew, to wherever the address leads now. While the
 * server is still read-only the new session is refused too: one reconnect a refused write.
 *
 * A session whose statement went unanswered (pg's query_timeout ran out: a server gone silent, a
 * network cut that TCP has not noticed) is closed too. pg fails the statement but keeps it as its
 * session's active one, and pg-pool would take the session back: the next request's statements
 * would queue behind it, and a BEGIN sent there after the first one's ROLLBACK timed out would
 * join the first's transaction. Such a session answers no further statement (Kysely's ROLLBACK
 * after it fails at once rather than waiting out a timeout of its own), and its check-out gives
 * it back with an error. Lost connections the pool closes by itself.
 *
 * The quota store (rate-limiter-flexible) runs `pool.query`, which closes a client after any
 * error already.
 */
import type pg from 'pg';

/**
 * Whether PostgreSQL answered the statement with an error (a SQLSTATE: a constraint, a timeout of
 * its own), so that it is known to have done nothing; not a connection lost or a client-side
 * timeout, after which a write may or may not have been committed.
 */
export function answeredByServer(err: unknown): boolean {
  const answer = err as { code?: unknown; severity?: unknown } | null;
  // A SQLSTATE with the severity PostgreSQL's error message carries: Node's EPIPE (a lost
  // connection) has five characters too.
  return typeof answer?.code === 'string' && answer.code.length === 5 && typeof answer.severity === 'string';
}

/**
 * Sessions a statement went unanswered on, with the error it met: they take no more statements
 * (each is refused with that error), and are closed.
 */
const unansweredSessions = new WeakMap<pg.PoolClient, unknown>();

/** The error a session is given back to the pool with after a statement went unanswered on it. */
const UNANSWERED_SESSION = 'a PostgreSQL session whose statement went unanswered, closed';

/** pg's client as far as its queue goes (private fields, read as pg-pool reads _queryable). */
interface ClientQueue {
  _getActiveQuery?(): unknown;
  _queryQueue?: unknown[];
}

/** Whether a statement is still out or queued on the session, which is then not fit to reuse. */
function busy(client: pg.PoolClient): boolean {
  const queue = client as unknown as ClientQueue;
  return Boolean(queue._getActiveQuery?.()) || (queue._queryQueue?.length ?? 0) > 0;
}

/**
 * Marks every session of the pool on which a promise-style statement (Kysely's) fails without
 * an answer from the server, and makes such a session refuse the statements sent after it.
 */
export function markUnansweredSessions(pool: pg.Pool): void {
  pool.on('connect', (client) => {
    const query = client.query as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const promiseStyle = typeof args[0] === 'string' && typeof args.at(-1) !== 'function';
      // Refused with the error its statement met (a lost connection's, a read time-out's), as
      // the caller would have met it: Kysely's ROLLBACK throws it in place of the first one.
      if (promiseStyle && unansweredSessions.has(client)) return Promise.reject(unansweredSessions.get(client));
      const result = query.apply(client, args);
      if (promiseStyle && result instanceof Promise) {
        result.catch((err: unknown) => {
          if (!answeredByServer(err) && !unansweredSessions.has(client)) unansweredSessions.set(client, err);
        });
      }
      return result;
    };
  });
}

/** Sessions the server answered 25006 on: closed when next given back to the pool. */
const readOnlySessions = new WeakSet<pg.PoolClient>();

/** The error a marked session is given back with: the pool closes a client given back with one. */
const READ_ONLY_SESSION = new Error('a PostgreSQL session that takes no writes, closed');

interface ErrorResponse {
  code?: string;
}

/**
 * Marks every session of the pool that the server answers with 25006. pg's client reads each
 * ErrorResponse off its connection ('errorMessage') before it rejects the statement that met it,
 * so the mark is there by the time the caller gives the session back.
 */
export function markReadOnlySessions(pool: pg.Pool): void {
  pool.on('connect', (client) => {
    const connection = (client as unknown as { connection: NodeJS.EventEmitter }).connection;
    connection.on('errorMessage', (message: ErrorResponse) => {
      if (message.code === '25006') readOnlySessions.add(client);
    });
  });
}

/**
 * A session of the pool whose release() closes it instead when the server refused a write on it
 * (markReadOnlySessions), or when a statement on it went unanswered or is still out
 * (markUnansweredSessions), and otherwise behaves as pg-pool's.
 */
export async function checkOut(pool: pg.Pool): Promise<pg.PoolClient> {
  const client = await pool.connect();
  const release = client.release;
  client.release = (err?: Error | boolean) => {
    if (err) return release(err);
    if (readOnlySessions.has(client)) return release(READ_ONLY_SESSION);
    if (unansweredSessions.has(client) || busy(client)) return release(new Error(UNANSWERED_SESSION));
    return release();
  };
  return client;
}

/** The pool as Kysely's PostgreSQL dialect uses it, its sessions checked out by checkOut(). */
export function poolClosingUnfitSessions(pool: pg.Pool): {
  connect(): Promise<pg.PoolClient>;
  end(): Promise<void>;
} {
  return { connect: () => checkOut(pool), end: () => pool.end() };
}
