/**
 * `npm run bench`: fastpaste against tiny baselines doing the same storage work, measured in one
 * run, server pinned to core 0 and load from core 1 (autocannon, 50 connections, a warm-up,
 * then N seconds a scenario). Prints one table: scenario, req/s, p50, p99, errors, peak RSS of
 * the server, and the ratio to the baseline measured in the same run. 127.0.0.1 only; bounded.
 * Usage: npm run bench [-- --seconds 10] [--markdown FILE] [--only 'text of a scenario name']
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import {
  createKey,
  fastpasteCommand,
  freePort,
  hasTaskset,
  type LoadResult,
  load,
  pinSelf,
  startBenchServer,
} from './bench-kit.js';

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? (args[i + 1] ?? fallback) : fallback;
};
const SECONDS = Number(option('seconds', '10'));
const WARMUP = Math.max(1, Math.round(SECONDS / 5));
const PASTES = Number(option('pastes', '100000'));
const MARKDOWN = option('markdown', '');
/** Runs only the scenarios whose name contains this text (the baselines always run). */
const ONLY = option('only', '');

pinSelf();
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const newId = () => Array.from(randomBytes(10), (b) => ALPHABET[b % 62]).join('');
const KB = 'x'.repeat(1023) + '\n';
const pick = (ids: string[]) => ids[Math.floor(Math.random() * ids.length)] as string;

/** 10 KB of Python, for the highlighted view. */
const PYTHON = Array.from(
  { length: 200 },
  (_, i) => `def handler_${i}(request, limit=${i}):\n    return [x * 2 for x in request.items if x > limit]  # ${i}\n`,
)
  .join('')
  .slice(0, 10 * 1024);

// ---- baseline -------------------------------------------------------------------------
const baseDir = mkdtempSync(join(tmpdir(), 'fastpaste-baseline-'));
const baseFile = join(baseDir, 'baseline.db');
const baseIds: string[] = [];
{
  const db = new Database(baseFile);
  db.pragma('journal_mode = WAL');
  db.exec('CREATE TABLE rows (id TEXT PRIMARY KEY, body TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO rows (id, body) VALUES (?, ?)');
  db.transaction(() => {
    for (let i = 0; i < PASTES; i++) {
      const id = newId();
      baseIds.push(id);
      insert.run(id, KB);
    }
  })();
  db.close();
}
const basePort = await freePort();
const baseArgs = ['--import', 'tsx', 'bench/baselines/sqlite-baseline.ts', String(basePort), baseFile];
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
const server = await startBenchServer({ ANON_HOURLY_LIMIT: '0' });
const big = 1_000_000_000;
const readerKey = createKey(server.databaseUrl, { hourly: big, daily: big, monthly: big });
const listKey = createKey(server.databaseUrl, { hourly: big, daily: big, monthly: big });
const listKeyId = JSON.parse(fastpasteCommand(server.databaseUrl, ['keys', 'list', '--json'])).at(-1).id as string;
const pasteIds: string[] = [];
let viewId = '';
{
  const db = new Database(server.databaseUrl.slice('sqlite:'.length));
  const insert = db.prepare(
    `INSERT INTO pastes (id, owner_key_id, title, content, content_type, language, file_size, sha256, created_at, expires_at,
       view_count, burn_after_read, encrypted, downloadable, is_public, source)
     VALUES (?, ?, NULL, ?, 'text', 'text', 1024, ?, ?, NULL, 0, 0, 0, 1, 0, 'api')`,
  );
  const now = Date.now();
  const sha = 'a'.repeat(64);
  db.transaction(() => {
    for (let i = 0; i < PASTES; i++) {
      const id = newId();
      pasteIds.push(id);
      insert.run(id, listKeyId, KB, sha, now - PASTES + i);
    }
  })();
  viewId = newId();
  db.prepare(
    `INSERT INTO pastes (id, owner_key_id, title, content, content_type, language, file_size, sha256, created_at, expires_at,
       view_count, burn_after_read, encrypted, downloadable, is_public, source)
     VALUES (?, NULL, 'handlers.py', ?, 'text', 'python', ?, ?, ?, NULL, 0, 0, 0, 1, 0, 'api')`,
  ).run(viewId, PYTHON, PYTHON.length, sha, now);
  db.close();
}

interface Row {
  scenario: string;
  result: LoadResult;
  baseline: string;
  goal: number;
}
const baselines: Record<string, LoadResult> = {};
const rows: Row[] = [];

async function measure(options: Parameters<typeof load>[0]): Promise<LoadResult> {
  await load({ ...options, seconds: WARMUP });
  return load({ ...options, seconds: SECONDS });
}

const jsonCreate = JSON.stringify({ content: KB, language: 'text' });
try {
  baselines.R = await measure({ url: baseUrl, path: () => `/r/${pick(baseIds)}` });
  baselines.RJ = await measure({ url: baseUrl, path: () => `/j/${pick(baseIds)}` });
  baselines.W = await measure({
    url: `${baseUrl}/w`,
    method: 'POST',
    body: KB,
    headers: { 'content-type': 'text/plain' },
  });

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
    const result = await measure(options);
    rows.push({ scenario, result, baseline: base, goal });
    console.error(`${scenario}: ${result.rps.toFixed(0)} req/s`);
  }
} finally {
  baseline.kill('SIGTERM');
  await server.stop();
  rmSync(baseDir, { recursive: true, force: true });
}

const peak = server.peakRssMb();
const header = '| scenario | req/s | p50 ms | p99 ms | errors | peak RSS MB | baseline | ratio | goal |';
const line = '|---|---:|---:|---:|---:|---:|---|---:|---|';
const fmt = (r: LoadResult) => [r.rps.toFixed(0), String(r.p50), String(r.p99), String(r.errors + r.non2xx)];
const table = [header, line];
for (const [name, r] of Object.entries(baselines)) {
  table.push(`| baseline ${name} | ${fmt(r).join(' | ')} | | | | |`);
}
for (const row of rows) {
  const base = baselines[row.baseline] as LoadResult;
  const ratio = row.result.rps / base.rps;
  const status = ratio >= row.goal ? 'met' : 'not met';
  table.push(
    `| ${row.scenario} | ${fmt(row.result).join(' | ')} | ${peak.toFixed(0)} | ${row.baseline} | ${ratio.toFixed(2)} | ≥ ${row.goal} ${status} |`,
  );
}
const output = table.join('\n');
console.log(output);
if (MARKDOWN) writeFileSync(MARKDOWN, `${output}\n`);
