/**
 * SQL for pastes, the same on SQLite and PostgreSQL. Every statement that must be atomic is one
 * statement (a burn is one DELETE ... RETURNING). The rules (who may, when) live in the domain.
 */
import type BetterSqlite3 from 'better-sqlite3';
import { type ExpressionBuilder, type Kysely, type Selectable, sql } from 'kysely';
import type pg from 'pg';
import type { Paste } from '../pastes/paste.js';
import type { ExpirySweeper, SweepStatements } from './expiry-sweeper.js';
import { binaryTextArray } from './pg-binary-array.js';
import { answeredByServer } from './pg-sessions.js';
import { BATCH_CONTENT_BYTES, PointReadBatch } from './point-read-batch.js';
import { namedStatement, preparedQuery } from './prepared-query.js';
import type { Database, PasteTable } from './schema.js';

type PasteRow = Selectable<PasteTable>;

const flag = (value: boolean): number => (value ? 1 : 0);

/** A paste row with the views counted in paste_views since (see VIEWS). */
type RowWithViews = PasteRow & { extra_views?: number | string | null };

function toPaste(row: RowWithViews): Paste {
  return {
    id: row.id,
    ownerKeyId: row.owner_key_id,
    title: row.title,
    description: row.description,
    content: row.content,
    contentType: row.content_type,
    originalFilename: row.original_filename,
    language: row.language,
    fileSize: row.file_size,
    sha256: row.sha256,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    viewCount: row.view_count + Number(row.extra_views ?? 0),
    burnAfterRead: row.burn_after_read === 1,
    encrypted: row.encrypted === 1,
    downloadable: row.downloadable === 1,
    public: row.is_public === 1,
    passwordHash: row.password_hash,
    source: row.source,
    creatorIp: row.creator_ip,
  };
}

function toRow(paste: Paste): PasteRow {
  return {
    id: paste.id,
    owner_key_id: paste.ownerKeyId,
    title: paste.title,
    description: paste.description,
    content: paste.content,
    content_type: paste.contentType,
    original_filename: paste.originalFilename,
    language: paste.language,
    file_size: paste.fileSize,
    sha256: paste.sha256,
    created_at: paste.createdAt,
    expires_at: paste.expiresAt,
    view_count: paste.viewCount,
    burn_after_read: flag(paste.burnAfterRead),
    encrypted: flag(paste.encrypted),
    downloadable: flag(paste.downloadable),
    is_public: flag(paste.public),
    password_hash: paste.passwordHash,
    source: paste.source,
    creator_ip: paste.creatorIp,
  };
}

/** The columns a paste update may change. */
export type PasteChanges = Partial<
  Pick<
    Paste,
    | 'title'
    | 'description'
    | 'content'
    | 'language'
    | 'fileSize'
    | 'sha256'
    | 'expiresAt'
    | 'burnAfterRead'
    | 'encrypted'
    | 'downloadable'
    | 'passwordHash'
  >
> & { downloadableByRow?: DownloadableByRow };

/**
 * `downloadable` decided by the row as the update finds it rather than as it was read before it:
 * a PUT derives it from whether the paste is encrypted, and a concurrent PUT may change that in
 * between (the update's own `encrypted` is not looked at: SQL reads the row as it was). For a row
 * encrypted, and for one plain, the value to store; null keeps the row's own.
 */
export interface DownloadableByRow {
  ifEncrypted: boolean | null;
  ifPlain: boolean | null;
}

/** A place in an owner's list, newest first: the entry with this creation time and id. */
export interface ListPosition {
  createdAt: number;
  id: string;
}

/** The columns a list shows: everything but the content, which may be megabytes. */
export type PasteSummary = Omit<Paste, 'content' | 'passwordHash'>;

const SUMMARY_COLUMNS = [
  'id',
  'owner_key_id',
  'title',
  'description',
  'content_type',
  'original_filename',
  'language',
  'file_size',
  'sha256',
  'created_at',
  'expires_at',
  'view_count',
  'burn_after_read',
  'encrypted',
  'downloadable',
  'is_public',
  'source',
  'creator_ip',
] as const;

/** What an owner's list shows of each paste (the list endpoint, D15). */
export type OwnedListItem = Pick<
  Paste,
  | 'id'
  | 'title'
  | 'contentType'
  | 'language'
  | 'fileSize'
  | 'createdAt'
  | 'expiresAt'
  | 'viewCount'
  | 'encrypted'
  | 'downloadable'
>;

const LIST_COLUMNS = [
  'id',
  'title',
  'content_type',
  'language',
  'file_size',
  'created_at',
  'expires_at',
  'view_count',
  'encrypted',
  'downloadable',
] as const;

function toListItem(
  row: Pick<PasteRow, (typeof LIST_COLUMNS)[number]> & { extra_views?: number | string | null },
): OwnedListItem {
  return {
    id: row.id,
    title: row.title,
    contentType: row.content_type,
    language: row.language,
    fileSize: row.file_size,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    viewCount: row.view_count + Number(row.extra_views ?? 0),
    encrypted: row.encrypted === 1,
    downloadable: row.downloadable === 1,
  };
}

/** The views of a paste counted in paste_views, as a column of a query on pastes. */
const VIEWS =
  sql<number>`COALESCE((SELECT views FROM paste_views WHERE paste_views.paste_id = pastes.id AND paste_views.created_at IN (pastes.created_at, 0)), 0)`.as(
    'extra_views',
  );

function toLiveContent(
  row: Pick<PasteRow, 'password_hash' | 'burn_after_read' | 'created_at'> & { content: string | Buffer },
): LiveContent {
  return {
    content: row.content,
    createdAt: row.created_at,
    passwordProtected: row.password_hash !== null,
    burnAfterRead: row.burn_after_read === 1,
  };
}

function toSummary(row: Omit<PasteRow, 'content' | 'password_hash'>): PasteSummary {
  // The row has no content or password hash; the summary's type leaves both out.
  return toPaste(row as RowWithViews);
}

/** What the plain read of a paste's content needs: the content and what would forbid it. */
export interface LiveContent {
  /**
   * On SQLite past CONTENT_AS_BYTES, its UTF-8 bytes as stored (RAW_CONTENT); else the text (on
   * PostgreSQL a bytea would come as hex text to decode).
   */
  content: string | Buffer;
  /** The paste's, for counting its view (ViewCounter.add). */
  createdAt: number;
  passwordProtected: boolean;
  burnAfterRead: boolean;
}

/**
 * An upsert's update of a count. Added to the row when it counts the same paste (same created_at;
 * 0 is a row written by an instance still running code from before migration 0007, taken as
 * the same). When the two differ, one of them counts a paste deleted since (a count held in
 * memory when its paste was deleted, or another instance's flush that read it just before): the
 * one whose created_at is the live paste's wins, looked up only then. So a paste made again under
 * an id takes its row over, and a late count of the old paste leaves it alone, whichever of the
 * two is older by the clocks that stamped them.
 */
const CURRENT_PASTE_CREATED = sql`(SELECT pastes.created_at FROM pastes WHERE pastes.id = excluded.paste_id)`;
const ADD_TO_SAME_PASTE = sql`views = CASE
    WHEN paste_views.created_at = excluded.created_at OR paste_views.created_at = 0 THEN paste_views.views + excluded.views
    WHEN excluded.created_at = ${CURRENT_PASTE_CREATED} THEN excluded.views
    ELSE paste_views.views END,
  created_at = CASE
    WHEN paste_views.created_at = 0 THEN excluded.created_at
    -- compared first, so that the common upsert (same paste) never runs the look-up
    WHEN paste_views.created_at <> excluded.created_at AND excluded.created_at = ${CURRENT_PASTE_CREATED} THEN excluded.created_at
    ELSE paste_views.created_at END`;

/** View counts to add: [paste id, views, created_at of the paste they were counted for]. */
export type ViewChunk = Array<[string, number, number]>;

/**
 * A chunk of view counts added in one statement, on SQLite: the chunk as a JSON array of
 * ViewChunk triples. One statement instead of one per paste: 1.9 µs a paste instead of 2.7
 * (30,000 sorted pastes over 100,000, measured alone). Only ids that still have a paste are
 * counted, looked up in the primary key's index alone: the paste's created_at comes with the
 * count (the reader had the row), so its 1 KB+ row is not read again, a random page of the table
 * a view (a count then cost 1.7-2.2 µs instead of 3.5-4.0).
 */
function addViewsSqlite(chunk: string) {
  return sql`INSERT INTO paste_views (paste_id, created_at, views)
  SELECT counted.value ->> 0, counted.value ->> 2, counted.value ->> 1 FROM json_each(${chunk}) AS counted
  WHERE EXISTS (SELECT 1 FROM pastes WHERE pastes.id = counted.value ->> 0)
  ON CONFLICT (paste_id) DO UPDATE SET ${ADD_TO_SAME_PASTE}`;
}

/** The database's clock in milliseconds since the epoch (PostgreSQL): one clock for every instance. */
const DATABASE_NOW_MS = sql<number>`(extract(epoch FROM now()) * 1000)::bigint`;

/** How long a view chunk's token is kept: longer than a chunk whose write went unanswered waits for its retry. */
export const VIEW_TOKEN_LIFE_MS = 60 * 60 * 1000;

/**
 * The same on PostgreSQL, the chunk as three arrays. The rows are written in the order of their
 * ids, so instances flushing at the same moment lock the rows they share in one order and cannot
 * deadlock each other. The statement takes the chunk's token and adds the counts only if it was
 * not taken before: a chunk written again after a write that went unanswered (the connection
 * lost at its commit) is added once. Were the first write still running, the second waits on its
 * token's row, then adds nothing if the first committed and everything if it did not.
 */
function addViewsPostgres(token: string, ids: string[], counts: number[], createdAts: number[]) {
  return sql`WITH taken AS (
    INSERT INTO view_write_tokens (token, written_at) VALUES (${token}, ${DATABASE_NOW_MS})
    ON CONFLICT (token) DO NOTHING RETURNING token
  )
  INSERT INTO paste_views (paste_id, created_at, views)
  SELECT counted.id, counted.created_at, counted.views
  FROM unnest(${ids}::text[], ${counts}::bigint[], ${createdAts}::bigint[]) AS counted (id, views, created_at)
  WHERE EXISTS (SELECT 1 FROM taken) AND EXISTS (SELECT 1 FROM pastes WHERE pastes.id = counted.id)
  ORDER BY counted.id
  ON CONFLICT (paste_id) DO UPDATE SET ${ADD_TO_SAME_PASTE}`;
}

/** The next `batch` expired pastes, oldest expiry first. */
function expiredBatch(db: Kysely<Database>, now: number, batch: number) {
  return db.selectFrom('pastes').select('id').where('expires_at', '<=', now).orderBy('expires_at').limit(batch);
}

/** Drops the counted views of the next batch of expired pastes (before they are deleted). */
function expiredViewsDelete(db: Kysely<Database>, now: number, batch: number) {
  return db.deleteFrom('paste_views').where('paste_id', 'in', expiredBatch(db, now, batch));
}

/** Deletes the next batch of expired pastes (the same rows as expiredViewsDelete, in one transaction). */
function expiredPastesDelete(db: Kysely<Database>, now: number, batch: number) {
  return db.deleteFrom('pastes').where('id', 'in', expiredBatch(db, now, batch));
}

/** The SQL of one batch of the sweep, each statement with the parameters (now, batch). */
export function expirySweepSql(db: Kysely<Database>): SweepStatements {
  const forget = expiredViewsDelete(db, 0, 1).compile();
  const remove = expiredPastesDelete(db, 0, 1).compile();
  if (forget.parameters.length !== 2 || remove.parameters.length !== 2) throw new Error('sweep');
  return { forget: forget.sql, remove: remove.sql };
}

type InTransaction = (trx: Kysely<Database>) => Promise<void>;

interface PendingInsert {
  paste: Paste;
  also: InTransaction | undefined;
  resolve: (inserted: boolean) => void;
  reject: (err: unknown) => void;
}

async function insertRow(db: Kysely<Database>, paste: Paste): Promise<boolean> {
  const result = await db
    .insertInto('pastes')
    .values(toRow(paste))
    .onConflict((oc) => oc.column('id').doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0n) === 1;
}

/** The columns that tell a paste's row from another's under its id (ownRows): all but the content and views. */
const OWN_ROW_COLUMNS: ReadonlyArray<keyof PasteTable> = [
  ...SUMMARY_COLUMNS.filter((column) => column !== 'view_count'),
  'password_hash',
];

/** A stored value and a row's own, as equal: null and undefined alike, numbers by value. */
function sameValue(stored: unknown, given: unknown): boolean {
  if (stored === given) return true;
  if (stored == null || given == null) return stored == null && given == null;
  return typeof given === 'number' && Number(stored) === given;
}

/**
 * Whether a failed insert on PostgreSQL is known never to have reached it: no connection was had
 * (the pool's wait ran out, or the server refused to connect). Then there is nothing to recover.
 */
function neverSent(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') return true;
  return (
    err instanceof Error &&
    /timeout exceeded when trying to connect|Connection terminated due to connection timeout/i.test(err.message)
  );
}

/**
 * At most this many pastes in one grouped commit on PostgreSQL (on Kysely's multi-row insert, taken
 * when outbox rows follow, 20 parameters each, of 65,535).
 */
const GROUP_ROWS = 500;
/** At most this much content (UTF-16 units) in one grouped commit on PostgreSQL. */
const GROUP_BYTES = 8 * 1024 * 1024;
/**
 * How many turns of grouped commits run at once on PostgreSQL: while one waits for its commit
 * (the WAL flush and the round trip), the next takes what arrived meanwhile.
 */
export const TURNS_IN_FLIGHT = 2;

/**
 * The SQLSTATEs of a group insert that one of its rows may have caused, so that the group is
 * tried again in halves: data exceptions (22: a value refused), integrity constraints (23: an
 * owner key deleted meanwhile) and transaction rollbacks (40). Any other refuses the statement
 * whatever its rows.
 */
const REFUSED_BY_A_ROW = /^(22|23|40)/;

/**
 * Each column of a paste's row (toRow) with the type of the array that carries it in a grouped
 * insert on PostgreSQL (GROUP_INSERT_PG).
 */
const PG_COLUMN_ARRAYS: Record<keyof PasteRow, string> = {
  id: 'text[]',
  owner_key_id: 'text[]',
  title: 'text[]',
  description: 'text[]',
  content: 'text[]',
  content_type: 'text[]',
  original_filename: 'text[]',
  language: 'text[]',
  file_size: 'int[]',
  sha256: 'text[]',
  created_at: 'bigint[]',
  expires_at: 'bigint[]',
  view_count: 'int[]',
  burn_after_read: 'int[]',
  encrypted: 'int[]',
  downloadable: 'int[]',
  is_public: 'int[]',
  password_hash: 'text[]',
  source: 'text[]',
  creator_ip: 'text[]',
};
const PG_COLUMNS = Object.keys(PG_COLUMN_ARRAYS) as Array<keyof PasteRow>;

/**
 * A turn's pastes in one statement on PostgreSQL whatever their number: one array a column,
 * unnested into rows in the order given (ids sorted: see commitInTurns). One text, so each
 * connection parses it once as a named statement (and plans it as PostgreSQL's plan cache does),
 * where Kysely's multi-row VALUES was a new text (built, compiled, parsed and planned) for every
 * number of rows. A lone insert without outbox rows takes it too.
 */
const GROUP_INSERT_PG = `INSERT INTO pastes (${PG_COLUMNS.join(', ')})
SELECT ${PG_COLUMNS.map((column) => `u.${column}`).join(', ')}
FROM unnest(${PG_COLUMNS.map((column, i) => `$${i + 1}::${PG_COLUMN_ARRAYS[column]}`).join(', ')})
  WITH ORDINALITY AS u(${PG_COLUMNS.join(', ')}, position)
ORDER BY u.position
ON CONFLICT (id) DO NOTHING
RETURNING id`;

/**
 * The pastes' rows as GROUP_INSERT_PG's values: one array a column, in the order given; the text
 * columns in PostgreSQL's binary format (pg-binary-array.ts: no escaping of the content), the
 * numbers as pg's array literals.
 */
function columnArrays(pastes: Paste[]): unknown[] {
  const arrays: unknown[][] = PG_COLUMNS.map(() => []);
  for (const paste of pastes) {
    const row = toRow(paste);
    for (let i = 0; i < PG_COLUMNS.length; i++) (arrays[i] as unknown[]).push(row[PG_COLUMNS[i] as keyof PasteRow]);
  }
  return arrays.map((values, i) =>
    PG_COLUMN_ARRAYS[PG_COLUMNS[i] as keyof PasteRow] === 'text[]'
      ? binaryTextArray(values as Array<string | null>)
      : values,
  );
}

/** A paste that fills every column, for compiling the insert once. */
const SAMPLE: Paste = {
  id: 'sample',
  ownerKeyId: 'k',
  title: 't',
  description: 'd',
  content: 'c',
  contentType: 'text',
  originalFilename: 'f',
  language: 'l',
  fileSize: 1,
  sha256: 's',
  createdAt: 1,
  expiresAt: 1,
  viewCount: 0,
  burnAfterRead: false,
  encrypted: false,
  downloadable: true,
  public: false,
  passwordHash: 'h',
  source: 'api',
  creatorIp: 'i',
};

/** Every column of a paste, named (the hot reads run as named statements: prepared-query.ts). */
const PASTE_COLUMNS = Object.keys(toRow(SAMPLE)) as Array<keyof PasteRow>;
/** A paste still live at `now`: no expiry, or one after it (D12). */
const liveAt = (now: number) => (eb: ExpressionBuilder<Database, 'pastes'>) =>
  eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', now)]);
/** The size in bytes past which /raw reads a content from SQLite as bytes (RAW_CONTENT). */
export const CONTENT_AS_BYTES = 16 * 1024;
/** What /raw reads of a paste (findLiveContent). */
const LIVE_CONTENT_COLUMNS = ['content', 'password_hash', 'burn_after_read', 'created_at'] as const;
/**
 * findLiveContent's content on SQLite (a UTF-8 file): past CONTENT_AS_BYTES (its file_size, the
 * UTF-8 size it was stored with), the UTF-8 bytes it is stored as, which /raw writes as they are:
 * no V8 string is made of them, and no bytes encoded from that string on the way out, so a large
 * answer holds its size once, off the heap, freed with the answer (`npm run bench:unread`, 4 MB
 * answers no one reads: peak RSS 569 MB against 1,010). Smaller, the text: made a buffer, a 1 KB
 * content gave /raw 0.78 of R against 0.82 over five alternations (within the noise, no gain).
 */
const RAW_CONTENT = sql<
  string | Buffer
>`CASE WHEN file_size > ${sql.lit(CONTENT_AS_BYTES)} THEN CAST(content AS BLOB) ELSE content END`.as('content');
const LIVE_CONTENT_BESIDE = LIVE_CONTENT_COLUMNS.filter((column) => column !== 'content');
/** A row of findLiveContent's reads in one query on PostgreSQL: the columns, its id and expiry. */
type LiveContentRow = Pick<PasteRow, (typeof LIVE_CONTENT_COLUMNS)[number] | 'id' | 'expires_at'>;

export class PasteRepository {
  private readonly findLiveQuery;
  private readonly liveContentQuery;
  private readonly pageQuery;
  private readonly pageAfterQuery;
  /** On PostgreSQL, findLive's and findLiveContent's reads of one turn in one query each. */
  private readonly liveBatch: PointReadBatch<RowWithViews> | null = null;
  private readonly liveContentBatch: PointReadBatch<LiveContentRow> | null = null;
  /** On PostgreSQL, GROUP_INSERT_PG as a named statement on the pool. */
  private readonly groupInsertPg: ((values: unknown[]) => Promise<Array<{ id: string }>>) | null;
  private pending: PendingInsert[] = [];
  /** On SQLite, the insert prepared once and run on the handle directly (see commitNow). */
  private readonly insertStatement: BetterSqlite3.Statement | null = null;

  /**
   * groupCommit: commit concurrent inserts together (SQLite, one writer); sqlite: the handle the
   * hot reads run on directly (prepared-query.ts).
   */
  constructor(
    private readonly db: Kysely<Database>,
    private readonly groupCommit = false,
    sqlite: BetterSqlite3.Database | null = null,
    pgPool: pg.Pool | null = null,
    private readonly expirySweeper: ExpirySweeper | null = null,
  ) {
    this.findLiveQuery = preparedQuery(
      db,
      ['string', 'number'],
      (id: string, now: number) =>
        db.selectFrom('pastes').select(PASTE_COLUMNS).select(VIEWS).where('id', '=', id).where(liveAt(now)),
      sqlite,
      pgPool,
    );
    // A content's bytes are its UTF-8 only in a file that stores text as UTF-8 (fastpaste's do;
    // one made elsewhere may not).
    const bytesAsStored = sqlite !== null && sqlite.pragma('encoding', { simple: true }) === 'UTF-8';
    this.liveContentQuery = preparedQuery(
      db,
      ['string', 'number'],
      (id: string, now: number) => {
        const read = db.selectFrom('pastes').where('id', '=', id).where(liveAt(now));
        return bytesAsStored ? read.select(LIVE_CONTENT_BESIDE).select(RAW_CONTENT) : read.select(LIVE_CONTENT_COLUMNS);
      },
      sqlite,
      pgPool,
    );
    this.pageQuery = preparedQuery(
      db,
      ['string', 'number', 'number', 'number'],
      (owner: string, now: number, limit: number, offset: number) => this.pageSelect(owner, now, null, limit, offset),
      sqlite,
      pgPool,
    );
    this.pageAfterQuery = preparedQuery(
      db,
      ['string', 'number', 'number', 'string', 'number', 'number'],
      (owner: string, now: number, createdAt: number, id: string, limit: number, offset: number) =>
        this.pageSelect(owner, now, { createdAt, id }, limit, offset),
      sqlite,
      pgPool,
    );
    this.groupInsertPg = pgPool ? namedStatement(pgPool, GROUP_INSERT_PG) : null;
    this.pagesThisTurn = pgPool ? new Map() : null;
    if (pgPool) {
      // The same columns as the single reads above, by a list of ids live at the earliest now of
      // the batch (each caller's own is judged by the batch), the content only up to
      // BATCH_CONTENT_BYTES (octet_length reads a stored value's size without decompressing it).
      const byIds = (columns: ReadonlyArray<keyof PasteRow>, withViews: boolean) => {
        const ids = ['ids'];
        const now = -7_000_000_000_001;
        const select = db
          .selectFrom('pastes')
          .select(columns.filter((column) => column !== 'content'))
          .select(
            sql<string>`CASE WHEN octet_length(content) <= ${sql.lit(BATCH_CONTENT_BYTES)} THEN content END`.as(
              'content',
            ),
          )
          .select(sql<boolean>`octet_length(content) > ${sql.lit(BATCH_CONTENT_BYTES)}`.as('oversize'));
        const compiled = (withViews ? select.select(VIEWS) : select)
          .where(sql<boolean>`id = ANY(${ids}::text[])`)
          .where(liveAt(now))
          .compile();
        if (compiled.parameters.length !== 2 || compiled.parameters[0] !== ids || compiled.parameters[1] !== now) {
          throw new Error('point reads by ids: the ids, then now');
        }
        const statement = namedStatement(pgPool, compiled.sql);
        return (part: string[], earliest: number) => statement([part, earliest]);
      };
      const live = byIds(PASTE_COLUMNS, true);
      this.liveBatch = new PointReadBatch(
        (part, earliest) => live(part, earliest) as Promise<RowWithViews[]>,
        (id, now) => this.findLiveQuery(id, now).then(([row]) => row),
      );
      const contentColumns = [...LIVE_CONTENT_COLUMNS, 'id', 'expires_at'] as const;
      const content = byIds(contentColumns, false);
      // The single read of a content, with the id and expiry the batch judges its callers by.
      const contentAlone = preparedQuery(
        db,
        ['string', 'number'],
        (id: string, now: number) =>
          db.selectFrom('pastes').select(contentColumns).where('id', '=', id).where(liveAt(now)),
        null,
        pgPool,
      );
      this.liveContentBatch = new PointReadBatch(
        (part, earliest) => content(part, earliest) as Promise<LiveContentRow[]>,
        (id, now) => contentAlone(id, now).then(([row]) => row),
      );
    }
    if (sqlite) {
      // Kysely's SQL for the insert, compiled once; its parameters are the row's values in order.
      const compiled = db
        .insertInto('pastes')
        .values(toRow(SAMPLE))
        .onConflict((oc) => oc.column('id').doNothing())
        .compile();
      if (compiled.parameters.length !== Object.keys(toRow(SAMPLE)).length) throw new Error('insert columns');
      this.insertStatement = sqlite.prepare(compiled.sql);
      this.sqlite = sqlite;
      // Made once: a transaction function of the handle's (wrapped by the write gate) per group
      // commit was work on the create path.
      this.inOneTransaction = sqlite.transaction((run: () => boolean[]) => run());
      this.addViewsStatement = sqlite.prepare(addViewsSqlite('').compile(db).sql);
      this.sweepStatements = expirySweepSql(db);
      const forget = sqlite.prepare(this.sweepStatements.forget);
      const remove = sqlite.prepare(this.sweepStatements.remove);
      this.sweepBatch = sqlite.transaction((now: number, batch: number) => {
        forget.run(now, batch);
        return remove.run(now, batch).changes;
      });
    }
  }

  /** On SQLite, runs its argument in one transaction on the handle (commitNow). */
  private readonly inOneTransaction: ((run: () => boolean[]) => boolean[]) | null = null;

  /** On SQLite, the SQL of a batch of the sweep, for the sweep's thread. */
  private readonly sweepStatements: SweepStatements | null = null;

  /** On SQLite, one batch of the sweep as one synchronous transaction on the handle. */
  private readonly sweepBatch: ((now: number, batch: number) => number) | null = null;

  private readonly sqlite: BetterSqlite3.Database | null = null;
  /** On SQLite, addViewsSqlite prepared once. */
  private readonly addViewsStatement: BetterSqlite3.Statement | null = null;

  /** True when this process is the only writer of the pastes (SQLite: one process owns the file). */
  get soleWriter(): boolean {
    return this.groupCommit;
  }

  /**
   * Inserts the batch in one transaction run straight on the SQLite handle, with no wait between
   * statements; null when that cannot be done (PostgreSQL, an outbox entry to write in the same
   * transaction, or a transaction of Kysely's open on the connection: joining it would tie these
   * inserts to its commit), and the Kysely path is taken instead.
   */
  private commitNow(batch: PendingInsert[]): boolean[] | null {
    const statement = this.insertStatement;
    const sqlite = this.sqlite;
    const inOneTransaction = this.inOneTransaction;
    if (!statement || !sqlite || !inOneTransaction || sqlite.inTransaction || batch.some((item) => item.also)) {
      return null;
    }
    const insertAll = () => batch.map((item) => statement.run(...Object.values(toRow(item.paste))).changes === 1);
    return batch.length === 1 ? insertAll() : inOneTransaction(insertAll);
  }

  /**
   * Inserts the paste unless its id is taken; returns whether it was inserted. `alsoInTransaction`
   * runs in the same transaction after a successful insert (the webhook outbox). The inserts of
   * concurrent requests are committed together in one transaction (group commit: one WAL commit
   * for many pastes; on PostgreSQL in turns, commitInTurns), and each caller hears back only
   * after that commit.
   */
  insertIfFree(paste: Paste, alsoInTransaction?: InTransaction): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.pending.push({ paste, also: alsoInTransaction, resolve, reject });
      if (this.groupCommit) {
        if (this.pending.length === 1) setImmediate(() => void this.commitPending());
      } else if (this.turnsRunning < TURNS_IN_FLIGHT) {
        this.turnsRunning++;
        setImmediate(() => void this.commitInTurns());
      }
    });
  }

  /** On PostgreSQL, how many loops of commitInTurns run (at most TURNS_IN_FLIGHT). */
  private turnsRunning = 0;

  /**
   * On PostgreSQL, group commit in turns: a transaction takes what is pending, so the inserts of
   * concurrent requests share one commit (one WAL flush, one round of BEGIN/COMMIT), and requests
   * arriving meanwhile wait for the next turn. Up to TURNS_IN_FLIGHT loops of turns run at once,
   * each on a connection of its own, so that one turn's commit does not leave the next waiting
   * idle behind it. A turn holds at most GROUP_ROWS pastes and GROUP_BYTES of content (a larger
   * paste goes alone), and one paste per id: which of two inserts of one id took it must be
   * known, so the second waits for a later turn. Two turns in flight may hold the same id: the
   * second's insert of it waits on the first's uncommitted row and then finds it taken (or free,
   * had the first rolled back), as PostgreSQL's `ON CONFLICT DO NOTHING` does. Each turn inserts
   * its rows in id order, so two turns (or two instances) that wait on each other's ids cannot
   * wait in a circle: a turn waiting at id X holds only ids below X, and the turn it waits for
   * has already passed them all.
   */
  private async commitInTurns(): Promise<void> {
    while (this.pending.length > 0) {
      const batch: PendingInsert[] = [];
      const later: PendingInsert[] = [];
      const ids = new Set<string>();
      let bytes = 0;
      for (const item of this.pending) {
        const size = item.paste.content.length;
        const full = batch.length >= GROUP_ROWS || (batch.length > 0 && bytes + size > GROUP_BYTES);
        if (full || ids.has(item.paste.id)) {
          later.push(item);
          continue;
        }
        batch.push(item);
        ids.add(item.paste.id);
        bytes += size;
      }
      this.pending = later;
      // In id order: two instances inserting the same ids (slugs) then lock them in one order.
      batch.sort((a, b) => (a.paste.id < b.paste.id ? -1 : a.paste.id > b.paste.id ? 1 : 0));
      await this.commitTogether(batch);
    }
    this.turnsRunning--;
  }

  /**
   * One turn of commitInTurns: the batch in one transaction (one statement, GROUP_INSERT_PG, or
   * Kysely's multi-row insert and the outbox rows after it). Never throws: each caller is
   * resolved or rejected once. Returns the error when the connection was lost or timed out on
   * the client's side and the batch could not be settled (recoverLost): the caller's later
   * halves are then not tried. Else undefined.
   */
  private async commitTogether(batch: PendingInsert[]): Promise<unknown> {
    let results: boolean[];
    try {
      results = await this.insertBatch(batch);
    } catch (err) {
      // A connection lost or a client-side timeout: the batch may have been committed or not.
      if (!answeredByServer(err)) {
        // The session is closed after such an error, the named statement's and Kysely's
        // transaction's (outbox rows) alike (pg-sessions.ts): the second try is on another.
        if (!neverSent(err)) return this.recoverLost(batch, err);
        for (const item of batch) item.reject(err);
        return err;
      }
      if (batch.length === 1) {
        (batch[0] as PendingInsert).reject(err);
        return undefined;
      }
      // Refused as a whole (read-only, out of disk or connections, cancelled): nothing of it is
      // stored, and the same statement for fewer rows would meet the same refusal.
      if (!REFUSED_BY_A_ROW.test((err as { code: string }).code)) {
        for (const item of batch) item.reject(err);
        return undefined;
      }
      // One insert was refused and took the batch with it (nothing of it stored): the batch is
      // tried again in halves, one statement at a time and still in id order, down to inserts
      // on their own, so one bad request never fails the others. One refused insert among n
      // costs about 2·log2(n) statements: tried each alone and all at once, a refused group of
      // 500 took the whole pool and made every read wait.
      const half = Math.ceil(batch.length / 2);
      const lost = await this.commitTogether(batch.slice(0, half));
      if (lost === undefined) return this.commitTogether(batch.slice(half));
      for (const item of batch.slice(half)) item.reject(lost);
      return lost;
    }
    for (const [i, item] of batch.entries()) item.resolve(results[i] as boolean);
    return undefined;
  }

  /**
   * The batch's insert: for each paste, whether it took its id. One statement is a transaction
   * of its own (one round trip instead of three), unless outbox rows must be written with it.
   */
  private insertBatch(batch: PendingInsert[]): Promise<boolean[]> {
    if (batch.length === 1) {
      const [only] = batch as [PendingInsert];
      return this.insertAlone(only.paste, only.also).then((took) => [took]);
    }
    // Kysely's multi-row insert, for a batch whose outbox rows follow in its transaction.
    const insertAll = (db: Kysely<Database>) =>
      db
        .insertInto('pastes')
        .values(batch.map((item) => toRow(item.paste)))
        .onConflict((oc) => oc.column('id').doNothing())
        .returning('id')
        .execute();
    const tookTheirIds = (rows: Array<{ id: string }>) => {
      const inserted = new Set(rows.map((row) => row.id));
      return batch.map((item) => inserted.has(item.paste.id));
    };
    return this.sent(() =>
      batch.some((item) => item.also)
        ? this.db.transaction().execute(async (trx) => {
            const flags = tookTheirIds(await insertAll(trx));
            for (const [i, item] of batch.entries()) if (flags[i] && item.also) await item.also(trx);
            return flags;
          })
        : (this.groupInsertPg
            ? this.groupInsertPg(columnArrays(batch.map((item) => item.paste)))
            : insertAll(this.db)
          ).then(tookTheirIds),
    );
  }

  /**
   * After the connection was lost or timed out under a batch's insert, the batch may have been
   * committed, or not, or may still be committing on the server: it is sent once more, on
   * another connection. A paste whose first insert did not commit takes its id now (its outbox
   * rows with it). One whose first insert committed finds its id taken, and the row under it is
   * told to be its own (ownRows); one whose first insert is still running makes the second wait
   * on its uncommitted row, as ON CONFLICT does, and then finds it taken or free. So a create
   * whose reply was lost is answered 201 once, with the paste it stored, instead of 503 for a
   * paste that exists and that a client's retry would store a second time. Should the second
   * try or the look fail too, every caller not yet settled hears the first error (503); the
   * returned error stops the turn's later halves, as the first would have.
   */
  private async recoverLost(batch: PendingInsert[], lost: unknown): Promise<unknown> {
    let inserted: boolean[];
    try {
      inserted = await this.insertBatch(batch);
    } catch {
      for (const item of batch) item.reject(lost);
      return lost;
    }
    const taken = batch.filter((_, i) => !inserted[i]);
    let own: Set<string> | null = null;
    if (taken.length > 0) {
      try {
        own = await this.ownRows(taken.map((item) => item.paste));
      } catch {
        // What the second try stored is told; a paste found taken may be its own: 503.
      }
    }
    for (const [i, item] of batch.entries()) {
      if (inserted[i]) item.resolve(true);
      else if (own === null) item.reject(lost);
      else item.resolve(own.has(item.paste.id));
    }
    return own === null && taken.length > 0 ? lost : undefined;
  }

  /**
   * The ids of `pastes` whose stored row is the one given: every column the same (the content by
   * its sha256; a password's hash is salted, so a paste behind a password is told apart by it
   * alone). A row another create stored under the same id (a slug asked for twice) differs in
   * one of them unless both asked for the same paste, from the same address, in the same
   * millisecond. Not told apart: a row of its own stored by the first try and deleted before the
   * second (a slug burned or deleted by a client that guessed it): the second stores it again.
   */
  private async ownRows(pastes: Paste[]): Promise<Set<string>> {
    const rows = await this.db
      .selectFrom('pastes')
      .select(OWN_ROW_COLUMNS)
      .where(
        'id',
        'in',
        pastes.map((paste) => paste.id),
      )
      .execute();
    const given = new Map(pastes.map((paste) => [paste.id, toRow(paste)]));
    const own = new Set<string>();
    for (const row of rows) {
      const mine = given.get(row.id) as Record<string, unknown> | undefined;
      const stored = row as Record<string, unknown>;
      if (mine && OWN_ROW_COLUMNS.every((column) => sameValue(stored[column], mine[column]))) own.add(row.id);
    }
    return own;
  }

  /** The group and lone inserts (statements, or transactions with outbox rows) sent (tests). */
  insertStatements = 0;
  /** How many of them were out at once, now and at most (tests). */
  private insertsOut = 0;
  insertsOutPeak = 0;

  /** Runs one insert statement (or transaction), counted. */
  private async sent<T>(run: () => Promise<T>): Promise<T> {
    this.insertStatements++;
    this.insertsOut++;
    if (this.insertsOut > this.insertsOutPeak) this.insertsOutPeak = this.insertsOut;
    try {
      return await run();
    } finally {
      this.insertsOut--;
    }
  }

  private insertAlone(paste: Paste, also?: InTransaction): Promise<boolean> {
    return this.sent(() => this.insertAloneNow(paste, also));
  }

  private async insertAloneNow(paste: Paste, also?: InTransaction): Promise<boolean> {
    if (!also && this.groupInsertPg) return (await this.groupInsertPg(columnArrays([paste]))).length === 1;
    if (!also) return insertRow(this.db, paste);
    return this.db.transaction().execute(async (trx) => {
      if (!(await insertRow(trx, paste))) return false;
      await also(trx);
      return true;
    });
  }

  private async commitPending(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    let committed: boolean[] | null = null;
    try {
      committed = this.commitNow(batch);
    } catch {
      // One insert failed and took the batch with it: each is tried again on its own below.
      for (const item of batch) this.insertAlone(item.paste, item.also).then(item.resolve, item.reject);
      return;
    }
    if (committed) {
      for (const [i, item] of batch.entries()) item.resolve(committed[i] as boolean);
      return;
    }
    if (batch.length === 1) {
      const [only] = batch as [PendingInsert];
      this.insertAlone(only.paste, only.also).then(only.resolve, only.reject);
      return;
    }
    const results: boolean[] = [];
    try {
      await this.db.transaction().execute(async (trx) => {
        for (const item of batch) {
          const inserted = await insertRow(trx, item.paste);
          if (inserted && item.also) await item.also(trx);
          results.push(inserted);
        }
      });
    } catch {
      // One insert failed and took the batch with it: each is tried again on its own, so one
      // bad request never fails the others.
      for (const item of batch) this.insertAlone(item.paste, item.also).then(item.resolve, item.reject);
      return;
    }
    for (const [i, item] of batch.entries()) item.resolve(results[i] as boolean);
  }

  /** Frees an id held only by an expired paste that the sweep has not removed yet. */
  async deleteIfExpired(id: string, now: number): Promise<void> {
    const row = await this.db
      .deleteFrom('pastes')
      .where('id', '=', id)
      .where('expires_at', '<=', now)
      .returning('created_at')
      .executeTakeFirst();
    if (row) await this.forgetViews(id, row.created_at);
  }

  /** The paste if it exists and has not expired at `now`. */
  async findLive(id: string, now: number): Promise<Paste | undefined> {
    const [row] = this.liveBatch ? [await this.liveBatch.read(id, now)] : await this.findLiveQuery(id, now);
    return row ? toPaste(row) : undefined;
  }

  /**
   * findLive at once, when the SQLite handle can answer now: the paste or null; undefined when it
   * cannot (PostgreSQL, a transaction open): use findLive.
   */
  findLiveNow(id: string, now: number): Paste | null | undefined {
    const row = this.findLiveQuery.first(id, now);
    return row ? toPaste(row) : row;
  }

  /** The content of a live paste and what would forbid reading it as is. */
  async findLiveContent(id: string, now: number): Promise<LiveContent | undefined> {
    const [row] = this.liveContentBatch
      ? [await this.liveContentBatch.read(id, now)]
      : await this.liveContentQuery(id, now);
    return row ? toLiveContent(row) : undefined;
  }

  /** findLiveContent at once: the content or null, or undefined (see findLiveNow). */
  findLiveContentNow(id: string, now: number): LiveContent | null | undefined {
    const row = this.liveContentQuery.first(id, now);
    return row ? toLiveContent(row) : row;
  }

  /**
   * Burn (D11): deletes a live view-once paste and returns it, in one statement, so of any number
   * of concurrent readers exactly one gets a row. Only the paste as the reader checked it: the
   * same one (its creation time), behind the same password (or none), as encrypted and as
   * downloadable. One a PUT changed since the checks is left alone (undefined): a read that
   * checked no password must not hand out what a PUT has just put behind one.
   */
  async consumeBurn(id: string, now: number, checked: Paste): Promise<Paste | undefined> {
    const row = await this.db
      .deleteFrom('pastes')
      .where('id', '=', id)
      .where('burn_after_read', '=', 1)
      .where(liveAt(now))
      .where('created_at', '=', checked.createdAt)
      .where((eb) =>
        checked.passwordHash === null
          ? eb('password_hash', 'is', null)
          : eb('password_hash', '=', checked.passwordHash),
      )
      .where('encrypted', '=', checked.encrypted ? 1 : 0)
      .where('downloadable', '=', checked.downloadable ? 1 : 0)
      .returningAll()
      .executeTakeFirst();
    if (!row) return undefined;
    // Not waited for: the one reader's content goes out now, not after another statement (on
    // PostgreSQL a pool's wait and a round trip, while the reader may leave). It never fails.
    void this.forgetViews(id, row.created_at);
    return toPaste(row);
  }

  /**
   * Drops the counted views of a paste that is gone (made at `createdAt`), so that a new paste
   * with its id starts at 0. Only its own counts (and untagged ones, 0), as reads take them, not
   * by comparing times (instances' clocks differ): a paste made again under the id while this
   * statement waited (for a connection, behind a flush's lock; another instance's, on
   * PostgreSQL) may have its first counts written already, which are kept.
   * Run after the paste's delete has committed, so it never fails the caller: a burned paste's one
   * reader must get its content (D11), and a DELETE that happened must not be answered 503. A row
   * left behind is harmless: counts are tagged with their paste's creation time (migration 0007),
   * and a paste made again under the id has another.
   */
  private async forgetViews(id: string, createdAt: number): Promise<void> {
    try {
      await this.db
        .deleteFrom('paste_views')
        .where('paste_id', '=', id)
        .where('created_at', 'in', [createdAt, 0])
        .execute();
    } catch {
      // Left for the tag to keep apart (above).
    }
  }

  /**
   * On SQLite, adds a chunk of counted views in one statement on the handle and returns true;
   * false when that cannot be done now (PostgreSQL, or a transaction of Kysely's open on the
   * connection): use addViews. Only ids that still have a paste are counted: a paste deleted
   * since leaves no row behind. A count of a paste deleted and made again under its id since is
   * tagged with the old paste's created_at, which the new paste's reads do not take and its own
   * first count replaces (ADD_TO_SAME_PASTE).
   */
  addViewsNow(chunk: ViewChunk): boolean {
    const statement = this.addViewsStatement;
    if (!statement || this.sqlite?.inTransaction) return false;
    statement.run(JSON.stringify(chunk));
    return true;
  }

  /**
   * addViewsNow through Kysely: one statement. On PostgreSQL the chunk is added under `token`
   * (addViewsPostgres): a chunk written again under its token after a failed write is added
   * once, whether the failed one committed or not. On SQLite a failed write wrote nothing.
   */
  async addViews(chunk: ViewChunk, token: string): Promise<void> {
    if (this.groupCommit) {
      await addViewsSqlite(JSON.stringify(chunk)).execute(this.db);
      return;
    }
    await addViewsPostgres(
      token,
      chunk.map(([id]) => id),
      chunk.map(([, views]) => views),
      chunk.map(([, , createdAt]) => createdAt),
    ).execute(this.db);
  }

  /** Drops the view chunks' tokens older than VIEW_TOKEN_LIFE_MS (PostgreSQL; none on SQLite). */
  async forgetOldViewTokens(): Promise<void> {
    if (this.groupCommit) return;
    await sql`DELETE FROM view_write_tokens WHERE written_at < ${DATABASE_NOW_MS} - ${VIEW_TOKEN_LIFE_MS}`.execute(
      this.db,
    );
  }

  /** Applies the changes to a live paste of that owner; returns it as it now is. */
  async updateOwned(id: string, ownerKeyId: string, now: number, changes: PasteChanges): Promise<Paste | undefined> {
    const set = changesToColumns(changes);
    const byRow = changes.downloadableByRow;
    const row = await this.db
      .updateTable('pastes')
      .set((eb) => {
        if (!byRow) return set;
        const stored = (value: boolean | null) => (value === null ? eb.ref('downloadable') : eb.lit(flag(value)));
        return {
          ...set,
          downloadable: eb
            .case()
            .when('encrypted', '=', 1)
            .then(stored(byRow.ifEncrypted))
            .else(stored(byRow.ifPlain))
            .end(),
        };
      })
      .where('id', '=', id)
      .where('owner_key_id', '=', ownerKeyId)
      .where(liveAt(now))
      .returningAll()
      .executeTakeFirst();
    return row ? toPaste(row) : undefined;
  }

  /** Deletes a live paste of that owner; returns the deleted paste's creation time, or null. */
  async deleteOwned(id: string, ownerKeyId: string, now: number): Promise<number | null> {
    const row = await this.db
      .deleteFrom('pastes')
      .where('id', '=', id)
      .where('owner_key_id', '=', ownerKeyId)
      .where(liveAt(now))
      .returning('created_at')
      .executeTakeFirst();
    if (!row) return null;
    await this.forgetViews(id, row.created_at);
    return row.created_at;
  }

  /**
   * One page of an owner's live pastes, newest first: `offset` entries skipped after `after`
   * (a position in that order, from ownerAnchors) or from the start, read from the covering
   * index alone (no table row is read).
   */
  async pageOwned(
    ownerKeyId: string,
    now: number,
    limit: number,
    offset: number,
    after: ListPosition | null = null,
  ): Promise<OwnedListItem[]> {
    const read = () =>
      after
        ? this.pageAfterQuery(ownerKeyId, now, after.createdAt, after.id, limit, offset)
        : this.pageQuery(ownerKeyId, now, limit, offset);
    if (!this.pagesThisTurn) return (await read()).map(toListItem);
    const key = `${ownerKeyId}\n${now}\n${limit}\n${offset}\n${after ? `${after.createdAt}\n${after.id}` : ''}`;
    let rows = this.pagesThisTurn.get(key);
    if (!rows) {
      const pages = this.pagesThisTurn;
      rows = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
        pages.delete(key);
        this.pageQueries++;
        return read();
      });
      pages.set(key, rows);
    }
    // Items of the caller's own: the service adds views to them.
    return (await rows).map(toListItem);
  }

  /**
   * On PostgreSQL, the page reads asked for in this turn of the event loop and not yet sent, by
   * their arguments: the same page asked for again in the turn (clients of one key polling its
   * list) shares the one query, sent in the turn's check phase, after every request that shares
   * it arrived, so each sees what was committed before it came (a query already sent is never
   * joined). Null on SQLite, where pages are read at once (and kept: owner-listing.ts).
   */
  private readonly pagesThisTurn: Map<string, Promise<Awaited<ReturnType<PasteRepository['pageQuery']>>>> | null;
  /** Page queries sent through pagesThisTurn (tests). */
  pageQueries = 0;

  /**
   * The page query, with or without a starting position (compiled once each, above): one range
   * of the owner's entries in pastes_owner_list, which holds every listed column.
   */
  private pageSelect(ownerKeyId: string, now: number, after: ListPosition | null, limit: number, offset: number) {
    let page = this.db
      .selectFrom('pastes')
      .select(LIST_COLUMNS)
      .select(VIEWS)
      .where('owner_key_id', '=', ownerKeyId)
      .where((w) => w.or([w('expires_at', 'is', null), w('expires_at', '>', now)]));
    if (after) page = page.where((w) => w(w.refTuple('created_at', 'id'), '<', w.tuple(after.createdAt, after.id)));
    return page.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset);
  }

  /**
   * Every `spacing`-th of an owner's live pastes, newest first (the entries at 1-based positions
   * spacing, 2 x spacing, ...): one pass over the owner's index entries, so that a page far down
   * the list starts from the nearest of them instead of skipping every entry before it.
   */
  async ownerAnchors(ownerKeyId: string, now: number, spacing: number): Promise<ListPosition[]> {
    const rows = await this.db
      .selectFrom((eb) =>
        eb
          .selectFrom('pastes')
          .select(['created_at', 'id'])
          .select(sql<number>`ROW_NUMBER() OVER (ORDER BY created_at DESC, id DESC)`.as('list_rank'))
          .where('owner_key_id', '=', ownerKeyId)
          .where((w) => w.or([w('expires_at', 'is', null), w('expires_at', '>', now)]))
          .as('ranked'),
      )
      .select(['created_at', 'id'])
      .where(sql<boolean>`list_rank % ${spacing} = 0`)
      .orderBy('list_rank')
      .execute();
    return rows.map((row) => ({ createdAt: Number(row.created_at), id: row.id }));
  }

  /**
   * How many live pastes an owner has, when the next of them expires (null: none does), and,
   * where other processes may change the list (PostgreSQL), a fingerprint of which pastes they
   * are: their count and the sum of their creation times (null on SQLite, whose sum of a long
   * list could overflow, and whose lists only this process changes). Two equal fingerprints
   * mean the same live pastes, so the same positions in the list, but for a paste removed and
   * another added with as much creation time between two counts.
   */
  async countOwned(
    ownerKeyId: string,
    now: number,
  ): Promise<{ total: number; nextExpiry: number | null; fingerprint: string | null }> {
    const row = await this.db
      .selectFrom('pastes')
      .select((eb) => [
        eb.fn.countAll<number>().as('total'),
        eb.fn.min<number | null>('expires_at').as('next_expiry'),
        (this.soleWriter ? sql<string | null>`NULL` : sql<string | null>`CAST(SUM(created_at) AS TEXT)`).as(
          'created_sum',
        ),
      ])
      .where('owner_key_id', '=', ownerKeyId)
      .where((w) => w.or([w('expires_at', 'is', null), w('expires_at', '>', now)]))
      .executeTakeFirstOrThrow();
    const total = Number(row.total);
    return {
      total,
      nextExpiry: row.next_expiry === null ? null : Number(row.next_expiry),
      fingerprint: this.soleWriter ? null : `${total}:${row.created_sum ?? 0}`,
    };
  }

  /** One page of the public archive (D22), newest first. */
  async listPublic(now: number, limit: number, offset: number): Promise<PasteSummary[]> {
    const rows = await this.db
      .selectFrom('pastes')
      .select(SUMMARY_COLUMNS)
      .where('is_public', '=', 1)
      .where('password_hash', 'is', null)
      .where('burn_after_read', '=', 0)
      .where('encrypted', '=', 0)
      .where(liveAt(now))
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .offset(offset)
      .execute();
    return rows.map(toSummary);
  }

  /**
   * On SQLite, deleteExpired at once: the batch runs as one synchronous transaction on the handle
   * (it holds the event loop for exactly its own work, and no transaction stays open across
   * turns of the event loop for the hot reads and group commits to meet). Null when that cannot
   * be done now (PostgreSQL, or a transaction of Kysely's open): use deleteExpired.
   */
  deleteExpiredNow(now: number, batch: number): number | null {
    if (!this.sweepBatch || this.sqlite?.inTransaction) return null;
    return this.sweepBatch(now, batch);
  }

  /**
   * On a SQLite file served with its threads (database.ts), every paste expired at `now` deleted
   * by the expiry sweep's thread (expiry-sweeper.ts), in batches that never hold the event loop;
   * how many went. Null where there is no such thread: use deleteExpiredNow or deleteExpired.
   */
  deleteExpiredInThread(now: number, firstBatch: number): Promise<number> | null {
    if (!this.expirySweeper || !this.sweepStatements) return null;
    return this.expirySweeper.sweep(this.sweepStatements, now, firstBatch);
  }

  /**
   * Removes up to `batch` expired pastes; returns how many went. On PostgreSQL, where several
   * instances sweep and flush view counts at once, the batch's pastes are taken with SKIP LOCKED
   * (two sweeps share out the rows instead of waiting on each other) and their count rows are
   * locked in id order, the order a flush writes them in, so a sweep and a flush cannot
   * deadlock (each holding a row the other waits for).
   */
  async deleteExpired(now: number, batch: number): Promise<number> {
    if (this.groupCommit) {
      return this.db.transaction().execute(async (trx) => {
        await expiredViewsDelete(trx, now, batch).execute();
        const result = await expiredPastesDelete(trx, now, batch).executeTakeFirst();
        return Number(result.numDeletedRows);
      });
    }
    return this.db.transaction().execute(async (trx) => {
      const ids = (await expiredBatch(trx, now, batch).forUpdate().skipLocked().execute()).map((row) => row.id);
      if (ids.length === 0) return 0;
      await trx
        .deleteFrom('paste_views')
        .where('paste_id', 'in', (eb) =>
          eb.selectFrom('paste_views').select('paste_id').where('paste_id', 'in', ids).orderBy('paste_id').forUpdate(),
        )
        .execute();
      const result = await trx.deleteFrom('pastes').where('id', 'in', ids).executeTakeFirst();
      return Number(result.numDeletedRows);
    });
  }
}

function changesToColumns(c: PasteChanges): Partial<PasteRow> {
  const set: Partial<PasteRow> = {};
  if (c.title !== undefined) set.title = c.title;
  if (c.description !== undefined) set.description = c.description;
  if (c.content !== undefined) set.content = c.content;
  if (c.language !== undefined) set.language = c.language;
  if (c.fileSize !== undefined) set.file_size = c.fileSize;
  if (c.sha256 !== undefined) set.sha256 = c.sha256;
  if (c.expiresAt !== undefined) set.expires_at = c.expiresAt;
  if (c.burnAfterRead !== undefined) set.burn_after_read = flag(c.burnAfterRead);
  if (c.encrypted !== undefined) set.encrypted = flag(c.encrypted);
  if (c.downloadable !== undefined) set.downloadable = flag(c.downloadable);
  if (c.passwordHash !== undefined) set.password_hash = c.passwordHash;
  return set;
}
