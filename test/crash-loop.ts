/**
 * The crash loop (issue 7): the real server (`node bin/fastpaste.js serve`) takes many concurrent
 * creates, JSON with a key and raw quick-creates without one, of random content from a few bytes
 * to hundreds of KB, and is killed with SIGKILL in the middle of them, again and again. After each
 * kill the database is checked before anything else opens it (SQLite: `PRAGMA integrity_check`
 * on the file; PostgreSQL: every row's content against its sha256, and amcheck on the indexes
 * when the extension is there), then the server starts again and every paste that got a 201 is
 * read back over HTTP and compared with the sha256 computed here.
 *
 * Used by test/crash-safety.test.ts (a few kills) and bench/soak.ts (many). Properties that
 * break are collected in `errors`, not thrown, so that a long run reports all its figures.
 */
import { createHash, randomBytes, randomInt } from 'node:crypto';
import Database from 'better-sqlite3';
import { freshDatabase, queryDatabase, sqlText } from './helpers.js';
import { fastpaste, type ServerProcess, startServerProcess } from './server-process.js';

export interface CrashLoopOptions {
  /** How many times the server is killed with SIGKILL. */
  kills: number;
  /** Creates in flight at once. */
  concurrency: number;
  /** The 201s to wait for in each round before the kill: a random number in this range. */
  acksBeforeKill?: [number, number];
  /** The largest content sent, in bytes (sizes are spread evenly on a log scale from 3 bytes). */
  maxContentBytes?: number;
  /** Pastes of earlier rounds read again over HTTP after each restart (default: all of them). */
  recheckEarlier?: number;
  /** No new round starts after this long (the last one still ends with its checks). */
  timeLimitMs?: number;
  /** The database to use (default: a fresh one from freshDatabase, dropped at the end). */
  database?: { url: string; path: string | null; drop?(): Promise<void> };
  /** REDIS_URL for the server (default: TEST_REDIS_URL, or none). */
  redisUrl?: string | null;
  /** More settings for the server (e.g. LOG_LEVEL). */
  env?: Record<string, string>;
  /** Called with each server process started (e.g. to sample its memory). */
  onServer?: (server: ServerProcess) => void;
  log?: (line: string) => void;
}

export interface CrashLoopResult {
  backend: 'sqlite' | 'postgres';
  /** Kills after which the database checked out and every acknowledged paste was there. */
  killsSurvived: number;
  createsSent: number;
  /** Creates answered 201 (each one checked after every later restart). */
  acknowledged: number;
  /** Successful reads over HTTP of an acknowledged paste with the right sha256. */
  pasteReads: number;
  /** Distinct acknowledged pastes read back at least once. */
  pastesChecked: number;
  /** Rows in the pastes table at the end. */
  rowsAtEnd: number;
  /** Pastes that got a 201 and were missing after a kill (must be 0). */
  lost: number;
  /** Rows committed whose 201 never arrived (the kill cut the answer): allowed, counted. */
  committedWithoutAnswer: number;
  /** Requests cut by a kill (expected; not errors). */
  cutByKill: number;
  integrityChecks: number;
  /** Indexes checked with amcheck (PostgreSQL, when the extension is available). */
  amcheckIndexes: number;
  /** Every property that broke; empty when all held. */
  errors: string[];
  durationMs: number;
}

interface Acked {
  id: string;
  sha: string;
  keyed: boolean;
}

const sha256 = (data: string | Uint8Array) => createHash('sha256').update(data).digest('hex');
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const EXTRA = ['é', 'ß', '漢字', '🙂', '\t', '\r\n', '\n', ' = & ', '"quoted"', '\\'];

/** Random text of a random size, log-uniform in [3, max] bytes, with multi-byte characters and CRLFs. */
export function randomContent(maxBytes: number): string {
  const target = Math.max(3, Math.round(3 * Math.exp(Math.random() * Math.log(maxBytes / 3))));
  const parts: string[] = [];
  let size = 0;
  while (size < target) {
    // base64 first, so the text is never blank and has at least 3 characters.
    const chunk = randomBytes(Math.min(48, Math.ceil(((target - size) * 3) / 4))).toString('base64');
    const extra = EXTRA[randomInt(EXTRA.length)] as string;
    parts.push(chunk, extra);
    size += chunk.length + Buffer.byteLength(extra);
  }
  return parts.join('');
}

/** What the database holds after a kill, read without the server. */
interface Inspection {
  integrity: string;
  amcheckIndexes: number;
  /** id → stored sha256 column, for every row. */
  rows: Map<string, string>;
  /** id → sha256 of the stored content, for the ids asked for. */
  contentSha: Map<string, string>;
  /** Rows per owner key id (null for anonymous). */
  owned: Map<string | null, number>;
}

async function inspectSqlite(path: string, verified: Set<string>): Promise<Inspection> {
  // Read-only: the WAL left by the kill stays for the server to recover on its next start.
  let db: Database.Database;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
  } catch {
    db = new Database(path, { fileMustExist: true });
  }
  try {
    const checks = db.pragma('integrity_check') as Array<{ integrity_check: string }>;
    const integrity = checks.map((r) => r.integrity_check).join('; ');
    const fk = db.pragma('foreign_key_check') as unknown[];
    const { rows, owned } = tally(
      db.prepare('SELECT id, sha256, owner_key_id FROM pastes').all() as Array<{
        id: string;
        sha256: string;
        owner_key_id: string | null;
      }>,
    );
    const contentSha = new Map<string, string>();
    const read = db.prepare('SELECT content FROM pastes WHERE id = ?').pluck();
    for (const id of rows.keys()) {
      if (!verified.has(id)) contentSha.set(id, sha256(read.get(id) as string));
    }
    return {
      integrity: fk.length > 0 ? `${integrity}; foreign_key_check: ${fk.length} row(s)` : integrity,
      amcheckIndexes: 0,
      rows,
      contentSha,
      owned,
    };
  } finally {
    db.close();
  }
}

function tally(list: Array<{ id: string; sha256: string; owner_key_id: string | null }>) {
  const rows = new Map<string, string>();
  const owned = new Map<string | null, number>();
  for (const row of list) {
    rows.set(row.id, row.sha256);
    owned.set(row.owner_key_id, (owned.get(row.owner_key_id) ?? 0) + 1);
  }
  return { rows, owned };
}

/** amcheck's bt_index_check on every B-tree index of the schema, when the extension can be had. */
async function amcheck(url: string): Promise<number> {
  try {
    const [available] = await queryDatabase<{ n: number }>(
      url,
      `SELECT count(*) AS n FROM pg_available_extensions WHERE name = 'amcheck'`,
    );
    if (Number(available?.n) === 0) return 0;
    await queryDatabase(url, 'CREATE EXTENSION IF NOT EXISTS amcheck WITH SCHEMA public');
  } catch {
    return 0; // not allowed to create it: the check is optional
  }
  const [home] = await queryDatabase<{ schema: string }>(
    url,
    `SELECT n.nspname AS schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'amcheck'`,
  );
  const indexes = await queryDatabase<{ name: string }>(
    url,
    `SELECT c.relname AS name FROM pg_index i
     JOIN pg_class c ON c.oid = i.indexrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace
     JOIN pg_am am ON am.oid = c.relam
     WHERE n.nspname = current_schema() AND am.amname = 'btree'`,
  );
  for (const { name } of indexes) {
    // Throws (and so fails the round) when an index does not match its table.
    await queryDatabase(url, `SELECT "${home?.schema}".bt_index_check('"${name}"'::regclass, true)`);
  }
  return indexes.length;
}

async function inspectPostgres(url: string, verified: Set<string>): Promise<Inspection> {
  const { rows, owned } = tally(
    await queryDatabase<{ id: string; sha256: string; owner_key_id: string | null }>(
      url,
      'SELECT id, sha256, owner_key_id FROM pastes',
    ),
  );
  const ids = [...rows.keys()].filter((id) => !verified.has(id));
  const contentSha = new Map<string, string>();
  for (let i = 0; i < ids.length; i += 500) {
    const list = ids
      .slice(i, i + 500)
      .map(sqlText)
      .join(', ');
    for (const row of await queryDatabase<{ id: string; content: string }>(
      url,
      `SELECT id, content FROM pastes WHERE id IN (${list})`,
    )) {
      contentSha.set(row.id, sha256(row.content));
    }
  }
  // Deliveries must point at pastes (none are made here, but a torn transaction would show).
  const [orphans] = await queryDatabase<{ n: number }>(
    url,
    'SELECT count(*) AS n FROM webhook_deliveries d WHERE NOT EXISTS (SELECT 1 FROM pastes p WHERE p.id = d.paste_id)',
  );
  let amcheckIndexes = 0;
  let integrity = Number(orphans?.n) === 0 ? 'ok' : `${orphans?.n} webhook deliveries without their paste`;
  try {
    amcheckIndexes = await amcheck(url);
  } catch (err) {
    integrity = `amcheck: ${(err as Error).message}`;
  }
  return { integrity, amcheckIndexes, rows, contentSha, owned };
}

/** Runs the loop; resolves with the figures (errors included) once the last check is done. */
export async function runCrashLoop(options: CrashLoopOptions): Promise<CrashLoopResult> {
  const started = Date.now();
  const log = options.log ?? (() => {});
  const acksRange = options.acksBeforeKill ?? [30, 150];
  const maxBytes = options.maxContentBytes ?? 256 * 1024;
  const recheck = options.recheckEarlier ?? Number.POSITIVE_INFINITY;
  const database = options.database ?? (await freshDatabase());
  const backend = database.url.startsWith('sqlite:') ? 'sqlite' : 'postgres';
  const redisUrl = options.redisUrl === undefined ? (process.env.TEST_REDIS_URL ?? null) : options.redisUrl;
  const env: Record<string, string> = {
    DATABASE_URL: database.url,
    ANON_HOURLY_LIMIT: '0',
    REDIS_URL: redisUrl ?? '',
    LOG_LEVEL: 'error',
    ...options.env,
  };
  const result: CrashLoopResult = {
    backend,
    killsSurvived: 0,
    createsSent: 0,
    acknowledged: 0,
    pasteReads: 0,
    pastesChecked: 0,
    rowsAtEnd: 0,
    lost: 0,
    committedWithoutAnswer: 0,
    cutByKill: 0,
    integrityChecks: 0,
    amcheckIndexes: 0,
    errors: [],
    durationMs: 0,
  };
  const fail = (message: string) => {
    if (result.errors.length < 100) result.errors.push(message);
    log(`ERROR ${message}`);
  };
  const acked: Acked[] = [];
  const checked = new Set<string>();
  /** Acknowledged pastes found missing (each reported once, then left out of later checks). */
  const lost = new Set<string>();
  /** Rows whose content was hashed after an earlier kill (it cannot change: nothing updates it). */
  const contentVerified = new Set<string>();
  let server: ServerProcess | null = null;
  const servers = new Map<string, ServerProcess>();
  let exited = (_url: string) => '';

  try {
    // `keys create` migrates the new database first.
    const made = await fastpaste(['keys', 'create', '--name', 'crash loop', '--json'], env);
    if (made.code !== 0) throw new Error(`keys create failed: ${made.stderr}`);
    const key = JSON.parse(made.stdout).key as string;
    const [keyRow] = await queryDatabase<{ id: string }>(
      database.url,
      `SELECT id FROM api_keys WHERE name = 'crash loop'`,
    );
    const keyId = keyRow?.id as string;

    /** When a server died on its own: its exit and last output, for the failure message. */
    exited = (url: string) => {
      const s = servers.get(url);
      if (!s || (s.child.exitCode === null && s.child.signalCode === null)) return '';
      return ` [server exited: code ${s.child.exitCode}, signal ${s.child.signalCode}: ${s.output().slice(-2000)}]`;
    };
    const start = async () => {
      const s = await startServerProcess(env);
      servers.set(s.url, s);
      // A server that stops without being told to is a failure of its own, whatever it was doing.
      s.child.once('exit', (code, signal) => {
        if (!s.child.killed)
          fail(`the server on ${s.url} exited on its own (code ${code}, signal ${signal}): ${s.output().slice(-2000)}`);
      });
      options.onServer?.(s);
      return s;
    };

    /** Reads pastes back over HTTP, a few at a time; returns how many were not right. */
    const readBack = async (url: string, list: Acked[]): Promise<number> => {
      let bad = 0;
      let next = 0;
      const reader = async () => {
        while (next < list.length) {
          const paste = list[next++] as Acked;
          try {
            const raw = await fetch(`${url}/raw/${paste.id}`);
            const bytes = new Uint8Array(await raw.arrayBuffer());
            if (raw.status !== 200) {
              bad++;
              fail(`paste ${paste.id} (201 seen) answers ${raw.status} on /raw after a restart`);
              continue;
            }
            if (sha256(bytes) !== paste.sha) {
              bad++;
              fail(`paste ${paste.id}: /raw content has sha256 ${sha256(bytes)}, expected ${paste.sha}`);
              continue;
            }
            if (paste.keyed) {
              const detail = await fetch(`${url}/api/v1/paste/${paste.id}`, { headers: { 'x-api-key': key } });
              const body = (await detail.json()) as { data?: { sha256?: string; content?: string } };
              if (
                detail.status !== 200 ||
                body.data?.sha256 !== paste.sha ||
                sha256(body.data?.content ?? '') !== paste.sha
              ) {
                bad++;
                fail(`paste ${paste.id}: GET /api/v1/paste answers ${detail.status}, sha256 ${body.data?.sha256}`);
                continue;
              }
            }
            result.pasteReads++;
            checked.add(paste.id);
          } catch (err) {
            bad++;
            fail(`reading paste ${paste.id} failed: ${describe(err)}${exited(url)}`);
          }
        }
      };
      await Promise.all(Array.from({ length: 8 }, reader));
      return bad;
    };

    server = await start();
    for (let round = 1; round <= options.kills; round++) {
      if (options.timeLimitMs !== undefined && Date.now() - started > options.timeLimitMs) {
        log(`time limit reached after ${round - 1} kills`);
        break;
      }
      const live: ServerProcess = server;
      const target = randomInt(acksRange[0], acksRange[1] + 1);
      const roundAcked: Acked[] = [];
      let killed = false;
      let inFlight = 0;
      const errorsBefore = result.errors.length;

      const writer = async () => {
        while (!killed) {
          const keyed = Math.random() < 0.5;
          const content = randomContent(maxBytes);
          result.createsSent++;
          inFlight++;
          let status = 0;
          let text = '';
          try {
            const res = keyed
              ? await fetch(`${live.url}/api/v1/paste`, {
                  method: 'POST',
                  headers: { 'x-api-key': key, 'content-type': 'application/json' },
                  body: JSON.stringify({ content, expiry: 'never' }),
                })
              : await fetch(`${live.url}/api/v1/cli?json=1&expiry=never`, {
                  method: 'POST',
                  headers: { 'content-type': 'text/plain; charset=utf-8' },
                  body: content,
                });
            status = res.status;
            text = await res.text();
          } catch (err) {
            if (killed) result.cutByKill++;
            else fail(`a create failed with the server up: ${describe(err)}${exited(live.url)}`);
            return;
          } finally {
            inFlight--;
          }
          if (status !== 201) {
            fail(`a create answered ${status}: ${text.slice(0, 200)}`);
            await sleep(50);
            continue;
          }
          const body = JSON.parse(text) as { data: { paste_id: string; sha256: string } };
          const expected = sha256(content);
          if (body.data.sha256 !== expected) {
            fail(`create of paste ${body.data.paste_id} answered sha256 ${body.data.sha256}, expected ${expected}`);
          }
          const paste = { id: body.data.paste_id, sha: expected, keyed };
          roundAcked.push(paste);
          acked.push(paste);
          result.acknowledged++;
        }
      };
      const writers = Array.from({ length: options.concurrency }, writer);

      const t0 = Date.now();
      const deadline = t0 + 30_000;
      const failing = () => result.errors.length > errorsBefore;
      while (roundAcked.length < target && Date.now() < deadline && !failing()) await sleep(5);
      if (roundAcked.length < target && !failing()) {
        fail(`round ${round}: only ${roundAcked.length} of ${target} creates answered within 30 s`);
      }
      // Land the kill at a random point among the creates and group commits in flight.
      await sleep(randomInt(0, 40));
      const atKill = inFlight;
      killed = true;
      await live.stop('SIGKILL');
      await Promise.all(writers);
      const t1 = Date.now();
      server = null;

      // The database as the kill left it, before anything else opens it.
      const lostBefore = lost.size;
      const fresh = new Set(roundAcked.map((p) => p.id));
      let inspection: Inspection;
      try {
        inspection =
          backend === 'sqlite'
            ? await inspectSqlite(database.path as string, contentVerified)
            : await inspectPostgres(database.url, contentVerified);
      } catch (err) {
        fail(`round ${round}: the database could not be inspected after the kill: ${(err as Error).message}`);
        break;
      }
      result.integrityChecks++;
      result.amcheckIndexes += inspection.amcheckIndexes;
      if (inspection.integrity !== 'ok') fail(`round ${round}: integrity check says "${inspection.integrity}"`);
      for (const paste of acked) {
        if (lost.has(paste.id)) continue; // reported once
        const stored = inspection.rows.get(paste.id);
        if (stored === undefined) {
          lost.add(paste.id);
          fail(`round ${round}: paste ${paste.id} got a 201 and is not in the database`);
        } else if (stored !== paste.sha) {
          fail(`round ${round}: paste ${paste.id} stored sha256 ${stored}, sent ${paste.sha}`);
        }
      }
      for (const [id, actual] of inspection.contentSha) {
        if (actual !== inspection.rows.get(id)) fail(`round ${round}: row ${id}: content does not match its sha256`);
        else contentVerified.add(id);
      }

      const t2 = Date.now();
      server = await start();
      const t3 = Date.now();
      const earlier = acked.filter((p) => !fresh.has(p.id) && !lost.has(p.id));
      const sample = Number.isFinite(recheck) ? pick(earlier, recheck) : earlier;
      const bad = await readBack(
        server.url,
        [...roundAcked, ...sample].filter((p) => !lost.has(p.id)),
      );
      // The list's total for the key counts what the database holds for it.
      const list = await fetch(`${server.url}/api/v1/pastes?limit=1`, { headers: { 'x-api-key': key } });
      const listed = (await list.json()) as { pagination?: { total?: number } };
      const ownedRows = inspection.owned.get(keyId) ?? 0;
      if (list.status !== 200 || listed.pagination?.total !== ownedRows) {
        fail(`round ${round}: GET /api/v1/pastes total ${listed.pagination?.total}, ${ownedRows} rows in the database`);
      }
      if (bad === 0 && inspection.integrity === 'ok' && lostBefore === lost.size) result.killsSurvived++;
      log(
        `kill ${round}/${options.kills}: ${roundAcked.length} acknowledged this round, ${atKill} in flight at the kill, ` +
          `${inspection.rows.size} rows, ${acked.length} acknowledged in all, ${sample.length + roundAcked.length} read back ` +
          `(load ${t1 - t0} ms, check ${t2 - t1} ms, restart ${t3 - t2} ms, reads ${Date.now() - t3} ms)`,
      );
      if (result.errors.length >= 100) break;
    }

    // At the end, every paste that ever got a 201, read back over HTTP once more.
    if (server) {
      await readBack(
        server.url,
        acked.filter((p) => !lost.has(p.id)),
      );
      const [count] = await queryDatabase<{ n: number }>(database.url, 'SELECT count(*) AS n FROM pastes');
      result.rowsAtEnd = Number(count?.n);
      const ackedIds = new Set(acked.map((p) => p.id));
      const ids = await queryDatabase<{ id: string }>(database.url, 'SELECT id FROM pastes');
      result.committedWithoutAnswer = ids.filter((r) => !ackedIds.has(r.id)).length;
      const code = await server.stop('SIGTERM');
      server = null;
      if (code !== 0) fail(`the server exited with ${code} on SIGTERM after the loop`);
    }
  } catch (err) {
    fail(`the loop stopped: ${(err as Error).stack ?? err}`);
  } finally {
    if (server) await server.stop('SIGKILL');
    result.pastesChecked = checked.size;
    result.lost = lost.size;
    result.durationMs = Date.now() - started;
    if (!options.database) await database.drop?.();
  }
  return result;
}

/** An error with its cause (fetch puts the socket error there). */
function describe(err: unknown): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  return e.cause ? `${e.message} (${e.cause.code ?? e.cause.message})` : String(e.message ?? e);
}

function pick<T>(list: T[], n: number): T[] {
  if (list.length <= n) return list;
  const copy = [...list];
  for (let i = 0; i < n; i++) {
    const j = i + randomInt(copy.length - i);
    [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
  }
  return copy.slice(0, n);
}
