/**
 * Numbered, forward-only migrations, compiled in and applied at start and by `fastpaste migrate`
 * (house style 7). They use only column types both SQLite and PostgreSQL understand.
 */
import { type Kysely, type Migration, type MigrationProvider, Migrator, sql } from 'kysely';
import { ConfigError } from '../config.js';
import type { Storage } from './database.js';

const migrations: Record<string, Migration> = {
  '0001_pastes_and_keys': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'varchar(32)', (c) => c.primaryKey())
        .addColumn('name', 'varchar(200)', (c) => c.notNull())
        .addColumn('digest', 'varchar(64)', (c) => c.notNull().unique())
        .addColumn('active', 'integer', (c) => c.notNull().defaultTo(1))
        .addColumn('hourly_limit', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('daily_limit', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('monthly_limit', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('webhook_url', 'text')
        .addColumn('webhook_secret', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();

      await db.schema
        .createTable('pastes')
        .addColumn('id', 'varchar(80)', (c) => c.primaryKey())
        .addColumn('owner_key_id', 'varchar(32)', (c) => c.references('api_keys.id'))
        .addColumn('title', 'text')
        .addColumn('description', 'text')
        .addColumn('content', 'text', (c) => c.notNull())
        .addColumn('content_type', 'varchar(8)', (c) => c.notNull())
        .addColumn('original_filename', 'text')
        .addColumn('language', 'varchar(40)')
        .addColumn('file_size', 'integer', (c) => c.notNull())
        .addColumn('sha256', 'varchar(64)', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint')
        .addColumn('view_count', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('burn_after_read', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('encrypted', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('downloadable', 'integer', (c) => c.notNull().defaultTo(1))
        .addColumn('is_public', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('password_hash', 'text')
        .addColumn('source', 'varchar(8)', (c) => c.notNull())
        .addColumn('creator_ip', 'varchar(64)')
        .execute();

      // The list endpoint: one key's pastes, newest first.
      await db.schema
        .createIndex('pastes_owner_created')
        .on('pastes')
        .columns(['owner_key_id', 'created_at', 'id'])
        .execute();
      // The sweep: expired rows in order.
      await db.schema.createIndex('pastes_expires').on('pastes').column('expires_at').execute();
      // The public archive and sitemap: only the rows that may be listed.
      await sql`CREATE INDEX pastes_public_created ON pastes (created_at) WHERE is_public = 1`.execute(db);
    },
  },
  '0002_webhook_outbox': {
    async up(db: Kysely<unknown>) {
      // A 410 from the receiver turns the key's webhook off until it is set again.
      await db.schema
        .alterTable('api_keys')
        .addColumn('webhook_active', 'integer', (c) => c.notNull().defaultTo(1))
        .execute();

      // The outbox: one row per announcement, written in the same transaction as its paste.
      await db.schema
        .createTable('webhook_deliveries')
        .addColumn('id', 'varchar(40)', (c) => c.primaryKey())
        .addColumn('key_id', 'varchar(32)', (c) => c.notNull().references('api_keys.id'))
        .addColumn('paste_id', 'varchar(80)', (c) => c.notNull())
        .addColumn('url', 'text', (c) => c.notNull())
        .addColumn('payload', 'text', (c) => c.notNull())
        .addColumn('status', 'varchar(12)', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
        .addColumn('locked_until', 'bigint')
        .addColumn('locked_by', 'varchar(40)')
        .addColumn('last_status_code', 'integer')
        .addColumn('last_error', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('finished_at', 'bigint')
        .execute();
      await db.schema
        .createIndex('webhook_deliveries_due')
        .on('webhook_deliveries')
        .columns(['status', 'next_attempt_at'])
        .execute();
      await db.schema
        .createIndex('webhook_deliveries_key')
        .on('webhook_deliveries')
        .columns(['key_id', 'created_at'])
        .execute();

      // Every attempt, for `fastpaste keys deliveries`.
      await db.schema
        .createTable('webhook_attempts')
        .addColumn('id', 'varchar(40)', (c) => c.primaryKey())
        .addColumn('delivery_id', 'varchar(40)', (c) => c.notNull().references('webhook_deliveries.id'))
        .addColumn('attempted_at', 'bigint', (c) => c.notNull())
        .addColumn('status_code', 'integer')
        .addColumn('error', 'text')
        .addColumn('duration_ms', 'integer', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('webhook_attempts_delivery')
        .on('webhook_attempts')
        .columns(['delivery_id', 'attempted_at'])
        .execute();
    },
  },
  '0003_rate_limit_counters': {
    async up(db: Kysely<unknown>) {
      // The quota counters' table, in the shape rate-limiter-flexible uses on both SQLite and
      // PostgreSQL; made here, under the migration lock, so instances starting together never
      // race to create it.
      await db.schema
        .createTable('rate_limit_counters')
        .ifNotExists()
        .addColumn('key', 'varchar(255)', (c) => c.primaryKey())
        .addColumn('points', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('expire', 'bigint')
        .execute();
    },
  },
  '0004_owner_index_covers_expiry': {
    async up(db: Kysely<unknown>) {
      // The list counts and pages one key's live pastes: with expires_at in the index, neither
      // reads a table row per entry (100,000 random reads for a key with 100,000 pastes).
      await db.schema
        .createIndex('pastes_owner_live')
        .on('pastes')
        .columns(['owner_key_id', 'created_at', 'id', 'expires_at'])
        .execute();
      await db.schema.dropIndex('pastes_owner_created').execute();
    },
  },
  '0005_paste_views': {
    async up(db: Kysely<unknown>) {
      // View counts land here (a few hundred per page) instead of on the pastes' 1 KB+ rows:
      // a second of reads over thousands of pastes rewrote thousands of pages.
      await db.schema
        .createTable('paste_views')
        .addColumn('paste_id', 'varchar(80)', (c) => c.primaryKey())
        .addColumn('views', 'integer', (c) => c.notNull())
        .execute();
    },
  },
  '0006_owner_list_index': {
    async up(db: Kysely<unknown>) {
      // A list page read from the index alone: with the listed columns in it, a page of 20 is
      // one range of index entries instead of 20 random reads of 1 KB+ rows. Only owned pastes
      // are listed, so anonymous ones (quick-creates) get no entry at all.
      await db.schema
        .createIndex('pastes_owner_list')
        .on('pastes')
        .columns([
          'owner_key_id',
          'created_at',
          'id',
          'expires_at',
          'title',
          'content_type',
          'language',
          'file_size',
          'view_count',
          'encrypted',
          'downloadable',
        ])
        .where(sql.ref('owner_key_id'), 'is not', null)
        .execute();
      await db.schema.dropIndex('pastes_owner_live').execute();
      if ((await currentSchema(db)) === null) {
        // SQLite: view counts in one b-tree keyed by paste id (a rowid table kept a second one
        // for its primary key), so a flush writes half the pages.
        await sql`CREATE TABLE paste_views_by_id (paste_id varchar(80) PRIMARY KEY, views integer NOT NULL) WITHOUT ROWID`.execute(
          db,
        );
        await sql`INSERT INTO paste_views_by_id (paste_id, views) SELECT paste_id, views FROM paste_views`.execute(db);
        await sql`DROP TABLE paste_views`.execute(db);
        await sql`ALTER TABLE paste_views_by_id RENAME TO paste_views`.execute(db);
      }
    },
  },
  '0007_views_tagged_with_paste': {
    async up(db: Kysely<unknown>) {
      // A count belongs to one paste, not to its id: a slug deleted and made again must start
      // from no views even when a count of the old paste lands after its deletion (a flush of
      // another instance on PostgreSQL, which read the old paste just before it went). Each row
      // carries the created_at of the paste it counted; reads take it only where that matches
      // (or is 0: written by an instance not yet running this code, during a rolling upgrade).
      // Written when SQLite's migrations ran outside a transaction (inOneSqliteTransaction): a
      // file a crash left after the ALTER must not make every later start fail on a duplicate column.
      if (!(await columnsOf(db, 'paste_views')).includes('created_at')) {
        await db.schema
          .alterTable('paste_views')
          .addColumn('created_at', 'bigint', (c) => c.notNull().defaultTo(0))
          .execute();
      }
      await sql`UPDATE paste_views SET created_at = pastes.created_at FROM pastes WHERE pastes.id = paste_views.paste_id`.execute(
        db,
      );
      // Counts of pastes gone (left by a flush that met a deletion) would match a new paste.
      await sql`DELETE FROM paste_views WHERE created_at = 0 AND NOT EXISTS (SELECT 1 FROM pastes WHERE pastes.id = paste_views.paste_id)`.execute(
        db,
      );
    },
  },
  '0008_view_write_tokens': {
    async up(db: Kysely<unknown>) {
      // A chunk of view counts is written with a token of its own, taken in the same statement
      // (PostgreSQL): when the connection is lost before the reply, the chunk is written again
      // under the same token, which adds nothing if the first write committed. SQLite never
      // writes here (a write there cannot succeed unseen); the table is made on both alike.
      // Made again on a file a crash left half-way when SQLite's migrations ran outside a
      // transaction, it is left as is.
      await db.schema
        .createTable('view_write_tokens')
        .ifNotExists()
        .addColumn('token', 'varchar(40)', (c) => c.primaryKey())
        .addColumn('written_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
  '0009_public_only_where_it_applies': {
    async up(db: Kysely<unknown>) {
      // `public` is ignored with a password, burn or encryption (api-v1.md), and is no longer
      // stored there (paste-service.ts); rows stored before kept it, and a PUT lifting the
      // password or the burn would have listed them.
      await sql`UPDATE pastes SET is_public = 0
        WHERE is_public = 1 AND (password_hash IS NOT NULL OR burn_after_read = 1 OR encrypted = 1)`.execute(db);
    },
  },
  '0010_counts_past_2_31': {
    async up(db: Kysely<unknown>) {
      // PostgreSQL's integer stops at 2^31 - 1 (SQLite's are 64-bit already). A paste's counted
      // views, or a window's requests (counted on past its limit, D20), can go beyond: the flush
      // of views then failed at that paste's chunk every second, holding back every chunk after
      // it, and the window answered 503 instead of 429. Both tables are small (a row a viewed
      // paste, three a key).
      if ((await currentSchema(db)) === null) return;
      await sql`ALTER TABLE paste_views ALTER COLUMN views TYPE bigint`.execute(db);
      await sql`ALTER TABLE rate_limit_counters ALTER COLUMN points TYPE bigint`.execute(db);
    },
  },
  '0011_webhook_deliveries_finished': {
    async up(db: Kysely<unknown>) {
      // Finished deliveries are removed after WEBHOOK_RETENTION_DAYS, oldest first: found by
      // this index, not by reading every delivery each sweep.
      await db.schema
        .createIndex('webhook_deliveries_finished')
        .ifNotExists()
        .on('webhook_deliveries')
        .column('finished_at')
        .execute();
    },
  },
};

// biome-ignore lint/suspicious/noExplicitAny: see migrateOn
async function currentSchema(db: Kysely<any>): Promise<string | null> {
  try {
    const result = await sql<{ schema: string }>`SELECT current_schema() AS schema`.execute(db);
    return result.rows[0]?.schema ?? null;
  } catch (error) {
    // SQLite has no schemas; anything else (a PostgreSQL still starting up) is an error, not a
    // reason to look for the migrations' tables across every schema.
    if (/no such function/i.test(String(error))) return null;
    throw error;
  }
}

/** The column names of a table (of the current schema on PostgreSQL). */
// biome-ignore lint/suspicious/noExplicitAny: see migrateOn
async function columnsOf(db: Kysely<any>, table: string): Promise<string[]> {
  const schema = await currentSchema(db);
  const result = schema
    ? await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns
        WHERE table_schema = ${schema} AND table_name = ${table}`.execute(db)
    : await sql<{ name: string }>`SELECT name FROM pragma_table_info(${table})`.execute(db);
  return result.rows.map((row) => row.name);
}

class CompiledMigrations implements MigrationProvider {
  async getMigrations(): Promise<Record<string, Migration>> {
    return migrations;
  }
}

/**
 * Applies every migration not yet applied, on the storage's migration connection (on PostgreSQL
 * one without the requests' time-outs); throws if one fails.
 */
export async function migrateToLatest(storage: Pick<Storage, 'openMigrationDb' | 'sqlite'>): Promise<string[]> {
  const { db, release } = storage.openMigrationDb();
  try {
    if (!storage.sqlite) return await migrateOn(db);
    // Nothing pending (every start but the first after an upgrade): no write lock taken, so a
    // command runs beside a server's writes, or on a file it may only read.
    if (!(await anyPending(db))) return [];
    return await inOneSqliteTransaction(storage.sqlite, db, () => migrateOn(db));
  } finally {
    await release();
  }
}

/** How long a second process starting on the same SQLite file waits for the first's migrations. */
const SQLITE_MIGRATION_WAIT_MS = 60_000;

/**
 * SQLite: the pending migrations and the migrator's record of them in one transaction, taken for
 * writing at once (BEGIN IMMEDIATE). Kysely runs SQLite's migrations outside any (its adapter
 * claims no transactional DDL, which SQLite has), so a crash or a failure in the middle of one
 * left it half applied and unrecorded, and every later start tried it again and failed (an index
 * that exists, a table dropped); and two processes on one file (the server and `fastpaste
 * migrate`, or two servers) could both find a migration pending and both run it. Now the second
 * waits for the first's transaction (up to a minute) and finds nothing left to do.
 */
async function inOneSqliteTransaction<T>(
  sqlite: NonNullable<Storage['sqlite']>,
  // biome-ignore lint/suspicious/noExplicitAny: see migrateOn
  db: Kysely<any>,
  run: () => Promise<T>,
): Promise<T> {
  const wait = Number(sqlite.pragma('busy_timeout', { simple: true }));
  sqlite.pragma(`busy_timeout = ${SQLITE_MIGRATION_WAIT_MS}`);
  try {
    await sql`BEGIN IMMEDIATE`.execute(db);
  } finally {
    sqlite.pragma(`busy_timeout = ${wait}`);
  }
  try {
    const result = await run();
    await sql`COMMIT`.execute(db);
    return result;
  } catch (err) {
    if (sqlite.inTransaction) await sql`ROLLBACK`.execute(db);
    throw err;
  }
}

// biome-ignore lint/suspicious/noExplicitAny: migrations run on any schema, before the typed one exists
async function migratorOn(db: Kysely<any>): Promise<Migrator> {
  // On PostgreSQL the migrator's own tables are named with the current schema: its "does the
  // table exist" check looks across every schema, and a database holding several fastpaste
  // schemas (one per tenant or test) would otherwise find another schema's table.
  const schema = await currentSchema(db);
  return new Migrator({
    db,
    provider: new CompiledMigrations(),
    ...(schema ? { migrationTableSchema: schema } : {}),
  });
}

/**
 * Whether the migrator has work (read only: its tables are not made): a migration not yet
 * applied, or one applied that this build does not know (a newer build's), which migrateOn
 * refuses, as Kysely's migrator does ("corrupted migrations"), rather than start on a schema
 * it was not written for.
 */
// biome-ignore lint/suspicious/noExplicitAny: see migratorOn
async function anyPending(db: Kysely<any>): Promise<boolean> {
  const migrations = await (await migratorOn(db)).getMigrations();
  if (migrations.some((migration) => migration.executedAt === undefined)) return true;
  const applied = await sql<{ n: number }>`SELECT count(*) AS n FROM kysely_migration`.execute(db);
  return Number(applied.rows[0]?.n) !== migrations.length;
}

// biome-ignore lint/suspicious/noExplicitAny: see migratorOn
async function migrateOn(db: Kysely<any>): Promise<string[]> {
  const migrator = await migratorOn(db);
  const { error, results } = await migrator.migrateToLatest();
  const unknown = /previously executed migration (\S+) is missing/.exec(String((error as Error | undefined)?.message));
  if (unknown) {
    throw new ConfigError(
      `DATABASE_URL names a database a newer fastpaste migrated (${unknown[1]}, which this version does not know): run that version or a later one`,
    );
  }
  if (error) throw error;
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
