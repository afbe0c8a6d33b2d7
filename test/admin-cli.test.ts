/**
 * The `fastpaste` command as an administrator runs it (D1, D2, D19): `node bin/fastpaste.js` in
 * child processes over a fresh database (a SQLite file in a temporary directory, or a PostgreSQL
 * schema with TEST_DATABASE_URL), and `serve` as a real server process on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { asDatabaseUrlRefusal, isRefusal, refusalMessage } from '../src/cli/refusals.js';
import { generateApiKey, isWellFormedApiKey } from '../src/keys/api-key-format.js';
import { KEY_CACHE_MS } from '../src/keys/key-service.js';
import { openStorage } from '../src/storage/database.js';
import { databaseContains, freshDatabase, onPostgres, queryDatabase } from './helpers.js';
import { startServerProcess } from './server-process.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SETTINGS = [
  'PORT',
  'HOST',
  'BASE_URL',
  'DATABASE_URL',
  'REDIS_URL',
  'TRUST_PROXY',
  'API_ENABLED',
  'ANONYMOUS_CLI',
  'ANON_HOURLY_LIMIT',
  'WEBHOOK_ALLOW_PRIVATE',
  'SWEEP_INTERVAL_SECONDS',
  'LOG_LEVEL',
  'NODE_TEST_CONTEXT',
  'NODE_OPTIONS',
];

/** The parent's environment without any fastpaste setting, plus `extra`. */
function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of SETTINGS) delete env[name];
  return { ...env, LOG_LEVEL: 'warn', ...extra };
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `node bin/fastpaste.js ...args` to its end. */
function fastpaste(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['bin/fastpaste.js', ...args],
      { cwd: ROOT, env: childEnv(env), timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : null) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

function assertOk(run: Run, what: string): void {
  assert.equal(run.code, 0, `${what} exited ${run.code}: ${run.stderr}${run.stdout}`);
}

/** A free port in 20000-40000: a random one, checked by listening on it. */
async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    const free = await new Promise<boolean>((resolve) => {
      const probe = net.createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port found');
}

const children = new Set<ChildProcess>();

/** Stops a child this file started: SIGTERM, then SIGKILL if it lingers. */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    children.delete(child);
    return;
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
  children.delete(child);
}

interface Served {
  child: ChildProcess;
  url: string;
  output: () => string;
}

/** Starts `node bin/fastpaste.js serve` and waits until /healthz answers. */
async function serve(env: Record<string, string>): Promise<Served> {
  const port = await freePort();
  const child = spawn(process.execPath, ['bin/fastpaste.js', 'serve'], {
    cwd: ROOT,
    env: childEnv({ HOST: '127.0.0.1', PORT: String(port), ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let output = '';
  const collect = (chunk: Buffer) => {
    if (output.length < 100_000) output += chunk.toString('utf8');
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`serve exited ${child.exitCode}: ${output}`);
    try {
      const health = await fetch(`${url}/healthz`);
      if (health.status === 200) return { child, url, output: () => output };
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await stop(child);
  throw new Error(`serve did not answer within 20 s: ${output}`);
}

/** The tables of the database at `databaseUrl` (in its schema, on PostgreSQL). */
async function tableNames(databaseUrl: string): Promise<string[]> {
  const rows = await queryDatabase<{ name: string }>(
    databaseUrl,
    onPostgres
      ? "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
      : "SELECT name FROM sqlite_master WHERE type = 'table'",
  );
  return rows.map((t) => t.name);
}

/** Whether this machine lets a program listen on an address it does not have. */
function nonLocalBind(): boolean {
  try {
    return readFileSync('/proc/sys/net/ipv4/ip_nonlocal_bind', 'utf8').trim() !== '0';
  } catch {
    return false;
  }
}

describe('fastpaste command', () => {
  it('the README gives the node flags npm start runs the server with (the memory settings measured)', () => {
    const start = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start as string;
    const flags = /^node ((?:--\S+ )+)bin\/fastpaste\.js serve$/.exec(start)?.[1]?.trim();
    assert.ok(flags?.includes('--max-semi-space-size='), start);
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8').replace(/\s+/g, ' ');
    assert.ok(readme.includes(`NODE_OPTIONS='${flags}'`), 'README names the flags for other starts');
  });

  it('a first start that compiles the sources leaves no esbuild process running beside the server, and builds at once all end', {
    skip: existsSync('/proc/self/stat') ? false : 'needs /proc',
  }, () => {
    // A build of its own (inside .build/, where packages resolve as the real one's do), then the
    // children the process still has: esbuild's service, unless it was stopped.
    const builds = join(ROOT, '.build', `test-${process.pid}`);
    // Two builds at once in one process: the first to end must not stop the service under the
    // other (its build would never settle, and node would exit with 13 and print nothing).
    const script = `
      import { readdirSync, readFileSync } from 'node:fs';
      const { ensureBuilt } = await import('./bin/build.js');
      const [dir, other] = await Promise.all([
        ensureBuilt(${JSON.stringify(join(builds, 'a'))}),
        ensureBuilt(${JSON.stringify(join(builds, 'b'))}),
      ]);
      const running = () => readdirSync('/proc').filter((entry) => {
        try {
          const stat = readFileSync('/proc/' + entry + '/stat', 'utf8').split(') ')[1].split(' ');
          // A child running (a zombie has exited, its exit not yet collected by node).
          return /^[0-9]+$/.test(entry) && stat[1] === String(process.pid) && stat[0] !== 'Z';
        } catch {
          return false;
        }
      }).length;
      // A stopped service is sent SIGTERM and exits a moment later: up to 2 s for that (one
      // never stopped keeps running for good).
      let children = running();
      for (let i = 0; i < 40 && children > 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        children = running();
      }
      const built = readdirSync(dir).includes('src') && readdirSync(other).includes('src');
      process.stdout.write(JSON.stringify({ built, children }));
    `;
    try {
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
        cwd: ROOT,
        encoding: 'utf8',
      });
      assert.deepEqual(JSON.parse(out), { built: true, children: 0 });
    } finally {
      rmSync(builds, { recursive: true, force: true });
    }
  });

  /** A scratch directory, for the SQLite files of single tests. */
  let dir: string;
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let env: Record<string, string>;
  let key = '';
  let keyId = '';

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fastpaste-cli-'));
    database = await freshDatabase();
    // With TEST_REDIS_URL the server processes count quotas in Redis, as the in-process ones do.
    env = {
      DATABASE_URL: database.url,
      ...(process.env.TEST_REDIS_URL ? { REDIS_URL: process.env.TEST_REDIS_URL } : {}),
    };
  });
  after(async () => {
    await Promise.all([...children].map(stop));
    rmSync(dir, { recursive: true, force: true });
    await database?.drop();
  });

  it('keys create --json prints {"key","name","webhook_secret":null} with an fp_ key, shown once', async () => {
    const run = await fastpaste(
      ['keys', 'create', '--name', 'N', '--hourly', '5', '--daily', '6', '--monthly', '7', '--json'],
      env,
    );
    assertOk(run, 'keys create');
    const lines = run.stdout.trim().split('\n');
    assert.equal(lines.length, 1, `more than the JSON line: ${run.stdout}`);
    const printed = JSON.parse(lines[0] as string);
    assert.deepEqual(Object.keys(printed).sort(), ['key', 'name', 'webhook_secret']);
    assert.equal(printed.name, 'N');
    assert.equal(printed.webhook_secret, null);
    assert.match(printed.key, /^fp_[0-9A-Za-z]+$/);
    // 256 bits of base62 is at least 43 characters, plus the prefix and a checksum (D19).
    assert.ok(printed.key.length >= 3 + 43, printed.key);
    assert.ok(isWellFormedApiKey(printed.key));
    key = printed.key;
    const [stored] = await queryDatabase<{ id: string }>(database.url, 'SELECT id FROM api_keys');
    keyId = stored?.id ?? '';
    assert.ok(keyId, 'no key stored');
  });

  it('stores only the SHA-256 digest of the key, never the key', async () => {
    assert.ok(key, 'needs the key from keys create');
    const rows = await queryDatabase(database.url, 'SELECT * FROM api_keys');
    assert.equal(rows.length, 1);
    const row = rows[0] as Record<string, unknown>;
    assert.equal(row.digest, createHash('sha256').update(key).digest('hex'));
    assert.equal(row.name, 'N');
    assert.equal(row.hourly_limit, 5);
    assert.equal(row.daily_limit, 6);
    assert.equal(row.monthly_limit, 7);
    const body = key.slice(3, 3 + 43);
    for (const [column, value] of Object.entries(row)) {
      assert.ok(!String(value).includes(body), `column ${column} holds the key`);
    }
    // Nor anywhere else: in the database files (SQLite), in any table (PostgreSQL).
    assert.equal(await databaseContains(database.url, body), false, 'the database holds the key');
  });

  it('keys list and keys list --json show the limits and never the key', async () => {
    assert.ok(key, 'needs the key from keys create');
    const digest = createHash('sha256').update(key).digest('hex');
    const [text, json] = await Promise.all([
      fastpaste(['keys', 'list'], env),
      fastpaste(['keys', 'list', '--json'], env),
    ]);
    assertOk(text, 'keys list');
    assertOk(json, 'keys list --json');
    for (const run of [text, json]) {
      assert.ok(!run.stdout.includes(key.slice(3, 3 + 43)), 'the key is listed');
      assert.ok(!run.stdout.includes(digest), 'the digest is listed');
    }
    assert.ok(text.stdout.includes(keyId), text.stdout);
    assert.ok(text.stdout.includes('N'), text.stdout);
    assert.match(text.stdout, /\b5\b[^\n]*\b6\b[^\n]*\b7\b/, `limits 5/6/7 not shown: ${text.stdout}`);

    const list = JSON.parse(json.stdout);
    assert.ok(Array.isArray(list));
    assert.equal(list.length, 1);
    const item = list[0];
    assert.equal(item.id, keyId);
    assert.equal(item.name, 'N');
    assert.equal(item.active, true);
    assert.equal(item.hourly_limit, 5);
    assert.equal(item.daily_limit, 6);
    assert.equal(item.monthly_limit, 7);
    assert.equal(item.webhook_url, null);
    assert.equal(item.webhook_active, null);
    assert.ok(!('key' in item) && !('digest' in item), JSON.stringify(item));
  });

  it('keys deactivate makes a running server refuse the key with 403; keys activate makes it work again', async () => {
    assert.ok(key && keyId, 'needs the key from keys create');
    const server = await serve(env);
    try {
      const list = () => fetch(`${server.url}/api/v1/pastes`, { headers: { 'x-api-key': key } });
      const quick = () =>
        fetch(`${server.url}/api/v1/cli`, {
          method: 'POST',
          headers: { 'x-api-key': key, 'content-type': 'text/plain' },
          body: 'made with a key',
        });
      assert.equal((await list()).status, 200);

      const off = await fastpaste(['keys', 'deactivate', keyId], env);
      assertOk(off, 'keys deactivate');
      // A running server trusts a key it looked up for KEY_CACHE_MS (another process changed it).
      await new Promise((resolve) => setTimeout(resolve, KEY_CACHE_MS + 50));
      const refused = await list();
      assert.equal(refused.status, 403);
      const body = (await refused.json()) as { error: boolean; code: string };
      assert.equal(body.error, true);
      assert.equal(body.code, 'api_key_invalid');
      assert.equal((await quick()).status, 403);
      const listed = await fastpaste(['keys', 'list', '--json'], env);
      assert.equal(JSON.parse(listed.stdout)[0].active, false);

      const on = await fastpaste(['keys', 'activate', keyId], env);
      assertOk(on, 'keys activate');
      await new Promise((resolve) => setTimeout(resolve, KEY_CACHE_MS + 50));
      assert.equal((await list()).status, 200);
      assert.equal((await quick()).status, 201);
    } finally {
      await stop(server.child);
    }
  });

  it('a limit over what the column holds is refused in one line naming it, on SQLite as on PostgreSQL; nothing is stored', async () => {
    const run = await fastpaste(['keys', 'create', '--name', 'too-big', '--hourly', '3000000000'], env);
    assert.equal(run.code, 1, `${run.stdout}${run.stderr}`);
    assert.match(
      run.stderr.trim(),
      /^fastpaste: The hourly limit must be a whole number from 0 \(unlimited\) to 2147483647\.$/,
    );
    const rows = await queryDatabase(database.url, "SELECT id FROM api_keys WHERE name = 'too-big'");
    assert.equal(rows.length, 0);
    const most = await fastpaste(['keys', 'limits', keyId, '--monthly', '2147483647'], env);
    assertOk(most, 'keys limits at the largest');
  });

  it("keys deliveries' --limit is held to 1..10000 in one line, and a webhook URL's password is never printed", async () => {
    for (const limit of ['100000000000000000000', '0', '10001']) {
      const run = await fastpaste(['keys', 'deliveries', keyId, '--limit', limit], env);
      assert.equal(run.code, 1, `${limit}: ${run.stdout}${run.stderr}`);
      assert.match(
        run.stderr.trim(),
        /^error: option '--limit <n>' argument '\d+' is invalid\. must be a whole number from 1 to 10000$/,
      );
    }
    assertOk(await fastpaste(['keys', 'deliveries', keyId, '--limit', '10000'], env), 'the largest');
    const bad = await fastpaste(['keys', 'webhook', keyId, 'https://user:s3cret@example.com:99999/'], env);
    assert.equal(bad.code, 1, `${bad.stdout}${bad.stderr}`);
    assert.match(bad.stderr, /is not a URL/);
    assert.ok(!`${bad.stdout}${bad.stderr}`.includes('s3cret'), bad.stderr);
  });

  it('an unknown key given in full is named by its first characters only', async () => {
    const unknown = generateApiKey();
    const run = await fastpaste(['keys', 'deactivate', unknown], env);
    assert.equal(run.code, 1, `${run.stdout}${run.stderr}`);
    assert.equal(run.stderr.trim(), `fastpaste: No API key "${unknown.slice(0, 7)}…".`);
    assert.ok(!`${run.stdout}${run.stderr}`.includes(unknown.slice(7)), 'the key was printed');
  });

  it('a key given with spaces around it is found; a mistyped one is named by its first characters only', async () => {
    const created = await fastpaste(['keys', 'create', '--name', 'copied', '--json'], env);
    assertOk(created, 'keys create');
    const copied = JSON.parse(created.stdout).key as string;
    assertOk(await fastpaste(['keys', 'usage', ` ${copied}\n`], env), 'keys usage of a key with spaces around it');
    for (const typo of [`"${copied}"`, copied.slice(3), copied.toUpperCase(), `${copied}x`, copied.slice(0, -1)]) {
      const run = await fastpaste(['keys', 'deactivate', typo], env);
      assert.equal(run.code, 1, `${typo}: ${run.stdout}${run.stderr}`);
      assert.equal(run.stderr.trim(), `fastpaste: No API key "${typo.slice(0, 7)}…".`);
      assert.ok(!`${run.stdout}${run.stderr}`.toLowerCase().includes(copied.slice(10, 30).toLowerCase()), typo);
    }
    // A key's id is named in full.
    const run = await fastpaste(['keys', 'deactivate', 'k_0123456789ab'], env);
    assert.equal(run.stderr.trim(), 'fastpaste: No API key "k_0123456789ab".');
  });

  it('migrate says the database is up to date on its second run', async (t) => {
    const empty = await freshDatabase();
    t.after(() => empty.drop());
    const fresh = { DATABASE_URL: empty.url };
    const first = await fastpaste(['migrate'], fresh);
    assertOk(first, 'first migrate');
    const tables = await tableNames(empty.url);
    assert.ok(tables.includes('pastes') && tables.includes('api_keys'), tables.join(', '));
    const second = await fastpaste(['migrate'], fresh);
    assertOk(second, 'second migrate');
    assert.match(second.stdout, /up to date/i);
  });

  it('a migration that fails half-way leaves nothing of the run behind: once its cause is gone, migrate completes', async (t) => {
    const db = await freshDatabase();
    t.after(() => db.drop());
    const env = { DATABASE_URL: db.url };
    // A table in the way of 0002's last one: 0002 fails after its ALTER, its first table and indexes.
    await queryDatabase(db.url, 'CREATE TABLE webhook_attempts (id integer)');
    const failed = await fastpaste(['migrate'], env);
    assert.notEqual(failed.code, 0, 'migrate succeeded over a table in its way');
    // A fault of the migration's, not the setting's: not blamed on DATABASE_URL.
    assert.doesNotMatch(failed.stderr, /DATABASE_URL/, failed.stderr);
    assert.match(failed.stderr, /webhook_attempts/, failed.stderr);
    const left = await tableNames(db.url);
    for (const table of ['pastes', 'api_keys', 'webhook_deliveries']) {
      assert.ok(!left.includes(table), `${table} was left by the failed run: ${left.join(', ')}`);
    }
    await queryDatabase(db.url, 'DROP TABLE webhook_attempts');
    const again = await fastpaste(['migrate'], env);
    assertOk(again, 'migrate after the cause was removed');
    assertOk(await fastpaste(['keys', 'create', '--name', 'after repair'], env), 'keys create');
  });

  it('with nothing to migrate, a command takes no write lock: it runs while another connection holds one', {
    skip: onPostgres && 'SQLite only',
  }, async (t) => {
    const db = await freshDatabase();
    t.after(() => db.drop());
    const env = { DATABASE_URL: db.url };
    assertOk(await fastpaste(['migrate'], env), 'migrate');
    assertOk(await fastpaste(['keys', 'create', '--name', 'listed'], env), 'keys create');
    const { default: Sqlite } = await import('better-sqlite3');
    const holder = new Sqlite(db.url.slice('sqlite:'.length));
    holder.exec('BEGIN IMMEDIATE'); // a server's write under way, say
    try {
      const started = Date.now();
      const listed = await fastpaste(['keys', 'list'], env);
      assertOk(listed, 'keys list beside a write lock');
      assert.match(listed.stdout, /listed/);
      assert.ok(Date.now() - started < 20_000, `waited ${Date.now() - started} ms`);
    } finally {
      holder.exec('ROLLBACK');
      holder.close();
    }
  });

  it('a database a newer build migrated is refused, not used on a schema this build was not written for', async (t) => {
    const db = await freshDatabase();
    t.after(() => db.drop());
    const env = { DATABASE_URL: db.url };
    assertOk(await fastpaste(['migrate'], env), 'migrate');
    await queryDatabase(
      db.url,
      "INSERT INTO kysely_migration (name, timestamp) VALUES ('9999_from_a_newer_build', '2026-11-29T00:00:00.000Z')",
    );
    for (const args of [['keys', 'list'], ['migrate']]) {
      const run = await fastpaste(args, env);
      assert.notEqual(run.code, 0, `${args.join(' ')} ran on a newer build's database`);
      assert.match(run.stderr, /9999_from_a_newer_build/);
      assert.equal(run.stderr.trim().split('\n').length, 1, `not one line: ${run.stderr}`);
    }
  });

  it('three migrate commands at once on a new database all succeed, each migration applied once', async (t) => {
    const db = await freshDatabase();
    t.after(() => db.drop());
    const env = { DATABASE_URL: db.url };
    const runs = await Promise.all([1, 2, 3].map(() => fastpaste(['migrate'], env)));
    for (const [i, run] of runs.entries()) assertOk(run, `migrate ${i + 1}`);
    const applied = await queryDatabase<{ name: string; n: number }>(
      db.url,
      'SELECT name, count(*) AS n FROM kysely_migration GROUP BY name',
    );
    assert.ok(applied.length >= 9, JSON.stringify(applied));
    assert.ok(
      applied.every((row) => Number(row.n) === 1),
      JSON.stringify(applied),
    );
    assert.equal(runs.filter((run) => /Applied:/.test(run.stdout)).length, 1, 'more than one run applied migrations');
  });

  it('a bad setting stops every command with a non-zero exit and one line naming the variable', async (t) => {
    // On SQLite a file in a directory not yet made; on PostgreSQL an empty schema.
    const untouched = onPostgres ? await freshDatabase() : null;
    if (untouched) t.after(() => untouched.drop());
    const badDb = join(dir, 'never-made', 'bad.db');
    const badPatterns = join(dir, 'bad-patterns.txt');
    writeFileSync(badPatterns, '# spam\nfree money\nunclosed (group\n');
    const databaseUrl = untouched?.url ?? `sqlite:${badDb}`;
    const cases: Array<[string[], Record<string, string>, string]> = [
      [['serve'], { PORT: 'abc' }, 'PORT'],
      [['migrate'], { PORT: 'abc' }, 'PORT'],
      [['keys', 'list'], { PORT: 'abc' }, 'PORT'],
      [['keys', 'create', '--name', 'x', '--json'], { PORT: 'abc' }, 'PORT'],
      [['serve'], { TRUST_PROXY: 'perhaps' }, 'TRUST_PROXY'],
      // A blocklist that does not compile, or is no file, is told before anything opens.
      [['serve'], { CONTENT_BLOCKLIST_FILE: badPatterns }, 'CONTENT_BLOCKLIST_FILE'],
      [['keys', 'list'], { CONTENT_BLOCKLIST_FILE: dir }, 'CONTENT_BLOCKLIST_FILE'],
      [['serve'], { BASE_URL: 'https://paste.example/?tracking=1' }, 'BASE_URL'],
      [['serve'], { BASE_URL: 'https://paste.example/#' }, 'BASE_URL'],
      // The pages link from the root: under a path they would not work.
      [['serve'], { BASE_URL: 'https://example.com/paste' }, 'BASE_URL'],
      // The line never shows a password of the URL it refuses.
      [['keys', 'list'], { DATABASE_URL: 'mysql://admin:s3cret-pw@db.example/x' }, 'DATABASE_URL'],
      [['serve'], { REDIS_URL: 'redis://admin:s3cret-pw@redis.example:99999' }, 'REDIS_URL'],
      // A password holding / (base64's) unencoded: the URL does not parse, the line still hides it.
      [['serve'], { REDIS_URL: 'redis://:ab/s3cret-pw@redis.example:6379' }, 'REDIS_URL'],
      [['keys', 'list'], { DATABASE_URL: 'postgres://fastpaste:ab/s3cret-pw@db.example:5432/fp' }, 'DATABASE_URL'],
      // A typo in the scheme, or libpq's keywords: where the password ends cannot be told.
      [['keys', 'list'], { DATABASE_URL: 'postgres:/app:s3cret-pw@db.example/fp' }, 'DATABASE_URL'],
      [['keys', 'list'], { DATABASE_URL: 'postgres//app:s3cret-pw@db.example/fp' }, 'DATABASE_URL'],
      [['keys', 'list'], { DATABASE_URL: 'host=db.example password=s3cret-pw' }, 'DATABASE_URL'],
      [['serve'], { REDIS_URL: 'redis//:s3cret-pw@cache.example' }, 'REDIS_URL'],
      [['serve'], { REDIS_URL: 'redis:/:s3cret-pw@cache.example:6379' }, 'REDIS_URL'],
      // A password in the query string, which pg and ioredis read too, of a URL that does not parse.
      [['keys', 'list'], { DATABASE_URL: 'postgres://db.example:5432x/fp?password=s3cret-pw' }, 'DATABASE_URL'],
      [['serve'], { REDIS_URL: 'redis://cache.example:99999/?password=s3cret-pw' }, 'REDIS_URL'],
      [['keys', 'list'], { DATABASE_URL: 'postgres://db.example:5432x/fp?password=s3cret-pw@x' }, 'DATABASE_URL'],
      [['keys', 'list'], { DATABASE_URL: 'postgres://app:pw?s3cret-pw@db.example:5432x/fp' }, 'DATABASE_URL'],
      // An empty SQLite path would be a database in memory, every key and paste gone at exit.
      [['keys', 'list'], { DATABASE_URL: 'sqlite:' }, 'DATABASE_URL'],
    ];
    const runs = await Promise.all(
      cases.map(([args, bad]) => fastpaste(args, { DATABASE_URL: databaseUrl, PORT: '0', ...bad })),
    );
    runs.forEach((run, i) => {
      const [args, , variable] = cases[i] as [string[], Record<string, string>, string];
      const what = `${args.join(' ')} with a bad ${variable}`;
      assert.notEqual(run.code, 0, `${what} exited 0`);
      assert.notEqual(run.code, null, `${what} did not exit by itself`);
      const lines = run.stderr.trim().split('\n');
      assert.equal(lines.length, 1, `${what}: not one line: ${run.stderr}`);
      assert.ok(lines[0]?.includes(variable), `${what}: the line does not name ${variable}: ${run.stderr}`);
      assert.ok(!run.stderr.includes('    at '), `${what}: a stack trace`);
      assert.ok(!run.stderr.includes('s3cret-pw'), `${what}: the line shows a password: ${run.stderr}`);
      assert.equal(run.stdout.trim(), '', `${what}: printed ${run.stdout}`);
    });
    if (untouched) {
      assert.deepEqual(await tableNames(untouched.url), [], 'a command with a bad setting touched the database');
    } else {
      assert.ok(!existsSync(badDb), 'a command with a bad setting touched the database');
    }
  });

  it('a port in use or a database out of reach stops a command with one line saying so, no stack', async () => {
    // Takes connections and never answers (the PostgreSQL case below); dropped at the end.
    const taken = new Set<net.Socket>();
    const holder = net.createServer((socket) => taken.add(socket));
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = String((holder.address() as net.AddressInfo).port);
    try {
      const cases: Array<[string[], Record<string, string>, RegExp]> = [
        [
          ['serve'],
          { PORT: port, DATABASE_URL: `sqlite:${join(dir, 'port-taken.db')}` },
          /HOST 127\.0\.0\.1, PORT \d+: .*EADDRINUSE/,
        ],
        // A name that does not resolve, an address not this machine's: named as HOST's.
        // Not where the machine lets a program listen on any address (keepalived hosts).
        ...(nonLocalBind()
          ? []
          : ([
              [
                ['serve'],
                { HOST: 'fastpaste-typo.invalid', PORT: '0', DATABASE_URL: `sqlite:${join(dir, 'no-host.db')}` },
                // (A resolver that answers every name would give it an address: EADDRNOTAVAIL.)
                /^fastpaste: cannot listen on HOST fastpaste-typo\.invalid, PORT 0: .*(ENOTFOUND|EAI_AGAIN|EADDRNOTAVAIL)/,
              ],
              [
                ['serve'],
                { HOST: '192.0.2.1', PORT: '0', DATABASE_URL: `sqlite:${join(dir, 'other-host.db')}` },
                /^fastpaste: cannot listen on HOST 192\.0\.2\.1, PORT 0: .*EADDRNOTAVAIL/,
              ],
            ] as Array<[string[], Record<string, string>, RegExp]>)),
        [
          ['keys', 'list'],
          { PORT: '0', DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' },
          /^fastpaste: DATABASE_URL: .*ECONNREFUSED/,
        ],
        // A port where something that is no PostgreSQL takes the connection and never answers:
        // pg gives up after its connection time-out with an error that has no code.
        [
          ['keys', 'list'],
          { PORT: '0', DATABASE_URL: `postgres://nobody@127.0.0.1:${port}/none` },
          /^fastpaste: DATABASE_URL: .*Connection terminated/,
        ],
        // SQLite refusing its file (here a directory): named as DATABASE_URL's.
        [['keys', 'list'], { PORT: '0', DATABASE_URL: `sqlite:${dir}` }, /^fastpaste: DATABASE_URL: .*SQLITE_CANTOPEN/],
      ];
      for (const [args, env, message] of cases) {
        const run = await fastpaste(args, { LOG_LEVEL: 'silent', ...env });
        const what = `${args.join(' ')} (${JSON.stringify(env)})`;
        assert.equal(run.code, 1, `${what}: exit ${run.code}: ${run.stderr}`);
        const lines = run.stderr.trim().split('\n');
        assert.equal(lines.length, 1, `${what}: not one line: ${run.stderr}`);
        assert.match(lines[0] as string, message, what);
        assert.ok(!run.stderr.includes('    at '), `${what}: a stack trace`);
      }
    } finally {
      for (const socket of taken) socket.destroy();
      await new Promise((resolve) => holder.close(resolve));
    }
  });

  it('a second server on a SQLite file another serves is refused with one line; once the first stops, it starts', async () => {
    const env = { LOG_LEVEL: 'silent', DATABASE_URL: `sqlite:${join(dir, 'one-server.db')}` };
    const first = await startServerProcess(env);
    try {
      // The commands still run beside it.
      assert.equal((await fastpaste(['keys', 'list'], env)).code, 0);
      const second = await fastpaste(['serve'], { ...env, PORT: '0' });
      assert.equal(second.code, 1, second.stderr);
      const lines = second.stderr.trim().split('\n');
      assert.equal(lines.length, 1, second.stderr);
      assert.match(
        lines[0] as string,
        /^fastpaste: DATABASE_URL: .*one-server\.db is served by another fastpaste process/,
      );
      assert.equal((await fetch(`${first.url}/healthz`)).status, 200, 'the first one serves on');
    } finally {
      await first.stop();
    }
    const again = await startServerProcess(env);
    await again.stop('SIGKILL'); // the lock goes with the process, however it ends
    const afterKill = await startServerProcess(env);
    assert.equal(await afterKill.stop(), 0);
  });

  it("the server's lock is the file's, whatever path reaches it, and a file that fails to open leaves it free", async () => {
    const file = join(dir, 'locked.db');
    const first = openStorage(`sqlite:${file}`, { soleServer: true });
    try {
      const link = join(dir, 'link-to-locked.db');
      symlinkSync(file, link);
      assert.throws(
        () => openStorage(`sqlite:${link}`, { soleServer: true }),
        /is served by another fastpaste process/,
      );
      // A link to a file not made yet names the same lock as the file once made.
      const early = join(dir, 'link-to-later.db');
      symlinkSync(join(dir, 'later.db'), early);
      const viaLink = openStorage(`sqlite:${early}`, { soleServer: true });
      try {
        assert.throws(
          () => openStorage(`sqlite:${join(dir, 'later.db')}`, { soleServer: true }),
          /is served by another fastpaste process/,
        );
      } finally {
        await viaLink.close();
      }
    } finally {
      await first.close();
    }
    const broken = join(dir, 'not-a-database.db');
    writeFileSync(broken, 'x'.repeat(4096));
    assert.throws(() => openStorage(`sqlite:${broken}`, { soleServer: true }), { code: 'SQLITE_NOTADB' });
    rmSync(broken);
    const repaired = openStorage(`sqlite:${broken}`, { soleServer: true });
    await repaired.close();
  });

  it("refusals of the database are told as DATABASE_URL's, a fault of a migration's own is not", async () => {
    const told = async (err: object) => {
      try {
        await asDatabaseUrlRefusal(async () => {
          throw Object.assign(new Error(String((err as { message?: string }).message ?? '')), err);
        });
      } catch (thrown) {
        return isRefusal(thrown) ? refusalMessage(thrown as Error) : `not a refusal: ${(thrown as Error).message}`;
      }
      return 'no throw';
    };
    for (const refused of [
      { code: 'ECONNREFUSED', message: 'connect ECONNREFUSED 127.0.0.1:5432' },
      { code: '28P01', message: 'password authentication failed for user "x"' },
      { code: '3D000', message: 'database "nope" does not exist' },
      { code: '53300', message: 'sorry, too many clients already' },
      { code: 'SELF_SIGNED_CERT_IN_CHAIN', message: 'self-signed certificate in certificate chain' },
      { code: 'ERR_TLS_CERT_ALTNAME_INVALID', message: "Hostname/IP does not match certificate's altnames" },
      { message: 'SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a string' },
      { message: 'The server does not support SSL connections' },
      { message: 'Connection terminated due to connection timeout' },
    ]) {
      assert.match(await told(refused), /^DATABASE_URL: /, JSON.stringify(refused));
    }
    for (const own of [
      { code: '42P07', message: 'relation "x" already exists' },
      { code: '53100', message: 'could not extend file' },
      { code: 'SQLITE_ERROR', message: 'near "x": syntax error' },
    ]) {
      assert.doesNotMatch(await told(own), /^DATABASE_URL: /, JSON.stringify(own));
    }
  });

  it('a refusal of errors (a name of two addresses, both refused) is told by its errors, never an empty line', () => {
    const both = Object.assign(
      new AggregateError([new Error('connect ECONNREFUSED ::1:1'), new Error('connect ECONNREFUSED 127.0.0.1:1')]),
      { code: 'ECONNREFUSED' },
    );
    assert.equal(isRefusal(both), true);
    assert.equal(refusalMessage(both), 'connect ECONNREFUSED ::1:1; connect ECONNREFUSED 127.0.0.1:1');
    assert.equal(refusalMessage(Object.assign(new Error(''), { code: 'ENOTFOUND' })), 'ENOTFOUND');
    assert.equal(isRefusal(new TypeError('a fault of our own')), false);
    // SQLite refusing its file is a refusal; an error of a statement is a fault of our own.
    assert.equal(
      isRefusal(Object.assign(new Error('unable to open database file'), { code: 'SQLITE_CANTOPEN' })),
      true,
    );
    assert.equal(isRefusal(Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_WRITE' })), true);
    assert.equal(isRefusal(Object.assign(new Error('no such column: x'), { code: 'SQLITE_ERROR' })), false);
    assert.equal(isRefusal(Object.assign(new Error('UNIQUE failed'), { code: 'SQLITE_CONSTRAINT_UNIQUE' })), false);
    assert.equal(isRefusal(Object.assign(new Error('password authentication failed'), { code: '28P01' })), true);
  });

  it('serve creates the data directory on first start', { skip: onPostgres && 'SQLite only' }, async () => {
    const nested = join(dir, 'newdir', 'sub');
    const file = join(nested, 'f.db');
    assert.ok(!existsSync(join(dir, 'newdir')));
    const server = await serve({ DATABASE_URL: `sqlite:${file}` });
    try {
      assert.ok(existsSync(file), `no database file at ${file}`);
      const ready = await fetch(`${server.url}/readyz`);
      assert.equal(ready.status, 200, server.output());
      const created = await fetch(`${server.url}/api/v1/cli`, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: 'first paste of a new server',
      });
      assert.equal(created.status, 201, await created.text());
    } finally {
      await stop(server.child);
    }
  });
});
