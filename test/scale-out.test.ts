/**
 * Scale-out (issue 5): several real server processes on one PostgreSQL and one Redis do
 * everything that must happen once exactly once, and an outage of either backend gives fast
 * 503s and heals by itself. Runs when TEST_DATABASE_URL and TEST_REDIS_URL are set (as CI does).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
import { type Logger, pino } from 'pino';
import { REDIS_COMMAND_TIMEOUT_MS } from '../src/services.js';
import { openStorage, STATEMENT_TIMEOUT_MS } from '../src/storage/database.js';
import { migrateToLatest } from '../src/storage/migrations.js';
import { answeredByServer } from '../src/storage/pg-sessions.js';
import {
  createPaste,
  expectError,
  freePort,
  freshDatabase,
  postgresProxy,
  queryDatabase,
  request,
  startServer,
  type TestServer,
  tcpProxy,
} from './helpers.js';
import { fastpaste, type ServerProcess, startServerProcess } from './server-process.js';

const TEST_DB = process.env.TEST_DATABASE_URL;
const TEST_REDIS = process.env.TEST_REDIS_URL;
const skip = !TEST_DB || !TEST_REDIS ? 'needs TEST_DATABASE_URL and TEST_REDIS_URL' : false;

interface Received {
  id: string;
  pasteId: string;
}

function startReceiver(): Promise<{ server: Server; url: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => {
      received.push({ id: String(req.headers['webhook-id']), pasteId: JSON.parse(body).paste_id });
      res.end('ok');
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      resolve({ server, url: `http://127.0.0.1:${port}/hook`, received });
    }),
  );
}

async function createKey(env: Record<string, string>, extra: string[] = []): Promise<string> {
  const out = await fastpaste(['keys', 'create', '--name', 'scale', '--json', ...extra], env);
  assert.equal(out.code, 0, out.stderr);
  return JSON.parse(out.stdout).key;
}

async function until<T>(check: () => Promise<T | undefined>, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** True once something accepts connections on the port, undefined while nothing does. */
function listening(port: number): Promise<true | undefined> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(undefined));
  });
}

/**
 * A fresh schema used through a login role of its own, so that the server's connections alone
 * can be turned read-only and dropped, as a failover to a standby drops them and the pool
 * reconnects to a server that takes no writes.
 */
async function databaseOfItsOwnRole(): Promise<{
  url: string;
  admin: pg.Client;
  schema: string;
  failover(options: { readOnly: boolean }): Promise<void>;
  /** The role's setting alone: sessions already open keep the one they began with. */
  setReadOnly(readOnly: boolean): Promise<void>;
  /** How many sessions the role has open. */
  sessions(): Promise<number>;
  drop(): Promise<void>;
}> {
  const role = `fp_ro_${process.pid}_${Date.now()}`;
  const password = `pw${Date.now()}`;
  const admin = new pg.Client({ connectionString: TEST_DB });
  await admin.connect();
  let db: Awaited<ReturnType<typeof freshDatabase>> | undefined;
  let schema: string;
  const dropAll = async () => {
    try {
      await db?.drop();
    } finally {
      try {
        // Whatever the role still owns or may use goes with it, even if the schema's drop failed.
        await admin.query(
          `DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${role}') THEN DROP OWNED BY ${role} CASCADE; DROP ROLE ${role}; END IF; END $$`,
        );
      } finally {
        await admin.end();
      }
    }
  };
  try {
    db = await freshDatabase();
    schema = new URL(db.url).searchParams.get('options')?.match(/search_path=(\w+)/)?.[1] as string;
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
    await admin.query(`GRANT ALL ON SCHEMA ${schema} TO ${role}`);
  } catch (err) {
    await dropAll();
    throw err;
  }
  const url = new URL(db.url);
  url.username = role;
  url.password = password;
  const setReadOnly = async (readOnly: boolean) => {
    await admin.query(
      readOnly
        ? `ALTER ROLE ${role} SET default_transaction_read_only = on`
        : `ALTER ROLE ${role} RESET default_transaction_read_only`,
    );
  };
  return {
    url: url.toString(),
    admin,
    schema,
    async failover({ readOnly }) {
      await setReadOnly(readOnly);
      await admin.query('SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE usename = $1', [
        role,
      ]);
    },
    setReadOnly,
    async sessions() {
      const { rows } = await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1', [role]);
      return rows[0].n as number;
    },
    drop: dropAll,
  };
}

/**
 * A server on `url` with a key, and a paste it created ('stored before'); `create` creates more
 * with the key.
 */
async function serverWithAPaste(
  url: string,
  logger: Logger,
): Promise<{ server: TestServer; create(content: string): ReturnType<typeof request>; id: string }> {
  const server = await startServer({ databaseUrl: url, logger });
  try {
    const key = await server.createKey({ hourly: 100_000 });
    const create = (content: string) =>
      request(`${server.url}/api/v1/paste`, { method: 'POST', headers: { 'x-api-key': key }, json: { content } });
    return { server, create, id: await createPaste(server, key, { content: 'stored before' }) };
  } catch (err) {
    await server.close();
    throw err;
  }
}

/** Stops a server process: its exit code, how long the stop took, and its JSON log lines. */
async function stopAndRead(
  server: ServerProcess,
): Promise<{ code: number | null; took: number; lines: Array<Record<string, unknown>> }> {
  const t0 = Date.now();
  const code = await server.stop();
  const took = Date.now() - t0;
  const lines = server
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  return { code, took, lines };
}

describe('two instances on one PostgreSQL and one Redis', { skip }, () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let env: Record<string, string>;
  let a: ServerProcess;
  let b: ServerProcess;
  let key: string;

  before(async () => {
    db = await freshDatabase();
    receiver = await startReceiver();
    env = {
      DATABASE_URL: db.url,
      REDIS_URL: TEST_REDIS as string,
      WEBHOOK_ALLOW_PRIVATE: 'true',
      WEBHOOK_RETRY_BASE_MS: '200',
      ANON_HOURLY_LIMIT: '0',
    };
    assert.equal((await fastpaste(['migrate'], env)).code, 0);
    key = await createKey(env, ['--webhook', receiver.url]);
    [a, b] = await Promise.all([startServerProcess(env), startServerProcess(env)]);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    receiver?.server.close();
    await db?.drop();
  });

  it('migrations run once when three instances start on an empty database together', async () => {
    const fresh = await freshDatabase();
    const servers = await Promise.all([1, 2, 3].map(() => startServerProcess({ ...env, DATABASE_URL: fresh.url })));
    try {
      const schema = new URL(fresh.url).searchParams.get('options')?.split('=')[1] as string;
      const client = new pg.Client({ connectionString: TEST_DB });
      await client.connect();
      const rows = await client.query(`SELECT name, count(*)::int AS n FROM ${schema}.kysely_migration GROUP BY name`);
      await client.end();
      assert.ok(rows.rows.length >= 3);
      for (const row of rows.rows) assert.equal(row.n, 1, `${row.name} applied ${row.n} times`);
      for (const s of servers) assert.equal((await fetch(`${s.url}/readyz`)).status, 200);
    } finally {
      await Promise.all(servers.map((s) => s.stop()));
      await fresh.drop();
    }
  });

  it('an instance starting while another migrates for longer than a statement may run waits, then starts', async (t) => {
    // Another instance's migrations (an index built on a large table, say) hold the migration
    // lock for longer than the pool lets a statement run: the waiting instance's lock request
    // must not be cancelled by the requests' time-out, nor its own long statements.
    const fresh = await freshDatabase();
    const holder = new pg.Client({ connectionString: fresh.url });
    await holder.connect();
    const storage = openStorage(fresh.url);
    const migrationLock = '3853314791062309107'; // Kysely's, on PostgreSQL
    let migrating: Promise<string[]> | undefined;
    try {
      await holder.query(`SELECT pg_advisory_lock(${migrationLock})`);
      const started = Date.now();
      migrating = migrateToLatest(storage);
      void migrating.catch(() => {}); // awaited below; a failure is the test's
      // Held from the moment the migration is seen waiting for it, for a second longer than a
      // statement may run.
      await until(
        async () => {
          const waiting = await holder.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event = 'advisory' AND datname = current_database()",
          );
          return waiting.rows[0].n > 0 ? true : undefined;
        },
        10_000,
        'the migration to wait for the lock',
      );
      await new Promise((resolve) => setTimeout(resolve, STATEMENT_TIMEOUT_MS + 1000));
      await holder.query(`SELECT pg_advisory_unlock(${migrationLock})`);
      const applied = await migrating; // cancelled by a statement time-out, it rejects (57014)
      assert.ok(applied.includes('0001_pastes_and_keys'), applied.join(', '));
      t.diagnostic(`migrated ${Date.now() - started} ms after it began`);
      // The requests' connections keep their time-out.
      const shown = await sql<{ statement_timeout: string }>`SHOW statement_timeout`.execute(storage.db);
      assert.equal(shown.rows[0]?.statement_timeout, `${STATEMENT_TIMEOUT_MS / 1000}s`);
    } finally {
      await holder.end();
      await migrating?.catch(() => {});
      await storage.close();
      await fresh.drop();
    }
  });

  it('50 concurrent readers split across both instances get one burn paste exactly once', async () => {
    const created = await fetch(`${a.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ content: 'read me once', burn: true }),
    });
    assert.equal(created.status, 201);
    const id = ((await created.json()) as { data: { paste_id: string } }).data.paste_id;
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        fetch(`${i % 2 ? a.url : b.url}/raw/${id}`).then(async (r) => ({ status: r.status, body: await r.text() })),
      ),
    );
    const served = answers.filter((r) => r.status === 200);
    assert.equal(served.length, 1);
    assert.equal(served[0]?.body, 'read me once');
    assert.equal(answers.filter((r) => r.status === 404).length, 49);
  });

  it('a key limited to N requests gets exactly N non-429 answers across both instances', async () => {
    const limited = await createKey(env, ['--hourly', '25']);
    const statuses = await Promise.all(
      Array.from({ length: 80 }, (_, i) =>
        fetch(`${i % 2 ? a.url : b.url}/api/v1/pastes`, { headers: { 'x-api-key': limited } }).then((r) => r.status),
      ),
    );
    const seen = (status: number) => statuses.filter((s) => s === status).length;
    assert.deepEqual({ ok: seen(200), limited: seen(429) }, { ok: 25, limited: 55 }, `statuses: ${statuses}`);
  });

  it('100 pastes created across both instances give exactly 100 webhook deliveries, each once', async () => {
    const start = receiver.received.length;
    const ids: string[] = [];
    for (let batch = 0; batch < 10; batch++) {
      const made = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          fetch(`${i % 2 ? a.url : b.url}/api/v1/paste`, {
            method: 'POST',
            headers: { 'x-api-key': key, 'content-type': 'application/json' },
            body: JSON.stringify({ content: `paste ${batch}-${i}` }),
          }).then(async (r) => ((await r.json()) as { data: { paste_id: string } }).data.paste_id),
        ),
      );
      ids.push(...made);
    }
    await until(async () => (receiver.received.length - start >= 100 ? true : undefined), 30_000, '100 deliveries');
    // Give a duplicate the time to show up, were there one.
    await new Promise((r) => setTimeout(r, 2500));
    const got = receiver.received.slice(start);
    assert.equal(got.length, 100);
    assert.equal(new Set(got.map((g) => g.id)).size, 100);
    assert.deepEqual(new Set(got.map((g) => g.pasteId)), new Set(ids));
  });
});

/**
 * A TCP proxy in front of the test's Redis that can hold Redis's replies back (the connection
 * stays up, nothing comes back: a Redis that stops answering) and drop every connection.
 */
async function redisProxy(target: URL): Promise<{ url: string; stall(): void; drop(): void; close(): void }> {
  let stalled = false;
  const proxy = await tcpProxy(target, 6379, (client, upstream) => {
    client.on('data', (data) => upstream.write(data));
    upstream.on('data', (data) => {
      if (!stalled) client.write(data);
    });
  });
  return {
    url: proxy.url,
    stall: () => {
      stalled = true;
    },
    drop: () => {
      stalled = false;
      proxy.dropAll();
    },
    close: proxy.close,
  };
}

/**
 * A server process on a database of its own whose Redis is reached through `redisProxy`, a key
 * of `hourly` requests, and `list`: that key's GET /api/v1/pastes (the fast lane).
 */
async function withProxiedRedis(
  hourly: number,
  test: (setup: {
    server: ServerProcess;
    key: string;
    proxy: Awaited<ReturnType<typeof redisProxy>>;
    list: () => Promise<Response>;
  }) => Promise<void>,
): Promise<void> {
  const proxy = await redisProxy(new URL(TEST_REDIS as string));
  const db = await freshDatabase();
  const env = { DATABASE_URL: db.url, REDIS_URL: proxy.url };
  let server: ServerProcess | undefined;
  try {
    const key = await createKey(env, ['--hourly', String(hourly)]);
    const started = await startServerProcess(env);
    server = started;
    const list = () => fetch(`${started.url}/api/v1/pastes`, { headers: { 'x-api-key': key } });
    await test({ server: started, key, proxy, list });
  } finally {
    await server?.stop();
    proxy.close();
    await db.drop();
  }
}

describe('a Redis that stops answering', { skip }, () => {
  it('fails counted requests with 503 within seconds, never holds them; served again once it answers', () =>
    withProxiedRedis(100_000, async ({ server, key, proxy, list }) => {
      assert.equal((await list()).status, 200);
      proxy.stall();
      const started = Date.now();
      // Never held until Redis answers: the test gives up after 10 s.
      const signal = AbortSignal.timeout(10_000);
      const answers = await Promise.all([
        fetch(`${server.url}/api/v1/pastes`, { headers: { 'x-api-key': key }, signal }), // the fast lane
        fetch(`${server.url}/api/v1/pastes?via=framework`, { headers: { 'x-api-key': key }, signal }),
        fetch(`${server.url}/api/v1/cli`, { method: 'POST', body: 'anonymous, counted per address', signal }),
      ]);
      const took = Date.now() - started;
      for (const answer of answers) {
        assert.equal(answer.status, 503);
        assert.equal(((await answer.json()) as { code: string }).code, 'service_unavailable');
      }
      // ioredis sends one automatic pipeline at a time: a request waits for the one out (timed
      // out after REDIS_COMMAND_TIMEOUT_MS) and its own, about 2 s, with room for a slow machine.
      assert.ok(took < 4 * REDIS_COMMAND_TIMEOUT_MS, `answered in ${took} ms`);
      proxy.drop(); // the connection made again answers
      await until(async () => ((await list()).status === 200 ? true : undefined), 15_000, 'recovery');
    }));

  it('a quota script cut off with its connection is not sent again: no request is counted twice', () =>
    withProxiedRedis(1000, async ({ proxy, list }) => {
      const remaining = async () => {
        const answer = await list();
        assert.equal(answer.status, 200);
        return Number(answer.headers.get('ratelimit-remaining'));
      };
      const before = await remaining();
      // Five counted requests whose scripts reach Redis and run; their replies are held back.
      proxy.stall();
      const pending = Array.from({ length: 5 }, () => list());
      await new Promise((resolve) => setTimeout(resolve, 500));
      proxy.drop();
      const statuses = await Promise.all(pending.map(async (answer) => (await answer).status));
      const served = statuses.filter((status) => status === 200).length;
      for (const status of statuses) assert.ok(status === 200 || status === 503, `status ${status}`);
      const after = await until(async () => remaining().catch(() => undefined), 15_000, 'recovery');
      // Counted: each of the five once (their scripts ran), and the read of `after` itself.
      const counted = before - after - 1;
      assert.ok(counted <= 5, `5 requests (${served} served) counted ${counted} times`);
      assert.ok(counted >= served, `${served} served, ${counted} counted`);
    }));
});

describe('a backend that goes away gives fast 503s and the instance heals by itself', { skip }, () => {
  it('Redis stopped: 503 within seconds; Redis back: served again without a restart', async () => {
    const port = await freePort();
    const startRedis = (): ChildProcess =>
      spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
        stdio: 'ignore',
      });
    let redis = startRedis();
    const db = await freshDatabase();
    const env = { DATABASE_URL: db.url, REDIS_URL: `redis://127.0.0.1:${port}` };
    let server: ServerProcess | undefined;
    try {
      await until(() => listening(port), 10_000, 'redis-server to listen');
      const key = await createKey(env, ['--hourly', '100000']);
      server = await startServerProcess(env);
      const get = () => fetch(`${server?.url}/api/v1/pastes`, { headers: { 'x-api-key': key } });
      assert.equal((await get()).status, 200);

      redis.kill('SIGKILL');
      await new Promise((r) => redis.once('exit', r));
      const started = Date.now();
      const down = await get();
      assert.equal(down.status, 503);
      assert.equal(((await down.json()) as { code: string }).code, 'service_unavailable');
      assert.ok(Date.now() - started < 5000, `took ${Date.now() - started} ms`);
      assert.equal((await fetch(`${server.url}/readyz`)).status, 503);

      redis = startRedis();
      await until(async () => ((await get()).status === 200 ? true : undefined), 15_000, 'recovery');
      assert.equal((await fetch(`${server.url}/readyz`)).status, 200);
    } finally {
      await server?.stop();
      redis.kill('SIGKILL');
      await db.drop();
    }
  });

  /** A key's JSON create on a server process. */
  const postJson = (server: ServerProcess, key: string, body: Record<string, unknown>) =>
    fetch(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  /**
   * Each answer 201 with its paste readable, the process still up, and each content stored once
   * (the rows whose content is LIKE `like`); returns the pastes' ids.
   */
  async function assertEachStoredOnce(
    server: ServerProcess,
    databaseUrl: string,
    answers: Response[],
    contents: string[],
    like: string,
  ): Promise<string[]> {
    const ids: string[] = [];
    for (const [i, answer] of answers.entries()) {
      assert.equal(answer.status, 201, await answer.clone().text());
      const { data } = (await answer.json()) as { data: { paste_id: string } };
      ids.push(data.paste_id);
      assert.equal(await (await fetch(`${server.url}/raw/${data.paste_id}`)).text(), contents[i]);
    }
    assert.equal(server.child.exitCode, null, `the process is still up: ${server.output()}`);
    const stored = await queryDatabase<{ content: string; n: number }>(
      databaseUrl,
      `SELECT content, count(*) AS n FROM pastes WHERE content LIKE '${like}' GROUP BY content`,
    );
    assert.deepEqual(
      stored.map((row) => [row.content, Number(row.n)]).sort(),
      contents.map((content) => [content, 1]),
      'each stored once',
    );
    return ids;
  }

  for (const cut of ['before', 'after'] as const) {
    it(`a PostgreSQL connection lost in the middle of a group of creates (${cut === 'before' ? 'before the insert reaches it' : 'after its commit, the reply lost'}): the group sent again on another connection, each create 201 with the paste stored once`, async () => {
      const db = await freshDatabase();
      const proxy = await postgresProxy(new URL(db.url));
      const env = { DATABASE_URL: proxy.url, REDIS_URL: '' };
      let server: ServerProcess | undefined;
      try {
        const key = await createKey(env);
        server = await startServerProcess(env);
        const create = (content: string) => postJson(server as ServerProcess, key, { content, title: content });
        // The group's insert (a named statement, its text sent on a connection's first use).
        proxy.cutAtNext('INSERT INTO pastes', cut);
        const contents = Array.from({ length: 6 }, (_, i) => `lost on the way ${i}`);
        const answers = await Promise.all(contents.map(create));
        assert.equal(proxy.cuts(), 1, 'the insert was cut');
        await assertEachStoredOnce(server, db.url, answers, contents, 'lost on the way %');
        // The same process, on a new connection, creates and serves.
        const made = await create('made after');
        assert.equal(made.status, 201, await made.clone().text());
      } finally {
        await server?.stop();
        proxy.close();
        await db.drop();
      }
    });
  }

  /**
   * A server process on a database of its own reached through `postgresProxy`, and a key with a
   * webhook to a receiver of the test's: `create` makes a paste with that key.
   */
  async function withWebhookKeyBehindProxy(
    test: (ctx: {
      db: Awaited<ReturnType<typeof freshDatabase>>;
      proxy: Awaited<ReturnType<typeof postgresProxy>>;
      receiver: Awaited<ReturnType<typeof startReceiver>>;
      server: ServerProcess;
      create: (content: string) => Promise<Response>;
    }) => Promise<void>,
  ): Promise<void> {
    const db = await freshDatabase();
    const proxy = await postgresProxy(new URL(db.url));
    const receiver = await startReceiver();
    const env = { DATABASE_URL: proxy.url, REDIS_URL: '', WEBHOOK_ALLOW_PRIVATE: 'true' };
    let server: ServerProcess | undefined;
    try {
      const key = await createKey(env, ['--webhook', receiver.url]);
      server = await startServerProcess(env);
      const started = server;
      const create = (content: string) => postJson(started, key, { content, title: content });
      await test({ db, proxy, receiver, server, create });
    } finally {
      await server?.stop();
      proxy.close();
      receiver.server.close();
      await db.drop();
    }
  }

  const outboxCuts = [
    { text: 'into "pastes"', when: 'before', what: 'the insert cut before it reaches PostgreSQL' },
    {
      text: 'into "pastes"',
      when: 'after',
      what: "the insert's reply held back (the client's query_timeout runs out, the transaction open)",
    },
    { text: 'commit', when: 'after', what: "the commit's reply lost" },
  ] as const;
  for (const { text, when, what } of outboxCuts) {
    it(`a group of creates of a key with a webhook (outbox rows in its transaction), ${what}: sent again on another session, each create 201, stored and announced once`, () =>
      withWebhookKeyBehindProxy(async ({ db, proxy, receiver, server, create }) => {
        proxy.cutAtNext(text, when);
        const contents = Array.from({ length: 6 }, (_, i) => `announced once ${i}`);
        const sentAt = Date.now();
        const answers = await Promise.all(contents.map(create));
        if (text === 'commit' || when === 'before') assert.equal(proxy.cuts(), 1, 'the connection was cut');
        // The held reply: the session was given up on after query_timeout (STATEMENT_TIMEOUT_MS + 1 s).
        else assert.ok(Date.now() - sentAt >= 4500, `answered after ${Date.now() - sentAt} ms, not held`);
        const ids = await assertEachStoredOnce(server, db.url, answers, contents, 'announced once %');
        await until(async () => (receiver.received.length >= ids.length ? true : undefined), 15_000, 'the deliveries');
        await new Promise((resolve) => setTimeout(resolve, 1000));
        assert.deepEqual(receiver.received.map((r) => r.pasteId).sort(), [...ids].sort(), 'each announced once');
        // The same process, on a new session, creates and serves.
        const made = await create('made after');
        assert.equal(made.status, 201, await made.clone().text());
      }));
  }

  it('a group of creates of a key with a webhook whose second try is cut too: answered 503 (never 500), nothing of it stored, the next create 201', () =>
    withWebhookKeyBehindProxy(async ({ db, proxy, create }) => {
      proxy.cutAtNext('into "pastes"', 'before', 2);
      // One create, alone in its group (two groups at once could share the two cuts).
      const answer = await create('cut twice');
      assert.equal(proxy.cuts(), 2, 'the first try and the second were cut');
      assert.equal(answer.status, 503, await answer.clone().text());
      assert.equal(((await answer.json()) as { code: string }).code, 'service_unavailable');
      const stored = await queryDatabase<{ n: number }>(
        db.url,
        "SELECT count(*) AS n FROM pastes WHERE content = 'cut twice'",
      );
      assert.equal(Number(stored[0]?.n), 0, 'the refused create was stored');
      const made = await create('made after');
      assert.equal(made.status, 201, await made.clone().text());
    }));

  it('a create of a slug another paste holds, its insert cut: the second try finds a row not its own there and takes a suffixed slug', async () => {
    const db = await freshDatabase();
    const proxy = await postgresProxy(new URL(db.url));
    const env = { DATABASE_URL: proxy.url, REDIS_URL: '' };
    let server: ServerProcess | undefined;
    try {
      const key = await createKey(env);
      server = await startServerProcess(env);
      const create = (content: string) => postJson(server as ServerProcess, key, { content, slug: 'held-slug' });
      const first = await create('the first');
      assert.equal(first.status, 201, await first.clone().text());
      // The insert is a named statement already prepared on the connection: it is told by the
      // content among its values.
      proxy.cutAtNext('the second', 'before');
      const second = await create('the second');
      assert.equal(proxy.cuts(), 1, 'the insert was cut');
      assert.equal(second.status, 201, await second.clone().text());
      const { data } = (await second.json()) as { data: { paste_id: string } };
      assert.notEqual(data.paste_id, 'held-slug', 'took the other paste for its own');
      assert.match(data.paste_id, /^held-slug-/);
      assert.equal(await (await fetch(`${server.url}/raw/held-slug`)).text(), 'the first');
      assert.equal(await (await fetch(`${server.url}/raw/${data.paste_id}`)).text(), 'the second');
    } finally {
      await server?.stop();
      proxy.close();
      await db.drop();
    }
  });

  it("an error PostgreSQL answered is told from a lost connection's, five-letter errno codes (EPIPE) included", async () => {
    const client = new pg.Client({ connectionString: TEST_DB });
    await client.connect();
    try {
      const refused = await client.query('SELECT 1 / 0').catch((err: unknown) => err);
      assert.equal((refused as { code?: string }).code, '22012');
      assert.equal(answeredByServer(refused), true);
    } finally {
      await client.end();
    }
    // What a socket lost under a write gives: a code of five characters that is no SQLSTATE.
    const broken = Object.assign(new Error('write EPIPE'), { code: 'EPIPE', errno: -32, syscall: 'write' });
    assert.equal(answeredByServer(broken), false);
    assert.equal(answeredByServer(new Error('Connection terminated unexpectedly')), false);
  });

  it('a create whose connection is lost and whose second try fails too is answered 503, the process up', async () => {
    const db = await freshDatabase();
    const proxy = await postgresProxy(new URL(db.url));
    const env = { DATABASE_URL: proxy.url, REDIS_URL: '' };
    let server: ServerProcess | undefined;
    try {
      const key = await createKey(env);
      server = await startServerProcess(env);
      const create = (content: string) => postJson(server as ServerProcess, key, { content });
      // Both the insert and its second try (on a connection of its own, where the statement's
      // text is sent again) are cut before they reach PostgreSQL.
      proxy.cutAtNext('INSERT INTO pastes', 'before', 2);
      const lost = await create('lost twice');
      assert.equal(proxy.cuts(), 2, 'the insert and its second try were cut');
      assert.equal(lost.status, 503, await lost.clone().text());
      assert.equal(((await lost.json()) as { code: string }).code, 'service_unavailable');
      const stored = await queryDatabase<{ n: number }>(
        db.url,
        "SELECT count(*) AS n FROM pastes WHERE content = 'lost twice'",
      );
      assert.equal(Number(stored[0]?.n), 0);
      const made = await create('made after');
      assert.equal(made.status, 201, await made.clone().text());
    } finally {
      await server?.stop();
      proxy.close();
      await db.drop();
    }
  });

  it('PostgreSQL backends terminated again and again under creates and reads: every answer 201, 200 or 503, every 201 readable, the process up', async (t) => {
    const db = await freshDatabase();
    // The server's connections carry a name of their own, so only they are terminated.
    const name = `fp_fault_${process.pid}_${Date.now()}`;
    const url = new URL(db.url);
    url.searchParams.set('application_name', name);
    const env = { DATABASE_URL: url.toString(), REDIS_URL: '' };
    const admin = new pg.Client({ connectionString: TEST_DB });
    await admin.connect();
    let server: ServerProcess | undefined;
    try {
      const key = await createKey(env, ['--hourly', '1000000']);
      const started = await startServerProcess(env);
      server = started;
      const created: Array<{ id: string; content: string }> = [];
      const statuses = new Map<number, number>();
      const answered = (status: number) => statuses.set(status, (statuses.get(status) ?? 0) + 1);
      const refusedAsUnavailable = async (res: Response) =>
        assert.equal(((await res.json()) as { code: string }).code, 'service_unavailable');
      let stop = false;
      let terminated = 0;
      const writer = async (w: number) => {
        for (let i = 0; !stop; i++) {
          const content = `writer ${w} paste ${i} ${'x'.repeat(i % 7 === 0 ? 20_000 : 200)}`;
          const res = await fetch(`${started.url}/api/v1/paste`, {
            method: 'POST',
            headers: { 'x-api-key': key, 'content-type': 'application/json' },
            body: JSON.stringify({ content }),
          });
          answered(res.status);
          if (res.status === 201)
            created.push({ id: ((await res.json()) as { data: { paste_id: string } }).data.paste_id, content });
          else await refusedAsUnavailable(res);
        }
      };
      const reader = async () => {
        while (!stop) {
          const pick = created[Math.floor(Math.random() * created.length)];
          if (!pick) {
            await new Promise((r) => setTimeout(r, 5));
            continue;
          }
          const res = await fetch(`${started.url}/raw/${pick.id}`);
          answered(res.status);
          if (res.status === 200) assert.equal(await res.text(), pick.content);
          else await refusedAsUnavailable(res);
        }
      };
      const terminator = async () => {
        for (let round = 0; round < 15; round++) {
          await new Promise((r) => setTimeout(r, 150));
          const { rows } = await admin.query(
            'SELECT count(pg_terminate_backend(pid, 5000)) AS n FROM pg_stat_activity WHERE application_name = $1',
            [name],
          );
          terminated += Number(rows[0]?.n);
        }
        stop = true;
      };
      await Promise.all([writer(0), writer(1), writer(2), writer(3), reader(), reader(), terminator()]);
      t.diagnostic(`backends terminated ${terminated}; answers ${JSON.stringify(Object.fromEntries(statuses))}`);
      assert.equal(started.child.exitCode, null, `the process is still up: ${started.output()}`);
      assert.ok(terminated >= 15, `${terminated} backends terminated`);
      assert.deepEqual(
        [...statuses.keys()].filter((status) => ![200, 201, 503].includes(status)),
        [],
        'only 200, 201 and 503',
      );
      assert.ok((statuses.get(503) ?? 0) >= 1, 'terminations met queries in flight');
      assert.ok((statuses.get(201) ?? 0) >= 10, 'creates went on between the terminations');
      // Every 201 is there, whole, once the terminations stop.
      for (const { id, content } of created) {
        const res = await fetch(`${started.url}/raw/${id}`);
        assert.equal(res.status, 200, id);
        assert.equal(await res.text(), content);
      }
      // Every 200 of /raw counted one view, and the flushes cut by the terminations wrote each
      // once: the shutdown writes what is held.
      assert.equal(await started.stop(), 0);
      const [views] = await queryDatabase<{ n: number }>(
        db.url,
        'SELECT COALESCE(SUM(views), 0) AS n FROM paste_views',
      );
      assert.equal(Number(views?.n), (statuses.get(200) ?? 0) + created.length);
    } finally {
      await server?.stop();
      await admin.end();
      await db.drop();
    }
  });

  it('a failover to a server that takes no writes: creates 503 saying so, logged once with a count, reads and their views kept, creates again after', async () => {
    const { url, admin, schema, failover, drop } = await databaseOfItsOwnRole();
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const logged = () => lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    let server: TestServer | undefined;
    try {
      let create: (content: string) => ReturnType<typeof request>;
      let id: string;
      ({ server, create, id } = await serverWithAPaste(url, logger));

      await failover({ readOnly: true });
      const statuses: number[] = [];
      let refusedAsReadOnly = 0;
      for (let i = 0; i < 30; i++) {
        const res: Awaited<ReturnType<typeof request>> = await (i % 3 === 2
          ? request(`${server.url}/api/v1/cli`, { method: 'POST', body: `quick ${i}` })
          : create(`refused ${i}`));
        statuses.push(res.status);
        expectError(res, 503, 'service_unavailable');
        if (/takes no writes or is failing/.test(res.body.message)) {
          refusedAsReadOnly++;
          assert.equal(res.headers.get('retry-after'), '60');
        }
      }
      assert.ok(refusedAsReadOnly >= 25, `${refusedAsReadOnly} of 30 said the storage takes no writes`);
      for (let i = 0; i < 3; i++) {
        const read = await request(`${server.url}/raw/${id}`);
        assert.equal(read.status, 200, read.text);
        assert.equal(read.text, 'stored before');
      }
      await server.services.pastes.views.flush(); // refused: the counts stay pending
      const told = logged().filter((entry) => entry.msg === 'storage refuses writes');
      assert.equal(told.length, 1, 'one line while the window is open');
      assert.equal((told[0]?.err as { code?: string }).code, '25006');
      assert.ok(!logged().some((entry) => entry.msg === 'unexpected error'), 'not as a fault of ours');

      // Back to a server that takes writes.
      await failover({ readOnly: false });
      let again = await create('writable again');
      for (let i = 0; i < 5 && again.status === 503; i++) again = await create('writable again');
      assert.equal(again.status, 201, again.text);
      assert.equal((await request(`${server.url}/raw/${again.body.data.paste_id}`)).text, 'writable again');
      await server.services.pastes.views.flush();
      const [row] = await admin
        .query(`SELECT views FROM ${schema}.paste_views WHERE paste_id = $1`, [id])
        .then((r) => r.rows);
      assert.equal(Number(row?.views), 3, 'the reads while writes were refused');
      const closing = server;
      server = undefined;
      await closing.close();
      const counted = logged().find((entry) => String(entry.msg).startsWith('storage refuses writes: '));
      assert.equal(counted?.alsoFailed, refusedAsReadOnly - 1, JSON.stringify(logged()));
    } finally {
      try {
        await server?.close();
      } finally {
        await drop();
      }
    }
  });

  it('sessions left read-only once the server takes writes again are closed on their first refusal: creates come back without a restart', async (t) => {
    const { url, failover, setReadOnly, sessions, drop } = await databaseOfItsOwnRole();
    let server: TestServer | undefined;
    try {
      let create: (content: string) => ReturnType<typeof request>;
      let id: string;
      ({ server, create, id } = await serverWithAPaste(url, pino({ level: 'silent' })));

      // The pool reconnects to a server that takes no writes and opens sessions there for reads,
      // which it takes.
      await failover({ readOnly: true });
      const reads = await Promise.all(Array.from({ length: 40 }, () => request(`${server?.url}/raw/${id}`)));
      assert.ok(
        reads.every((res) => res.status === 200),
        reads.map((res) => res.status).join(),
      );
      assert.ok((await sessions()) >= 1, 'the pool has sessions open on the read-only server');

      // The server takes writes again, but the sessions open keep the read-only they began with,
      // as sessions left on a demoted primary keep answering 25006. No session is terminated.
      await setReadOnly(false);
      let refused = 0;
      let again = await create('writable again');
      while (again.status === 503 && refused < 25) {
        expectError(again, 503, 'service_unavailable');
        assert.match(again.body.message, /takes no writes/);
        refused++;
        again = await create('writable again');
      }
      assert.equal(again.status, 201, `after ${refused} refusals: ${again.text}`);
      assert.ok(refused >= 1, 'the first create met a session left read-only');
      t.diagnostic(`${refused} create(s) refused before one was stored`);
      assert.ok(refused <= 11, `${refused} refusals: at most one a session of the pool (10)`);
      for (let i = 0; i < 20; i++) {
        const res = await create(`written ${i}`);
        assert.equal(res.status, 201, res.text);
        assert.equal((await request(`${server.url}/raw/${res.body.data.paste_id}`)).text, `written ${i}`);
      }
      assert.ok((await sessions()) <= 10, 'the pool stays within its size');
    } finally {
      try {
        await server?.close();
      } finally {
        await drop();
      }
    }
  });

  it('a shutdown while the database takes no writes: every step is taken, what could not be written is logged, and the exit code is 1', async () => {
    const { url, failover, drop } = await databaseOfItsOwnRole();
    const env = { DATABASE_URL: url, REDIS_URL: '' };
    let server: ServerProcess | undefined;
    try {
      const key = await createKey(env, ['--hourly', '1000']);
      const started = await startServerProcess(env);
      server = started;
      const created = await fetch(`${started.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ content: 'read while the storage is read-only' }),
      });
      assert.equal(created.status, 201);
      const id = ((await created.json()) as { data: { paste_id: string } }).data.paste_id;
      await failover({ readOnly: true });
      for (let i = 0; i < 3; i++) {
        let read = await fetch(`${started.url}/raw/${id}`);
        if (read.status === 503) read = await fetch(`${started.url}/raw/${id}`); // met the failover
        assert.equal(read.status, 200);
        await read.text();
      }
      // Without Redis a key's quota is counted in PostgreSQL: its requests meet the refusal
      // there first, and are told the same.
      for (const keyed of [
        fetch(`${started.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } }),
        fetch(`${started.url}/api/v1/paste`, {
          method: 'POST',
          headers: { 'x-api-key': key, 'content-type': 'application/json' },
          body: JSON.stringify({ content: 'refused' }),
        }),
      ]) {
        const res = await keyed;
        assert.equal(res.status, 503);
        assert.match(((await res.json()) as { message: string }).message, /takes no writes or is failing/);
      }
      server = undefined;
      const { code, took, lines } = await stopAndRead(started);
      assert.equal(code, 1, started.output());
      assert.ok(took < 8000, `stopped in ${took} ms`);
      const views = lines.find((line) => line.msg === 'view counts not written');
      assert.deepEqual([views?.views, views?.pastes, views?.possiblyWritten], [3, 1, 0], started.output());
      assert.ok(!lines.some((line) => String(line.msg).startsWith('webhook claims')), 'no claims were held');
      assert.ok(!lines.some((line) => line.msg === 'shutdown failed'), 'no step threw');
    } finally {
      try {
        await server?.stop();
      } finally {
        await drop();
      }
    }
  });

  const hasRedisServer = (() => {
    try {
      execFileSync('which', ['redis-server'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  })();

  /** A Redis of the test's own, keeping nothing on disk; `cli` runs redis-cli against it. */
  async function ownRedis(): Promise<{ port: number; cli(...args: string[]): string; kill(): void }> {
    const port = await freePort();
    const redis = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    const cli = (...args: string[]) =>
      execFileSync('redis-cli', ['-p', String(port), ...args], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }).trim();
    try {
      await until(async () => (cli('ping') === 'PONG' ? true : undefined), 5000, 'the Redis of the test');
    } catch (err) {
      redis.kill('SIGKILL');
      throw err;
    }
    return { port, cli, kill: () => redis.kill('SIGKILL') };
  }

  /** A key's read by id, answered 200 within `ms` (asked every 100 ms); the last answer. */
  async function servedWithin(server: TestServer, key: string, id: string, ms: number) {
    const deadline = Date.now() + ms;
    for (;;) {
      const res = await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } });
      if (res.status === 200 || Date.now() > deadline) return res;
      expectError(res, 503, 'service_unavailable');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  it('a Redis that refuses the login REDIS_URL gives stops serve and the commands with one line naming it, the password not shown', {
    skip: !hasRedisServer && 'needs redis-server to run a Redis of its own',
  }, async () => {
    const redis = await ownRedis();
    try {
      redis.cli('CONFIG', 'SET', 'requirepass', 'the-right-one');
      for (const [url, refusal] of [
        [`redis://:not-the-password@127.0.0.1:${redis.port}`, /WRONGPASS/],
        [`redis://127.0.0.1:${redis.port}`, /NOAUTH/],
      ] as const) {
        for (const args of [['keys', 'list'], ['serve']]) {
          const run = await fastpaste(args, { DATABASE_URL: TEST_DB as string, REDIS_URL: url, PORT: '0' });
          const what = `${args.join(' ')} with ${url}`;
          assert.equal(run.code, 78, `${what}: exit ${run.code}: ${run.stderr}`);
          const lines = run.stderr.trim().split('\n');
          assert.equal(lines.length, 1, `${what}: ${run.stderr}`);
          assert.match(
            lines[0] as string,
            /^fastpaste: REDIS_URL \(redis:\/\/.*127\.0\.0\.1:\d+\/?\): Redis refused the login/,
            what,
          );
          assert.match(lines[0] as string, refusal, what);
          assert.ok(!run.stderr.includes('not-the-password'), `${what}: the password shown`);
        }
      }
    } finally {
      redis.kill();
    }
  });

  it("a Redis turned replica (READONLY): a key's requests 503 saying the storage takes no writes, anonymous reads go on, and the key is served again once it is a primary", {
    skip: !hasRedisServer && 'needs redis-server to run a Redis of its own',
  }, async () => {
    // A Redis of the test's own, made a replica of a primary that is not there: every write is
    // refused with READONLY, as after a failover that left the instance on the replica.
    const redis = await ownRedis();
    let server: TestServer | undefined;
    try {
      server = await startServer({ env: { REDIS_URL: `redis://127.0.0.1:${redis.port}` } });
      const key = await server.createKey({ hourly: 100_000 });
      const id = await createPaste(server, key, { content: 'stored while Redis was a primary' });
      const deadPort = await freePort();
      assert.equal(redis.cli('replicaof', '127.0.0.1', String(deadPort)), 'OK');
      const refused = await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } });
      expectError(refused, 503, 'service_unavailable');
      assert.match(refused.body.message, /takes no writes or is failing/);
      assert.equal(refused.headers.get('retry-after'), '60');
      // The client reconnects after a READONLY (the next test), at most once in
      // READONLY_RECONNECT_EVERY_MS: on a Redis that stays a replica a request meets either the
      // replica's refusal or a connection not back yet, both 503, and /readyz (a ping) is not
      // kept down by the reconnects that every refused write would make.
      let ready = 0;
      for (let i = 0; i < 20; i++) {
        const res = await request(`${server.url}/api/v1/paste`, {
          method: 'POST',
          headers: { 'x-api-key': key },
          json: { content: 'refused' },
        });
        expectError(res, 503, 'service_unavailable');
        if ((await request(`${server.url}/readyz`)).status === 200) ready++;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.ok(ready >= 16, `/readyz 200 in ${ready} of 20 polls`);
      assert.equal((await request(`${server.url}/raw/${id}`)).text, 'stored while Redis was a primary');
      assert.equal(redis.cli('replicaof', 'no', 'one'), 'OK');
      const again = await servedWithin(server, key, id, 5000);
      assert.equal(again.status, 200, again.text);
    } finally {
      try {
        await server?.close();
      } finally {
        redis.kill();
      }
    }
  });

  it('a Redis failover whose address now leads to the new primary: the connection left on the demoted one is dropped at its first READONLY, and the key is served through a new one', {
    skip: !hasRedisServer && 'needs redis-server to run a Redis of its own',
  }, async () => {
    // The address the server is given is a proxy's, as a DNS name or a cloud endpoint is: it
    // leads to the old primary, then to the new one, and keeps the connections it has.
    const old = await ownRedis();
    const promoted = await ownRedis();
    const target = new URL(`redis://127.0.0.1:${old.port}`);
    const proxy = await tcpProxy(target, 6379, (client, upstream) => {
      client.pipe(upstream);
      upstream.pipe(client);
    });
    let server: TestServer | undefined;
    try {
      server = await startServer({ env: { REDIS_URL: proxy.url } });
      const key = await server.createKey({ hourly: 100_000 });
      const id = await createPaste(server, key, { content: 'stored before the failover' });

      // The failover: the old primary is demoted, the address leads to the new one from now on.
      const deadPort = await freePort();
      assert.equal(old.cli('replicaof', '127.0.0.1', String(deadPort)), 'OK');
      target.port = String(promoted.port);
      const refused = await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } });
      expectError(refused, 503, 'service_unavailable');
      assert.match(refused.body.message, /takes no writes or is failing/);

      const served = await servedWithin(server, key, id, 5000);
      assert.equal(served.status, 200, served.text);
      assert.equal(served.body.data.content, 'stored before the failover');
      assert.ok(Number(promoted.cli('dbsize')) > 0, 'the quota is counted on the new primary');
      const create = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        json: { content: 'after the failover' },
      });
      assert.equal(create.status, 201, create.text);
    } finally {
      try {
        await server?.close();
      } finally {
        proxy.close();
        old.kill();
        promoted.kill();
      }
    }
  });

  it("SIGTERM while PostgreSQL has gone silent: one last flush, cut by its time-out, and the process is gone inside a supervisor's 10 s grace, telling what was not written", async () => {
    const db = await freshDatabase();
    let stalled = false;
    const proxy = await tcpProxy(new URL(TEST_DB as string), 5432, (client, upstream) => {
      // Silent, not refusing: bytes are taken and never passed on, connections stay open.
      client.on('data', (data: Buffer) => void (stalled || upstream.write(data)));
      upstream.on('data', (data: Buffer) => void (stalled || client.write(data)));
    });
    const url = new URL(proxy.url);
    url.search = new URL(db.url).search;
    const env = { DATABASE_URL: url.toString(), REDIS_URL: '' };
    let server: ServerProcess | undefined;
    try {
      const started = await startServerProcess(env);
      server = started;
      const created = await fetch(`${started.url}/api/v1/cli`, { method: 'POST', body: 'read before the silence' });
      assert.equal(created.status, 201);
      const id = (await created.text()).trim().split('/').pop() as string;
      // A flush of the counts before (every second) is over before the reads.
      await new Promise((resolve) => setTimeout(resolve, 1100));
      for (let i = 0; i < 3; i++) assert.equal((await fetch(`${started.url}/raw/${id}`)).status, 200);
      stalled = true;
      server = undefined;
      const { code, took, lines } = await stopAndRead(started);
      assert.ok(took < STATEMENT_TIMEOUT_MS + 4000, `stopped in ${took} ms: ${started.output()}`);
      assert.equal(code, 1, started.output());
      const views = lines.find((line) => line.msg === 'view counts not written');
      assert.equal(Number(views?.views) + Number(views?.possiblyWritten), 3, started.output());
    } finally {
      try {
        await server?.stop();
      } finally {
        proxy.close();
        await db.drop();
      }
    }
  });

  const canMakeCluster = (() => {
    try {
      execFileSync('which', ['pg_createcluster'], { stdio: 'ignore' });
      return process.getuid?.() === 0;
    } catch {
      return false;
    }
  })();

  it('PostgreSQL stopped: 503 within seconds; PostgreSQL back: served again without a restart', {
    skip: !canMakeCluster && 'needs root and pg_createcluster for a cluster of its own',
  }, async () => {
    const version = execFileSync('ls', ['/usr/lib/postgresql'], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .pop() as string;
    const name = `fpoutage${process.pid}`;
    const port = await freePort();
    const ctl = (action: string, ...more: string[]) =>
      execFileSync('pg_ctlcluster', ['--skip-systemctl-redirect', version, name, action, ...more], { stdio: 'ignore' });
    execFileSync('pg_createcluster', [version, name, '-p', String(port), '--', '--auth=trust'], { stdio: 'ignore' });
    let server: ServerProcess | undefined;
    try {
      ctl('start');
      const env = { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/postgres`, REDIS_URL: '' };
      const key = await createKey(env);
      server = await startServerProcess(env);
      const get = () => fetch(`${server?.url}/api/v1/pastes`, { headers: { 'x-api-key': key } });
      assert.equal((await get()).status, 200);

      ctl('stop', '-m', 'immediate');
      const started = Date.now();
      const down = await get();
      assert.equal(down.status, 503);
      assert.equal(((await down.json()) as { code: string }).code, 'service_unavailable');
      assert.ok(Date.now() - started < 5000, `took ${Date.now() - started} ms`);
      const again = Date.now();
      assert.equal((await get()).status, 503);
      assert.ok(Date.now() - again < 5000);
      assert.equal((await fetch(`${server.url}/readyz`)).status, 503);

      ctl('start');
      await until(async () => ((await get()).status === 200 ? true : undefined), 20_000, 'recovery');
      assert.equal((await fetch(`${server.url}/readyz`)).status, 200);
    } finally {
      await server?.stop();
      execFileSync('pg_dropcluster', [version, name, '--stop'], { stdio: 'ignore' });
    }
  });
});
