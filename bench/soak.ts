/**
 * Soak (issue 7): the crash loop of test/crash-loop.ts with many SIGKILLs (SQLite, and
 * PostgreSQL when a URL is given), then minutes of sustained mixed load on the real server
 * (reads by /raw and the API with sha256 checks, creates with a key and anonymous quick-creates,
 * lists, and bad requests of every kind), while the server's memory is sampled. Prints the
 * figures and exits non-zero if any property broke: a paste with a 201 lost or with the wrong
 * sha256, an integrity check not ok, a 5xx or any status not expected, a connection error under
 * load, the server's peak RSS over the bound, or SIGTERM not ending in exit code 0.
 *
 * Bounded (about 9 minutes at most, whatever the flags) and on 127.0.0.1 only.
 *
 * Run: npm run soak -- [--kills 50] [--pg-kills 50] [--load-seconds 150] [--rss-limit-mb 400]
 *                      [--pg postgres://...] [--redis redis://...]
 * A PostgreSQL URL may also come from DATABASE_URL (postgres://...), Redis from REDIS_URL; each
 * PostgreSQL run uses a new schema of that database and drops it at the end.
 */
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import Database from 'better-sqlite3';
import { type CrashLoopResult, randomContent, runCrashLoop } from '../test/crash-loop.js';
import { freshDatabase } from '../test/helpers.js';
import { createKey, type RssWatch, startBenchServer, watchRss } from './bench-kit.js';

const started = Date.now();
/** Hard bound on the whole run; phases get what is left of it. */
const BUDGET_MS = 9 * 60_000;

const { values: flags } = parseArgs({
  options: {
    kills: { type: 'string', default: '50' },
    'pg-kills': { type: 'string', default: '50' },
    'load-seconds': { type: 'string', default: '150' },
    'rss-limit-mb': { type: 'string', default: '400' },
    concurrency: { type: 'string', default: '16' },
    pg: { type: 'string' },
    redis: { type: 'string' },
  },
});
const envPg = process.env.DATABASE_URL?.startsWith('postgres') ? process.env.DATABASE_URL : undefined;
const pgUrl = flags.pg ?? envPg;
const redisUrl = flags.redis ?? process.env.REDIS_URL ?? null;
const kills = Number(flags.kills);
const pgKills = pgUrl ? Number(flags['pg-kills']) : 0;
const loadSeconds = Number(flags['load-seconds']);
const rssLimitMb = Number(flags['rss-limit-mb']);
const concurrency = Number(flags.concurrency);
for (const [name, value] of Object.entries({ kills, pgKills, loadSeconds, rssLimitMb, concurrency })) {
  if (!Number.isFinite(value) || value < 0) throw new Error(`--${name} must be a number`);
}
for (const url of [pgUrl, redisUrl]) {
  if (url && !['127.0.0.1', 'localhost', '[::1]'].includes(new URL(url).hostname)) {
    throw new Error(`the soak talks to 127.0.0.1 only, not ${new URL(url).hostname}`);
  }
}

const sha256 = (data: string | Uint8Array) => createHash('sha256').update(data).digest('hex');
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0)} s`;
const left = () => BUDGET_MS - (Date.now() - started);
const problems: string[] = [];
const problem = (text: string) => {
  problems.push(text);
  console.log(`  PROBLEM ${text}`);
};

// A watchdog: whatever happens, the run ends within the budget plus a minute.
const watchdog = setTimeout(() => {
  console.log(`soak: over ${(BUDGET_MS + 60_000) / 60_000} minutes, giving up`);
  process.exit(2);
}, BUDGET_MS + 60_000);
watchdog.unref();

// ---------------------------------------------------------------------------------------------
// 1. Crash loops
// ---------------------------------------------------------------------------------------------

let crashPeakMb = 0;
async function crashLoop(label: string, count: number, base: string | undefined, timeLimitMs: number) {
  console.log(`\n[${elapsed()}] crash loop on ${label}: ${count} SIGKILLs, ${concurrency} creates in flight`);
  const watches: RssWatch[] = [];
  const database = await freshDatabase(base ?? '');
  const result = await runCrashLoop({
    kills: count,
    concurrency,
    acksBeforeKill: [20, 120],
    maxContentBytes: 512 * 1024,
    recheckEarlier: 150,
    timeLimitMs,
    database,
    redisUrl: base ? redisUrl : null,
    onServer: (server) => watches.push(watchRss(server.child.pid ?? 0)),
    log: (line) => {
      if (line.startsWith('ERROR') || /kill (\d+)\//.exec(line)?.[1]?.endsWith('0') || line.includes('limit')) {
        console.log(`  [${elapsed()}] ${line}`);
      }
    },
  }).finally(() => database.drop());
  const peak = Math.max(0, ...watches.map((w) => w.peakMb()));
  for (const w of watches) w.stop();
  crashPeakMb = Math.max(crashPeakMb, peak);
  report(label, result, count, peak);
  return result;
}

function report(label: string, r: CrashLoopResult, wanted: number, peakMb: number) {
  console.log(
    `  ${label}: ${r.killsSurvived}/${wanted} kills survived, ${r.createsSent} creates sent, ${r.acknowledged} acknowledged, ` +
      `${r.pastesChecked} distinct pastes checked by HTTP (${r.pasteReads} reads), ${r.rowsAtEnd} rows at the end ` +
      `(${r.committedWithoutAnswer} committed with the answer cut), ${r.cutByKill} requests cut by kills, ` +
      `${r.integrityChecks} integrity checks${r.amcheckIndexes ? ` (${r.amcheckIndexes} amcheck index checks)` : ''}, ` +
      `lost ${r.lost}, errors ${r.errors.length}, peak RSS ${peakMb.toFixed(0)} MB, ${(r.durationMs / 1000).toFixed(0)} s`,
  );
  for (const e of r.errors.slice(0, 10)) problem(`${label} crash loop: ${e.slice(0, 500)}`);
  if (r.killsSurvived < r.integrityChecks)
    problem(`${label}: ${r.integrityChecks - r.killsSurvived} kills not survived`);
  if (r.killsSurvived < wanted) console.log(`  ${label}: ${wanted - r.killsSurvived} kills not run (time budget)`);
}

// Time: the crash loops get what the load phase leaves, PostgreSQL a share when it runs.
const loadMs = loadSeconds * 1000;
const crashBudget = Math.max(30_000, BUDGET_MS - loadMs - 45_000);
const sqliteCrash = await crashLoop('SQLite', kills, undefined, (crashBudget * kills) / (kills + pgKills || 1));
const pgCrash = pgUrl
  ? await crashLoop('PostgreSQL', pgKills, pgUrl, Math.max(20_000, left() - loadMs - 60_000))
  : null;

// ---------------------------------------------------------------------------------------------
// 2. Sustained mixed load
// ---------------------------------------------------------------------------------------------

interface Stream {
  name: string;
  connections: number;
  expected: number[];
  requests: autocannon.Request[];
}

interface StreamFigures {
  name: string;
  sent: number;
  statuses: Record<string, number>;
  unexpected: number;
  errors: number;
}

async function mixedLoad(label: string, databaseUrl: string, seconds: number) {
  console.log(`\n[${elapsed()}] sustained mixed load on ${label} for ${seconds} s`);
  const server = await startBenchServer({
    DATABASE_URL: databaseUrl,
    // Every request comes from 127.0.0.1: the 404 budget per address would turn the whole
    // load into 429s after the first minute's bad requests.
    NOT_FOUND_LIMIT_PER_MINUTE: '0',
    ...(redisUrl && !databaseUrl.startsWith('sqlite:') ? { REDIS_URL: redisUrl } : {}),
  });
  const exitCode = new Promise<number | null>((resolve) => server.process.once('exit', (code) => resolve(code)));
  const key = createKey(databaseUrl, { hourly: 0, daily: 0, monthly: 0 });
  const json = { 'x-api-key': key, 'content-type': 'application/json' };

  // Pastes to read: made first, each sha256 kept for the checking reader.
  const pool: Array<{ id: string; sha: string }> = [];
  for (let i = 0; i < 300; i++) {
    const content = randomContent(64 * 1024);
    const res = await fetch(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ content, expiry: 'never' }),
    });
    if (res.status !== 201) throw new Error(`seeding: ${res.status} ${await res.text()}`);
    const data = ((await res.json()) as { data: { paste_id: string } }).data;
    pool.push({ id: data.paste_id, sha: sha256(content) });
  }
  const anyId = () => (pool[randomInt(pool.length)] as { id: string }).id;
  const smallBody = () => JSON.stringify({ content: randomContent(8 * 1024), expiry: '1h' });
  const missing = () => `nope${randomBytes(4).toString('hex')}`;

  const streams: Stream[] = [
    {
      name: 'GET /raw/{id}',
      connections: 12,
      expected: [200],
      requests: [{ method: 'GET', setupRequest: (r) => ({ ...r, path: `/raw/${anyId()}` }) }],
    },
    {
      name: 'GET /api/v1/paste/{id}',
      connections: 4,
      expected: [200],
      requests: [{ method: 'GET', headers: json, setupRequest: (r) => ({ ...r, path: `/api/v1/paste/${anyId()}` }) }],
    },
    {
      name: 'POST /api/v1/paste',
      connections: 4,
      expected: [201],
      requests: [
        { method: 'POST', path: '/api/v1/paste', headers: json, setupRequest: (r) => ({ ...r, body: smallBody() }) },
      ],
    },
    {
      name: 'POST /api/v1/cli',
      connections: 2,
      expected: [201],
      requests: [
        {
          method: 'POST',
          path: '/api/v1/cli',
          headers: { 'content-type': 'text/plain' },
          setupRequest: (r) => ({ ...r, body: randomContent(8 * 1024) }),
        },
      ],
    },
    {
      name: 'GET /api/v1/pastes',
      connections: 2,
      expected: [200],
      requests: [
        {
          method: 'GET',
          headers: json,
          setupRequest: (r) => ({ ...r, path: `/api/v1/pastes?page=${randomInt(1, 20)}&limit=20` }),
        },
      ],
    },
  ];

  // Bad requests of every kind, each with the one status it must get. (Sent by hand, not by
  // autocannon: the server closes the connection after some refusals, and autocannon then
  // loses its place in a list of requests.)
  const bad: Array<{
    status: number;
    method: string;
    path: () => string;
    headers?: Record<string, string>;
    body?: string;
  }> = [
    { status: 404, method: 'GET', path: () => `/raw/${missing()}` },
    { status: 404, method: 'GET', path: () => `/api/v1/paste/${missing()}`, headers: { 'x-api-key': key } },
    { status: 400, method: 'POST', path: () => '/api/v1/paste', headers: json, body: '{"content": ' },
    { status: 400, method: 'POST', path: () => '/api/v1/paste', headers: json, body: '{"content": "ab"}' },
    {
      status: 400,
      method: 'POST',
      path: () => '/api/v1/paste',
      headers: json,
      body: '{"content":"abc","expiry":"5y"}',
    },
    {
      status: 400,
      method: 'POST',
      path: () => '/api/v1/paste',
      headers: { ...json, 'content-type': 'text/plain' },
      body: 'abc',
    },
    { status: 400, method: 'GET', path: () => '/api/v1/pastes?limit=1000', headers: { 'x-api-key': key } },
    {
      status: 401,
      method: 'POST',
      path: () => '/api/v1/paste',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    },
    { status: 403, method: 'GET', path: () => '/api/v1/pastes', headers: { 'x-api-key': 'fp_not_a_key' } },
    { status: 404, method: 'DELETE', path: () => `/api/v1/paste/${missing()}`, headers: { 'x-api-key': key } },
    { status: 405, method: 'PATCH', path: () => '/api/v1/paste/abc', headers: json, body: '{}' },
    {
      status: 413,
      method: 'POST',
      path: () => '/api/v1/cli',
      headers: { 'content-type': 'text/plain' },
      body: 'x'.repeat(4 * 1024 * 1024 + 1),
    },
  ];
  const badFigures: StreamFigures = { name: 'bad requests', sent: 0, statuses: {}, unexpected: 0, errors: 0 };
  const badSender = async () => {
    for (let i = randomInt(bad.length); !stop; i++) {
      const kind = bad[i % bad.length] as (typeof bad)[number];
      const path = kind.path();
      badFigures.sent++;
      try {
        const res = await fetch(`${server.url}${path}`, {
          method: kind.method,
          headers: kind.headers ?? {},
          body: kind.body ?? null,
        });
        await res.arrayBuffer();
        badFigures.statuses[res.status] = (badFigures.statuses[res.status] ?? 0) + 1;
        if (res.status !== kind.status) {
          badFigures.unexpected++;
          if (badFigures.unexpected <= 5)
            problem(`${label} load: ${kind.method} ${path} answered ${res.status}, not ${kind.status}`);
        }
      } catch (err) {
        // A refusal before the body is read may close the connection while the body is sent.
        if (kind.status === 413) continue;
        badFigures.errors++;
        if (badFigures.errors <= 5) problem(`${label} load: ${kind.method} ${path} failed: ${(err as Error).message}`);
      }
    }
  };

  // Beside autocannon, a reader that checks what comes back: the right sha256 for each paste.
  let stop = false;
  let verified = 0;
  const badSenders = [badSender(), badSender()];
  const checker = (async () => {
    while (!stop) {
      const paste = pool[randomInt(pool.length)] as { id: string; sha: string };
      try {
        const res = await fetch(`${server.url}/raw/${paste.id}`);
        const bytes = new Uint8Array(await res.arrayBuffer());
        if (res.status !== 200 || sha256(bytes) !== paste.sha) {
          problem(`${label} load: /raw/${paste.id} answered ${res.status} with sha256 ${sha256(bytes)}`);
        } else verified++;
      } catch (err) {
        problem(`${label} load: checking read failed: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  })();

  server.resetPeak();
  const runs = await Promise.all(
    streams.map(async (stream): Promise<StreamFigures> => {
      const result = await autocannon({
        url: server.url,
        connections: stream.connections,
        duration: seconds,
        requests: stream.requests,
        timeout: 30,
      });
      const statuses: Record<string, number> = {};
      let unexpected = 0;
      for (const [code, { count }] of Object.entries(result.statusCodeStats ?? {})) {
        statuses[code] = count ?? 0;
        if (!stream.expected.includes(Number(code))) unexpected += count ?? 0;
      }
      return {
        name: stream.name,
        sent: result.requests.sent,
        statuses,
        unexpected,
        errors: result.errors + result.timeouts,
      };
    }),
  );
  stop = true;
  await checker;
  await Promise.all(badSenders);
  runs.push(badFigures);
  const peak = server.peakRssMb();

  let sent = 0;
  for (const run of runs) {
    sent += run.sent;
    const codes = Object.entries(run.statuses)
      .map(([code, n]) => `${code}×${n}`)
      .join(' ');
    console.log(`  ${run.name.padEnd(24)} ${String(run.sent).padStart(7)} sent   ${codes}`);
    if (run.unexpected > 0) problem(`${label} load: ${run.name}: ${run.unexpected} answers with an unexpected status`);
    if (run.errors > 0) problem(`${label} load: ${run.name}: ${run.errors} connection errors or time-outs`);
  }
  const fivexx = runs.reduce(
    (n, r) => n + Object.entries(r.statuses).reduce((m, [c, k]) => m + (Number(c) >= 500 ? k : 0), 0),
    0,
  );
  console.log(
    `  ${label}: ${sent + verified} requests (${verified} reads checked by sha256), ${fivexx} 5xx, peak RSS ${peak.toFixed(0)} MB`,
  );
  if (peak > rssLimitMb) problem(`${label} load: peak RSS ${peak.toFixed(0)} MB over ${rssLimitMb} MB`);

  await server.stop();
  const code = await exitCode;
  if (code !== 0) problem(`${label}: the server exited with ${code} on SIGTERM after the load`);
  return {
    sent: sent + verified,
    verified,
    fivexx,
    unexpected: runs.reduce((n, r) => n + r.unexpected + r.errors, 0),
    peak,
  };
}

const sqliteDb = await freshDatabase('');
const loads: Array<Awaited<ReturnType<typeof mixedLoad>> & { label: string }> = [];
try {
  const share = pgUrl ? 0.5 : 1;
  const sqliteSeconds = Math.max(10, Math.min(loadSeconds * share, (left() - 30_000) / 1000 / (pgUrl ? 2 : 1)));
  loads.push({ label: 'SQLite', ...(await mixedLoad('SQLite', sqliteDb.url, Math.floor(sqliteSeconds))) });
  // SQLite's own check of the file the load wrote, after the clean stop.
  const db = new Database(sqliteDb.path as string, { readonly: true });
  const integrity = (db.pragma('integrity_check') as Array<{ integrity_check: string }>)[0]?.integrity_check;
  db.close();
  console.log(`  SQLite integrity_check after the load: ${integrity}`);
  if (integrity !== 'ok') problem(`SQLite integrity_check after the load: ${integrity}`);
  if (pgUrl) {
    const pgDb = await freshDatabase(pgUrl);
    try {
      const pgSeconds = Math.max(10, Math.min(loadSeconds * share, (left() - 20_000) / 1000));
      loads.push({ label: 'PostgreSQL', ...(await mixedLoad('PostgreSQL', pgDb.url, Math.floor(pgSeconds))) });
    } finally {
      await pgDb.drop();
    }
  }
} catch (err) {
  problem(`load phase stopped: ${(err as Error).stack ?? err}`);
} finally {
  await sqliteDb.drop();
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

const crashes = [sqliteCrash, pgCrash].filter((r): r is CrashLoopResult => r !== null);
const peakMb = Math.max(crashPeakMb, ...loads.map((l) => l.peak));
if (crashPeakMb > rssLimitMb) problem(`crash loop: peak RSS ${crashPeakMb.toFixed(0)} MB over ${rssLimitMb} MB`);
console.log(`\nsoak figures (${elapsed()} in all)`);
console.log(`  kills survived:        ${crashes.map((r) => `${r.killsSurvived} (${r.backend})`).join(', ')}`);
console.log(`  creates sent in loops: ${crashes.reduce((n, r) => n + r.createsSent, 0)}`);
console.log(`  creates acknowledged:  ${crashes.reduce((n, r) => n + r.acknowledged, 0)}`);
console.log(`  pastes checked:        ${crashes.reduce((n, r) => n + r.pastesChecked, 0)} (all, after the last kill)`);
console.log(`  lost / wrong sha256:   ${crashes.reduce((n, r) => n + r.lost, 0)}`);
console.log(`  load requests:         ${loads.map((l) => `${l.sent} (${l.label})`).join(', ')}`);
console.log(`  5xx under load:        ${loads.reduce((n, l) => n + l.fivexx, 0)}`);
console.log(`  unexpected answers:    ${loads.reduce((n, l) => n + l.unexpected, 0)}`);
console.log(`  peak RSS:              ${peakMb.toFixed(0)} MB (bound ${rssLimitMb} MB)`);
console.log(`  problems:              ${problems.length}`);
for (const p of problems.slice(0, 20)) console.log(`    - ${p}`);
process.exit(problems.length === 0 ? 0 : 1);
