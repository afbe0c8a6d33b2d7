/**
 * Quotas and the switches around them (api-v1.md Authentication and Limits; D2, D7, D20): per-key
 * hourly, daily and monthly limits over fixed UTC calendar windows (0 = unlimited), counted
 * before any work and exactly under concurrency, in the database (surviving a restart) or in
 * Redis; the D20 headers; the anonymous quick-create limit per client address and its content
 * check; ANONYMOUS_CLI and API_ENABLED; and the administrator's `keys limits` / `keys usage`.
 *
 * Every test talks to a real server on 127.0.0.1. Time moves only with the ManualClock. The
 * Redis variants run when TEST_REDIS_URL is set (e.g. redis://127.0.0.1:6379); the other tests
 * then count in Redis too, except those that name the database store (REDIS_URL '').
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config.js';
import { AppError } from '../src/errors.js';
import { RedisCounterStore } from '../src/keys/counter-store.js';
import { KEY_CACHE_MS, type NewKeyOptions } from '../src/keys/key-service.js';
import { keySubject } from '../src/keys/quota-service.js';
import { parseCreateInput } from '../src/pastes/paste-input.js';
import { createServices } from '../src/services.js';
import { openStorage } from '../src/storage/database.js';
import { migrateToLatest } from '../src/storage/migrations.js';
import {
  encryptForTest,
  expectError,
  freePort,
  freshDatabase,
  ManualClock,
  onPostgres,
  request,
  startServer,
  type TestServer,
  type TestServerOptions,
} from './helpers.js';

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TEST_REDIS_URL = process.env.TEST_REDIS_URL?.trim() || '';

type Answer = Awaited<ReturnType<typeof request>>;

/** A server closed when the test ends, whatever happens. */
async function start(t: TestContext, options: TestServerOptions = {}): Promise<TestServer> {
  const server = await startServer(options);
  t.after(() => server.close());
  return server;
}

/**
 * Runs `body` with a fresh database (a SQLite file, or a PostgreSQL schema) for several servers or
 * processes in turn, and drops it when the test ends: the drop is added last, so it runs after
 * the `t.after` hooks that `body` added to stop them (hooks run in the order they were added).
 */
async function withDatabase(t: TestContext, body: (databaseUrl: string) => Promise<void>): Promise<void> {
  const database = await freshDatabase();
  try {
    await body(database.url);
  } finally {
    t.after(() => database.drop());
  }
}

/** A temporary directory removed when the test ends. */
function tempDir(t: TestContext, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function limits(hourly: number, daily: number, monthly: number): Partial<NewKeyOptions> {
  return { hourly, daily, monthly };
}

/** The cheapest keyed request: the caller's list. */
function listWith(server: TestServer, key: string): Promise<Answer> {
  return request(`${server.url}/api/v1/pastes`, { headers: { 'x-api-key': key } });
}

function createWith(server: TestServer, key: string, content = 'quota test paste'): Promise<Answer> {
  return request(`${server.url}/api/v1/paste`, { method: 'POST', headers: { 'x-api-key': key }, json: { content } });
}

/** An anonymous (or keyed) quick-create with a raw text body. */
function quickCreate(
  server: TestServer,
  options: { body?: BodyInit; headers?: Record<string, string> } = {},
): Promise<Answer> {
  return request(`${server.url}/api/v1/cli`, {
    method: 'POST',
    headers: { 'content-type': 'text/plain', ...options.headers },
    body: options.body ?? 'echo hello from a script\n',
  });
}

function assertStatus(answer: Answer, status: number, what: string): void {
  assert.equal(answer.status, status, `${what}: expected ${status}, got ${answer.status} ${answer.text.slice(0, 300)}`);
}

/** Seconds from `now` to `end`, computed here, independently of src/keys/quota-windows.ts. */
function secondsUntil(end: number, now: number): number {
  return Math.ceil((end - now) / 1000);
}

/** A 429 in the D7 envelope with a Retry-After of exactly `retryAfter` seconds. */
function assertRateLimited(answer: Answer, retryAfter: number, what: string): void {
  assert.equal(answer.status, 429, `${what}: expected 429, got ${answer.status} ${answer.text.slice(0, 300)}`);
  expectError(answer, 429, 'rate_limited');
  assert.deepEqual(Object.keys(answer.body).sort(), ['code', 'error', 'message'], `${what}: D7 envelope`);
  assert.equal(answer.headers.get('retry-after'), String(retryAfter), `${what}: Retry-After`);
}

/** Sends `count` requests one after another, asserting each is `status`. */
async function expectEach(count: number, send: () => Promise<Answer>, status: number, what: string): Promise<void> {
  for (let i = 1; i <= count; i++) assertStatus(await send(), status, `${what} #${i}`);
}

/** `"hourly";q=5;w=3600, "daily";...` as { hourly: { q: 5, w: 3600 }, ... }. */
function parseStructuredList(header: string | null, name: string): Record<string, Record<string, number>> {
  assert.ok(header, `${name} header missing`);
  const out: Record<string, Record<string, number>> = {};
  for (const item of header.split(',')) {
    const [label, ...params] = item.trim().split(';');
    const match = /^"([a-z]+)"$/.exec((label ?? '').trim());
    assert.ok(match?.[1], `${name}: bad item ${JSON.stringify(item)} in ${header}`);
    const entry: Record<string, number> = {};
    for (const param of params) {
      const [k, v] = param.trim().split('=');
      assert.ok(k && v !== undefined && /^\d+$/.test(v), `${name}: bad parameter ${param} in ${header}`);
      entry[k] = Number(v);
    }
    out[match[1]] = entry;
  }
  return out;
}

function headerNumber(answer: Answer, name: string): number {
  const value = answer.headers.get(name);
  assert.ok(value !== null && /^\d+$/.test(value), `${name} should be a whole number, got ${value}`);
  return Number(value);
}

async function countPastes(server: TestServer): Promise<number> {
  return Number((await server.sql<{ n: number }>('SELECT COUNT(*) AS n FROM pastes'))[0]?.n);
}

// ---------------------------------------------------------------------------------------------
// Counting, shared by both counter stores
// ---------------------------------------------------------------------------------------------

interface Store {
  name: string;
  env: Record<string, string>;
  skip: string | false;
}

const STORES: Store[] = [
  // REDIS_URL '' keeps the counters in the database even when TEST_REDIS_URL is set.
  { name: `the database (${onPostgres ? 'PostgreSQL' : 'SQLite'})`, env: { REDIS_URL: '' }, skip: false },
  {
    name: 'Redis (REDIS_URL)',
    env: TEST_REDIS_URL ? { REDIS_URL: TEST_REDIS_URL } : {},
    skip: TEST_REDIS_URL ? false : 'set TEST_REDIS_URL (e.g. redis://127.0.0.1:6379) to run the Redis variants',
  },
];

/** Waits until the server's counter store answers a read (which counts nothing). */
async function storeReady(server: TestServer): Promise<void> {
  const deadline = Date.now() + 5000;
  for (;;) {
    try {
      await server.services.quota.usage('readiness-probe', { hourly: 0, daily: 0, monthly: 0 });
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

function quotaCountingSuite(store: Store): void {
  describe(`per-key quotas counted in ${store.name}`, { skip: store.skip }, () => {
    /**
     * A server on this store, once the store answers. (A Redis connection is still opening when
     * the server starts listening; that gap is tested on its own below.)
     */
    const startOn = async (t: TestContext, options: TestServerOptions): Promise<TestServer> => {
      const server = await start(t, { ...options, env: { ...store.env, ...options.env } });
      await storeReady(server);
      return server;
    };
    const startAt = (t: TestContext, now: number) => startOn(t, { clock: new ManualClock(now) });

    if (store.env.REDIS_URL) {
      it('the first request right after the server starts is answered, not a 500', async (t) => {
        const server = await start(t, { env: store.env });
        const key = await server.createKey(limits(5, 0, 0));
        const first = await listWith(server, key);
        assertStatus(first, 200, 'first request after start');
        assert.equal(first.headers.get('ratelimit-remaining'), '4');
      });
    }

    it('hourly N: requests 1..N answer 200, N+1 is 429 rate_limited (D7) with Retry-After to the hour end', async (t) => {
      const now = Date.UTC(2026, 0, 15, 12, 20, 0);
      const server = await startAt(t, now);
      const key = await server.createKey(limits(5, 0, 0));
      await expectEach(5, () => listWith(server, key), 200, 'within the hourly limit');
      const refused = await listWith(server, key);
      assertRateLimited(refused, secondsUntil(Date.UTC(2026, 0, 15, 13), now), 'request 6 of hourly 5');
      assert.equal(headerNumber(refused, 'ratelimit-remaining'), 0);
      // And it stays refused for the rest of the hour.
      server.clock.advance(30 * MINUTE);
      assertRateLimited(await listWith(server, key), 10 * 60, 'later in the same hour');
    });

    it('hourly N: the count starts again at the top of the hour, and the headers of the new hour say so', async (t) => {
      const now = Date.UTC(2026, 0, 15, 12, 59, 0);
      const server = await startAt(t, now);
      const key = await server.createKey(limits(3, 10, 0));
      await expectEach(2, () => listWith(server, key), 200, 'the last minute of the hour');
      server.clock.advance(61 * SECOND);
      const next = await listWith(server, key);
      assertStatus(next, 200, 'first request of the next hour');
      assert.equal(next.headers.get('ratelimit'), '"hourly";r=2;t=3599, "daily";r=7;t=39599');
      assert.equal(next.headers.get('ratelimit-policy'), '"hourly";q=3;w=3600, "daily";q=10;w=86400');
      await expectEach(2, () => listWith(server, key), 200, 'the rest of the new hour');
      assertRateLimited(await listWith(server, key), 3599, 'request 4 of the new hour');
    });

    it('daily N alone: N+1 is the first 429, Retry-After to midnight UTC', async (t) => {
      const now = Date.UTC(2026, 0, 15, 18, 0, 0);
      const server = await startAt(t, now);
      const key = await server.createKey(limits(0, 4, 0));
      await expectEach(4, () => listWith(server, key), 200, 'within the daily limit');
      assertRateLimited(await listWith(server, key), secondsUntil(Date.UTC(2026, 0, 16), now), 'request 5 of daily 4');
    });

    it('monthly N alone: N+1 is the first 429, Retry-After to the first of the next month', async (t) => {
      const now = Date.UTC(2026, 1, 20, 6, 30, 0); // February 2026 has 28 days
      const server = await startAt(t, now);
      const key = await server.createKey(limits(0, 0, 3));
      await expectEach(3, () => listWith(server, key), 200, 'within the monthly limit');
      assertRateLimited(await listWith(server, key), secondsUntil(Date.UTC(2026, 2, 1), now), 'request 4 of monthly 3');
    });

    it('when several windows are used up, Retry-After waits for the last of them to end', async (t) => {
      const now = Date.UTC(2026, 0, 15, 12, 0, 0);
      const server = await startAt(t, now);
      const key = await server.createKey(limits(1, 1, 0));
      assertStatus(await listWith(server, key), 200, 'first request');
      // Both the hour and the day are used up: only midnight frees the key.
      assertRateLimited(await listWith(server, key), secondsUntil(Date.UTC(2026, 0, 16), now), 'second request');
    });

    it('Retry-After waits for a window the refused request itself filled: after it the key passes', async (t) => {
      const now = Date.UTC(2026, 0, 15, 12, 0, 0);
      const server = await startAt(t, now);
      const key = await server.createKey(limits(1, 2, 0));
      assertStatus(await listWith(server, key), 200, 'first request');
      // The hour is past its limit; this 429 is counted too (D20) and fills the day (2 of 2).
      const midnight = secondsUntil(Date.UTC(2026, 0, 16), now);
      const refused = await listWith(server, key);
      assertRateLimited(refused, midnight, 'second request');
      assert.equal(refused.headers.get('ratelimit-reset'), String(midnight), 'RateLimit-Reset agrees');
      server.clock.advance(midnight * SECOND);
      assertStatus(await listWith(server, key), 200, 'after Retry-After');
    });

    it('30 concurrent creates against hourly 10: exactly 10 succeed, 20 are 429, 10 pastes exist', async (t) => {
      const server = await startAt(t, Date.UTC(2026, 0, 15, 12, 0, 0));
      const key = await server.createKey(limits(10, 0, 0));
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) => createWith(server, key, `concurrent ${i}`)),
      );
      const statuses = answers.map((a) => a.status);
      assert.equal(statuses.filter((s) => s === 201).length, 10, `statuses: ${statuses.join(' ')}`);
      assert.equal(statuses.filter((s) => s === 429).length, 20, `statuses: ${statuses.join(' ')}`);
      assert.equal(await countPastes(server), 10);
      // The remaining counts handed out are 9..0, each once.
      const remaining = answers
        .filter((a) => a.status === 201)
        .map((a) => headerNumber(a, 'ratelimit-remaining'))
        .sort((a, b) => a - b);
      assert.deepEqual(remaining, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    });

    it('two instances sharing the store: 30 concurrent requests split across both, exactly 10 pass', {
      // One process owns an SQLite file (its counts are written behind); instances share
      // PostgreSQL or Redis (README, Running at scale).
      skip: store.name.includes('SQLite') && 'an SQLite file is owned by one process',
    }, async (t) => {
      const clock = new ManualClock(Date.UTC(2026, 0, 15, 12, 0, 0));
      await withDatabase(t, async (databaseUrl) => {
        const first = await startOn(t, { clock, databaseUrl });
        const second = await startOn(t, { clock, databaseUrl });
        const key = await first.createKey(limits(0, 10, 0));
        const answers = await Promise.all(
          Array.from({ length: 30 }, (_, i) => listWith(i % 2 === 0 ? first : second, key)),
        );
        const statuses = answers.map((a) => a.status);
        assert.equal(statuses.filter((s) => s === 200).length, 10, `statuses: ${statuses.join(' ')}`);
        assert.equal(statuses.filter((s) => s === 429).length, 20, `statuses: ${statuses.join(' ')}`);
      });
    });

    it('hourly rolls over at the hour: used up from 10:00 to 10:59:59, free again at 11:00:00', async (t) => {
      const server = await startAt(t, Date.UTC(2026, 4, 6, 10, 0, 0));
      const key = await server.createKey(limits(2, 0, 0));
      assertStatus(await listWith(server, key), 200, '10:00:00');
      server.clock.now = Date.UTC(2026, 4, 6, 10, 59, 59);
      assertStatus(await listWith(server, key), 200, '10:59:59 (second of two)');
      // No reset inside the window, however long after its first request.
      assertRateLimited(await listWith(server, key), 1, '10:59:59 (third)');
      server.clock.now = Date.UTC(2026, 4, 6, 11, 0, 0);
      const next = await listWith(server, key);
      assertStatus(next, 200, '11:00:00');
      assert.equal(headerNumber(next, 'ratelimit-remaining'), 1, 'a fresh hour, one request used');
      assertStatus(await listWith(server, key), 200, '11:00:00 second');
      assertRateLimited(await listWith(server, key), 3600, '11:00:00 third');
    });

    it('a read by id over the quota stays refused, and is served again at the top of the hour or once the limit is raised', async (t) => {
      // The fast lane remembers a refused key and leaves its reads by id to the routes, which count
      // before reading: the memory must never refuse what a count would pass. Refused at 10:30:00.4,
      // it is kept until 11:00:00.4 (Retry-After in whole seconds): at 11:00:00 still held.
      const server = await startAt(t, Date.UTC(2026, 4, 6, 10, 30, 0, 400));
      const key = await server.createKey(limits(2, 0, 0));
      const created = await createWith(server, key, 'read by id over the quota');
      assertStatus(created, 201, 'create (1 of 2)');
      const id = created.body.data.paste_id as string;
      const read = () => request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } });
      assertStatus(await read(), 200, 'read (2 of 2)');
      for (let i = 0; i < 3; i++) assertRateLimited(await read(), 30 * 60, `read over the limit, try ${i + 1}`);
      const subject = keySubject((await server.services.keys.find(key))?.id as string);
      assert.equal(server.services.quota.knownRefused(subject), true, 'remembered as refused');
      server.clock.now = Date.UTC(2026, 4, 6, 11, 0, 0);
      assert.equal(server.services.quota.knownRefused(subject), true, 'still remembered at 11:00:00');
      const next = await read();
      assertStatus(next, 200, 'the next hour');
      assert.equal(server.services.quota.knownRefused(subject), false, 'forgotten once a count passed');
      assert.equal(next.body.data.content, 'read by id over the quota');
      assertStatus(await read(), 200, 'the next hour, second');
      assertRateLimited(await read(), 3600, 'the next hour, third');
      await server.services.keys.setLimits(key, { hourly: 5 });
      // The refused third counted (D20: every authenticated request): two more pass.
      for (let i = 0; i < 2; i++) assertStatus(await read(), 200, `raised to 5, read ${i + 4}`);
      assertRateLimited(await read(), 3600, 'raised to 5, read 6');
    });

    it('a request refused with 429 counts in every window (D20: every authenticated request)', async (t) => {
      const server = await startAt(t, Date.UTC(2026, 4, 6, 10, 0, 0));
      const key = await server.createKey(limits(1, 3, 0));
      assertStatus(await listWith(server, key), 200, '10:00 (hour 1 of 1, day 1 of 3)');
      assertRateLimited(await listWith(server, key), 3600, '10:00 again (day 2 of 3)');
      // This refusal fills the day: Retry-After waits for midnight, as the request at 11:00 shows.
      assertRateLimited(await listWith(server, key), 14 * 3600, '10:00 once more (day 3 of 3)');
      server.clock.now = Date.UTC(2026, 4, 6, 11, 0, 0);
      // A fresh hour, but the day's three are spent: refused until midnight.
      assertRateLimited(await listWith(server, key), 13 * 3600, '11:00 (day 4 of 3)');
    });

    it('daily rolls over at midnight UTC: used up at 23:59:59, free again at 00:00:00', async (t) => {
      const server = await startAt(t, Date.UTC(2026, 2, 10, 0, 0, 0));
      const key = await server.createKey(limits(0, 2, 0));
      assertStatus(await listWith(server, key), 200, '00:00:00');
      server.clock.now = Date.UTC(2026, 2, 10, 13, 0, 0);
      assertStatus(await listWith(server, key), 200, '13:00:00');
      server.clock.now = Date.UTC(2026, 2, 10, 23, 59, 59);
      assertRateLimited(await listWith(server, key), 1, '23:59:59');
      server.clock.now = Date.UTC(2026, 2, 11, 0, 0, 0);
      assertStatus(await listWith(server, key), 200, 'next day 00:00:00');
      assertStatus(await listWith(server, key), 200, 'next day second');
      assertRateLimited(await listWith(server, key), 86_400, 'next day third');
    });

    it('monthly rolls over from December 31 23:59:59 to January 1 00:00:00 of the next year', async (t) => {
      const server = await startAt(t, Date.UTC(2026, 11, 1, 0, 0, 0));
      const key = await server.createKey(limits(0, 0, 2));
      assertStatus(await listWith(server, key), 200, 'December 1');
      server.clock.now = Date.UTC(2026, 11, 31, 23, 59, 58);
      assertStatus(await listWith(server, key), 200, 'December 31 23:59:58');
      server.clock.now = Date.UTC(2026, 11, 31, 23, 59, 59);
      assertRateLimited(await listWith(server, key), 1, 'December 31 23:59:59');
      server.clock.now = Date.UTC(2027, 0, 1, 0, 0, 0);
      const next = await listWith(server, key);
      assertStatus(next, 200, 'January 1 2027 00:00:00');
      assert.equal(headerNumber(next, 'ratelimit-remaining'), 1);
      assertStatus(await listWith(server, key), 200, 'January 1 second');
      assertRateLimited(await listWith(server, key), 31 * 86_400, 'January 1 third');
    });

    it('all three windows roll over together at the new year', async (t) => {
      const server = await startAt(t, Date.UTC(2026, 11, 31, 23, 59, 59));
      const key = await server.createKey(limits(1, 1, 1));
      assertStatus(await listWith(server, key), 200, 'December 31 23:59:59');
      assertRateLimited(await listWith(server, key), 1, 'December 31 23:59:59 again');
      server.clock.now = Date.UTC(2027, 0, 1, 0, 0, 0);
      assertStatus(await listWith(server, key), 200, 'January 1 00:00:00');
    });
  });
}

for (const store of STORES) quotaCountingSuite(store);

// ---------------------------------------------------------------------------------------------
// Headers, 0 = unlimited, what counts and what does not (the default store: Redis with TEST_REDIS_URL)
// ---------------------------------------------------------------------------------------------

describe('quota rules', () => {
  it('keyed answers (200 and a 404 after auth) carry the D20 headers; remaining counts down, reset by the clock', async (t) => {
    const now = Date.UTC(2026, 0, 15, 12, 15, 30);
    const server = await start(t, { clock: new ManualClock(now) });
    const key = await server.createKey(limits(5, 100, 1000));
    const toHour = secondsUntil(Date.UTC(2026, 0, 15, 13), now);
    const toDay = secondsUntil(Date.UTC(2026, 0, 16), now);
    const toMonth = secondsUntil(Date.UTC(2026, 1, 1), now);

    const first = await listWith(server, key);
    assertStatus(first, 200, 'first');
    // The hour is nearest to running out (4 left against 99 and 999).
    assert.equal(first.headers.get('ratelimit-limit'), '5');
    assert.equal(first.headers.get('ratelimit-remaining'), '4');
    assert.equal(first.headers.get('ratelimit-reset'), String(toHour));
    const policy = parseStructuredList(first.headers.get('ratelimit-policy'), 'RateLimit-Policy');
    assert.deepEqual(Object.keys(policy).sort(), ['daily', 'hourly', 'monthly']);
    assert.deepEqual(policy.hourly, { q: 5, w: 3600 });
    assert.deepEqual(policy.daily, { q: 100, w: 86_400 });
    assert.equal(policy.monthly?.q, 1000);
    const monthW = policy.monthly?.w ?? 0;
    assert.ok(monthW >= 28 * 86_400 && monthW <= 31 * 86_400, `monthly w=${monthW}`);
    const state = parseStructuredList(first.headers.get('ratelimit'), 'RateLimit');
    assert.deepEqual(state, {
      hourly: { r: 4, t: toHour },
      daily: { r: 99, t: toDay },
      monthly: { r: 999, t: toMonth },
    });

    // A 404 after authentication is a keyed answer too, and it counts.
    server.clock.advance(100 * SECOND);
    const missing = await request(`${server.url}/api/v1/paste/NoSuchPaste`, { headers: { 'x-api-key': key } });
    expectError(missing, 404, 'not_found');
    assert.equal(missing.headers.get('ratelimit-limit'), '5');
    assert.equal(missing.headers.get('ratelimit-remaining'), '3');
    assert.equal(missing.headers.get('ratelimit-reset'), String(toHour - 100));
    assert.deepEqual(parseStructuredList(missing.headers.get('ratelimit'), 'RateLimit'), {
      hourly: { r: 3, t: toHour - 100 },
      daily: { r: 98, t: toDay - 100 },
      monthly: { r: 998, t: toMonth - 100 },
    });
    assert.ok(missing.headers.get('ratelimit-policy'), 'RateLimit-Policy on the 404');

    const third = await createWith(server, key);
    assertStatus(third, 201, 'a create');
    assert.equal(third.headers.get('ratelimit-remaining'), '2');
  });

  it('RateLimit-Limit/Remaining/Reset follow the window nearest to running out (here the day)', async (t) => {
    const now = Date.UTC(2026, 0, 15, 20, 0, 0);
    const server = await start(t, { clock: new ManualClock(now) });
    const key = await server.createKey(limits(5, 2, 0));
    const first = await listWith(server, key);
    assertStatus(first, 200, 'first');
    assert.equal(first.headers.get('ratelimit-limit'), '2');
    assert.equal(first.headers.get('ratelimit-remaining'), '1');
    assert.equal(first.headers.get('ratelimit-reset'), String(secondsUntil(Date.UTC(2026, 0, 16), now)));
    const state = parseStructuredList(first.headers.get('ratelimit'), 'RateLimit');
    assert.deepEqual(state.hourly, { r: 4, t: 3600 });
    assert.deepEqual(state.daily, { r: 1, t: 4 * 3600 });
  });

  it('of windows with as few left, RateLimit-Reset names the one that ends last (it holds the key longest)', async (t) => {
    const now = Date.UTC(2026, 0, 15, 20, 0, 0);
    const server = await start(t, { clock: new ManualClock(now) });
    const key = await server.createKey(limits(2, 2, 0));
    const first = await listWith(server, key);
    assertStatus(first, 200, 'first');
    assert.equal(first.headers.get('ratelimit-remaining'), '1');
    // An hour on, the hour's count starts again but the day's does not: 1 left until midnight.
    assert.equal(first.headers.get('ratelimit-reset'), String(secondsUntil(Date.UTC(2026, 0, 16), now)));
  });

  it('0 means unlimited for all three: 50 requests with 0/0/0 all pass', async (t) => {
    const server = await start(t);
    const key = await server.createKey(limits(0, 0, 0));
    const answers = await Promise.all(Array.from({ length: 50 }, () => listWith(server, key)));
    assert.deepEqual(
      answers.map((a) => a.status),
      Array(50).fill(200),
    );
  });

  it('0 for one window leaves the others in force (hourly 0 + daily 3; hourly 0 + daily 0 + monthly 3)', async (t) => {
    const server = await start(t);
    const daily = await server.createKey(limits(0, 3, 0));
    await expectEach(3, () => listWith(server, daily), 200, 'daily key');
    assertRateLimited(await listWith(server, daily), 12 * 3600, 'daily key, 4th');

    const monthly = await server.createKey(limits(0, 0, 3));
    await expectEach(3, () => listWith(server, monthly), 200, 'monthly key');
    const left = secondsUntil(Date.UTC(2026, 1, 1), server.clock.now);
    assertRateLimited(await listWith(server, monthly), left, 'monthly key, 4th');

    const hourlyUnlimited = await server.createKey(limits(0, 20, 20));
    await expectEach(15, () => listWith(server, hourlyUnlimited), 200, 'hourly 0 with daily/monthly 20');
  });

  it('401 and 403 count against nothing: a key refused while deactivated still has its whole budget', async (t) => {
    const server = await start(t);
    const key = await server.createKey(limits(2, 0, 0));
    // 401: no key at all.
    for (let i = 0; i < 3; i++) expectError(await request(`${server.url}/api/v1/pastes`), 401, 'api_key_missing');
    // 403: deactivated.
    await server.services.keys.setActive(key, false);
    for (let i = 0; i < 5; i++) expectError(await listWith(server, key), 403, 'api_key_invalid');
    for (let i = 0; i < 2; i++) {
      expectError(
        await request(`${server.url}/api/v1/paste`, {
          method: 'POST',
          headers: { 'x-api-key': key },
          json: { content: 'refused' },
        }),
        403,
        'api_key_invalid',
      );
    }
    await server.services.keys.setActive(key, true);
    await expectEach(2, () => listWith(server, key), 200, 'after re-activation');
    assertRateLimited(await listWith(server, key), 3600, 'third after re-activation');
  });

  it('a 403 for a bad key on /api/v1/cli does not count against the anonymous address', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '2' } });
    const good = await server.createKey();
    const unknown = `${good.slice(0, -4)}AAAA`;
    for (const bad of ['not-a-key', unknown]) {
      for (let i = 0; i < 3; i++) {
        expectError(await quickCreate(server, { headers: { 'x-api-key': bad } }), 403, 'api_key_invalid');
      }
    }
    await expectEach(2, () => quickCreate(server), 201, 'anonymous after the 403s');
    assertRateLimited(await quickCreate(server), 3600, 'third anonymous');
  });

  it("a 403 decided after the count (another key's paste, a paste behind a password) gives its count back", async (t) => {
    const server = await start(t);
    const owner = await server.createKey();
    const create = async (json: Record<string, unknown>) => {
      const created = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': owner },
        json,
      });
      assertStatus(created, 201, 'create');
      return created.body.data.paste_id as string;
    };
    const plain = await create({ content: 'plain' });
    const locked = await create({ content: 'locked', password: 'hunter22' });
    const other = await server.createKey(limits(2, 4, 0));
    const refusals: Array<[string, RequestInit & { method: string }, string]> = [
      [`/api/v1/paste/${plain}`, { method: 'PUT', body: JSON.stringify({ title: 'mine now' }) }, 'forbidden'],
      [`/api/v1/paste/${plain}`, { method: 'DELETE' }, 'forbidden'],
      [`/api/v1/paste/${locked}`, { method: 'GET' }, 'password_protected'],
    ];
    for (let round = 0; round < 2; round++) {
      for (const [path, init, code] of refusals) {
        const headers: Record<string, string> = { 'x-api-key': other };
        if (init.body) headers['content-type'] = 'application/json';
        const answer = await request(`${server.url}${path}`, { ...init, headers } as Parameters<typeof request>[1]);
        expectError(answer, 403, code);
        // The answer's headers tell the budget without it: nothing used.
        assert.equal(answer.headers.get('ratelimit-remaining'), '2', `${init.method} ${path}`);
        assert.match(answer.headers.get('ratelimit') ?? '', /"hourly";r=2;.*"daily";r=4;/);
      }
    }
    const read = () => request(`${server.url}/api/v1/paste/${plain}`, { headers: { 'x-api-key': other } });
    await expectEach(2, read, 200, 'reads after six 403s');
    assertRateLimited(await read(), 3600, 'third read');
  });

  it('key A used up leaves key B untouched', async (t) => {
    const server = await start(t);
    const a = await server.createKey({ name: 'A', ...limits(2, 0, 0) });
    const b = await server.createKey({ name: 'B', ...limits(2, 0, 0) });
    await expectEach(2, () => listWith(server, a), 200, 'key A');
    assertRateLimited(await listWith(server, a), 3600, 'key A third');
    const first = await listWith(server, b);
    assertStatus(first, 200, 'key B first');
    assert.equal(first.headers.get('ratelimit-remaining'), '1');
    assertStatus(await listWith(server, b), 200, 'key B second');
    assertRateLimited(await listWith(server, b), 3600, 'key B third');
  });

  it('limits survive a restart on the same database', async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 5, 1, 9, 0, 0));
    // The counters in the database itself, not in Redis.
    const env = { REDIS_URL: '' };
    await withDatabase(t, async (databaseUrl) => {
      const before = await startServer({ clock, databaseUrl, env });
      let key: string;
      try {
        key = await before.createKey(limits(5, 0, 0));
        await expectEach(3, () => listWith(before, key), 200, 'before the restart');
      } finally {
        await before.close();
      }
      const after = await start(t, { clock, databaseUrl, env });
      const next = await listWith(after, key);
      assertStatus(next, 200, 'request 4 after the restart');
      assert.equal(next.headers.get('ratelimit-remaining'), '1', 'the count went on from 3');
      assertStatus(await listWith(after, key), 200, 'request 5');
      assertRateLimited(await listWith(after, key), 3600, 'request 6 after the restart');
    });
  });

  it('the quota is checked before any work: an over-limit create stores nothing, and is 429 even with a bad body', async (t) => {
    const server = await start(t);
    const key = await server.createKey(limits(1, 0, 0));
    assertStatus(await createWith(server, key, 'the one allowed paste'), 201, 'first create');
    assert.equal(await countPastes(server), 1);
    assertRateLimited(await createWith(server, key, 'a valid but over-limit paste'), 3600, 'second create');
    assert.equal(await countPastes(server), 1, 'the refused create stored a paste');
    // The body is never read: malformed JSON is not even noticed.
    const malformed = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: '{"content": ',
    });
    assertRateLimited(malformed, 3600, 'malformed over-limit create');
    // Nor are quick-create's body and content check.
    const quick = await quickCreate(server, { headers: { 'x-api-key': key }, body: Buffer.from([0, 1, 2, 3]) });
    assertRateLimited(quick, 3600, 'over-limit keyed quick-create');
    assert.equal(await countPastes(server), 1);
  });
});

// ---------------------------------------------------------------------------------------------
// Anonymous quick-create: the per-address limit
// ---------------------------------------------------------------------------------------------

describe('anonymous quick-create limit (ANON_HOURLY_LIMIT, TRUST_PROXY)', () => {
  const fromAddress = (server: TestServer, address: string) =>
    quickCreate(server, { headers: { 'x-forwarded-for': address } });

  it('ANON_HOURLY_LIMIT=3: the 4th anonymous create from one address is 429, the next hour it passes', async (t) => {
    const server = await start(t, {
      env: { ANON_HOURLY_LIMIT: '3' },
      clock: new ManualClock(Date.UTC(2026, 0, 15, 12, 40)),
    });
    await expectEach(3, () => quickCreate(server), 201, 'anonymous');
    assertRateLimited(await quickCreate(server), 20 * 60, 'anonymous 4th');
    assert.equal(await countPastes(server), 3);
    server.clock.now = Date.UTC(2026, 0, 15, 13, 0, 0);
    assertStatus(await quickCreate(server), 201, 'anonymous in the next hour');
  });

  it('with TRUST_PROXY=true each X-Forwarded-For address has its own budget', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '3', TRUST_PROXY: 'true' } });
    await expectEach(3, () => fromAddress(server, '203.0.113.10'), 201, '203.0.113.10');
    assertRateLimited(await fromAddress(server, '203.0.113.10'), 3600, '203.0.113.10 4th');
    await expectEach(3, () => fromAddress(server, '203.0.113.11'), 201, '203.0.113.11');
    assertRateLimited(await fromAddress(server, '203.0.113.11'), 3600, '203.0.113.11 4th');
    // The connection's own address (127.0.0.1) is yet another budget.
    assertStatus(await quickCreate(server), 201, 'no X-Forwarded-For');
  });

  it('with TRUST_PROXY=true an address a proxy sent with its port counts without it; one that is no address shares one budget', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '2', TRUST_PROXY: 'true' } });
    // A new source port for every connection: the same client.
    await expectEach(
      2,
      () => fromAddress(server, `203.0.113.40:${40000 + Math.floor(Math.random() * 1000)}`),
      201,
      'v4',
    );
    assertRateLimited(await fromAddress(server, '203.0.113.40:51234'), 3600, 'v4 on another port');
    assertRateLimited(await fromAddress(server, '203.0.113.40'), 3600, 'v4 without a port');
    await expectEach(2, () => fromAddress(server, '[2001:db8:1:2::5]:443'), 201, 'v6');
    assertRateLimited(await fromAddress(server, '[2001:db8:1:2::6]:444'), 3600, 'v6, the same /64, another port');
    await expectEach(2, () => fromAddress(server, 'unknown'), 201, 'not an address');
    assertRateLimited(await fromAddress(server, 'junk-that-changes-1'), 3600, 'another that is not one');
  });

  it('with TRUST_PROXY=true the address the proxy appended counts: entries a client puts before it buy nothing', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '2', TRUST_PROXY: 'true' } });
    // The proxy appends the address it saw (203.0.113.20) to whatever the client sent.
    await expectEach(2, () => fromAddress(server, '198.51.100.1, 203.0.113.20'), 201, 'first two');
    assertRateLimited(await fromAddress(server, '198.51.100.2, 203.0.113.20'), 3600, 'a new made-up address first');
    assertRateLimited(await fromAddress(server, '203.0.113.20'), 3600, 'the address alone');
    assertStatus(await fromAddress(server, '203.0.113.20, 203.0.113.21'), 201, 'another client of the proxy');
  });

  it('with TRUST_PROXY=2 (two proxies) the entry the outer proxy appended counts', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '1', TRUST_PROXY: '2' } });
    assertStatus(await fromAddress(server, '192.0.2.1, 203.0.113.30, 10.0.0.7'), 201, 'first');
    assertRateLimited(
      await fromAddress(server, '192.0.2.2, 203.0.113.30, 10.0.0.8'),
      3600,
      'same client, other inner hop',
    );
    assertStatus(await fromAddress(server, '192.0.2.1, 203.0.113.31, 10.0.0.7'), 201, 'another client');
  });

  it("with TRUST_PROXY as the proxies' addresses, X-Forwarded-For is believed from them only, up to the first entry no proxy of the list appended", async (t) => {
    // The tests connect from 127.0.0.1: a listed proxy here.
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '1', TRUST_PROXY: 'loopback, 203.0.113.0/24' } });
    // 203.0.113.40 is a proxy of the list too: the client is the address it saw (198.51.100.1).
    assertStatus(await fromAddress(server, '198.51.100.1, 203.0.113.40'), 201, 'through two proxies');
    assertRateLimited(await fromAddress(server, '198.51.100.1'), 3600, 'same client through one');
    // An entry left of a client's own address is the client's say: it buys nothing.
    assertRateLimited(await fromAddress(server, '192.0.2.9, 198.51.100.1, 203.0.113.41'), 3600, 'made-up entry');
    assertStatus(await fromAddress(server, '198.51.100.2, 203.0.113.40'), 201, 'another client');

    // A peer that is not a listed proxy is the client, whatever X-Forwarded-For says.
    const direct = await start(t, { env: { ANON_HOURLY_LIMIT: '2', TRUST_PROXY: '10.0.0.0/8,::ffff:10.0.0.1' } });
    assertStatus(await fromAddress(direct, '198.51.100.1'), 201, 'first');
    assertStatus(await fromAddress(direct, '198.51.100.2'), 201, 'second');
    assertRateLimited(await quickCreate(direct), 3600, 'third, without the header: the same 127.0.0.1');
  });

  it('without TRUST_PROXY, X-Forwarded-For is ignored: every request counts as 127.0.0.1', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '3' } });
    assertStatus(await fromAddress(server, '198.51.100.1'), 201, 'first');
    assertStatus(await fromAddress(server, '198.51.100.2'), 201, 'second');
    assertStatus(await quickCreate(server), 201, 'third');
    assertRateLimited(await fromAddress(server, '198.51.100.3'), 3600, 'fourth, from a "new" address');
  });

  it('IPv6 clients are counted per /64: the same /64 shares a budget, another /64 does not', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '2', TRUST_PROXY: 'true' } });
    assertStatus(await fromAddress(server, '2001:db8:aa:1::1'), 201, 'first in 2001:db8:aa:1::/64');
    assertStatus(await fromAddress(server, '2001:db8:aa:1:ffff:ffff:ffff:fffe'), 201, 'second in the /64');
    // Same /64 written out in full.
    assertRateLimited(
      await fromAddress(server, '2001:0db8:00aa:0001:0000:0000:0000:0042'),
      3600,
      'third in the /64 (other spelling)',
    );
    await expectEach(2, () => fromAddress(server, '2001:db8:aa:2::1'), 201, 'the neighbouring /64');
    assertRateLimited(await fromAddress(server, '2001:db8:aa:2::99'), 3600, 'the neighbouring /64, third');
  });

  it('an IPv4-mapped IPv6 address (::ffff:1.2.3.4) counts as the IPv4 address', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '2', TRUST_PROXY: 'true' } });
    assertStatus(await fromAddress(server, '1.2.3.4'), 201, '1.2.3.4');
    assertStatus(await fromAddress(server, '::ffff:1.2.3.4'), 201, '::ffff:1.2.3.4');
    assertRateLimited(await fromAddress(server, '1.2.3.4'), 3600, '1.2.3.4 third');
    assertRateLimited(await fromAddress(server, '::ffff:1.2.3.4'), 3600, '::ffff:1.2.3.4 third');
    // And it is not lumped together with other mapped addresses.
    assertStatus(await fromAddress(server, '::ffff:1.2.3.5'), 201, '::ffff:1.2.3.5');
  });

  it('a keyed request to /api/v1/cli counts against the key, not the address', async (t) => {
    const server = await start(t, { env: { ANON_HOURLY_LIMIT: '1' } });
    const key = await server.createKey(limits(3, 0, 0));
    const keyed = () => quickCreate(server, { headers: { 'x-api-key': key } });
    await expectEach(3, keyed, 201, 'keyed quick-create');
    assertRateLimited(await keyed(), 3600, 'keyed quick-create 4th');
    // The address's own budget of 1 is untouched by the three keyed creates.
    assertStatus(await quickCreate(server), 201, 'anonymous after the keyed ones');
    assertRateLimited(await quickCreate(server), 3600, 'anonymous second');
    // And the key's count includes its quick-creates: the list is refused too.
    assertRateLimited(await listWith(server, key), 3600, 'keyed list after 3 keyed quick-creates');
  });
});

// ---------------------------------------------------------------------------------------------
// Anonymous quick-create: the content check
// ---------------------------------------------------------------------------------------------

describe('anonymous content check (400 content_rejected)', () => {
  const BLOCKLIST = [
    '# Patterns refused in anonymous pastes, one regular expression a line.',
    '# this line is a comment',
    '',
    'buy\\s+cheap\\s+pills',
    '  ^casino-bonus-[0-9]+$  ',
    '',
  ].join('\n');

  const SPAM = Array.from({ length: 10 }, (_, i) => `https://spam${i}.example.com/offer?id=${i}`).join('\n');

  async function checkedServer(t: TestContext): Promise<TestServer> {
    const dir = tempDir(t, 'fastpaste-blocklist-');
    const file = join(dir, 'blocklist.txt');
    writeFileSync(file, BLOCKLIST);
    return start(t, { env: { CONTENT_BLOCKLIST_FILE: file, ANON_HOURLY_LIMIT: '1000' } });
  }

  it('binary data is refused: NUL bytes, invalid UTF-8, NUL in a form field', async (t) => {
    const server = await checkedServer(t);
    const nul = await quickCreate(server, {
      headers: { 'content-type': 'application/octet-stream' },
      body: Buffer.from('hello\u0000world, this is binary'),
    });
    expectError(nul, 400, 'content_rejected');
    const badUtf8 = await quickCreate(server, {
      body: Buffer.from([0x68, 0x65, 0x6c, 0x6c, 0x6f, 0xff, 0xfe, 0xc3, 0x28, 0x21]),
    });
    expectError(badUtf8, 400, 'content_rejected');
    const elf = await quickCreate(server, {
      headers: { 'content-type': 'application/octet-stream' },
      body: Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x3e, 0x00]),
    });
    expectError(elf, 400, 'content_rejected');
    const form = await request(`${server.url}/api/v1/cli`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'content=hello%00world%00binary',
    });
    expectError(form, 400, 'content_rejected');
    // The home page's form alike.
    const page = await request(`${server.url}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: 'content=hello%00world%00binary',
    });
    expectError(page, 400, 'content_rejected');
    assert.equal(await countPastes(server), 0);
  });

  it("text is not taken for binary data: a U+FFFD sent as UTF-8, a terminal's colours (ESC)", async (t) => {
    const server = await checkedServer(t);
    for (const body of [
      'caf\u00e9 \ufffd au lait, as a log wrote it\n',
      '\u001b[31mred\u001b[0m \u001b[1;32mgreen\u001b[0m\n',
    ]) {
      const created = await quickCreate(server, { body });
      assertStatus(created, 201, JSON.stringify(body));
      const id = (created.text.trim().split('/').at(-1) as string).trim();
      assert.equal((await request(`${server.url}/raw/${id}`)).text, body);
    }
    // Mostly control characters is still binary, U+FFFD among them.
    const controls = '\u0001\u0002\u0003\ufffd\u0004\u0005'.repeat(20);
    expectError(await quickCreate(server, { body: `text ${controls}` }), 400, 'content_rejected');
  });

  it('content matching an administrator pattern is refused, case-insensitively; comment lines are not patterns', async (t) => {
    const server = await checkedServer(t);
    expectError(await quickCreate(server, { body: 'Hello!\nBUY   Cheap\tPILLS here\n' }), 400, 'content_rejected');
    expectError(await quickCreate(server, { body: 'buy cheap pills' }), 400, 'content_rejected');
    expectError(await quickCreate(server, { body: 'CASINO-BONUS-42' }), 400, 'content_rejected');
    assert.equal(await countPastes(server), 0);
    // Near misses and the comment lines themselves pass.
    assertStatus(await quickCreate(server, { body: 'buy cheap bread, not pills' }), 201, 'near miss');
    assertStatus(await quickCreate(server, { body: '# this line is a comment\nhello' }), 201, 'comment text');
    assertStatus(await quickCreate(server, { body: 'casino-bonus-42 in the middle of a line' }), 201, 'anchored');
  });

  it("an anonymous paste's title is held to the same rules: quick-create's title, the home page's form, an E2E paste's too", async (t) => {
    const server = await checkedServer(t);
    const blocked = 'BUY cheap  pills';
    const cli = await request(`${server.url}/api/v1/cli?title=${encodeURIComponent(blocked)}`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'an innocent text',
    });
    expectError(cli, 400, 'content_rejected');
    assert.match(cli.text, /The title was refused/);
    const form = (fields: Record<string, string>, key?: string) =>
      request(`${server.url}/`, {
        method: 'POST',
        headers: {
          accept: 'application/json',
          'content-type': 'application/x-www-form-urlencoded',
          ...(key ? { 'x-api-key': key } : {}),
        },
        body: new URLSearchParams(fields).toString(),
      });
    expectError(await form({ content: 'an innocent text', title: blocked, public: 'true' }), 400, 'content_rejected');
    const { wire } = await encryptForTest('whatever the ciphertext hides');
    expectError(
      await form({ content: wire, encrypt: 'true', title: blocked, public: 'true' }),
      400,
      'content_rejected',
    );
    assert.equal(await countPastes(server), 0);
    // A title that passes, and the same title with a key, are taken.
    assertStatus(await form({ content: wire, encrypt: 'true', title: 'cheap bread' }), 201, 'a fine title');
    const key = await server.createKey();
    assertStatus(await form({ content: 'an innocent text', title: blocked }, key), 201, 'keyed');
    assert.equal(await countPastes(server), 2);
  });

  it('link spam (mostly URLs) is refused, while text with one or two links passes', async (t) => {
    const server = await checkedServer(t);
    expectError(await quickCreate(server, { body: SPAM }), 400, 'content_rejected');
    expectError(
      await request(`${server.url}/api/v1/cli`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ content: SPAM }).toString(),
      }),
      400,
      'content_rejected',
    );
    assert.equal(await countPastes(server), 0);
    const prose = [
      'The build failed again this morning; the log is at https://ci.example.com/builds/1234 and the',
      'fix I tried is described in https://github.com/example/project/pull/99 if anyone wants to look.',
      'I think the cache is stale, so clearing it before the next run should be enough.',
    ].join('\n');
    assertStatus(await quickCreate(server, { body: prose }), 201, 'prose with two links');
    assertStatus(await quickCreate(server, { body: 'see https://example.com/docs' }), 201, 'one link');
  });

  it('keyed quick-creates are not checked: the same spam and pattern are accepted with a key', async (t) => {
    const server = await checkedServer(t);
    const key = await server.createKey();
    const keyed = (body: string) => quickCreate(server, { headers: { 'x-api-key': key }, body });
    assertStatus(await keyed(SPAM), 201, 'keyed link spam');
    assertStatus(await keyed('buy cheap pills'), 201, 'keyed blocked pattern');
    expectError(await quickCreate(server, { body: SPAM }), 400, 'content_rejected');
  });

  it('a CONTENT_BLOCKLIST_FILE that does not exist stops the configuration, naming the variable', () => {
    const missing = join(tmpdir(), `fastpaste-no-such-blocklist-${process.pid}-${Date.now()}.txt`);
    assert.throws(() => loadConfig({ CONTENT_BLOCKLIST_FILE: missing }), /CONTENT_BLOCKLIST_FILE/);
  });

  it('bad values of the new settings stop the configuration, naming the variable (D2)', () => {
    const cases: Array<[string, string]> = [
      ['ANON_HOURLY_LIMIT', 'many'],
      ['ANON_HOURLY_LIMIT', '-1'],
      ['TRUST_PROXY', 'sometimes'],
      ['TRUST_PROXY', '11'],
      ['API_ENABLED', 'maybe'],
      ['ANONYMOUS_CLI', 'perhaps'],
      ['REDIS_URL', 'http://127.0.0.1:6379'],
      // Words a plain object holds are no yes/no word.
      ['API_ENABLED', 'constructor'],
      ['ANONYMOUS_CLI', '__proto__'],
      ['TRUST_PROXY', 'constructor'],
      // Not a list of proxies' addresses.
      ['TRUST_PROXY', 'proxy.example.com'],
      ['TRUST_PROXY', '10.0.0.1,'],
      ['TRUST_PROXY', '10.0.0.0/33'],
      ['TRUST_PROXY', '10.0.0.1 10.0.0.2'],
      ['TRUST_PROXY', '300.0.0.1'],
      // Forms ipaddr.js reads as other addresses: 0.0.0.11, 127.0.0.1, 8.0.0.1.
      ['TRUST_PROXY', '11,12'],
      ['TRUST_PROXY', '127.1'],
      ['TRUST_PROXY', '010.0.0.1'],
      ['TRUST_PROXY', '10.0.0.0/8,0x7f000001'],
      // Typos the URL parser would mend: no // or no host.
      ['REDIS_URL', 'redis:cache:6379'],
      ['REDIS_URL', 'redis:/:pw@cache:6379'],
      ['BASE_URL', 'http:/paste.example.com'],
      ['BASE_URL', 'https:paste.example.com'],
      ['HOST', 'not a host'],
      ['HOST', 'http://0.0.0.0'],
    ];
    for (const [name, value] of cases) {
      assert.throws(() => loadConfig({ [name]: value }), new RegExp(name), `${name}=${value}`);
    }
    // libpq's socket form (credentials, no host) is a PostgreSQL URL pg reads.
    const socket = 'postgres://fastpaste:pw@/fastpaste?host=/var/run/postgresql';
    assert.equal(loadConfig({ DATABASE_URL: socket }).databaseUrl, socket);
    // Settings are trimmed: a trailing space in BASE_URL would be in every address given out.
    assert.equal(loadConfig({ BASE_URL: ' https://paste.example.com/ \n' }).baseUrl, 'https://paste.example.com');
    const defaults = loadConfig({});
    assert.equal(defaults.apiEnabled, true);
    assert.equal(defaults.anonymousCli, true);
    assert.equal(defaults.anonHourlyLimit, 30);
    assert.equal(defaults.trustProxy, 0);
    assert.equal(loadConfig({ TRUST_PROXY: 'true' }).trustProxy, 1);
    assert.equal(loadConfig({ TRUST_PROXY: '2' }).trustProxy, 2);
    assert.equal(loadConfig({ TRUST_PROXY: 'false' }).trustProxy, 0);
    assert.deepEqual(loadConfig({ TRUST_PROXY: ' 10.0.0.0/8, ::1,Loopback ' }).trustProxy, [
      '10.0.0.0/8',
      '::1',
      'loopback',
    ]);
    assert.equal(defaults.redisUrl, null);
    // ioredis's socket form has no host.
    assert.equal(
      loadConfig({ REDIS_URL: 'redis:///?path=/run/redis.sock' }).redisUrl,
      'redis:///?path=/run/redis.sock',
    );
    for (const redis of ['rediss://cache.example', 'redis://:pw@cache:6379/0', 'redis://[::1]:6379']) {
      assert.equal(loadConfig({ REDIS_URL: redis }).redisUrl, redis);
    }
    for (const host of [
      '0.0.0.0',
      '::',
      '::1',
      'fe80::1%eth0',
      'localhost',
      'paste-1.internal',
      'my_host',
      '10.0.0.7',
    ]) {
      assert.equal(loadConfig({ HOST: host }).host, host);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// The switches
// ---------------------------------------------------------------------------------------------

describe('ANONYMOUS_CLI and API_ENABLED', () => {
  it('ANONYMOUS_CLI=false: a keyless quick-create is 401 api_key_missing, a keyed one works', async (t) => {
    const server = await start(t, { env: { ANONYMOUS_CLI: 'false' } });
    expectError(await quickCreate(server), 401, 'api_key_missing');
    expectError(
      await request(`${server.url}/api/v1/cli`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'content=hello+there',
      }),
      401,
      'api_key_missing',
    );
    assert.equal(await countPastes(server), 0);
    const key = await server.createKey();
    assertStatus(await quickCreate(server, { headers: { 'x-api-key': key } }), 201, 'keyed quick-create');
    assert.equal(await countPastes(server), 1);
  });

  it('API_ENABLED=false: every /api/v1 request is 503 api_disabled, with or without a key; /raw and /view answer', async (t) => {
    const server = await start(t, { env: { API_ENABLED: 'false' } });
    const key = await server.createKey(limits(100, 0, 0));
    const created = await server.services.pastes.create(parseCreateInput({ content: 'still readable' }, 'json'), {
      owner: null,
      source: 'api',
      ip: '127.0.0.1',
    });
    const id = created.paste.id;
    const routes: Array<{ method: string; path: string; json?: unknown; body?: string; type?: string }> = [
      { method: 'GET', path: `/api/v1/paste/${id}` },
      { method: 'GET', path: `/api/v1/paste/${id}/raw` },
      { method: 'POST', path: '/api/v1/paste', json: { content: 'new paste' } },
      { method: 'PUT', path: `/api/v1/paste/${id}`, json: { title: 'x' } },
      { method: 'DELETE', path: `/api/v1/paste/${id}` },
      { method: 'GET', path: '/api/v1/pastes' },
      { method: 'POST', path: '/api/v1/cli', body: 'quick create', type: 'text/plain' },
      { method: 'GET', path: '/api/v1/cli' },
      { method: 'GET', path: '/api/v1/no-such-route' },
    ];
    for (const route of routes) {
      for (const headers of [{}, { 'x-api-key': key }] as Array<Record<string, string>>) {
        const answer = await request(`${server.url}${route.path}`, {
          method: route.method,
          headers: { ...headers, ...(route.type ? { 'content-type': route.type } : {}) },
          ...(route.json !== undefined ? { json: route.json } : {}),
          ...(route.body !== undefined ? { body: route.body } : {}),
        });
        const what = `${route.method} ${route.path} ${headers['x-api-key'] ? 'with' : 'without'} a key`;
        assert.equal(answer.status, 503, `${what}: got ${answer.status} ${answer.text.slice(0, 200)}`);
        expectError(answer, 503, 'api_disabled');
      }
    }
    // Nothing was done: the paste is intact, no paste was added, the key used nothing.
    assert.equal(await countPastes(server), 1);
    const raw = await request(`${server.url}/raw/${id}`);
    assertStatus(raw, 200, '/raw');
    assert.equal(raw.text, 'still readable');
    const view = await request(`${server.url}/view/${id}`, { headers: { accept: 'text/html' } });
    assertStatus(view, 200, '/view');
    assert.ok(view.text.includes('still readable'), 'the view page shows the paste');
    const usage = await server.services.quota.usage(`key:${(await server.services.keys.find(key))?.id}`, {
      hourly: 100,
      daily: 0,
      monthly: 0,
    });
    assert.equal(usage.find((w) => w.kind === 'hourly')?.used, 0, 'a 503 counted against the key');
  });

  it('API_ENABLED=false cannot be bypassed with a percent-encoded spelling of an /api/v1 path', async (t) => {
    const server = await start(t, { env: { API_ENABLED: 'false' } });
    const key = await server.createKey();
    // The router decodes the path, so these reach the API routes; the switch must catch them too.
    const attempts: Array<{ method: string; path: string; headers: Record<string, string> }> = [
      { method: 'GET', path: '/api/v1/%70astes', headers: { 'x-api-key': key } },
      { method: 'GET', path: '/api/%761/pastes', headers: { 'x-api-key': key } },
      { method: 'GET', path: '/%61pi/v1/pastes', headers: { 'x-api-key': key } },
      { method: 'POST', path: '/%61pi/v1/cli', headers: { 'content-type': 'text/plain' } },
    ];
    const reached: string[] = [];
    for (const attempt of attempts) {
      const answer = await request(`${server.url}${attempt.path}`, {
        method: attempt.method,
        headers: attempt.headers,
        ...(attempt.method === 'POST' ? { body: 'made while the API is off' } : {}),
      });
      if (answer.status < 400) reached.push(`${attempt.method} ${attempt.path} -> ${answer.status}`);
    }
    assert.deepEqual(reached, [], 'requests that reached the disabled API');
    assert.equal(await countPastes(server), 0, 'a paste was created while the API is disabled');
  });
});

// ---------------------------------------------------------------------------------------------
// The administrator's commands through the real binary
// ---------------------------------------------------------------------------------------------

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
  'CONTENT_BLOCKLIST_FILE',
  'WEBHOOK_ALLOW_PRIVATE',
  'SWEEP_INTERVAL_SECONDS',
  'LOG_LEVEL',
  'NODE_TEST_CONTEXT',
  'NODE_OPTIONS',
];

function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of SETTINGS) delete env[name];
  return { ...env, LOG_LEVEL: 'silent', ...extra };
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

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

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

/** `node bin/fastpaste.js serve` on a free port; resolves once /healthz answers. Stopped at test end. */
async function serveProcess(t: TestContext, env: Record<string, string>): Promise<string> {
  const port = await freePort();
  const child = spawn(process.execPath, ['bin/fastpaste.js', 'serve'], {
    cwd: ROOT,
    env: childEnv({ HOST: '127.0.0.1', PORT: String(port), ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.after(() => stopChild(child));
  let output = '';
  const collect = (chunk: Buffer) => {
    if (output.length < 50_000) output += chunk.toString('utf8');
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`serve exited ${child.exitCode}: ${output}`);
    try {
      if ((await fetch(`${url}/healthz`)).status === 200) return url;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`serve did not answer within 20 s: ${output}`);
}

describe('fastpaste keys limits / keys usage', () => {
  it('limits set by the tool are enforced by a running server, and usage shows used and left per window', async (t) => {
    // Stay clear of an hour boundary, which would reset the hourly count mid-test.
    const toNextHour = HOUR - (Date.now() % HOUR);
    if (toNextHour < 20 * SECOND) await new Promise((resolve) => setTimeout(resolve, toNextHour + SECOND));

    await withDatabase(t, async (databaseUrl) => {
      // The server and the tool share the counters: in the database, or in Redis with TEST_REDIS_URL.
      const env = { DATABASE_URL: databaseUrl, ...(TEST_REDIS_URL ? { REDIS_URL: TEST_REDIS_URL } : {}) };
      const created = await fastpaste(['keys', 'create', '--name', 'x', '--json'], env);
      assertOk(created, 'keys create');
      const key = JSON.parse(created.stdout.trim()).key as string;

      const set = await fastpaste(['keys', 'limits', key, '--hourly', '2', '--daily', '5'], env);
      assertOk(set, 'keys limits');
      assert.match(set.stdout, /hourly 2/);
      assert.match(set.stdout, /daily 5/);

      const url = await serveProcess(t, env);
      const list = () => request(`${url}/api/v1/pastes`, { headers: { 'x-api-key': key } });
      await expectEach(2, list, 200, 'requests within the limit');

      const usage = await fastpaste(['keys', 'usage', key, '--json'], env);
      assertOk(usage, 'keys usage');
      const windows = JSON.parse(usage.stdout.trim()) as Array<Record<string, unknown>>;
      const byKind = Object.fromEntries(windows.map((w) => [w.window, w]));
      assert.deepEqual(Object.keys(byKind).sort(), ['daily', 'hourly', 'monthly']);
      assert.equal(byKind.hourly?.limit, 2);
      assert.equal(byKind.hourly?.used, 2);
      assert.equal(byKind.hourly?.remaining, 0);
      assert.equal(byKind.daily?.limit, 5);
      assert.equal(byKind.daily?.used, 2);
      assert.equal(byKind.daily?.remaining, 3);
      assert.equal(byKind.monthly?.limit, 0);
      assert.equal(byKind.monthly?.remaining, null, 'an unlimited window has no remaining count');
      assert.equal(byKind.monthly?.used, null, 'an unlimited window is not counted: it has no used count');

      const human = await fastpaste(['keys', 'usage', key], env);
      assertOk(human, 'keys usage (text)');
      assert.match(human.stdout, /hourly\s+used 2, 0 left of 2/);
      assert.match(human.stdout, /daily\s+used 2, 3 left of 5/);
      assert.match(human.stdout, /monthly\s+unlimited, not counted/);

      // The server reads the limits of a key it looked up more than KEY_CACHE_MS ago: used up now,
      // raised by the tool, free again once that second has passed.
      const refused = await list();
      expectError(refused, 429, 'rate_limited');
      assert.ok(refused.headers.get('retry-after'), 'Retry-After on the 429');
      assertOk(await fastpaste(['keys', 'limits', key, '--hourly', '10'], env), 'keys limits (raise)');
      await new Promise((resolve) => setTimeout(resolve, KEY_CACHE_MS + 50));
      assertStatus(await list(), 200, 'after raising the hourly limit');
    });
  });

  it('keys limits and keys usage on an unknown key exit non-zero', async (t) => {
    await withDatabase(t, async (databaseUrl) => {
      const env = { DATABASE_URL: databaseUrl };
      const limitsRun = await fastpaste(['keys', 'limits', 'k_000000000000', '--hourly', '2'], env);
      assert.notEqual(limitsRun.code, 0, `keys limits on an unknown key exited 0: ${limitsRun.stdout}`);
      assert.match(limitsRun.stderr, /k_000000000000/);
      const usageRun = await fastpaste(['keys', 'usage', 'k_000000000000'], env);
      assert.notEqual(usageRun.code, 0, `keys usage on an unknown key exited 0: ${usageRun.stdout}`);
      const badNumber = await fastpaste(['keys', 'limits', 'k_000000000000', '--hourly', 'lots'], env);
      assert.notEqual(badNumber.code, 0, 'a non-numeric limit was accepted');
    });
  });
});

describe('Redis counters: the windows of a request in one script run', {
  skip: process.env.TEST_REDIS_URL ? false : 'needs TEST_REDIS_URL',
}, () => {
  const prefix = `test-${process.pid}-${Date.now()}`;
  const key = (name: string) => `${prefix}:${name}`;
  const stored = (name: string) => `fastpaste:q:${key(name)}`;
  let redis: Redis;
  let store: RedisCounterStore;

  before(async () => {
    // As the server makes its client (services.ts): pipelined, failing fast.
    redis = new Redis(process.env.TEST_REDIS_URL as string, {
      enableAutoPipelining: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      lazyConnect: true,
    });
    await redis.connect();
    store = new RedisCounterStore(redis);
  });

  after(async () => {
    const keys = await redis.keys(`fastpaste:q:${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  });

  it("moves the limiter's own counters, one each, each made with its time to live", async () => {
    assert.equal(await store.increment(key('a'), 100), 1); // through RateLimiterRedis
    const counted = await store.incrementAll([
      { key: key('a'), ttlSeconds: 100 },
      { key: key('b'), ttlSeconds: 200 },
      { key: key('c'), ttlSeconds: 300 },
    ]);
    assert.deepEqual(counted, [2, 1, 1]);
    assert.equal(await store.increment(key('b'), 200), 2);
    assert.equal(await store.read(key('c')), 1);
    const ttls = await Promise.all(['a', 'b', 'c'].map((name) => redis.ttl(stored(name))));
    assert.ok((ttls[0] as number) > 90 && (ttls[0] as number) <= 100, `a: ${ttls[0]}`);
    assert.ok((ttls[1] as number) > 190 && (ttls[1] as number) <= 200, `b: ${ttls[1]}`);
    assert.ok((ttls[2] as number) > 290 && (ttls[2] as number) <= 300, `c: ${ttls[2]}`);
    await store.decrement(key('c'), 300);
    assert.equal(await store.read(key('c')), 0);
  });

  it('hands out every count once to 200 concurrent runs', async () => {
    const runs = await Promise.all(
      Array.from({ length: 200 }, () =>
        store.incrementAll([
          { key: key('x'), ttlSeconds: 60 },
          { key: key('y'), ttlSeconds: 60 },
        ]),
      ),
    );
    const expected = Array.from({ length: 200 }, (_, i) => i + 1);
    assert.deepEqual(
      runs.map((run) => run[0]).sort((p, q) => (p as number) - (q as number)),
      expected,
    );
    assert.deepEqual(
      runs.map((run) => run[1]).sort((p, q) => (p as number) - (q as number)),
      expected,
    );
  });

  it('counts the runs of one turn on the same counters in one script run, each its own count in order', async () => {
    // Counts the script's runs on the real client, passing each through to Redis (with
    // auto-pipelining ioredis calls the same function again on its pipeline: not counted).
    const client = redis as unknown as { fastpasteIncrementAll: (...args: unknown[]) => Promise<number[]> };
    const real = client.fastpasteIncrementAll;
    const calls: unknown[][] = [];
    client.fastpasteIncrementAll = function (this: unknown, ...args: unknown[]) {
      if (this === redis) calls.push(args);
      return real.apply(this, args);
    };
    try {
      const pq = [
        { key: key('p'), ttlSeconds: 60 },
        { key: key('q'), ttlSeconds: 90 },
      ];
      const first = await Promise.all([
        ...Array.from({ length: 50 }, () => store.incrementAll(pq)),
        ...Array.from({ length: 10 }, () => store.incrementAll([{ key: key('r'), ttlSeconds: 60 }])),
      ]);
      assert.equal(calls.length, 2, 'one script run for each set of counters');
      assert.deepEqual(
        first.slice(0, 50),
        Array.from({ length: 50 }, (_, i) => [i + 1, i + 1]),
      );
      assert.deepEqual(
        first.slice(50),
        Array.from({ length: 10 }, (_, i) => [i + 1]),
      );
      // The next turn counts on from there, and the counters keep their times to live.
      assert.deepEqual(await store.incrementAll(pq), [51, 51]);
      assert.equal(calls.length, 3);
      const ttl = await redis.ttl(stored('q'));
      assert.ok(ttl > 80 && ttl <= 90, `q: ${ttl}`);
      assert.equal(await store.read(key('p')), 51);
    } finally {
      client.fastpasteIncrementAll = real;
    }
  });

  it('fails every run of a group whose script run fails, and only that group, with 503', async () => {
    // A counter that holds a list: Redis refuses INCRBY on it, so the group's one run fails.
    await redis.rpush(stored('listed'), 'x');
    const failing = [
      { key: key('fine'), ttlSeconds: 60 },
      { key: key('listed'), ttlSeconds: 60 },
    ];
    const results = await Promise.allSettled([
      ...Array.from({ length: 5 }, () => store.incrementAll(failing)),
      ...Array.from({ length: 3 }, () => store.incrementAll([{ key: key('other'), ttlSeconds: 60 }])),
    ]);
    for (const result of results.slice(0, 5)) {
      assert.equal(result.status, 'rejected');
      const err = (result as PromiseRejectedResult).reason;
      assert.ok(err instanceof AppError && err.code === 'service_unavailable', String(err));
    }
    assert.deepEqual(
      results.slice(5).map((result) => (result as PromiseFulfilledResult<number[]>).value),
      [[1], [2], [3]],
    );
  });

  it('gives a counter that lost its time to live one again', async () => {
    await redis.set(stored('kept'), 5);
    assert.deepEqual(await store.incrementAll([{ key: key('kept'), ttlSeconds: 50 }]), [6]);
    const ttl = await redis.ttl(stored('kept'));
    assert.ok(ttl > 40 && ttl <= 50, `ttl ${ttl}`);
  });

  it('fails at once with 503 service_unavailable while Redis is not connected', async () => {
    const down = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
    });
    down.on('error', () => {});
    try {
      const unconnected = new RedisCounterStore(down);
      await assert.rejects(
        unconnected.incrementAll([{ key: key('z'), ttlSeconds: 5 }]),
        (err) => err instanceof AppError && err.code === 'service_unavailable',
      );
    } finally {
      down.disconnect();
    }
  });
});

describe('expired quota counters on SQLite', { skip: onPostgres ? 'SQLite only' : false }, () => {
  it('are deleted on a timer that outlives a database refusing writes (a failed clean-up is no unhandled rejection)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fastpaste-counters-'));
    const storage = openStorage(`sqlite:${join(dir, 'counters.db')}`);
    await migrateToLatest(storage);
    const services = await createServices(storage, { counterClearEveryMs: 50 });
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => rejections.push(reason);
    process.on('unhandledRejection', onRejection);
    const sqlite = storage.sqlite as import('better-sqlite3').Database;
    const insert = sqlite.prepare('INSERT INTO rate_limit_counters (key, points, expire) VALUES (?, 1, ?)');
    const left = () =>
      (sqlite.prepare('SELECT key FROM rate_limit_counters ORDER BY key').all() as Array<{ key: string }>).map(
        (row) => row.key,
      );
    const until = async (done: () => boolean, what: string) => {
      for (const started = Date.now(); !done(); await new Promise((resolve) => setTimeout(resolve, 20))) {
        assert.ok(Date.now() - started < 5000, `${what} within 5 s: ${left().join(', ')}`);
      }
    };
    try {
      // The limiter's own clean-up timer is off: its failed DELETE would be a rejection nothing catches.
      const store = (services.quota as unknown as { counters: { durable: { limiter: object } } }).counters.durable;
      assert.equal((store.limiter as { _clearExpiredTimeoutId?: unknown })._clearExpiredTimeoutId, undefined);
      insert.run('q:two hours past', Date.now() - 2 * HOUR);
      insert.run('q:live', Date.now() + HOUR);
      await until(() => !left().includes('q:two hours past'), 'an expired counter deleted');
      // The next expired counter, and the file refusing writes before any turn of the timer.
      insert.run('q:past while refused', Date.now() - 2 * HOUR);
      sqlite.pragma('query_only = ON');
      await new Promise((resolve) => setTimeout(resolve, 400));
      assert.deepEqual(rejections, []);
      assert.ok(left().includes('q:past while refused'));
      sqlite.pragma('query_only = OFF');
      await until(() => !left().includes('q:past while refused'), 'the clean-up going on once writable');
      assert.deepEqual(left(), ['q:live']);
    } finally {
      process.off('unhandledRejection', onRejection);
      await services.close();
      await storage.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('quota counters in PostgreSQL: a window that fails to count', {
  skip: onPostgres ? false : 'PostgreSQL only: there each window is counted by a statement of its own',
}, () => {
  it("counts a window past 2^31 - 1 (integer's limit): a request over the limit is 429, not 503", async (t) => {
    const server = await start(t, { env: { REDIS_URL: '' } });
    await storeReady(server);
    const key = await server.createKey({ hourly: 100, daily: 100, monthly: 100 });
    const list = () => request(`${server.url}/api/v1/pastes?page=%31`, { headers: { 'x-api-key': key } });
    assert.equal((await list()).status, 200);
    // Requests go on being counted past the limit (D20): a month of a client retrying at once.
    await server.sql('UPDATE rate_limit_counters SET points = 2147483647');
    const over = await list();
    assert.equal(over.status, 429, over.text);
    const points = await server.sql<{ points: number }>('SELECT points FROM rate_limit_counters');
    assert.deepEqual(
      points.map((row) => Number(row.points)),
      [2147483648, 2147483648, 2147483648],
    );
  });

  it('leaves the other windows uncounted too: the request is 503 and counted in none', async (t) => {
    const server = await start(t, { env: { REDIS_URL: '' } });
    await storeReady(server);
    const key = await server.createKey({ hourly: 100, daily: 100, monthly: 100 });
    const list = () => request(`${server.url}/api/v1/pastes?page=%31`, { headers: { 'x-api-key': key } });
    const points = async () =>
      Object.fromEntries(
        (await server.sql<{ key: string; points: number }>('SELECT key, points FROM rate_limit_counters')).map(
          (row) => [row.key.split(':').at(-2), Number(row.points)],
        ),
      );
    assert.equal((await list()).status, 200);
    assert.deepEqual(await points(), { hourly: 1, daily: 1, monthly: 1 });
    // The day's counter refuses to pass 1, as a lock wait or a statement time-out would refuse it.
    await server.sql(
      "ALTER TABLE rate_limit_counters ADD CONSTRAINT day_held CHECK (key NOT LIKE '%:daily:%' OR points < 2)",
    );
    expectError(await list(), 503, 'service_unavailable');
    assert.deepEqual(await points(), { hourly: 1, daily: 1, monthly: 1 });
    await server.sql('ALTER TABLE rate_limit_counters DROP CONSTRAINT day_held');
    assert.equal((await list()).status, 200);
    assert.deepEqual(await points(), { hourly: 2, daily: 2, monthly: 2 });

    // A 403 counts against nothing (D20): its count is taken back. The day's counter now refuses
    // to go down: the request stays counted in every window, not in the day's alone.
    const other = await server.createKey({ name: 'owner of the paste' });
    const created = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': other },
      json: { content: 'not yours' },
    });
    assert.equal(created.status, 201, created.text);
    const othersPut = () =>
      request(`${server.url}/api/v1/paste/${created.body.data.paste_id}`, {
        method: 'PUT',
        headers: { 'x-api-key': key },
        json: { content: 'mine now?' },
      });
    expectError(await othersPut(), 403, 'forbidden');
    assert.deepEqual(await points(), { hourly: 2, daily: 2, monthly: 2 }, 'a 403 given back');
    await server.sql(`CREATE FUNCTION day_only_up() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
      IF NEW.key LIKE '%:daily:%' AND NEW.points < OLD.points THEN RAISE EXCEPTION 'held by the test'; END IF;
      RETURN NEW; END $$`);
    await server.sql(
      'CREATE TRIGGER day_only_up BEFORE UPDATE ON rate_limit_counters FOR EACH ROW EXECUTE FUNCTION day_only_up()',
    );
    expectError(await othersPut(), 403, 'forbidden');
    // Given back after the answer: wait for the counts to settle.
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(await points(), { hourly: 3, daily: 3, monthly: 3 });
  });
});
