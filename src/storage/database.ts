/**
 * Opens the database named by DATABASE_URL: SQLite through better-sqlite3 (WAL mode, the data
 * directory created on first start) or PostgreSQL through pg. Everything else in the code speaks
 * Kysely and does not know which one it has; the few dialect differences live here.
 */
import { closeSync, mkdirSync, openSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import {
  type DatabaseConnection,
  Kysely,
  PostgresDialect,
  SqliteDialect,
  type SqliteDialectConfig,
  SqliteDriver,
} from 'kysely';
import type pg from 'pg';
import { ExpirySweeper } from './expiry-sweeper.js';
import { markReadOnlySessions, markUnansweredSessions, poolClosingUnfitSessions } from './pg-sessions.js';
import type { Database } from './schema.js';
import { WalCheckpointer } from './wal-checkpointer.js';
import { WriteGate } from './write-gate.js';

/** The PostgreSQL driver, loaded only for a PostgreSQL database (it costs 17 MB of memory). */
const loadPg = (): typeof pg => createRequire(import.meta.url)('pg');

export type Dialect = 'sqlite' | 'postgres';

export interface Storage {
  db: Kysely<Database>;
  dialect: Dialect;
  /** The SQLite handle, for the online backup and integrity checks; null on PostgreSQL. */
  sqlite: BetterSqlite3.Database | null;
  /** The PostgreSQL pool, for stores that speak to it directly; null on SQLite. */
  pgPool: pg.Pool | null;
  /** SQLite with backgroundCheckpoints: the thread that checkpoints the WAL; null otherwise. */
  checkpointer?: WalCheckpointer | null;
  /** SQLite with backgroundCheckpoints: the thread that sweeps a backlog of expired pastes. */
  expirySweeper?: ExpirySweeper | null;
  /** With the expiry sweeper: the turns its thread and this connection take at writing. */
  writeGate?: WriteGate | null;
  /**
   * The connection migrations run on. On PostgreSQL one of its own, without the pool's statement
   * and query time-outs: a migration may build an index on a large table, or wait for another
   * instance's migrations to finish, for longer than a request may wait.
   */
  openMigrationDb(): MigrationDb;
  close(): Promise<void>;
}

export interface MigrationDb {
  db: Kysely<Database>;
  release(): Promise<void>;
}

export interface StorageOptions {
  /**
   * SQLite: WAL checkpoints run by a thread of their own, and a backlog of expired pastes swept by
   * another (the server; not one-off commands).
   */
  backgroundCheckpoints?: boolean;
  /** With backgroundCheckpoints: the pages of log that restart it (RESTART_PAGES; tests go lower). */
  walRestartPages?: number;
  /**
   * SQLite: this process is the file's one server (`serve`), held to it by a lock beside the file
   * for as long as the storage is open (holdServerLock).
   */
  soleServer?: boolean;
}

/**
 * The lock of the one server of the SQLite file at `path`: an exclusive transaction held open on
 * `<path>-server.lock`, which the system drops when the process ends however it ends. A server
 * on SQLite keeps the quota's counts and the lists' caches of the file in its memory (D20's exact
 * limits rest on it): a second one on the same file would let each key twice its limits and
 * list pastes it never saw made. One-off commands (`keys`, `migrate`) do not take it.
 */
function holdServerLock(path: string): BetterSqlite3.Database {
  // Named after the file itself, however it is reached (a link, another spelling of its path):
  // made first if it is not there yet (SQLite takes an empty file as a new database), so that a
  // link to a file still to be made names the same lock before and after.
  closeSync(openSync(path, 'a'));
  const lockPath = `${realpathSync(path)}-server.lock`;
  const lock = new BetterSqlite3(lockPath, { timeout: 0 });
  try {
    lock.pragma('journal_mode = MEMORY'); // no journal file beside it
    lock.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    lock.close();
    if (!String((err as { code?: unknown }).code).startsWith('SQLITE_BUSY')) throw err;
    throw Object.assign(
      new Error(
        `${path} is served by another fastpaste process (it holds ${lockPath}): one server a SQLite file; run several on PostgreSQL`,
      ),
      { code: 'SQLITE_BUSY' },
    );
  }
  return lock;
}

/** `sqlite:./data/fastpaste.db`, `sqlite::memory:` or `postgres://...`. */
export function openStorage(databaseUrl: string, options: StorageOptions = {}): Storage {
  if (databaseUrl.startsWith('sqlite:')) return openSqlite(databaseUrl.slice('sqlite:'.length), options);
  return openPostgres(databaseUrl);
}

function openSqlite(path: string, options: StorageOptions): Storage {
  const memory = path === ':memory:' || path === '';
  if (!memory) mkdirSync(dirname(resolve(path)), { recursive: true });
  const serverLock = !memory && options.soleServer ? holdServerLock(path) : null;
  try {
    return sqliteStorage(path, memory, options, serverLock);
  } catch (err) {
    serverLock?.close(); // the file refused: a later open in this process may take the lock
    throw err;
  }
}

/** openSqlite's storage over the file at `path`, holding `serverLock` until it closes. */
function sqliteStorage(
  path: string,
  memory: boolean,
  options: StorageOptions,
  serverLock: BetterSqlite3.Database | null,
): Storage {
  const sqlite = new BetterSqlite3(memory ? ':memory:' : path);
  try {
    if (!memory) sqlite.pragma('journal_mode = WAL');
    // NORMAL in WAL mode: a committed transaction survives a crash of the process (not of the OS).
    sqlite.pragma('synchronous = NORMAL');
    sqlite.pragma('busy_timeout = 5000');
    sqlite.pragma('foreign_keys = ON');
    // 4 MB of page cache instead of better-sqlite3's 16 MB: the inner B-tree pages stay cached,
    // and the leaves of random reads miss either way (the OS cache holds the file). Measured: the
    // same /raw rate, 7 MB less RSS.
    sqlite.pragma('cache_size = -4000');
  } catch (err) {
    sqlite.close(); // a file that is no database, say: nothing of it kept open
    throw err;
  }
  const threads = !memory && options.backgroundCheckpoints;
  const checkpointer = threads ? new WalCheckpointer(sqlite, path, options.walRestartPages) : null;
  let expirySweeper: ExpirySweeper | null = null;
  let writeGate: WriteGate | null = null;
  if (threads) {
    // A second writer of the file: the two take turns (write-gate.ts).
    writeGate = new WriteGate();
    writeGate.install(sqlite);
    expirySweeper = new ExpirySweeper(path, writeGate, checkpointer, options.walRestartPages);
  }
  const db = new Kysely<Database>({
    dialect: new SqliteDialectKeepingErrors(sqlite, { database: withStatementCache(sqlite) }),
  });
  return {
    db,
    dialect: 'sqlite',
    sqlite,
    pgPool: null,
    checkpointer,
    expirySweeper,
    writeGate,
    openMigrationDb: () => ({ db, release: async () => {} }),
    async close() {
      try {
        await expirySweeper?.stop();
        await checkpointer?.stop();
        await db.destroy();
        expirySweeper?.closeLogHeader(); // after the last connection: see ExpirySweeper.logHeader
      } finally {
        serverLock?.close();
      }
    },
  };
}

/**
 * SQLite rolls a transaction back by itself when a statement in it fails with SQLITE_FULL (and
 * a few others); Kysely's ROLLBACK after it then fails ("no transaction is active") and that
 * error replaces the one that says why (a full disk, a 503, became a 500). The rollback is sent
 * only while a transaction is open.
 */
class SqliteDialectKeepingErrors extends SqliteDialect {
  constructor(
    private readonly sqlite: BetterSqlite3.Database,
    private readonly config: SqliteDialectConfig,
  ) {
    super(config);
  }

  override createDriver(): SqliteDriver {
    const sqlite = this.sqlite;
    return new (class extends SqliteDriver {
      override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
        if (sqlite.inTransaction) await super.rollbackTransaction(connection);
      }
    })(this.config);
  }
}

/**
 * Kysely prepares every statement anew on each query, which costs more than running a point
 * read. The same SQL text gets the same prepared statement back (better-sqlite3 statements are
 * reusable); the cache is bounded, as texts that embed values would otherwise pile up.
 */
function withStatementCache(sqlite: BetterSqlite3.Database) {
  const statements = new Map<string, BetterSqlite3.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(sqlText: string) {
      let statement = statements.get(sqlText);
      if (!statement) {
        if (statements.size >= 500) statements.clear();
        statement = sqlite.prepare(sqlText);
        statements.set(sqlText, statement);
      }
      return statement;
    },
  };
}

/** How long PostgreSQL runs a statement (lock waits included) before it cancels it. */
export const STATEMENT_TIMEOUT_MS = 4000;

/**
 * A connection lost (PostgreSQL restarted, a backend terminated, a network reset) must not crash
 * the process: its query is rejected, and a request answered 503. pg emits the loss as an
 * 'error' event on the client too, which the pool listens to only while the client is idle; one
 * lost while a query runs on it had no listener, and so was an uncaught exception. Each client
 * gets a listener of its own for its whole life; the pool drops it when it comes back broken.
 */
function quietOnLostConnections(pool: pg.Pool): void {
  pool.on('error', () => {});
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });
}

function openPostgres(url: string): Storage {
  const pg = loadPg();
  // bigint columns (times) come back as numbers: every value we store fits in 2^53.
  pg.types.setTypeParser(pg.types.builtins.INT8, (value: string) => Number(value));
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    connectionTimeoutMillis: 3000,
    idleTimeoutMillis: 30_000,
    // PostgreSQL cancels a statement (57014, a 503) before the client gives up on it: a
    // statement the client stopped waiting for would still run once its locks were free and
    // commit a create answered 503 (a client trying again would store it twice) or a flush of
    // view counts written again.
    statement_timeout: STATEMENT_TIMEOUT_MS,
    // A server that stops answering (not refusing) must not hang a request either.
    query_timeout: STATEMENT_TIMEOUT_MS + 1000,
  });
  quietOnLostConnections(pool);
  // A session left on a server that takes no writes is closed, not kept (pg-sessions.ts).
  markReadOnlySessions(pool);
  // One whose statement went unanswered (a client-side timeout) is closed too, not reused.
  markUnansweredSessions(pool);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: poolClosingUnfitSessions(pool) }) });
  return {
    db,
    dialect: 'postgres',
    sqlite: null,
    pgPool: pool,
    openMigrationDb() {
      const migrationPool = new pg.Pool({
        connectionString: url,
        max: 1,
        connectionTimeoutMillis: 3000,
        // A lock a migration waits for (an ALTER TABLE behind a long reader) queues every
        // request of the instances still running behind it: give up after 10 s, and fail the
        // start, rather than hold them. Kysely's wait for another instance's migrations sets
        // its own (an hour) for that one statement.
        lock_timeout: 10_000,
        // A server gone silent (not refusing) is noticed by TCP rather than never.
        keepAlive: true,
        keepAliveInitialDelayMillis: 10_000,
      });
      // No statement time-out, whatever the role or the URL sets.
      migrationPool.on('connect', (client) => void client.query('SET statement_timeout = 0').catch(() => {}));
      quietOnLostConnections(migrationPool);
      const migrationDb = new Kysely<Database>({ dialect: new PostgresDialect({ pool: migrationPool }) });
      return { db: migrationDb, release: () => migrationDb.destroy() };
    },
    async close() {
      await db.destroy();
    },
  };
}
