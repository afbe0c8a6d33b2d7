/**
 * The PostgreSQL pool's sessions, checked out and given back so that one left on a server that
 * takes no writes is closed rather than kept.
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
 * The quota store (rate-limiter-flexible) runs `pool.query`, which closes a client after any
 * error already.
 */
import type pg from 'pg';

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
 * (markReadOnlySessions), and otherwise behaves as pg-pool's.
 */
export async function checkOut(pool: pg.Pool): Promise<pg.PoolClient> {
  const client = await pool.connect();
  const release = client.release;
  client.release = (err?: Error | boolean) =>
    release(err || (readOnlySessions.has(client) ? READ_ONLY_SESSION : undefined));
  return client;
}

/** The pool as Kysely's PostgreSQL dialect uses it, its sessions checked out by checkOut(). */
export function poolClosingReadOnlySessions(pool: pg.Pool): {
  connect(): Promise<pg.PoolClient>;
  end(): Promise<void>;
} {
  return { connect: () => checkOut(pool), end: () => pool.end() };
}
