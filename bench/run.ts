/**
 * `npm run bench`: fastpaste against tiny baselines doing the same storage work, measured in one
 * run, server pinned to core 0 and load from core 1 (autocannon, 50 connections, a warm-up,
 * then N seconds a scenario, its baseline measured N/2 seconds just before and N/2 just after).
 * Prints one table: scenario, req/s, p50, p99, errors, the answering process's CPU time an answer
 * and how busy its core and the loader's were, peak RSS of the server, and the ratio to the
 * baseline measured around it in the same run (and the ratio of their CPU time an answer).
 * 127.0.0.1 only; bounded.
 * Usage: npm run bench [-- --seconds 10] [--db sqlite|postgres] [--redis redis://127.0.0.1:6379] [--markdown FILE] [--only 'text of a scenario name'] [--rounds N]
 * --db postgres uses BENCH_DATABASE_URL (or TEST_DATABASE_URL, or postgres://postgres@127.0.0.1:5432/test),
 * a fresh schema for each side, dropped at the end.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import {
  createKey,
  fastpasteCommand,
  freePort,
  hasTaskset,
  KB,
  type LoadResult,
  load,
  option,
  pick,
  pinSelf,
  randomId,
  startBenchServer,
} from './bench-kit.js';

const SECONDS = Number(option('seconds', '10'));
const WARMUP = Math.max(1, Math.round(SECONDS / 5));
const PASTES = Number(option('pastes', '100000'));
const MARKDOWN = option('markdown', '');
/** Runs only the scenarios whose name contains this text (and their baselines). */
const ONLY = option('only', '');
/**
 * Measures each scenario this many times, each with its own baseline around it, and reports the
 * round with the median ratio (and the range of the ratios): one pair is at the mercy of this
 * machine's drift, several show it.
 */
const ROUNDS = Number(option('rounds', '1'));
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error('--rounds takes a whole number from 1');

pinSelf();

/** 10 KB of Python, for the highlighted view. */
const PYTHON = Array.from(
  { length: 200 },
  (_, i) => `def handler_${i}(request, limit=${i}):\n    return [x * 2 for x in request.items if x > limit]  # ${i}\n`,
)
  .join('')
  .slice(0, 10 * 1024);

const DB = option('db', 'sqlite');
/** A Redis URL for the quota counters (as instances sharing PostgreSQL use it); none by default. */
const REDIS = option('redis', '');
if (DB !== 'sqlite' && DB !== 'postgres') throw new Error('--db sqlite|postgres');
/** The PostgreSQL database the postgres run uses (a fresh schema in it for each side). */
const PG_URL =
  process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

interface SeedRow {
  id: string;
  owner: string | null;
  title: string | null;
  content: string;
  language: string;
  createdAt: number;
}

/** Where the two sides keep their data: a SQLite file each, or a PostgreSQL schema each. */
interface Backend {
  /** Seeds the baseline's table with `ids` (1 KB rows) and returns its command line. */
  baseline(ids: string[], port: number): Promise<string[]>;
  /** The DATABASE_URL for fastpaste. */
  fastpasteUrl(): Promise<string>;
  /** Inserts pastes straight into fastpaste's (migrated) database. */
  seed(databaseUrl: string, rows: SeedRow[]): Promise<void>;
  cleanup(): Promise<void>;
}

const PASTE_COLUMNS = `id, owner_key_id, title, content, content_type, language, file_size, sha256, created_at, expires_at,
  view_count, burn_after_read, encrypted, downloadable, is_public, source`;

function sqliteBackend(): Backend {
  const dir = mkdtempSync(join(tmpdir(), 'fastpaste-baseline-'));
  return {
    async baseline(ids, port) {
      const file = join(dir, 'baseline.db');
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      db.exec('CREATE TABLE rows (id TEXT PRIMARY KEY, body TEXT NOT NULL)');
      const insert = db.prepare('INSERT INTO rows (id, body) VALUES (?, ?)');
      db.transaction(() => {
        for (const id of ids) insert.run(id, KB);
      })();
      db.close();
      return ['--import', 'tsx', 'bench/baselines/sqlite-baseline.ts', String(port), file];
    },
    async fastpasteUrl() {
      return `sqlite:${join(dir, 'fastpaste.db')}`;
    },
    async seed(databaseUrl, rows) {
      const db = new Database(databaseUrl.slice('sqlite:'.length));
      const insert = db.prepare(
        `INSERT INTO pastes (${PASTE_COLUMNS}) VALUES (?, ?, ?, ?, 'text', ?, ?, ?, ?, NULL, 0, 0, 0, 1, 0, 'api')`,
      );
      db.transaction(() => {
        for (const r of rows) {
          insert.run(r.id, r.owner, r.title, r.content, r.language, Buffer.byteLength(r.content), SHA, r.createdAt);
        }
      })();
      db.close();
    },
    async cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function postgresBackend(): Backend {
  const suffix = randomBytes(4).toString('hex');
  const schemas = { base: `fp_bench_base_${suffix}`, app: `fp_bench_app_${suffix}` };
  const urlFor = (schema: string) => {
    const url = new URL(PG_URL);
    url.searchParams.set('options', `-c search_path=${schema}`);
    return url.toString();
  };
  const withClient = async <T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  };
  return {
    async baseline(ids, port) {
      await withClient(PG_URL, (c) => c.query(`CREATE SCHEMA ${schemas.base}`));
      const url = urlFor(schemas.base);
      await withClient(url, async (c) => {
        await c.query('CREATE TABLE rows (id TEXT PRIMARY KEY, body TEXT NOT NULL)');
        for (let i = 0; i < ids.length; i += 5000) {
          await c.query('INSERT INTO rows (id, body) SELECT unnest($1::text[]), $2', [ids.slice(i, i + 5000), KB]);
        }
        await c.query('ANALYZE rows');
      });
      return ['--import', 'tsx', 'bench/baselines/postgres-baseline.ts', String(port), url];
    },
    async fastpasteUrl() {
      await withClient(PG_URL, (c) => c.query(`CREATE SCHEMA ${schemas.app}`));
      return urlFor(schemas.app);
    },
    async seed(databaseUrl, rows) {
      await withClient(databaseUrl, async (c) => {
        for (let i = 0; i < rows.length; i += 5000) {
          const chunk = rows.slice(i, i + 5000);
          await c.query(
            `INSERT INTO pastes (${PASTE_COLUMNS})
             SELECT id, owner, title, content, 'text', language, octet_length(content), $6, created, NULL, 0, 0, 0, 1, 0, 'api'
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $7::bigint[])
               AS t(id, owner, title, content, language, created)`,
            [
              chunk.map((r) => r.id),
              chunk.map((r) => r.owner),
              chunk.map((r) => r.title),
              chunk.map((r) => r.content),
              chunk.map((r) => r.language),
              SHA,
              chunk.map((r) => r.createdAt),
            ],
          );
        }
        // As autovacuum leaves a table that has settled: statistics, and the visibility map that
        // lets the list's index-only scans skip the table (without it each of 100,000 index
        // entries costs a heap visit when the anchors are recomputed).
        await c.query('VACUUM ANALYZE pastes');
      });
    },
    async cleanup() {
      await withClient(PG_URL, (c) => c.query(`DROP SCHEMA IF EXISTS ${schemas.base}, ${schemas.app} CASCADE`));
    },
  };
}

const SHA = 'a'.repeat(64);
const backend = DB === 'postgres' ? postgresBackend() : sqliteBackend();

// ---- baseline -------------------------------------------------------------------------
const baseIds = Array.from({ length: PASTES }, randomId);
const basePort = await freePort();
// BENCH_BASELINE_NODE_ARGS: flags for the baseline's node, as BENCH_NODE_ARGS for the server's.
const baseArgs = [
  ...(process.env.BENCH_BASELINE_NODE_ARGS ?? '').split(' ').filter(Boolean),
  ...(await backend.baseline(baseIds, basePort)),
];
const baseline = hasTaskset()
  ? spawn('taskset', ['-c', '0', process.execPath, ...baseArgs], { stdio: 'inherit' })
  : spawn(process.execPath, baseArgs, { stdio: 'inherit' });
const baseUrl = `http://127.0.0.1:${basePort}`;
for (let i = 0; i < 100; i++) {
  try {
    await fetch(`${baseUrl}/r/${baseIds[0]}`);
    break;
  } catch {
    await new Promise((r) => setTimeout(r, 100));
  }
}

// ---- fastpaste on a seeded database -----------------------------------------------------
const server = await startBenchServer({
  ANON_HOURLY_LIMIT: '0',
  DATABASE_URL: await backend.fastpasteUrl(),
  ...(REDIS ? { REDIS_URL: REDIS } : {}),
});
const big = 1_000_000_000;
const readerKey = createKey(server.databaseUrl, { hourly: big, daily: big, monthly: big });
const listKey = createKey(server.databaseUrl, { hourly: big, daily: big, monthly: big });
const listKeyId = JSON.parse(fastpasteCommand(server.databaseUrl, ['keys', 'list', '--json'])).at(-1).id as string;
const pasteIds = Array.from({ length: PASTES }, randomId);
const viewId = randomId();
{
  const now = Date.now();
  const rows: SeedRow[] = pasteIds.map((id, i) => ({
    id,
    owner: listKeyId,
    title: null,
    content: KB,
    language: 'text',
    createdAt: now - PASTES + i,
  }));
  rows.push({ id: viewId, owner: null, title: 'handlers.py', content: PYTHON, language: 'python', createdAt: now });
  await backend.seed(server.databaseUrl, rows);
}

interface Row {
  scenario: string;
  result: LoadResult;
  peakMb: number;
  baseline: string;
  /** The baseline measured around this scenario: half before, half after (see paired()). */
  pairedBaseline: LoadResult;
  goal: number;
  /** The ratios of every round (one unless --rounds), lowest first. */
  ratios: number[];
}
const rows: Row[] = [];

/**
 * Several measurements as one (each as long as the others): their mean rate, the worst p50 and
 * p99, every error, their CPU time over their answers, and the mean busy shares.
 */
function combined(results: LoadResult[]): LoadResult {
  const sum = (values: number[]) => values.reduce((total, v) => total + v, 0);
  const mean = (values: number[]) => sum(values) / values.length;
  const cpus = results.flatMap((r) => (r.cpu ? [r.cpu] : []));
  return {
    rps: mean(results.map((r) => r.rps)),
    p50: Math.max(...results.map((r) => r.p50)),
    p99: Math.max(...results.map((r) => r.p99)),
    errors: results.reduce((sum, r) => sum + r.errors, 0),
    non2xx: results.reduce((sum, r) => sum + r.non2xx, 0),
    ...(cpus.length === results.length && cpus.length > 0
      ? {
          cpu: {
            usPerAnswer: sum(cpus.map((c) => c.micros)) / sum(cpus.map((c) => c.answers)),
            busy: mean(cpus.map((c) => c.busy)),
            loaderBusy: mean(cpus.map((c) => c.loaderBusy)),
            micros: sum(cpus.map((c) => c.micros)),
            answers: sum(cpus.map((c) => c.answers)),
          },
        }
      : {}),
  };
}

const jsonCreate = JSON.stringify({ content: KB, language: 'text' });
// taskset execs node, so the pids are those of the processes that answer.
const basePid = baseline.pid as number;
const serverPid = server.process.pid as number;
const baselineLoads: Record<string, Parameters<typeof load>[0]> = {
  R: { url: baseUrl, path: () => `/r/${pick(baseIds)}`, pid: basePid },
  RJ: { url: baseUrl, path: () => `/j/${pick(baseIds)}`, pid: basePid },
  W: { url: `${baseUrl}/w`, method: 'POST', body: KB, headers: { 'content-type': 'text/plain' }, pid: basePid },
};

/**
 * A scenario and its baseline measured around it, so that the machine's drift (its speed
 * changes by a fifth or more from one minute to the next) falls on both: the baseline for half
 * the time, the scenario for the whole time, the baseline for the other half. The ratio is the
 * scenario's rate over the mean of the two halves.
 */
async function paired(base: string, options: Parameters<typeof load>[0]): Promise<[LoadResult, LoadResult]> {
  const baseOptions = baselineLoads[base] as Parameters<typeof load>[0];
  const half = Math.max(1, SECONDS / 2);
  await load({ ...baseOptions, seconds: WARMUP });
  const before = await load({ ...baseOptions, seconds: half });
  await load({ ...options, seconds: WARMUP });
  const result = await load({ ...options, seconds: SECONDS, pid: serverPid });
  const after = await load({ ...baseOptions, seconds: half });
  return [result, combined([before, after])];
}

try {
  server.resetPeak();
  const scenarios: Array<[string, string, number, Parameters<typeof load>[0]]> = [
    ['GET /raw/<id> (1 KB, random of 100k)', 'R', 0.8, { url: server.url, path: () => `/raw/${pick(pasteIds)}` }],
    [
      'GET /api/v1/paste/{id} (key, quota)',
      'RJ',
      0.6,
      { url: server.url, path: () => `/api/v1/paste/${pick(pasteIds)}`, headers: { 'x-api-key': readerKey } },
    ],
    [
      'POST /api/v1/paste (1 KB JSON, key)',
      'W',
      1.2,
      {
        url: `${server.url}/api/v1/paste`,
        method: 'POST',
        body: jsonCreate,
        headers: { 'x-api-key': readerKey, 'content-type': 'application/json' },
      },
    ],
    [
      'POST /api/v1/cli (1 KB raw, anonymous)',
      'W',
      1.0,
      { url: `${server.url}/api/v1/cli`, method: 'POST', body: KB, headers: { 'content-type': 'text/plain' } },
    ],
    [
      'GET /api/v1/pastes?page=1 (100k pastes)',
      'RJ',
      0.3,
      { url: `${server.url}/api/v1/pastes?page=1`, headers: { 'x-api-key': listKey } },
    ],
    [
      'GET /api/v1/pastes?page=1000',
      'RJ',
      0.3,
      { url: `${server.url}/api/v1/pastes?page=1000`, headers: { 'x-api-key': listKey } },
    ],
    ['GET /view/<id> (10 KB highlighted)', 'R', 0.3, { url: `${server.url}/view/${viewId}` }],
  ];
  for (const [scenario, base, goal, options] of scenarios) {
    if (ONLY && !scenario.includes(ONLY)) continue;
    server.resetPeak();
    const rounds: Array<[LoadResult, LoadResult]> = [];
    for (let round = 0; round < ROUNDS; round++) rounds.push(await paired(base, options));
    const ratioOf = ([result, around]: [LoadResult, LoadResult]) => result.rps / around.rps;
    rounds.sort((a, b) => ratioOf(a) - ratioOf(b));
    const [result, pairedBaseline] = rounds[Math.floor((rounds.length - 1) / 2)] as [LoadResult, LoadResult];
    const ratios = rounds.map(ratioOf);
    rows.push({ scenario, result, baseline: base, pairedBaseline, goal, peakMb: server.peakRssMb(), ratios });
    console.error(
      `${scenario}: ${result.rps.toFixed(0)} req/s${ROUNDS > 1 ? `, ratios ${ratios.map((r) => r.toFixed(2)).join(' ')}` : ''}`,
    );
  }
} finally {
  baseline.kill('SIGTERM');
  await server.stop();
  await backend.cleanup();
}

const peak = Math.max(...rows.map((row) => row.peakMb));
const header =
  '| scenario | req/s | p50 ms | p99 ms | errors | CPU µs an answer | busy % (side / loader) | peak RSS MB | baseline (req/s around it) | ratio | CPU ratio | goal |';
const line = '|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|';
const fmt = (r: LoadResult) => [
  r.rps.toFixed(0),
  String(r.p50),
  String(r.p99),
  String(r.errors + r.non2xx),
  r.cpu ? r.cpu.usPerAnswer.toFixed(1) : '',
  r.cpu ? `${r.cpu.busy.toFixed(0)} / ${r.cpu.loaderBusy.toFixed(0)}` : '',
];
/**
 * The baseline's CPU time an answer over the scenario's: the ratio the scenario would have if both
 * ran at their own core's pace. It differs from the ratio when a side's core was not the limit
 * (under 100% busy: the loader's was, or the database's).
 */
const cpuRatio = (row: Row) =>
  row.result.cpu && row.pairedBaseline.cpu
    ? (row.pairedBaseline.cpu.usPerAnswer / row.result.cpu.usPerAnswer).toFixed(2)
    : '';
/** With several rounds: the range of their ratios after the median's. */
const range = (ratios: number[]) =>
  ratios.length > 1 ? ` (${(ratios[0] as number).toFixed(2)}–${(ratios.at(-1) as number).toFixed(2)})` : '';
const table = [header, line];
for (const name of Object.keys(baselineLoads)) {
  const measured = rows.filter((row) => row.baseline === name).map((row) => row.pairedBaseline);
  if (measured.length > 0) table.push(`| baseline ${name} (mean) | ${fmt(combined(measured)).join(' | ')} | | | | | |`);
}
for (const row of rows) {
  const ratio = row.result.rps / row.pairedBaseline.rps;
  const status = ratio >= row.goal ? 'met' : 'not met';
  table.push(
    `| ${row.scenario} | ${fmt(row.result).join(' | ')} | ${row.peakMb.toFixed(0)} | ${row.baseline} (${row.pairedBaseline.rps.toFixed(0)}) | ${ratio.toFixed(2)}${range(row.ratios)} | ${cpuRatio(row)} | ≥ ${row.goal} ${status} |`,
  );
}
table.push(
  '',
  `Database: ${DB}${REDIS ? ' with Redis counters' : ''}. Peak RSS of the server through all scenarios: ${peak.toFixed(0)} MB (goal < 150).`,
);
const output = table.join('\n');
console.log(output);
if (MARKDOWN) writeFileSync(MARKDOWN, `${output}\n`);
