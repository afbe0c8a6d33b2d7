/**
 * Paste-created webhooks (api-v1.md Events; D4, D10, D19, D21): the body exactly as the Events
 * table, Standard Webhooks headers and signature (checked with the standardwebhooks package and
 * with the known test vector), the outbox written in the paste's transaction, delivery at least
 * once with the same webhook-id on every attempt, growing back-off, Retry-After, 410, the time-out,
 * redirects not followed, at most a few KB of the answer read, bounded concurrency, paste creation
 * never slowed by a receiver, durability across SIGKILL, the address guard at set time and at
 * connection time, and the administrator's `keys webhook / deliveries / redeliver`.
 *
 * Every receiver listens on 127.0.0.1; no request leaves the machine. Servers run on the system
 * clock because the worker waits on real timers (it polls every second and is woken on commit).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { loadConfig } from '../src/config.js';
import { openStorage } from '../src/storage/database.js';
import { migrateToLatest } from '../src/storage/migrations.js';
import { WebhookRepository } from '../src/storage/webhook-repository.js';
import { lookupTurns, refusingLookup } from '../src/webhooks/address-guard.js';
import { DeliveryWorker, PRUNE_BATCH } from '../src/webhooks/delivery-worker.js';
import { MAX_ATTEMPTS, retryDelayMs } from '../src/webhooks/retry-schedule.js';
import { encryptForTest, freePort, freshDatabase, request, startServer, type TestServer } from './helpers.js';
import { startServerProcess } from './server-process.js';

const SECOND = 1000;
const HOUR = 3_600_000;
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TIMESTAMP = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/;

/**
 * These tests read and write the SQLite file behind the server (better-sqlite3); on a PostgreSQL
 * run (TEST_DATABASE_URL) they are skipped.
 */
const SQLITE_ONLY = { skip: process.env.TEST_DATABASE_URL ? 'reads the SQLite file directly' : false };

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// Clean-up: one stack per test, run last-in first-out (receivers close before the server, so the
// worker's in-flight attempts end at once instead of waiting for their time-out).
// ---------------------------------------------------------------------------------------------

type Cleanup = () => unknown;
const stacks = new WeakMap<TestContext, Cleanup[]>();

function defer(t: TestContext, fn: Cleanup): void {
  let stack = stacks.get(t);
  if (!stack) {
    const created: Cleanup[] = [];
    stacks.set(t, created);
    t.after(async () => {
      while (created.length > 0) {
        const next = created.pop() as Cleanup;
        try {
          await next();
        } catch (err) {
          console.error('clean-up failed:', err);
        }
      }
    });
    stack = created;
  }
  stack.push(fn);
}

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'fastpaste-webhooks-'));
  defer(t, () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Settings for tests: receivers are on 127.0.0.1, back-off short. */
const TEST_ENV = { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_RETRY_BASE_MS: '50', WEBHOOK_TIMEOUT_MS: '2000' };

async function start(t: TestContext, env: Record<string, string> = {}): Promise<TestServer> {
  const server = await startServer({ clock: 'system', env: { ...TEST_ENV, ...env } });
  defer(t, () => server.close());
  return server;
}

async function waitUntil(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}

// ---------------------------------------------------------------------------------------------
// A receiver on 127.0.0.1 that records every request
// ---------------------------------------------------------------------------------------------

interface Received {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** When the whole request body had arrived. */
  at: number;
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, received: Received, index: number) => void;

const answer200: Handler = (_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('ok');
};

/** A receiver that answers 200 `ms` after the request. */
const answer200After =
  (ms: number): Handler =>
  (_req, res) => {
    setTimeout(() => {
      res.writeHead(200);
      res.end('ok');
    }, ms);
  };

interface Receiver {
  port: number;
  url: string;
  received: Received[];
  /** Requests whose answer has not finished yet, and the most ever at once. */
  open: number;
  maxOpen: number;
  handler: Handler;
  waitFor(count: number, timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

async function startReceiver(t: TestContext, handler: Handler = answer200, port = 0): Promise<Receiver> {
  const receiver: Receiver = {
    port: 0,
    url: '',
    received: [],
    open: 0,
    maxOpen: 0,
    handler,
    async waitFor(count, timeoutMs) {
      await waitUntil(() => receiver.received.length >= count, timeoutMs, `${count} request(s) at the receiver`);
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = http.createServer((req, res) => {
    receiver.open++;
    receiver.maxOpen = Math.max(receiver.maxOpen, receiver.open);
    res.once('close', () => {
      receiver.open--;
    });
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const received: Received = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        at: Date.now(),
      };
      const index = receiver.received.push(received) - 1;
      receiver.handler(req, res, received, index);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  receiver.port = (server.address() as AddressInfo).port;
  receiver.url = `http://127.0.0.1:${receiver.port}/`;
  defer(t, () => receiver.close());
  return receiver;
}

function header(received: Received, name: string): string {
  const value = received.headers[name];
  assert.equal(typeof value, 'string', `header ${name} missing or repeated: ${JSON.stringify(received.headers)}`);
  return value as string;
}

function webhookHeaders(received: Received): Record<string, string> {
  return {
    'webhook-id': header(received, 'webhook-id'),
    'webhook-timestamp': header(received, 'webhook-timestamp'),
    'webhook-signature': header(received, 'webhook-signature'),
  };
}

const payloadOf = (received: Received): Record<string, unknown> => JSON.parse(received.body);

// ---------------------------------------------------------------------------------------------
// The database, read (and in two tests written) directly
// ---------------------------------------------------------------------------------------------

interface DeliveryRow {
  id: string;
  key_id: string;
  paste_id: string;
  url: string;
  payload: string;
  status: string;
  attempts: number;
  next_attempt_at: number;
  locked_until: number | null;
  locked_by: string | null;
  last_status_code: number | null;
  last_error: string | null;
}

interface AttemptRow {
  delivery_id: string;
  attempted_at: number;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
}

function withDb<T>(path: string, fn: (db: Database.Database) => T): T {
  const db = new Database(path, { fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

function deliveries(path: string): DeliveryRow[] {
  return withDb(path, (db) => db.prepare('SELECT * FROM webhook_deliveries ORDER BY created_at, id').all() as any[]);
}

function deliveryFor(path: string, pasteId: string): DeliveryRow | undefined {
  return deliveries(path).find((d) => d.paste_id === pasteId);
}

function attemptsOf(path: string, deliveryId: string): AttemptRow[] {
  return withDb(
    path,
    (db) =>
      db
        .prepare('SELECT * FROM webhook_attempts WHERE delivery_id = ? ORDER BY attempted_at, rowid')
        .all(deliveryId) as any[],
  );
}

function keyRow(path: string, keyId: string): { webhook_url: string | null; webhook_active: number } {
  return withDb(path, (db) => db.prepare('SELECT * FROM api_keys WHERE id = ?').get(keyId) as any);
}

// ---------------------------------------------------------------------------------------------
// Keys and pastes
// ---------------------------------------------------------------------------------------------

interface HookKey {
  key: string;
  id: string;
  secret: string;
}

async function hookKey(server: TestServer, url: string, name = 'hook key'): Promise<HookKey> {
  const created = await server.services.keys.create({ name, webhookUrl: url });
  assert.ok(created.webhookSecret, 'a key made with a webhook URL gets a signing secret');
  return { key: created.key, id: created.apiKey.id, secret: created.webhookSecret };
}

async function createPaste(
  server: TestServer,
  key: string,
  json: Record<string, unknown> = { content: 'hello, webhook receivers' },
): Promise<string> {
  const answer = await request(`${server.url}/api/v1/paste`, { method: 'POST', headers: { 'x-api-key': key }, json });
  assert.equal(answer.status, 201, `create: ${answer.status} ${answer.text.slice(0, 300)}`);
  return answer.body.data.paste_id as string;
}

/** Waits until the delivery of `pasteId` has at least `count` recorded attempts; returns them. */
async function waitForAttempts(
  server: TestServer,
  pasteId: string,
  count: number,
  timeoutMs: number,
): Promise<AttemptRow[]> {
  let attempts: AttemptRow[] = [];
  await waitUntil(
    () => {
      const delivery = deliveryFor(server.databasePath, pasteId);
      attempts = delivery ? attemptsOf(server.databasePath, delivery.id) : [];
      return attempts.length >= count;
    },
    timeoutMs,
    `${count} recorded attempt(s) for paste ${pasteId}`,
  );
  return attempts;
}

async function waitForStatus(server: TestServer, pasteId: string, status: string, timeoutMs: number) {
  let row: DeliveryRow | undefined;
  await waitUntil(
    () => {
      row = deliveryFor(server.databasePath, pasteId);
      return row?.status === status;
    },
    timeoutMs,
    `delivery of ${pasteId} to be ${status} (is ${row?.status})`,
  );
  return row as DeliveryRow;
}

// ---------------------------------------------------------------------------------------------
// The real binary
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
  'WEBHOOK_RETRY_BASE_MS',
  'WEBHOOK_TIMEOUT_MS',
  'WEBHOOK_CONCURRENCY',
  'WEBHOOK_RETENTION_DAYS',
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

async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

/** `node bin/fastpaste.js serve` on a free port; resolves once /healthz answers. */
async function serveProcess(
  t: TestContext,
  env: Record<string, string>,
): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, ['bin/fastpaste.js', 'serve'], {
    cwd: ROOT,
    env: childEnv({ HOST: '127.0.0.1', PORT: String(port), BASE_URL: url, ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  defer(t, () => stopChild(child));
  let output = '';
  const collect = (chunk: Buffer) => {
    if (output.length < 50_000) output += chunk.toString('utf8');
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`serve exited ${child.exitCode}: ${output}`);
    try {
      if ((await fetch(`${url}/healthz`)).status === 200) return { url, child };
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`serve did not answer within 20 s: ${output}`);
}

// =============================================================================================
// The body
// =============================================================================================

describe('webhook body (api-v1.md Events; D4, D10, D21)', SQLITE_ONLY, () => {
  it('has exactly the Events fields, with type, source, download_url and expires_at as the decisions say', async (t) => {
    const server = await start(t);
    const receiver = await startReceiver(t);
    const hook = await hookKey(server, receiver.url, 'body key');
    const plainKey = await server.createKey({ name: 'no webhook' });
    const expected = new Map<string, Record<string, unknown>>();

    const detailOf = async (id: string) => {
      const answer = await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': hook.key } });
      assert.equal(answer.status, 200, answer.text);
      return answer.body.data as { created_at: string; expires_at: string | null };
    };
    const expect = async (
      id: string,
      fields: { type: string; source: string; download: boolean; expiresAt?: string | null },
    ) => {
      const detail = await detailOf(id);
      assert.match(detail.created_at, TIMESTAMP);
      expected.set(id, {
        event: 'paste_created',
        paste_id: id,
        type: fields.type,
        source: fields.source,
        api_key_name: 'body key',
        url: `${server.url}/view/${id}`,
        raw_url: `${server.url}/raw/${id}`,
        download_url: fields.download ? `${server.url}/download/${id}` : null,
        expires_at: fields.expiresAt === undefined ? detail.expires_at : fields.expiresAt,
        created_at: detail.created_at,
        ip: '127.0.0.1',
      });
    };

    // JSON text that never expires: expires_at null (D4).
    const never = await createPaste(server, hook.key, { content: 'never expires', expiry: 'never' });
    await expect(never, { type: 'text', source: 'api', download: true, expiresAt: null });

    // JSON text for an hour: expires_at is created_at + 1 h in the D3 format.
    const hourly = await createPaste(server, hook.key, { content: 'an hour long', expiry: '1h' });
    await expect(hourly, { type: 'text', source: 'api', download: true });

    // An upload: type file (D10).
    const form = new FormData();
    form.append('file', new Blob(['print("uploaded")\n'], { type: 'text/plain' }), 'script.py');
    const uploaded = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': hook.key },
      body: form,
    });
    assert.equal(uploaded.status, 201, uploaded.text);
    const upload = uploaded.body.data.paste_id as string;
    await expect(upload, { type: 'file', source: 'api', download: true });

    // E2E, not downloadable: /download answers 403, so download_url is null (D21). The decryption
    // key sent with the request is never stored, so it is not in the webhook's url either.
    const sealed = await encryptForTest('a secret nobody but the client reads');
    const encrypted = await createPaste(server, hook.key, { content: sealed.wire, encrypt: true, key: sealed.key });
    const download = await fetch(`${server.url}/download/${encrypted}`);
    await download.arrayBuffer();
    assert.equal(download.status, 403, 'the non-downloadable E2E paste answers 403 at /download');
    await expect(encrypted, { type: 'text', source: 'api', download: false });

    // E2E, downloadable: download_url is there.
    const sealed2 = await encryptForTest('downloadable ciphertext');
    const downloadable = await createPaste(server, hook.key, {
      content: sealed2.wire,
      encrypt: true,
      downloadable: true,
    });
    await expect(downloadable, { type: 'text', source: 'api', download: true });

    // A keyed quick-create: source cli (D10).
    const quick = await request(`${server.url}/api/v1/cli?json=1`, {
      method: 'POST',
      headers: { 'x-api-key': hook.key, 'content-type': 'text/plain' },
      body: 'echo hello from a keyed script\n',
    });
    assert.equal(quick.status, 201, quick.text);
    const cli = quick.body.data.paste_id as string;
    await expect(cli, { type: 'text', source: 'cli', download: true });

    // Not announced: an anonymous quick-create, and a key without a webhook.
    const anonymous = await request(`${server.url}/api/v1/cli?json=1`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'echo hello from an anonymous script\n',
    });
    assert.equal(anonymous.status, 201, anonymous.text);
    const anonymousId = anonymous.body.data.paste_id as string;
    const unhooked = await createPaste(server, plainKey, { content: 'a key without a webhook' });

    await receiver.waitFor(expected.size, 10 * SECOND);
    await sleep(1500); // one more poll: nothing else may arrive
    assert.equal(receiver.received.length, expected.size, 'exactly one request per announced paste');

    for (const received of receiver.received) {
      const body = payloadOf(received);
      const want = expected.get(body.paste_id as string);
      assert.ok(want, `unexpected announcement ${received.body}`);
      assert.deepEqual(body, want, `body of ${body.paste_id}`);
    }
    const ids = receiver.received.map((r) => payloadOf(r).paste_id);
    assert.deepEqual(new Set(ids), new Set(expected.keys()));
    assert.ok(!ids.includes(anonymousId) && !ids.includes(unhooked));

    // The hour-long paste's expires_at, computed here from created_at.
    const hourBody = payloadOf(receiver.received.find((r) => payloadOf(r).paste_id === hourly) as Received);
    const createdMs = Date.parse(`${String(hourBody.created_at).replace(' ', 'T')}Z`);
    assert.ok(Math.abs(createdMs - Date.now()) < 60 * SECOND, `created_at ${hourBody.created_at} is about now (UTC)`);
    assert.equal(hourBody.expires_at, new Date(createdMs + HOUR).toISOString().slice(0, 19).replace('T', ' '));
    assert.equal(
      payloadOf(receiver.received.find((r) => payloadOf(r).paste_id === never) as Received).expires_at,
      null,
    );

    // And nothing was queued for the two that are not announced.
    const queued = deliveries(server.databasePath).map((d) => d.paste_id);
    assert.ok(!queued.includes(anonymousId), 'no delivery for an anonymous quick-create');
    assert.ok(!queued.includes(unhooked), 'no delivery for a key without a webhook');
  });
});

// =============================================================================================
// Headers and signature
// =============================================================================================

describe('webhook headers and signature (D21, Standard Webhooks)', SQLITE_ONLY, () => {
  it('carries webhook-id, webhook-timestamp, webhook-signature and JSON; verifies with standardwebhooks', async (t) => {
    const server = await start(t);
    const receiver = await startReceiver(t);
    const target = `${receiver.url}hooks/fastpaste?src=fp`;
    const hook = await hookKey(server, target);
    assert.match(hook.secret, /^whsec_[A-Za-z0-9+/]+={0,2}$/);
    const pasteId = await createPaste(server, hook.key);
    await receiver.waitFor(1, 10 * SECOND);
    const received = receiver.received[0] as Received;

    assert.equal(received.method, 'POST');
    assert.equal(received.path, '/hooks/fastpaste?src=fp', 'the URL path and query are kept');
    assert.match(header(received, 'content-type'), /^application\/json(;|$)/);

    const id = header(received, 'webhook-id');
    assert.match(id, /^msg_[A-Za-z0-9_-]+$/);
    assert.equal(id, deliveryFor(server.databasePath, pasteId)?.id, 'webhook-id is the stored delivery id');

    const timestamp = header(received, 'webhook-timestamp');
    assert.match(timestamp, /^\d+$/, 'webhook-timestamp is whole seconds');
    assert.ok(Math.abs(Number(timestamp) - Date.now() / 1000) < 30, `webhook-timestamp ${timestamp} is about now`);

    const signature = header(received, 'webhook-signature');
    assert.match(signature, /^v1,[A-Za-z0-9+/]{43}=( v1,[A-Za-z0-9+/]{43}=)*$/);

    // The standardwebhooks package accepts it, and returns the body.
    const verified = new Webhook(hook.secret).verify(received.body, webhookHeaders(received));
    assert.deepEqual(verified, payloadOf(received));
    assert.equal(payloadOf(received).paste_id, pasteId);

    // D21 by hand: base64 HMAC-SHA256 of id.timestamp.body with the secret's bytes.
    const mac = createHmac('sha256', Buffer.from(hook.secret.slice('whsec_'.length), 'base64'))
      .update(`${id}.${timestamp}.${received.body}`)
      .digest('base64');
    assert.ok(signature.split(' ').includes(`v1,${mac}`), `signature ${signature} is v1,${mac}`);

    // And it is a real check: another body or another secret fails.
    assert.throws(() => new Webhook(hook.secret).verify(`${received.body} `, webhookHeaders(received)));
    const other = `whsec_${randomBytes(32).toString('base64')}`;
    assert.throws(() => new Webhook(other).verify(received.body, webhookHeaders(received)));
  });
});

describe('the standardwebhooks test vector (dependencies.md)', () => {
  it('signs the known Standard Webhooks test vector (dependencies.md) with the Webhook class the worker uses', () => {
    const signature = new Webhook('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw').sign(
      'msg_p5jXN8AQM9LWM0D4loKWxJek',
      new Date(1614265330 * 1000),
      '{"test": 2432232314}',
    );
    assert.equal(signature, 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
    // The same by the D21 definition.
    const mac = createHmac('sha256', Buffer.from('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'base64'))
      .update('msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{"test": 2432232314}')
      .digest('base64');
    assert.equal(`v1,${mac}`, signature);
  });
});

// =============================================================================================
// Retries, time-out, redirects, the answer's size, Retry-After, 410
// =============================================================================================

describe('webhook delivery attempts (D21)', SQLITE_ONLY, () => {
  it('a receiver answering 500, 500, 200 gets exactly three POSTs with the same webhook-id, then nothing', async (t) => {
    const server = await start(t);
    const receiver = await startReceiver(t, (_req, res, _r, index) => {
      res.writeHead(index < 2 ? 500 : 200);
      res.end(index < 2 ? 'down' : 'ok');
    });
    const hook = await hookKey(server, receiver.url);
    const pasteId = await createPaste(server, hook.key);
    await receiver.waitFor(3, 15 * SECOND);
    await sleep(2500); // well past the back-off and the 1 s poll
    assert.equal(receiver.received.length, 3, 'nothing after the 200');

    const ids = receiver.received.map((r) => header(r, 'webhook-id'));
    assert.equal(new Set(ids).size, 1, `the same webhook-id on every attempt: ${ids.join(', ')}`);
    assert.equal(new Set(receiver.received.map((r) => r.body)).size, 1, 'the same body on every attempt');
    for (const received of receiver.received) {
      new Webhook(hook.secret).verify(received.body, webhookHeaders(received));
    }

    const listed = await server.services.webhooks.listForKey(hook.id, 10);
    assert.equal(listed.length, 1);
    const delivery = listed[0];
    assert.ok(delivery);
    assert.equal(delivery.id, ids[0]);
    assert.equal(delivery.paste_id, pasteId);
    assert.equal(delivery.status, 'delivered');
    assert.equal(delivery.attempts, 3);
    const attempts = await server.services.webhooks.attemptsOf([delivery.id]);
    assert.deepEqual(
      attempts.map((a) => a.status_code),
      [500, 500, 200],
    );
    assert.ok(attempts[0]?.error && attempts[1]?.error, 'the failed attempts record an error');
    assert.equal(attempts[2]?.error, null);
  });

  it('a receiver that never answers is cut at WEBHOOK_TIMEOUT_MS, recorded as timed out, and retried', async (t) => {
    const server = await start(t, { WEBHOOK_TIMEOUT_MS: '1000' });
    const receiver = await startReceiver(t, () => {
      // never answers
    });
    const hook = await hookKey(server, receiver.url);
    const pasteId = await createPaste(server, hook.key);
    await receiver.waitFor(2, 10 * SECOND);
    const [first, second] = receiver.received as [Received, Received];
    assert.equal(header(first, 'webhook-id'), header(second, 'webhook-id'), 'the retry has the same webhook-id');
    assert.ok(second.at - first.at >= 900, `the retry came ${second.at - first.at} ms after the first attempt`);

    const attempts = await waitForAttempts(server, pasteId, 1, 5 * SECOND);
    const attempt = attempts[0] as AttemptRow;
    assert.equal(attempt.status_code, null);
    assert.match(attempt.error ?? '', /timed? ?out/i);
    assert.ok(
      attempt.duration_ms >= 900 && attempt.duration_ms < 2500,
      `the attempt lasted ${attempt.duration_ms} ms, about the 1000 ms time-out`,
    );
    assert.equal(deliveryFor(server.databasePath, pasteId)?.status, 'pending', 'still to be retried');
  });

  it('a redirect (302, then 307) is not followed: the target gets nothing and the attempt is a failure', async (t) => {
    const server = await start(t);
    const target = await startReceiver(t);
    const redirecting = await startReceiver(t, (_req, res, _r, index) => {
      res.writeHead(index === 0 ? 302 : 307, { location: `${target.url}stolen` });
      res.end();
    });
    const hook = await hookKey(server, redirecting.url);
    const pasteId = await createPaste(server, hook.key);
    await redirecting.waitFor(2, 10 * SECOND);
    const attempts = await waitForAttempts(server, pasteId, 2, 5 * SECOND);
    await sleep(300);
    assert.equal(target.received.length, 0, 'the redirect target was never called');
    assert.deepEqual(
      attempts.slice(0, 2).map((a) => a.status_code),
      [302, 307],
    );
    for (const attempt of attempts.slice(0, 2)) assert.match(attempt.error ?? '', /redirect/i);
    assert.notEqual(deliveryFor(server.databasePath, pasteId)?.status, 'delivered');
  });

  it('a huge answer (50 MB) is not read whole: the attempt ends quickly and the connection is dropped early', async (t) => {
    const server = await start(t);
    const total = 50 * 1024 * 1024;
    const chunk = Buffer.alloc(64 * 1024, 'x');
    let written = 0;
    let finished = false;
    let closed = false;
    const receiver = await startReceiver(t, (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(total) });
      res.once('close', () => {
        closed = true;
        finished = res.writableFinished;
      });
      const pump = () => {
        while (written < total && !res.destroyed) {
          written += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        if (written >= total) res.end();
      };
      pump();
    });
    const hook = await hookKey(server, receiver.url);
    const pasteId = await createPaste(server, hook.key);
    const attempts = await waitForAttempts(server, pasteId, 1, 10 * SECOND);
    const attempt = attempts[0] as AttemptRow;
    assert.ok(attempt.duration_ms < 1500, `the attempt took ${attempt.duration_ms} ms`);
    assert.equal(attempt.status_code, 200);
    await waitUntil(() => closed, 5 * SECOND, 'the receiver to see the connection close');
    assert.equal(finished, false, 'the connection was closed before the answer was finished');
    assert.ok(written < total / 2, `only ${written} of ${total} bytes could be written`);
    assert.equal((await waitForStatus(server, pasteId, 'delivered', 5 * SECOND)).attempts, 1);
  });

  it("the receiver's Retry-After delays the next attempt, even with a tiny base", async (t) => {
    const server = await start(t);
    const receiver = await startReceiver(t, (_req, res, _r, index) => {
      if (index === 0) {
        res.writeHead(503, { 'retry-after': '2' });
        res.end('busy');
      } else {
        res.writeHead(200);
        res.end('ok');
      }
    });
    const hook = await hookKey(server, receiver.url);
    const pasteId = await createPaste(server, hook.key);
    await receiver.waitFor(2, 10 * SECOND);
    const [first, second] = receiver.received as [Received, Received];
    assert.ok(second.at - first.at >= 1900, `the retry came ${second.at - first.at} ms after a Retry-After of 2 s`);
    assert.equal(header(first, 'webhook-id'), header(second, 'webhook-id'));
    const done = await waitForStatus(server, pasteId, 'delivered', 5 * SECOND);
    assert.equal(done.attempts, 2);
  });

  it('410 from the receiver turns the key webhook off: status gone, webhook_active 0, no more deliveries', async (t) => {
    const server = await start(t);
    const receiver = await startReceiver(t, (_req, res) => {
      res.writeHead(410);
      res.end('gone');
    });
    const hook = await hookKey(server, receiver.url);
    const first = await createPaste(server, hook.key);
    await receiver.waitFor(1, 10 * SECOND);
    const gone = await waitForStatus(server, first, 'gone', 5 * SECOND);
    assert.equal(gone.last_status_code, 410);
    assert.equal(keyRow(server.databasePath, hook.id).webhook_active, 0, 'api_keys.webhook_active is 0');
    // The administrator sees it turned off.
    const env = { DATABASE_URL: `sqlite:${server.databasePath}` };
    const [listed, text] = await Promise.all([
      fastpaste(['keys', 'list', '--json'], env),
      fastpaste(['keys', 'list'], env),
    ]);
    const item = (JSON.parse(listed.stdout) as Array<Record<string, unknown>>).find((k) => k.id === hook.id);
    assert.equal(item?.webhook_url, receiver.url);
    assert.equal(item?.webhook_active, false);
    assert.match(text.stdout, /webhook off: its receiver answered 410/);
    // Redelivering to a webhook that is off is refused, not queued to be closed again unsent.
    const goneId = deliveryFor(server.databasePath, first)?.id as string;
    const refused = await fastpaste(['keys', 'redeliver', goneId], env);
    assert.equal(refused.code, 1, refused.stdout);
    assert.match(refused.stderr, /has no webhook on .*keys webhook/);
    assert.equal(deliveryFor(server.databasePath, first)?.status, 'gone');

    const second = await createPaste(server, hook.key);
    await sleep(2000);
    assert.equal(receiver.received.length, 1, 'no retry of the first, nothing for the second');
    assert.notEqual(deliveryFor(server.databasePath, second)?.status, 'delivered');

    // Setting the webhook again turns it back on.
    receiver.handler = answer200;
    const { secret } = await server.services.keys.setWebhook(hook.id, receiver.url);
    assert.equal(keyRow(server.databasePath, hook.id).webhook_active, 1);
    const third = await createPaste(server, hook.key);
    await receiver.waitFor(2, 10 * SECOND);
    const last = receiver.received[1] as Received;
    assert.equal(payloadOf(last).paste_id, third);
    new Webhook(secret as string).verify(last.body, webhookHeaders(last));
  });

  it('a 410 from a URL the key no longer sends to (set anew while the attempt was out) leaves the new webhook on, and the delivery goes there', async (t) => {
    const server = await start(t);
    let answerOld: () => void = () => {};
    const answered = new Promise<void>((resolve) => {
      answerOld = resolve;
    });
    const old = await startReceiver(t, (_req, res) => {
      void answered.then(() => {
        res.writeHead(410);
        res.end('gone');
      });
    });
    const hook = await hookKey(server, old.url);
    const first = await createPaste(server, hook.key);
    await old.waitFor(1, 10 * SECOND);
    // The attempt is out at the old URL; the admin points the key at a new one.
    const fresh = await startReceiver(t);
    const { secret } = await server.services.keys.setWebhook(hook.id, fresh.url);
    answerOld();
    await fresh.waitFor(1, 10 * SECOND);
    const resent = fresh.received[0] as Received;
    assert.equal(payloadOf(resent).paste_id, first, 'the announcement the old URL refused went to the new one');
    new Webhook(secret as string).verify(resent.body, webhookHeaders(resent));
    assert.equal(keyRow(server.databasePath, hook.id).webhook_active, 1, 'the new webhook is still on');
    const second = await createPaste(server, hook.key);
    await fresh.waitFor(2, 10 * SECOND);
    assert.equal(payloadOf(fresh.received[1] as Received).paste_id, second);
    assert.equal((await waitForStatus(server, first, 'delivered', 5 * SECOND)).attempts, 2);
    assert.equal(old.received.length, 1);
  });
});

// =============================================================================================
// The retry schedule and the settings
// =============================================================================================

describe('retry schedule and settings', () => {
  it('retryDelayMs grows with attempts, is capped, jitters within ±20%, and spans a day at the production base', () => {
    const base = 30_000;
    const nominal = (n: number) => retryDelayMs(n, base, null, () => 0.5);
    assert.ok(nominal(2) > nominal(1) && nominal(3) > nominal(2) && nominal(4) > nominal(3), 'grows');
    for (let n = 1; n < 200; n++) assert.ok(nominal(n + 1) >= nominal(n), `never shrinks (attempt ${n})`);
    const cap = nominal(1000);
    assert.ok(Number.isFinite(cap) && cap > nominal(1), `capped at ${cap} ms`);
    assert.ok(cap <= 24 * HOUR, `the cap ${cap} ms is at most a day`);
    assert.equal(nominal(100), cap);
    assert.equal(nominal(MAX_ATTEMPTS * 4), cap);

    for (const n of [1, 2, 5, 9, 15, 40]) {
      const mid = nominal(n);
      const low = retryDelayMs(n, base, null, () => 0);
      const high = retryDelayMs(n, base, null, () => 0.999999);
      assert.ok(low < high, `jitter at attempt ${n}`);
      for (const value of [low, high, ...Array.from({ length: 50 }, () => retryDelayMs(n, base, null))]) {
        assert.ok(value >= mid * 0.8 - 1 && value <= mid * 1.2 + 1, `${value} within ±20% of ${mid}`);
      }
    }

    // Even with the least jitter every time, the waits before MAX_ATTEMPTS span at least 24 h.
    let span = 0;
    for (let n = 1; n < MAX_ATTEMPTS; n++) span += retryDelayMs(n, base, null, () => 0);
    assert.ok(span >= 24 * HOUR, `${MAX_ATTEMPTS} attempts span ${(span / HOUR).toFixed(1)} h`);

    // A receiver's Retry-After longer than the back-off wins.
    assert.ok(retryDelayMs(1, 50, 2000, () => 0.5) >= 2000);
  });

  it('WEBHOOK_TIMEOUT_MS is 10 s by default, WEBHOOK_RETRY_BASE_MS 30 s, and private addresses are refused', () => {
    const defaults = loadConfig({});
    assert.equal(defaults.webhookTimeoutMs, 10_000);
    assert.equal(defaults.webhookRetryBaseMs, 30_000);
    assert.equal(defaults.webhookAllowPrivate, false);
    const set = loadConfig({ WEBHOOK_TIMEOUT_MS: '1000', WEBHOOK_RETRY_BASE_MS: '50', WEBHOOK_ALLOW_PRIVATE: 'true' });
    assert.equal(set.webhookTimeoutMs, 1000);
    assert.equal(set.webhookRetryBaseMs, 50);
    assert.equal(set.webhookAllowPrivate, true);
  });
});

// =============================================================================================
// Concurrency and isolation from paste creation
// =============================================================================================

describe('webhook worker load', SQLITE_ONLY, () => {
  it('with WEBHOOK_CONCURRENCY=2, at most two requests are open at once while six deliveries drain', async (t) => {
    const server = await start(t, { WEBHOOK_CONCURRENCY: '2' });
    const receiver = await startReceiver(t, answer200After(500));
    const hook = await hookKey(server, receiver.url);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await createPaste(server, hook.key, { content: `concurrency paste ${i}` }));
    await receiver.waitFor(6, 15 * SECOND);
    for (const id of ids) await waitForStatus(server, id, 'delivered', 5 * SECOND);
    assert.equal(receiver.maxOpen, 2, `at most (and here exactly) 2 requests open at once; saw ${receiver.maxOpen}`);
    assert.deepEqual(new Set(receiver.received.map((r) => payloadOf(r).paste_id)), new Set(ids));
  });

  it("one key's slow receiver does not keep another key's deliveries behind all of its backlog", async (t) => {
    const server = await start(t, { WEBHOOK_CONCURRENCY: '2' });
    const slow = await startReceiver(t, answer200After(1500));
    const quick = await startReceiver(t);
    const slowKey = await hookKey(server, slow.url, 'slow receiver');
    const quickKey = await hookKey(server, quick.url, 'quick receiver');
    for (let i = 0; i < 8; i++) await createPaste(server, slowKey.key, { content: `a slow backlog ${i}` });
    await slow.waitFor(2, 5 * SECOND);
    const created = Date.now();
    const id = await createPaste(server, quickKey.key, { content: 'announced after the backlog' });
    await quick.waitFor(1, 15 * SECOND);
    const waited = (quick.received[0] as Received).at - created;
    assert.equal(payloadOf(quick.received[0] as Received).paste_id, id);
    // About one slow attempt (1.5 s), not the backlog's four rounds of two.
    assert.ok(waited < 3500, `the other key's delivery came ${waited} ms after its paste`);
    assert.ok(slow.received.length < 6, `${slow.received.length} of the backlog sent before it`);
    assert.equal(slow.maxOpen, 2, 'a key alone still takes every slot');
  });

  it('a dead receiver and a hanging one do not slow paste creation', async (t) => {
    const server = await start(t, { WEBHOOK_TIMEOUT_MS: '3000' });
    const hanging = await startReceiver(t, () => {
      // never answers
    });
    const deadPort = await freePort(); // nothing listens here
    const dead = await hookKey(server, `http://127.0.0.1:${deadPort}/`, 'dead receiver');
    const slow = await hookKey(server, hanging.url, 'hanging receiver');
    await createPaste(server, await server.createKey({ name: 'warm-up' }));

    const durations: number[] = [];
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const started = performance.now();
      ids.push(await createPaste(server, i % 2 === 0 ? dead.key : slow.key, { content: `paste number ${i}` }));
      durations.push(performance.now() - started);
    }
    // Half of WEBHOOK_TIMEOUT_MS: a create that waited for its delivery would take all of it.
    for (const [i, ms] of durations.entries()) assert.ok(ms < 1500, `create #${i} took ${ms.toFixed(0)} ms`);

    // Meanwhile deliveries do fail in the background.
    await hanging.waitFor(1, 5 * SECOND);
    const attempts = await waitForAttempts(server, ids[0] as string, 1, 5 * SECOND);
    assert.equal(attempts[0]?.status_code, null);
    assert.ok(attempts[0]?.error, 'the dead receiver attempt records an error');
  });
});

// =============================================================================================
// The outbox and durability
// =============================================================================================

describe('webhook outbox (D21)', SQLITE_ONLY, () => {
  it('the delivery row is written in the paste transaction: both there, or neither', async (t) => {
    const server = await start(t);
    const receiver = await startReceiver(t);
    const hook = await hookKey(server, receiver.url);

    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await createPaste(server, hook.key, { content: `outbox paste ${i}` }));
    for (const id of ids) {
      const row = deliveryFor(server.databasePath, id);
      assert.ok(row, `a delivery row for ${id} right after the create answered`);
      assert.equal(row.key_id, hook.id);
      assert.match(row.id, /^msg_/);
      assert.equal(JSON.parse(row.payload).paste_id, id);
    }

    // Make the outbox insert fail: the paste must not be left behind unannounced.
    const pastesNow = () =>
      withDb(server.databasePath, (db) => (db.prepare('SELECT count(*) AS n FROM pastes').get() as { n: number }).n);
    const before = pastesNow();
    const deliveriesBefore = deliveries(server.databasePath).length;
    withDb(server.databasePath, (db) =>
      db.exec(`CREATE TRIGGER outbox_down BEFORE INSERT ON webhook_deliveries
               BEGIN SELECT RAISE(ABORT, 'outbox unavailable'); END`),
    );
    const failed = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': hook.key },
      json: { content: 'this paste cannot be announced', slug: 'unannounced-paste' },
    });
    assert.equal(failed.status, 500, `the create fails as a whole: ${failed.status} ${failed.text.slice(0, 200)}`);
    assert.equal(pastesNow(), before, 'no paste without its delivery');
    assert.equal(deliveries(server.databasePath).length, deliveriesBefore);
    // A key without a webhook is untouched by the outbox.
    await createPaste(server, await server.createKey({ name: 'plain' }), { content: 'no outbox involved' });
    assert.equal(pastesNow(), before + 1);

    withDb(server.databasePath, (db) => db.exec('DROP TRIGGER outbox_down'));
    const after = await createPaste(server, hook.key, { content: 'announced again' });
    assert.ok(deliveryFor(server.databasePath, after), 'paste and delivery both there again');
    await receiver.waitFor(4, 10 * SECOND);
    const announced = new Set(receiver.received.map((r) => payloadOf(r).paste_id));
    assert.deepEqual(announced, new Set([...ids, after]));
  });

  it('deliveries pending when the server is killed with SIGKILL are delivered after it starts again', async (t) => {
    const dir = tempDir(t);
    const databaseUrl = `sqlite:${join(dir, 'db.sqlite')}`;
    const databasePath = join(dir, 'db.sqlite');
    const receiverPort = await freePort(); // nothing listens here yet
    const env = {
      DATABASE_URL: databaseUrl,
      WEBHOOK_ALLOW_PRIVATE: 'true',
      WEBHOOK_RETRY_BASE_MS: '200',
      WEBHOOK_TIMEOUT_MS: '1000',
    };
    const made = await fastpaste(
      ['keys', 'create', '--name', 'crash', '--webhook', `http://127.0.0.1:${receiverPort}/`, '--json'],
      env,
    );
    assertOk(made, 'keys create --webhook');
    const { key, webhook_secret: secret } = JSON.parse(made.stdout) as { key: string; webhook_secret: string };

    const first = await serveProcess(t, env);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const answer = await request(`${first.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        json: { content: `survives a crash ${i}` },
      });
      assert.equal(answer.status, 201, answer.text);
      ids.push(answer.body.data.paste_id);
    }
    // Every delivery has failed at least once (nothing listens) and is pending; none is claimed.
    await waitUntil(
      () => {
        const rows = deliveries(databasePath);
        return (
          rows.length === ids.length &&
          rows.every((r) => r.status === 'pending' && r.attempts >= 1 && r.locked_by === null)
        );
      },
      10 * SECOND,
      'every delivery to have failed once and be pending',
    );
    await stopChild(first.child, 'SIGKILL');
    assert.equal(first.child.signalCode, 'SIGKILL');

    const stored = new Map(deliveries(databasePath).map((d) => [d.paste_id, d.id]));
    assert.deepEqual(new Set(stored.keys()), new Set(ids));
    assert.ok(
      deliveries(databasePath).every((d) => d.status === 'pending'),
      'still pending after the crash',
    );

    const receiver = await startReceiver(t, answer200, receiverPort);
    await serveProcess(t, env);
    await waitUntil(
      () => ids.every((id) => receiver.received.some((r) => payloadOf(r).paste_id === id)),
      30 * SECOND,
      'every paste to be announced after the restart',
    );
    for (const received of receiver.received) {
      const pasteId = payloadOf(received).paste_id as string;
      assert.equal(header(received, 'webhook-id'), stored.get(pasteId), `the stored webhook-id for ${pasteId}`);
      new Webhook(secret).verify(received.body, webhookHeaders(received));
    }
    await waitUntil(
      () => deliveries(databasePath).every((d) => d.status === 'delivered'),
      5 * SECOND,
      'every delivery to be marked delivered',
    );
  });
});

// =============================================================================================
// The address guard (D21)
// =============================================================================================

const REFUSED = [
  'http://127.1/',
  'http://0x7f.1/',
  'http://2130706433/',
  'http://0177.0.0.1/',
  'http://127.0.0.1/',
  'http://127.0.0.1:8080/hook',
  'http://[::ffff:127.0.0.1]/',
  'http://[::ffff:7f00:1]/',
  'http://[::]/',
  'http://0.0.0.0/',
  'http://0/',
  'http://169.254.169.254/',
  'http://[::ffff:169.254.169.254]/',
  // A public address mapped: the connection-time check refuses it, so setting it must too.
  'http://[::ffff:93.184.216.34]/',
  // Azure's platform address, public unicast by its range.
  'http://168.63.129.16/',
  'http://10.0.0.1/',
  'https://10.0.0.1/',
  'http://172.16.0.1/',
  'http://192.168.1.1/',
  'http://100.64.0.1/',
  'http://[fc00::1]/',
  'http://[fd12::1]/',
  'http://[fe80::1]/',
  'http://[::1]/',
  'http://224.0.0.1/',
  'http://localhost/',
  'ftp://example.com/',
  'file:///etc/passwd',
];

/** A logger that writes nothing, for workers made by hand. */
const silent = { info() {}, warn() {}, error() {} };

describe('stopping the delivery worker (D21)', () => {
  // On SQLite and on PostgreSQL: the worker over the real outbox, its claim held back by a
  // transaction of the test's (SQLite's one connection; PostgreSQL's table lock).
  it('a claim that comes back from a poll in flight when the worker stops is given back, not attempted', async (t) => {
    const receiver = await startReceiver(t);
    const database = await freshDatabase();
    defer(t, () => database.drop());
    const storage = openStorage(database.url);
    defer(t, () => storage.close());
    await migrateToLatest(storage);
    const now = Date.now();
    await storage.db
      .insertInto('api_keys')
      .values({
        id: 'key_stop',
        name: 'stop',
        digest: randomBytes(32).toString('hex'),
        active: 1,
        hourly_limit: 0,
        daily_limit: 0,
        monthly_limit: 0,
        webhook_url: receiver.url,
        webhook_secret: `whsec_${randomBytes(24).toString('base64')}`,
        created_at: now,
      })
      .execute();
    await storage.db
      .insertInto('webhook_deliveries')
      .values({
        id: 'msg_stop',
        key_id: 'key_stop',
        paste_id: 'pasteStop1',
        url: receiver.url,
        payload: '{}',
        status: 'pending',
        attempts: 0,
        next_attempt_at: now - 1000,
        locked_until: null,
        locked_by: null,
        last_status_code: null,
        last_error: null,
        created_at: now,
        finished_at: null,
      })
      .execute();
    const options = {
      concurrency: 2,
      pollMs: 60_000,
      timeoutMs: 2000,
      retryBaseMs: 50,
      allowPrivate: true,
      retentionMs: 86_400_000,
    };
    const worker = new DeliveryWorker(new WebhookRepository(storage.db, storage.dialect), Date.now, options, silent);

    let letGo = () => {};
    const held = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    let holding = () => {};
    const locked = new Promise<void>((resolve) => {
      holding = resolve;
    });
    const holder = storage.db.transaction().execute(async (trx) => {
      if (storage.dialect === 'postgres') await sql`LOCK TABLE webhook_deliveries IN EXCLUSIVE MODE`.execute(trx);
      else await trx.selectFrom('webhook_deliveries').select('id').execute();
      holding();
      await held;
    });
    await locked;
    worker.start();
    await sleep(200); // the poll is waiting for the outbox
    const stopped = worker.stop(5000);
    await sleep(100);
    letGo();
    await holder;
    await stopped;
    await sleep(300); // an attempt started after the stop would reach the receiver by now

    assert.equal(receiver.received.length, 0, 'no attempt is started by a stopped worker');
    const [row] = await storage.db
      .selectFrom('webhook_deliveries')
      .select(['status', 'attempts', 'locked_by', 'locked_until'])
      .execute();
    assert.deepEqual(row, { status: 'pending', attempts: 0, locked_by: null, locked_until: null });

    // Another worker takes it at once and delivers it.
    const next = new DeliveryWorker(new WebhookRepository(storage.db, storage.dialect), Date.now, options, silent);
    next.start();
    defer(t, () => next.stop(1000));
    await receiver.waitFor(1, 5000);
  });
});

describe('finished deliveries kept for WEBHOOK_RETENTION_DAYS', () => {
  const DAY = 86_400_000;
  const URL_IN = 'https://hooks.example/in';

  /** A fresh, migrated storage with a key `keyId` that has a webhook. */
  async function storageWithHookedKey(t: TestContext, keyId: string, createdAt: number) {
    const database = await freshDatabase();
    defer(t, () => database.drop());
    const storage = openStorage(database.url);
    defer(t, () => storage.close());
    await migrateToLatest(storage);
    await storage.db
      .insertInto('api_keys')
      .values({
        id: keyId,
        name: keyId,
        digest: randomBytes(32).toString('hex'),
        active: 1,
        hourly_limit: 0,
        daily_limit: 0,
        monthly_limit: 0,
        webhook_url: URL_IN,
        webhook_secret: `whsec_${randomBytes(24).toString('base64')}`,
        created_at: createdAt,
      })
      .execute();
    return { database, storage };
  }

  /** A delivery of the key's, made at `createdAt`, in `status` since `finishedAt` (null: not finished). */
  const delivery = (
    keyId: string,
    id: string,
    status: 'pending' | 'delivered' | 'failed' | 'gone',
    createdAt: number,
    finishedAt: number | null,
  ) => ({
    id,
    key_id: keyId,
    paste_id: `p_${id}`,
    url: URL_IN,
    payload: '{}',
    status,
    attempts: 1,
    next_attempt_at: createdAt,
    locked_until: null,
    locked_by: null,
    last_status_code: null,
    last_error: null,
    created_at: createdAt,
    finished_at: finishedAt,
  });

  it('is 30 days by default, from 1 to 3650', () => {
    assert.equal(loadConfig({}).webhookRetentionMs, 30 * DAY);
    assert.equal(loadConfig({ WEBHOOK_RETENTION_DAYS: '7' }).webhookRetentionMs, 7 * DAY);
    for (const bad of ['0', '3651', 'forever']) {
      assert.throws(() => loadConfig({ WEBHOOK_RETENTION_DAYS: bad }), /WEBHOOK_RETENTION_DAYS/);
    }
  });

  // On SQLite and on PostgreSQL: the worker's pruning over the real outbox.
  it('removes the deliveries finished before it with their attempts, batch by batch; pending ones, however old, and recent ones stay', async (t) => {
    const now = Date.UTC(2026, 11, 7, 12);
    const { storage } = await storageWithHookedKey(t, 'key_prune', now - 90 * DAY);
    const made = now - 60 * DAY;
    // More old ones than one batch takes, each of the finished kinds among them.
    const kinds = ['delivered', 'failed', 'gone'] as const;
    const old = Array.from({ length: PRUNE_BATCH + 20 }, (_, i) =>
      delivery('key_prune', `msg_old_${i}`, kinds[i % 3] as 'delivered', made, now - 30 * DAY - 1 - i * 60_000),
    );
    const kept = [
      delivery('key_prune', 'msg_pending', 'pending', made, null),
      delivery('key_prune', 'msg_recent', 'delivered', made, now - 30 * DAY + 60_000),
      // Finished exactly at the cutoff: not before it.
      delivery('key_prune', 'msg_at_cutoff', 'failed', made, now - 30 * DAY),
    ];
    for (let i = 0; i < old.length; i += 200) {
      await storage.db
        .insertInto('webhook_deliveries')
        .values(old.slice(i, i + 200))
        .execute();
    }
    await storage.db.insertInto('webhook_deliveries').values(kept).execute();
    const attempts = [...old, ...kept].flatMap((d) =>
      [1, 2].map((n) => ({
        id: `att_${d.id}_${n}`,
        delivery_id: d.id,
        attempted_at: now - 60 * DAY + n,
        status_code: 500,
        error: null,
        duration_ms: 5,
      })),
    );
    for (let i = 0; i < attempts.length; i += 200) {
      await storage.db
        .insertInto('webhook_attempts')
        .values(attempts.slice(i, i + 200))
        .execute();
    }

    // As services.ts makes it: on SQLite with the handle, whose synchronous batch serve runs.
    const repository = new WebhookRepository(storage.db, storage.dialect, storage.sqlite);
    const batches: number[] = [];
    let afterFirst: string[] = [];
    const pruneFinished = repository.pruneFinished.bind(repository);
    repository.pruneFinished = async (cutoff, limit) => {
      const removed = await pruneFinished(cutoff, limit);
      batches.push(removed);
      if (batches.length === 1) {
        afterFirst = (await storage.db.selectFrom('webhook_deliveries').select('id').execute()).map((row) => row.id);
      }
      return removed;
    };
    const options = { concurrency: 1, pollMs: 60_000, timeoutMs: 2000, retryBaseMs: 50, allowPrivate: false };
    const worker = new DeliveryWorker(repository, () => now, { ...options, retentionMs: 30 * DAY }, silent);

    // A stopped worker prunes nothing (a sweep that ends during shutdown).
    const stopped = new DeliveryWorker(repository, () => now, { ...options, retentionMs: 30 * DAY }, silent);
    await stopped.stop(0);
    assert.equal(await stopped.pruneFinished(), 0);
    assert.deepEqual(batches, []);

    assert.equal(await worker.pruneFinished(), PRUNE_BATCH + 20);
    assert.deepEqual(batches, [PRUNE_BATCH, 20]);
    // Oldest first: the first batch left the 20 old ones finished last (msg_old_0 to _19).
    const oldLeft = afterFirst.filter((id) => id.startsWith('msg_old_'));
    assert.deepEqual(
      oldLeft.map((id) => Number(id.slice('msg_old_'.length))).sort((x, y) => x - y),
      Array.from({ length: 20 }, (_, i) => i),
    );
    const left = await storage.db.selectFrom('webhook_deliveries').select('id').orderBy('id').execute();
    assert.deepEqual(
      left.map((row) => row.id),
      ['msg_at_cutoff', 'msg_pending', 'msg_recent'],
    );
    const attemptsLeft = await storage.db.selectFrom('webhook_attempts').select('delivery_id').execute();
    assert.deepEqual([...new Set(attemptsLeft.map((row) => row.delivery_id))].sort(), [
      'msg_at_cutoff',
      'msg_pending',
      'msg_recent',
    ]);
    assert.equal(attemptsLeft.length, 6);
    // Nothing more to remove: one query that finds nothing, through the index on finished_at.
    batches.length = 0;
    assert.equal(await worker.pruneFinished(), 0);
    assert.deepEqual(batches, [0]);
    const index =
      storage.dialect === 'postgres'
        ? sql<{ name: string }>`SELECT indexname AS name FROM pg_indexes WHERE tablename = 'webhook_deliveries'`
        : sql<{
            name: string;
          }>`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'webhook_deliveries'`;
    const names = (await index.execute(storage.db)).rows.map((row) => row.name);
    assert.ok(names.includes('webhook_deliveries_finished'), names.join(', '));
  });

  it('`serve` removes them in its sweep, logging how many', async (t) => {
    const now = Date.now();
    const { database, storage } = await storageWithHookedKey(t, 'key_serve', now - 9 * DAY);
    await storage.db
      .insertInto('webhook_deliveries')
      .values([
        delivery('key_serve', 'msg_week_old', 'delivered', now - 9 * DAY, now - 8 * DAY),
        delivery('key_serve', 'msg_today', 'delivered', now - 9 * DAY, now - 60_000),
      ])
      .execute();
    const server = await startServerProcess({
      DATABASE_URL: database.url,
      WEBHOOK_RETENTION_DAYS: '7',
      LOG_LEVEL: 'info',
    });
    defer(t, () => server.stop());
    let left: string[] = [];
    for (let waited = 0; waited < 15_000; waited += 100) {
      left = (await storage.db.selectFrom('webhook_deliveries').select('id').execute()).map((r) => r.id);
      if (left.length === 1) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.deepEqual(left, ['msg_today']);
    for (
      let waited = 0;
      waited < 5_000 && !server.output().includes('finished webhook deliveries removed');
      waited += 100
    ) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.match(server.output(), /"removed":1,.*"msg":"finished webhook deliveries removed"/);
  });
});

describe('webhook address guard (D21)', SQLITE_ONLY, () => {
  it('refuses every internal address spelling and non-http schemes when the URL is set; accepts a public literal', async (t) => {
    const server = await start(t, { WEBHOOK_ALLOW_PRIVATE: 'false' });
    const created = await server.services.keys.create({ name: 'guarded' });
    const keyId = created.apiKey.id;

    for (const url of REFUSED) {
      await assert.rejects(
        server.services.keys.setWebhook(keyId, url),
        (err: any) => err?.code === 'invalid_request',
        `setWebhook must refuse ${url}`,
      );
      await assert.rejects(
        server.services.keys.create({ name: 'refused at create', webhookUrl: url }),
        (err: any) => err?.code === 'invalid_request',
        `keys.create must refuse ${url}`,
      );
    }
    assert.equal(keyRow(server.databasePath, keyId).webhook_url, null, 'nothing was stored');

    // The administrator's tool refuses too (a few spellings; each run starts a process).
    const env = { DATABASE_URL: `sqlite:${server.databasePath}`, WEBHOOK_ALLOW_PRIVATE: 'false' };
    const cliRefused = ['http://[::ffff:127.0.0.1]/', 'http://localhost/'];
    const runs = await Promise.all(cliRefused.map((url) => fastpaste(['keys', 'webhook', keyId, url], env)));
    for (const [i, run] of runs.entries()) {
      assert.notEqual(run.code, 0, `keys webhook ${cliRefused[i]} must fail: ${run.stdout}`);
      assert.ok(run.stderr.trim().length > 0, `keys webhook ${cliRefused[i]} says why`);
    }
    assert.equal(keyRow(server.databasePath, keyId).webhook_url, null, 'the tool stored nothing either');

    // A public literal is accepted (no request is made for a literal; no paste is made with it).
    const accepted = await server.services.keys.setWebhook(keyId, 'http://93.184.216.34/hook');
    assert.match(accepted.secret ?? '', /^whsec_/);
    assert.equal(keyRow(server.databasePath, keyId).webhook_url, 'http://93.184.216.34/hook');
  });

  it('refuses a loopback literal at connection time when the URL was stored by hand', async (t) => {
    await refusedAtCallTime(t, (port) => `http://127.0.0.1:${port}/`);
  });

  it('refuses a name resolving to loopback (localhost) at connection time when stored by hand', async (t) => {
    await refusedAtCallTime(t, (port) => `http://localhost:${port}/`);
  });
});

/**
 * Puts `url` straight into api_keys (bypassing the set-time check) on a server without
 * WEBHOOK_ALLOW_PRIVATE, creates a paste, and expects a recorded, refused attempt and a receiver
 * on 127.0.0.1 that was never called.
 */
async function refusedAtCallTime(t: TestContext, urlFor: (port: number) => string): Promise<void> {
  const server = await start(t, { WEBHOOK_ALLOW_PRIVATE: 'false', WEBHOOK_TIMEOUT_MS: '1000' });
  const receiver = await startReceiver(t);
  const url = urlFor(receiver.port);
  const created = await server.services.keys.create({ name: 'stored by hand' });
  withDb(server.databasePath, (db) =>
    db
      .prepare('UPDATE api_keys SET webhook_url = ?, webhook_secret = ?, webhook_active = 1 WHERE id = ?')
      .run(url, `whsec_${randomBytes(32).toString('base64')}`, created.apiKey.id),
  );
  const pasteId = await createPaste(server, created.key, { content: 'bypassing the set-time check' });
  try {
    const attempts = await waitForAttempts(server, pasteId, 1, 5 * SECOND);
    const attempt = attempts[0] as AttemptRow;
    assert.equal(attempt.status_code, null, `${url}: no answer was received`);
    assert.ok(attempt.error, `${url}: the attempt records an error`);
    assert.doesNotMatch(attempt.error, /ECONNREFUSED|timed out/i, `${url}: refused by the guard`);
    assert.notEqual(deliveryFor(server.databasePath, pasteId)?.status, 'delivered');
  } finally {
    assert.equal(receiver.received.length, 0, `${url}: the receiver on 127.0.0.1 was never called`);
  }
}

// =============================================================================================
// The administrator's tool (D19)
// =============================================================================================

describe("the delivery's lookup at connection time (D21)", () => {
  it('makes at most two system lookups at a time and one of each name: the others wait, and one that waited its time-out fails unmade', async () => {
    const held: Array<() => void> = [];
    const asked: string[] = [];
    const turns = lookupTurns((host, _options, callback) => {
      asked.push(host);
      held.push(() => callback(null, '93.184.216.34', 4));
    }, 2);
    const answers: Record<string, string> = {};
    const look = (name: string, host: string, waitMs: number) =>
      turns(waitMs)(host, {}, (err) => {
        answers[name] = err ? `${(err as NodeJS.ErrnoException).code}` : 'answered';
      });
    look('a', 'dead.example', 10_000); // its name servers never answer
    look('a again', 'dead.example', 100); // the same name: waits, though a turn is free
    look('b', 'b.example', 10_000);
    look('c', 'c.example', 100); // behind two that do not answer
    look('d', 'd.example', 10_000);
    assert.deepEqual(asked, ['dead.example', 'b.example'], 'two at a time, one of each name');
    await new Promise((resolve) => setTimeout(resolve, 150));
    // Their time is up with every turn still taken: failed, not kept waiting for a turn.
    assert.deepEqual(answers, { 'a again': 'ETIMEOUT', c: 'ETIMEOUT' });
    held.splice(1, 1)[0]?.(); // b answers: d takes its turn
    assert.deepEqual(asked, ['dead.example', 'b.example', 'd.example'], 'the timed out never looked up');
    for (const answer of held.splice(0)) answer();
    assert.deepEqual(answers, { a: 'answered', 'a again': 'ETIMEOUT', b: 'answered', c: 'ETIMEOUT', d: 'answered' });
  });

  type Answer = string | Array<{ address: string; family: number }>;
  /** The guard over a resolver that answers `answer` for any name. */
  const lookupAnswering = (answer: Answer) =>
    new Promise<{ err: Error | null; address: Answer }>((resolve) => {
      const lookup = refusingLookup((_host, _options, callback) =>
        callback(null, answer as never, typeof answer === 'string' ? (answer.includes(':') ? 6 : 4) : undefined),
      );
      lookup('hooks.example', Array.isArray(answer) ? { all: true } : {}, (err, address) => resolve({ err, address }));
    });

  it('refuses an answer holding an internal or IPv4-compatible address, passes public ones as they are', async () => {
    for (const refused of [
      '::7f00:1', // ::127.0.0.1, IPv4-compatible
      '::a00:1',
      '127.0.0.1',
      '10.1.2.3',
      '::ffff:192.168.0.1',
      '::ffff:93.184.216.34',
      '168.63.129.16',
      [
        { address: '93.184.216.34', family: 4 },
        { address: '::7f00:1', family: 6 },
      ],
    ] as Answer[]) {
      const { err } = await lookupAnswering(refused);
      assert.ok(err, `${JSON.stringify(refused)} passed`);
      assert.match(err.message, /^hooks\.example resolves to /);
    }
    for (const passed of [
      '93.184.216.34',
      '2606:2800:220:1:248:1893:25c8:1946',
      [
        { address: '93.184.216.34', family: 4 },
        { address: '2606:2800:220:1:248:1893:25c8:1946', family: 6 },
      ],
    ] as Answer[]) {
      const { err, address } = await lookupAnswering(passed);
      assert.equal(err, null, `${JSON.stringify(passed)}: ${err?.message}`);
      assert.deepEqual(address, passed);
    }
  });
});

describe('fastpaste keys webhook / deliveries / redeliver', SQLITE_ONLY, () => {
  it('creates with a secret, rotates it, lists deliveries with attempts, redelivers with the same id, and clears', async (t) => {
    const server = await start(t);
    let failNext = true;
    const receiver = await startReceiver(t, (_req, res) => {
      const status = failNext ? 500 : 200;
      failNext = false;
      res.writeHead(status);
      res.end(String(status));
    });
    const env = { DATABASE_URL: `sqlite:${server.databasePath}`, WEBHOOK_ALLOW_PRIVATE: 'true' };

    // keys create --webhook --json: D19's shape, with a whsec_ secret.
    const made = await fastpaste(['keys', 'create', '--name', 'cli hook', '--webhook', receiver.url, '--json'], env);
    assertOk(made, 'keys create --webhook --json');
    const createdJson = JSON.parse(made.stdout) as { key: string; name: string; webhook_secret: string };
    assert.deepEqual(Object.keys(createdJson).sort(), ['key', 'name', 'webhook_secret']);
    assert.equal(createdJson.name, 'cli hook');
    assert.match(createdJson.webhook_secret, /^whsec_[A-Za-z0-9+/]+={0,2}$/);
    const { key, webhook_secret: secret1 } = createdJson;

    // A first paste: 500 once, then delivered; signed with the first secret.
    const paste1 = await createPaste(server, key, { content: 'first, before rotation' });
    await receiver.waitFor(2, 10 * SECOND);
    await waitForStatus(server, paste1, 'delivered', 5 * SECOND);
    for (const received of receiver.received) new Webhook(secret1).verify(received.body, webhookHeaders(received));

    // keys webhook <key> <url>: a new secret, shown once; later deliveries verify with it only.
    const rotated = await fastpaste(['keys', 'webhook', key, receiver.url], env);
    assertOk(rotated, 'keys webhook (rotate)');
    const secret2 = /whsec_[A-Za-z0-9+/]+={0,2}/.exec(rotated.stdout)?.[0];
    assert.ok(secret2, `a new secret is printed: ${rotated.stdout}`);
    assert.notEqual(secret2, secret1);
    const paste2 = await createPaste(server, key, { content: 'second, after rotation' });
    await receiver.waitFor(3, 10 * SECOND);
    const afterRotation = receiver.received[2] as Received;
    assert.equal(payloadOf(afterRotation).paste_id, paste2);
    new Webhook(secret2).verify(afterRotation.body, webhookHeaders(afterRotation));
    assert.throws(() => new Webhook(secret1).verify(afterRotation.body, webhookHeaders(afterRotation)));
    await waitForStatus(server, paste2, 'delivered', 5 * SECOND);

    // keys deliveries <key> --json: status, attempts, time and error, per delivery and attempt.
    const [listed, unknown, mistaken] = await Promise.all([
      fastpaste(['keys', 'deliveries', key, '--json'], env),
      fastpaste(['keys', 'redeliver', 'msg_doesnotexist'], env),
      // A key pasted where a delivery id goes is not printed whole.
      fastpaste(['keys', 'redeliver', key], env),
    ]);
    assertOk(listed, 'keys deliveries --json');
    assert.notEqual(unknown.code, 0, 'an unknown delivery id is an error');
    assert.equal(unknown.stderr.trim(), 'fastpaste: No webhook delivery "msg_doe…".');
    assert.equal(mistaken.code, 1, mistaken.stderr);
    assert.ok(!`${mistaken.stdout}${mistaken.stderr}`.includes(key.slice(7)), mistaken.stderr);
    const shown = JSON.parse(listed.stdout) as Array<{
      id: string;
      paste_id: string;
      status: string;
      attempts: number;
      created_at: string;
      last_error: string | null;
      history: Array<{ at: string; status_code: number | null; error: string | null; duration_ms: number }>;
    }>;
    assert.equal(shown.length, 2);
    const first = shown.find((d) => d.paste_id === paste1);
    const second = shown.find((d) => d.paste_id === paste2);
    assert.ok(first && second, listed.stdout);
    assert.equal(first.status, 'delivered');
    assert.equal(first.attempts, 2);
    assert.match(first.created_at, TIMESTAMP);
    assert.deepEqual(
      first.history.map((a) => a.status_code),
      [500, 200],
    );
    assert.match(first.history[0]?.error ?? '', /500/);
    assert.equal(first.history[1]?.error, null);
    for (const a of first.history) {
      assert.match(a.at, TIMESTAMP);
      assert.equal(typeof a.duration_ms, 'number');
    }
    assert.equal(first.id, header(receiver.received[0] as Received, 'webhook-id'));
    assert.equal(second.status, 'delivered');
    assert.equal(second.attempts, 1);

    // keys redeliver <delivery-id>: the running server sends it again, same webhook-id.
    const redelivered = await fastpaste(['keys', 'redeliver', second.id], env);
    assertOk(redelivered, 'keys redeliver');
    await receiver.waitFor(4, 10 * SECOND);
    const again = receiver.received[3] as Received;
    assert.equal(header(again, 'webhook-id'), second.id);
    assert.equal(payloadOf(again).paste_id, paste2);
    assert.equal(again.body, afterRotation.body, 'the same body');
    new Webhook(secret2).verify(again.body, webhookHeaders(again));

    // keys webhook <key> --clear: no more deliveries.
    const cleared = await fastpaste(['keys', 'webhook', key, '--clear'], env);
    assertOk(cleared, 'keys webhook --clear');
    const paste3 = await createPaste(server, key, { content: 'third, after clear' });
    await sleep(1500);
    assert.equal(receiver.received.length, 4, 'nothing is sent after --clear');
    assert.notEqual(deliveryFor(server.databasePath, paste3)?.status, 'delivered');
  });

  it('keys redeliver refuses a delivery being sent right now, which would be sent twice at once; after it ends, redelivers', async (t) => {
    const server = await start(t);
    let hold: (() => void) | null = null;
    const receiver = await startReceiver(t, (_req, res, _received, index) => {
      if (index > 0) return void res.end('ok');
      hold = () => res.end('ok'); // the first send is held: its worker's claim stands
    });
    const env = { DATABASE_URL: `sqlite:${server.databasePath}`, WEBHOOK_ALLOW_PRIVATE: 'true' };
    const made = await fastpaste(['keys', 'create', '--name', 'held hook', '--webhook', receiver.url, '--json'], env);
    assertOk(made, 'keys create --webhook --json');
    const { key } = JSON.parse(made.stdout) as { key: string };
    const pasteId = await createPaste(server, key, { content: 'held at the receiver' });
    await receiver.waitFor(1, 10 * SECOND);
    const deliveryId = header(receiver.received[0] as Received, 'webhook-id');

    const refused = await fastpaste(['keys', 'redeliver', deliveryId], env);
    assert.notEqual(refused.code, 0, `redelivered while being sent: ${refused.stdout}`);
    assert.match(refused.stderr, /is being sent right now/);
    await sleep(1500);
    assert.equal(receiver.received.length, 1, 'sent a second time while the first was out');

    (hold as unknown as () => void)();
    await waitForStatus(server, pasteId, 'delivered', 5 * SECOND);
    const redelivered = await fastpaste(['keys', 'redeliver', deliveryId], env);
    assertOk(redelivered, 'keys redeliver after the send ended');
    await receiver.waitFor(2, 10 * SECOND);
    assert.equal(header(receiver.received[1] as Received, 'webhook-id'), deliveryId);
  });
});
