/**
 * The SQLite file's writers take turns through this handshake: the server's connection and the
 * expiry sweep's thread (expiry-sweeper.ts), each with a connection of its own.
 *
 * SQLite lets one connection write at a time. A connection that finds the file locked waits in
 * its busy handler, which sleeps 1, 2, 5, 10… ms between tries: on the server's connection that
 * sleep holds the event loop and every request behind it (measured with the sweep in a thread
 * and no handshake: /raw fell to 401 req/s). And a transaction of the server's that read before
 * it writes would fail outright (SQLITE_BUSY_SNAPSHOT) if the thread committed in between. So the
 * server marks that it wants to write before every write or transaction of its connection, and
 * waits (Atomics.wait, no busy handler) for the thread's batch under way, about a millisecond;
 * the thread starts no batch while the server's mark is up, however long it stays up. Two flags in shared memory,
 * each side raising its own and then reading the other's (both sequentially consistent), so that
 * both cannot go ahead at once; when both see the other's, the thread steps back.
 *
 * The server's reads take no part: in WAL mode a reader is never blocked by a writer. The gate is
 * a courtesy on top of SQLite's own locking, which stays in force (busy_timeout): a write that
 * slipped past it would wait in the busy handler, not corrupt anything, and the server gives up
 * waiting for the thread after WAIT_LIMIT_MS and goes to SQLite's locking.
 */
import type BetterSqlite3 from 'better-sqlite3';

/** Flags (Int32Array indexes): the thread is in a batch... */
export const THREAD_WRITING = 0;
/** ...the server's connection writes, or has a transaction open... */
export const SERVER_WRITING = 1;
/** ...the thread is asked to stop after its batch under way. */
export const STOP_ASKED = 2;
/** How long the server waits for the thread before it leaves the matter to SQLite's locking. */
export const WAIT_LIMIT_MS = 5000;

/** Transaction control: read-only for SQLite, yet it opens or ends what the gate must cover. */
const TRANSACTION_CONTROL = /^\s*(begin|commit|end|rollback|savepoint|release)\b/i;

export class WriteGate {
  /** Shared with the sweep's thread. */
  readonly buffer = new SharedArrayBuffer(3 * Int32Array.BYTES_PER_ELEMENT);
  private readonly flags = new Int32Array(this.buffer);
  private held = false;

  /**
   * Before the server's connection writes: waits for the thread's batch under way, if one is
   * (about a millisecond of the thread's work; the event loop waits, as it would for the write
   * itself). The thread runs at idle priority, so the wait is longer while threads at normal
   * priority keep the core busy (another process's, say).
   */
  enter(): void {
    if (this.held) return;
    this.held = true;
    Atomics.store(this.flags, SERVER_WRITING, 1);
    const until = performance.now() + WAIT_LIMIT_MS;
    while (Atomics.load(this.flags, THREAD_WRITING) === 1) {
      const left = until - performance.now();
      if (left <= 0) return;
      Atomics.wait(this.flags, THREAD_WRITING, 1, left);
    }
  }

  /** Once the server's connection has no transaction open: the thread may go on. */
  leave(): void {
    if (!this.held) return;
    this.held = false;
    Atomics.store(this.flags, SERVER_WRITING, 0);
    Atomics.notify(this.flags, SERVER_WRITING);
  }

  /** Whether the server's connection holds the gate (tests). */
  get holding(): boolean {
    return this.held;
  }

  /**
   * Puts every write of `sqlite` (the server's connection) behind the gate: statements that
   * write or control transactions (run, get, all), transaction functions, exec and pragma.
   * Reads are returned as they are, so that the hot paths pay nothing. The gate is left when a
   * call ends with no transaction open (committed, rolled back, or never begun), however it
   * ends. Not covered: `iterate` over a statement that writes (nothing does), which would meet
   * the thread in SQLite's busy handler.
   */
  install(sqlite: BetterSqlite3.Database): void {
    const gate = this;
    const gated = <F extends (...args: never[]) => unknown>(call: F): F =>
      function (this: unknown, ...args: Parameters<F>) {
        gate.enter();
        try {
          return call.apply(this, args);
        } finally {
          if (!sqlite.inTransaction) gate.leave();
        }
      } as F;
    const prepare = sqlite.prepare.bind(sqlite);
    sqlite.prepare = ((source: string) => {
      const statement = prepare(source);
      if (statement.readonly && !TRANSACTION_CONTROL.test(source)) return statement;
      statement.run = gated(statement.run);
      statement.get = gated(statement.get);
      statement.all = gated(statement.all);
      return statement;
    }) as typeof sqlite.prepare;
    const transaction = sqlite.transaction.bind(sqlite);
    sqlite.transaction = ((fn: (...args: unknown[]) => unknown) => {
      const made = transaction(fn);
      const modes = ['default', 'deferred', 'immediate', 'exclusive'] as const;
      const wrapped = Object.fromEntries(modes.map((mode) => [mode, gated(made[mode] ?? made)]));
      // As better-sqlite3 does: each version carries all of them.
      for (const version of Object.values(wrapped)) {
        for (const mode of modes) Object.defineProperty(version, mode, { value: wrapped[mode] });
        Object.defineProperty(version, 'database', { value: sqlite });
      }
      return wrapped.default;
    }) as typeof sqlite.transaction;
    const pragma = sqlite.pragma.bind(sqlite);
    sqlite.pragma = gated(pragma) as typeof sqlite.pragma;
    sqlite.exec = gated(sqlite.exec.bind(sqlite)) as typeof sqlite.exec;
  }
}
