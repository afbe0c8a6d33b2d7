/**
 * Security properties over real HTTP on 127.0.0.1 (issue 7): only the owner writes or lists its
 * pastes (D14); keys and paste passwords never reach the database or a trace-level log in clear
 * (D13, D19); the security headers are on every answer; uploaded file names never reach a header
 * or a page unescaped (D17); the webhook address guard refuses every internal spelling (D21);
 * X-Forwarded-For counts only with TRUST_PROXY (D2); and 404s are throttled per address, so ids
 * and slugs cannot be enumerated at speed.
 *
 * What other files already check is named where it applies rather than repeated.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import ipaddr from 'ipaddr.js';
import pino from 'pino';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { loadConfig } from '../src/config.js';
import { JSON_BODY_LIMIT } from '../src/http/api/paste-routes.js';
import { NotFoundThrottle } from '../src/http/not-found-throttle.js';
import { escapeHtml } from '../src/http/web/pages.js';
import { apiKeyDigest } from '../src/keys/api-key-format.js';
import { LimiterCounterStore } from '../src/keys/counter-store.js';
import { checkWebhookUrl } from '../src/webhooks/address-guard.js';
import { sendWebhook } from '../src/webhooks/webhook-sender.js';
import {
  databaseContains,
  encryptForTest,
  expectError,
  freshDatabase,
  ManualClock,
  pipelinedAnswers,
  queryDatabase,
  request,
  sqlText,
  startServer,
  type TestServer,
} from './helpers.js';
import { fastpaste, startServerProcess } from './server-process.js';

type Result = Awaited<ReturnType<typeof request>>;

const MINUTE = 60_000;

/** A secret of letters and digits only, so that no encoding (URL, JSON, form) can hide it from a search. */
const secret = (label: string): string => `${label}${randomBytes(12).toString('hex')}`;

async function createPaste(server: TestServer, key: string, json: Record<string, unknown>): Promise<string> {
  const created = await request(`${server.url}/api/v1/paste`, { method: 'POST', headers: { 'x-api-key': key }, json });
  assert.equal(created.status, 201, created.text);
  return created.body.data.paste_id as string;
}

async function pasteRow(server: TestServer, id: string): Promise<Record<string, unknown> | undefined> {
  return (await server.sql(`SELECT * FROM pastes WHERE id = ${sqlText(id)}`))[0];
}

/** A multipart body built by hand, so that file names reach the server exactly as written. */
function multipart(parts: Array<{ disposition: string; type?: string; data: string }>): {
  body: string;
  contentType: string;
} {
  const boundary = `----fastpaste${randomBytes(8).toString('hex')}`;
  const chunks = parts.map(
    (part) =>
      `--${boundary}\r\nContent-Disposition: ${part.disposition}\r\n` +
      (part.type ? `Content-Type: ${part.type}\r\n` : '') +
      `\r\n${part.data}\r\n`,
  );
  return {
    // A string: fetch sends it as UTF-8, the bytes a browser would send.
    body: `${chunks.join('')}--${boundary}--\r\n`,
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

/** Writes bytes on a new connection and returns what comes back before it closes (at most 2 s). */
function sendRaw(port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    let answer = '';
    const socket = net.connect(port, '127.0.0.1', () => socket.write(text));
    const timer = setTimeout(() => socket.destroy(), 2000);
    socket.on('data', (data) => {
      answer += data.toString('latin1');
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(answer);
    });
  });
}

/** The text of every Buffer in a JSON log line ({"type":"Buffer","data":[...]}), as Latin-1. */
function logBuffersText(line: string): string {
  const texts: string[] = [];
  try {
    JSON.parse(line, (_name, value) => {
      if (value && value.type === 'Buffer' && Array.isArray(value.data))
        texts.push(Buffer.from(value.data).toString('latin1'));
      return value;
    });
  } catch {}
  return texts.join(' ');
}

/** A HEAD request (no body to parse). */
async function head(url: string, headers: Record<string, string> = {}): Promise<Result> {
  const response = await fetch(url, { method: 'HEAD', headers });
  return { status: response.status, headers: response.headers, body: null, text: '' };
}

/** Raw headers of one answer, as sent (fetch would join repeated headers). */
function rawGet(url: string, headers: Record<string, string> = {}): Promise<{ status: number; raw: string[] }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, raw: res.rawHeaders }));
    });
    req.on('error', reject);
  });
}

// =============================================================================================
// (1) Only the owner writes and lists (D14)
// =============================================================================================

describe('only the owner can update, delete or list its pastes (D14)', () => {
  // paste-lifecycle.test.ts checks one PUT and one DELETE by another key and the other key's
  // list; here every writing route, every updatable field, protected and view-once pastes,
  // method tricks and a burst in parallel, with the whole stored row compared.
  let server: TestServer;
  let owner: string;
  let other: string;
  let plain: string;
  let guarded: string;
  let encrypted: { wire: string; key: string };
  const PASSWORD = secret('pw');

  before(async () => {
    server = await startServer();
    owner = await server.createKey({ name: 'owner' });
    other = await server.createKey({ name: 'other' });
    plain = await createPaste(server, owner, {
      content: 'the owner wrote this',
      title: 'owner title',
      description: 'owner description',
      language: 'markdown',
      expiry: '1w',
      public: true,
    });
    guarded = await createPaste(server, owner, { content: 'protected and view once', password: PASSWORD, burn: true });
    await createPaste(server, other, { content: 'the other key wrote this' });
    encrypted = await encryptForTest('replacement by a stranger');
  });
  after(() => server.close());

  const send = (method: string, path: string, key: string, json?: unknown) =>
    request(`${server.url}${path}`, { method, headers: { 'x-api-key': key }, ...(json === undefined ? {} : { json }) });

  /** Every field PUT accepts, each in a request of its own, including those that would lift a protection. */
  const updates = (): Array<Record<string, unknown>> => [
    { content: 'hijacked content' },
    { title: 'hijacked' },
    { title: null },
    { description: 'hijacked' },
    { description: null },
    { expiry: 'never' },
    { expiry: '10m' },
    { burn: true },
    { burn: false },
    { password: 'taken over' },
    { password: null },
    { password: '' },
    { language: 'python' },
    { downloadable: true },
    { content: encrypted.wire, encrypt: true, key: encrypted.key },
    { title: 'all at once', content: 'all at once', password: null, burn: false, expiry: 'never' },
  ];

  it('PUT by another key is 403 forbidden for every field, says nothing of the paste, and changes no column', async () => {
    for (const id of [plain, guarded]) {
      const before = await pasteRow(server, id);
      for (const body of updates()) {
        const refused = await send('PUT', `/api/v1/paste/${id}`, other, body);
        expectError(refused, 403, 'forbidden');
        assert.doesNotMatch(refused.text, /owner wrote|owner title|protected and view once/, 'nothing leaks');
        assert.deepEqual(await pasteRow(server, id), before, `${id}: ${JSON.stringify(body)} changed the row`);
      }
    }
  });

  it('DELETE by another key is 403 forbidden and the paste stays (a view-once paste is not consumed)', async () => {
    for (const id of [plain, guarded]) {
      const before = await pasteRow(server, id);
      expectError(await send('DELETE', `/api/v1/paste/${id}`, other), 403, 'forbidden');
      assert.deepEqual(await pasteRow(server, id), before);
    }
    // The protection is intact: still asks for the password.
    expectError(await request(`${server.url}/raw/${guarded}`), 403, 'password_protected');
  });

  it('other methods on a paste address are 405 and change nothing, whatever the override headers say', async () => {
    const before = await pasteRow(server, plain);
    const attempts: Array<[string, string, Record<string, string>]> = [
      ['PATCH', `/api/v1/paste/${plain}`, {}],
      ['POST', `/api/v1/paste/${plain}`, {}],
      ['POST', `/api/v1/paste/${plain}`, { 'x-http-method-override': 'DELETE' }],
      ['POST', `/api/v1/paste/${plain}?_method=DELETE`, {}],
      ['PUT', `/api/v1/paste/${plain}/raw`, {}],
      ['DELETE', `/api/v1/paste/${plain}/raw`, {}],
      ['PATCH', '/api/v1/pastes', {}],
      ['DELETE', '/api/v1/pastes', {}],
      ['DELETE', `/view/${plain}`, {}],
      ['PUT', `/raw/${plain}`, {}],
      ['DELETE', `/download/${plain}`, {}],
    ];
    for (const key of [other, owner]) {
      for (const [method, path, headers] of attempts) {
        const result = await request(`${server.url}${path}`, {
          method,
          headers: { 'x-api-key': key, ...headers },
          json: { title: 'changed by a method trick' },
        });
        expectError(result, 405, 'method_not_allowed');
      }
    }
    assert.deepEqual(await pasteRow(server, plain), before);
  });

  it('CONNECT (a proxy method) is answered 405 in the envelope with Allow and the security headers, not a dropped connection', async () => {
    for (const target of ['example.com:443', `/api/v1/paste/${plain}`]) {
      const answer = await sendRaw(
        Number(new URL(server.url).port),
        `CONNECT ${target} HTTP/1.1\r\nHost: example.com:443\r\n\r\n`,
      );
      assert.match(answer, /^HTTP\/1\.1 405 /, `CONNECT ${target}: ${JSON.stringify(answer)}`);
      const [head = '', body = ''] = answer.split('\r\n\r\n');
      assert.match(head, /\r\nallow: GET, HEAD, POST, PUT, DELETE\r\n/i);
      assert.match(head, /\r\nx-content-type-options: nosniff\r\n/i);
      assert.equal((JSON.parse(body) as { code: string }).code, 'method_not_allowed');
    }
    // A client that resets the connection at once (before or while the answer is written) and
    // one that keeps it open sending more: the server stays up, and closes the second itself.
    const port = Number(new URL(server.url).port);
    for (let i = 0; i < 5; i++) {
      const reset = net.connect(port, '127.0.0.1', () => {
        reset.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n');
        reset.resetAndDestroy();
      });
      reset.on('error', () => {});
    }
    // Half-open: it reads the answer and its end, never ends its own side, and keeps writing.
    const lingering = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    lingering.on('error', () => {});
    lingering.resume();
    const closed = new Promise<number>((resolve) => {
      const started = Date.now();
      lingering.on('close', () => resolve(Date.now() - started));
    });
    lingering.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n');
    const more = setInterval(() => lingering.writable && lingering.write('more bytes, never an end'), 200);
    try {
      const after = await Promise.race([
        closed,
        new Promise<number>((resolve) => setTimeout(() => resolve(-1), 10_000)),
      ]);
      assert.ok(after >= 0, 'the server never closed a refused CONNECT');
    } finally {
      clearInterval(more);
      lingering.destroy();
    }
    expectError(await request(`${server.url}/api/v1/paste/${plain}`), 401, 'api_key_missing');
  });

  it('a connection refused by the parser (400) is closed by the server even when its client never ends its side', async () => {
    const port = Number(new URL(server.url).port);
    for (const [what, sent] of [
      ['not HTTP', 'X\r\n\r\n'],
      ['a header line that is none', 'GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n'],
    ] as const) {
      // The server's side of the connection, to see it closed.
      const accepted: net.Socket[] = [];
      const seen = (socket: net.Socket) => accepted.push(socket);
      server.app.server.on('connection', seen);
      // Half-open: it reads the answer and its end, then sends nothing and never ends its side.
      const client = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
      client.on('error', () => {});
      await new Promise((resolve) => client.once('connect', resolve));
      let serverSide: net.Socket | undefined;
      for (let i = 0; i < 100 && !serverSide; i++) {
        serverSide = accepted.find((socket) => socket.remotePort === client.localPort);
        if (!serverSide) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      server.app.server.off('connection', seen);
      assert.ok(serverSide, `${what}: the server's side not seen`);
      client.write(sent);
      const serverClosed = new Promise<boolean>((resolve) => {
        if (serverSide.destroyed) resolve(true);
        serverSide.once('close', () => resolve(true));
        setTimeout(() => resolve(false), 8000);
      });
      let answer = '';
      client.on('data', (chunk: Buffer) => {
        answer += chunk.toString('latin1');
      });
      try {
        assert.ok(await serverClosed, `${what}: the server kept the half-closed connection`);
        assert.match(answer, /^HTTP\/1\.1 400 /, `${what}: ${JSON.stringify(answer.slice(0, 80))}`);
      } finally {
        client.destroy();
      }
    }
  });

  it('a CONNECT pipelined behind other requests is answered after them, each answer whole and in order', async () => {
    for (let i = 0; i < 3; i++) {
      const answers = await pipelinedAnswers(server.url, [
        `GET /api/v1/paste/${plain} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${owner}\r\n\r\n`,
        `GET /raw/${plain} HTTP/1.1\r\nHost: x\r\n\r\n`,
        'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n',
      ]);
      assert.deepEqual(
        answers.map((answer) => answer.status),
        [200, 200, 405],
      );
      assert.equal((JSON.parse(answers[0]?.body ?? '') as { data: { paste_id: string } }).data.paste_id, plain);
      assert.equal((JSON.parse(answers[2]?.body ?? '') as { code: string }).code, 'method_not_allowed');
    }
  });

  it("a CONNECT waiting behind an answer its client never reads is closed with every connection (the shutdown's deadline)", async (t) => {
    // A server of its own: every connection of it is closed below.
    const own = await startServer();
    t.after(() => own.close());
    const big = await createPaste(own, await own.createKey({ name: 'big' }), {
      content: 'y'.repeat(4 * 1024 * 1024 - 1024),
    });
    const socket = net.connect(Number(new URL(own.url).port), '127.0.0.1');
    socket.on('error', () => {});
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    const read = `GET /raw/${big} HTTP/1.1\r\nHost: x\r\n\r\n`;
    // Three reads of 4 MB that the client never reads: the refusal waits behind their answers.
    socket.write(`${read}${read}${read}CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n`);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.ok(!socket.destroyed, 'the connection is still open before the deadline');
    own.app.server.closeAllConnections();
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Now read: a connection the server closed gives what it had sent, then its end. One still
    // open would go on to the three answers and the refusal.
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
    });
    const after = await Promise.race([
      closed.then(() => 'closed'),
      new Promise((resolve) => setTimeout(() => resolve('still open 3 s after'), 3000)),
    ]);
    socket.destroy();
    assert.equal(after, 'closed');
    assert.ok(!received.includes('HTTP/1.1 405'), 'the refusal was written: the connection was not closed');
    // The server goes on answering.
    expectError(await request(`${own.url}/api/v1/paste/${big}`), 401, 'api_key_missing');
  });

  /**
   * Sends `head` and then a body that goes on for as long as the connection takes it (1 KB every
   * 20 ms); returns what came back and whether the server closed the connection within 5 s.
   */
  async function withEndlessBody(head: string): Promise<{ after: unknown; received: string }> {
    const socket = net.connect(Number(new URL(server.url).port), '127.0.0.1');
    socket.on('error', () => {});
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
    });
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.write(head);
    const chunk = head.includes('Transfer-Encoding: chunked') ? `400\r\n${'z'.repeat(0x400)}\r\n` : 'z'.repeat(0x400);
    const more = setInterval(() => socket.writable && socket.write(chunk), 20);
    try {
      const after = await Promise.race([
        closed.then(() => 'closed'),
        new Promise((resolve) => setTimeout(() => resolve('still reading 5 s after'), 5000)),
      ]);
      return { after, received };
    } finally {
      clearInterval(more);
      socket.destroy();
    }
  }

  it('a success answered before the body ended closes the connection: the rest of a body no route reads is not read', async () => {
    const deleter = await server.createKey({ name: 'deleter' });
    const id = await createPaste(server, deleter, { content: 'deleted with a body that never ends' });
    const { after, received } = await withEndlessBody(
      `DELETE /api/v1/paste/${id} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${deleter}\r\n` +
        'Content-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n',
    );
    assert.equal(after, 'closed');
    assert.match(received, /^HTTP\/1\.1 200 /);
    assert.match(received, /\r\nconnection: close\r\n/i);
    expectError(
      await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': deleter } }),
      404,
      'not_found',
    );
  });

  it('so does a read whose GET carries a body, on the paths the fast lane answers too', async () => {
    const reader = await server.createKey({ name: 'reader' });
    const id = await createPaste(server, reader, { content: 'read with a body that never ends' });
    const paths = [`/raw/${id}`, `/view/${id}`, `/api/v1/paste/${id}`, '/api/v1/pastes'];
    for (const framing of ['Transfer-Encoding: chunked', 'Content-Length: 100000000']) {
      for (const path of paths) {
        // The key looked up just before (through the framework), so the lane would answer its reads.
        await request(`${server.url}/api/v1/pastes?page=%31`, { headers: { 'x-api-key': reader } });
        const { after, received } = await withEndlessBody(
          `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${reader}\r\n${framing}\r\n\r\n`,
        );
        assert.equal(after, 'closed', `${path}, ${framing}`);
        assert.match(received, /^HTTP\/1\.1 200 /, `${path}, ${framing}`);
        assert.match(received, /\r\nconnection: close\r\n/i, `${path}, ${framing}`);
      }
    }
  });

  it('a burst of 40 parallel PUTs and DELETEs by another key are all refused; the paste is intact', async () => {
    const before = await pasteRow(server, plain);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 === 0
          ? send('PUT', `/api/v1/paste/${plain}`, other, { content: `race ${i}` })
          : send('DELETE', `/api/v1/paste/${plain}`, other),
      ),
    );
    for (const result of results) expectError(result, 403, 'forbidden');
    assert.deepEqual(await pasteRow(server, plain), before);
  });

  it("the list never shows another key's pastes, on any page, and takes no owner from the query", async () => {
    const ids = async (key: string, query = '') => {
      const list = await send('GET', `/api/v1/pastes${query}`, key);
      assert.equal(list.status, 200, list.text);
      return { ids: list.body.data.map((p: { paste_id: string }) => p.paste_id), total: list.body.pagination.total };
    };
    const mine = await ids(other, '?limit=100');
    assert.equal(mine.total, 1);
    assert.equal(mine.ids.includes(plain) || mine.ids.includes(guarded), false);
    for (let page = 1; page <= 3; page++) {
      const seen = await ids(other, `?limit=1&page=${page}`);
      assert.equal(seen.ids.includes(plain) || seen.ids.includes(guarded), false, `page ${page}`);
    }
    const owners = await ids(owner, '?limit=100');
    assert.deepEqual(new Set(owners.ids), new Set([plain, guarded]));
    // No parameter names another owner: each is refused rather than silently honoured.
    for (const query of [`?owner=${owner}`, `?key=${owner}`, `?api_key=${owner}`, '?owner_key_id=k_1']) {
      expectError(await send('GET', `/api/v1/pastes${query}`, other), 400, 'invalid_request');
    }
  });

  it('the owner itself still can (the control): PUT, then DELETE', async () => {
    const id = await createPaste(server, owner, { content: 'the control paste' });
    const updated = await send('PUT', `/api/v1/paste/${id}`, owner, { title: 'mine' });
    assert.equal(updated.status, 200, updated.text);
    assert.equal((await pasteRow(server, id))?.title, 'mine');
    assert.equal((await send('DELETE', `/api/v1/paste/${id}`, owner)).status, 200);
    assert.equal(await pasteRow(server, id), undefined);
  });
  // Ownerless (keyless quick-create) pastes: paste-lifecycle.test.ts, "an ownerless paste ...".
});

// =============================================================================================
// (2) Secrets in the database and in the log
// =============================================================================================

describe('keys and paste passwords never reach the database or the log in clear (D13, D19)', () => {
  // paste-create.test.ts checks that a create's password is stored only as an argon2id hash and
  // that the E2E key is stored nowhere; here the real binary logging at trace level, and every
  // way a key or a password reaches the server, searched for in the log, the database and Redis.
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let server: Awaited<ReturnType<typeof startServerProcess>>;
  let key: string;
  let tampered: string;
  const redisUrl = process.env.TEST_REDIS_URL;
  const api = (path: string, init: Parameters<typeof request>[1] = {}) =>
    request(`${server.url}${path}`, { ...init, headers: { 'x-api-key': key, ...init.headers } });

  before(async () => {
    db = await freshDatabase();
    const env: Record<string, string> = {
      DATABASE_URL: db.url,
      LOG_LEVEL: 'trace',
      ...(redisUrl ? { REDIS_URL: redisUrl } : {}),
    };
    // The key is made by the administrator's tool, as in production: its output is the one
    // place the key is ever shown.
    const made = await fastpaste(['keys', 'create', '--name', 'secret-test', '--json'], env);
    assert.equal(made.code, 0, made.stderr);
    key = JSON.parse(made.stdout).key as string;
    tampered = `${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`;
    server = await startServerProcess(env);
  });
  after(async () => {
    await server?.stop('SIGKILL');
    await db?.drop();
  });

  /** The log so far, once the server has written what it had. */
  const logSoFar = async (): Promise<string> => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    return server.output();
  };

  /**
   * Fails naming the first log line that holds a secret (with the secret masked), as text or
   * inside a logged Buffer (pino writes those as arrays of bytes).
   */
  const assertNotInLog = (log: string, secrets: Record<string, string>) => {
    const lines = log.split('\n').map((line) => `${line} ${logBuffersText(line)}`);
    for (const [name, value] of Object.entries(secrets)) {
      const line = lines.find((l) => l.includes(value));
      assert.equal(line, undefined, `the log holds ${name}: ${line?.replaceAll(value, `<${name}>`).slice(0, 600)}`);
    }
  };

  const assertNotStored = async (secrets: Record<string, string>) => {
    for (const [name, value] of Object.entries(secrets)) {
      assert.equal(await databaseContains(db.url, value), false, `the database holds ${name}`);
    }
    if (!redisUrl) return;
    const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
    try {
      const names = await redis.keys('fastpaste:*');
      const values = await Promise.all(names.map((name) => redis.dumpBuffer(name)));
      const text = `${names.join('\n')}\n${values.map((v) => v?.toString('latin1') ?? '').join('\n')}`;
      for (const [name, value] of Object.entries(secrets)) assert.ok(!text.includes(value), `Redis holds ${name}`);
    } finally {
      redis.disconnect();
    }
  };

  it('JSON, form and header requests: only the key digest and argon2id hashes are stored; a trace log holds neither', async () => {
    const url = server.url;
    const secrets = {
      createPassword: secret('createpw'),
      newPassword: secret('putpw'),
      wrongHeader: secret('wrongheader'),
      wrongForm: secret('wrongform'),
      inBadJson: secret('badjsonpw'),
      inRefusedCreate: secret('refusedpw'),
      inQuickCreateForm: secret('cliformpw'),
    };
    const content = `content-${randomBytes(8).toString('hex')}`;

    // Passwords on create and on update, right and wrong on /raw and /view.
    const first = await api('/api/v1/paste', {
      method: 'POST',
      json: { content, password: secrets.createPassword, title: 'secret test' },
    });
    assert.equal(first.status, 201, first.text);
    const id = first.body.data.paste_id as string;
    assert.equal(
      (await api(`/api/v1/paste/${id}`, { method: 'PUT', json: { password: secrets.newPassword } })).status,
      200,
    );
    assert.equal(
      (await request(`${url}/raw/${id}`, { headers: { 'x-paste-password': secrets.newPassword } })).status,
      200,
    );
    for (const wrong of [secrets.wrongHeader, secrets.createPassword]) {
      expectError(await request(`${url}/raw/${id}`, { headers: { 'x-paste-password': wrong } }), 403, 'wrong_password');
    }
    expectError(
      await request(`${url}/download/${id}`, { headers: { 'x-paste-password': secrets.wrongHeader } }),
      403,
      'wrong_password',
    );
    const viewForm = (password: string) =>
      request(`${url}/view/${id}`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ confirm: '1', password }).toString(),
      });
    assert.equal((await viewForm(secrets.wrongForm)).status, 403);
    assert.equal((await viewForm(secrets.newPassword)).status, 200);

    // Refused requests that carry a secret: the answer does not echo it either.
    const badJson = await api('/api/v1/paste', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `{"content": "abc", "password": "${secrets.inBadJson}", `,
    });
    expectError(badJson, 400, 'invalid_request');
    const refused = await api('/api/v1/paste', {
      method: 'POST',
      json: { content: 'abc def', password: secrets.inRefusedCreate, colour: 'red', expiry: 'soon' },
    });
    expectError(refused, 400, 'invalid_request');
    const cliForm = await request(`${url}/api/v1/cli`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ content: 'quick', password: secrets.inQuickCreateForm }).toString(),
    });
    expectError(cliForm, 400, 'invalid_request');
    for (const [what, answer] of [
      ['malformed JSON', badJson],
      ['refused create', refused],
      ['quick-create form', cliForm],
    ] as const) {
      for (const value of Object.values(secrets)) assert.ok(!answer.text.includes(value), `${what} echoes a secret`);
    }

    // The key: on every API route, and refused when tampered with or sent the wrong way.
    assert.equal((await api(`/api/v1/paste/${id}`)).status, 403); // password_protected
    assert.equal((await api('/api/v1/pastes?limit=5')).status, 200);
    const keyedCli = await api('/api/v1/cli', {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'keyed quick create',
    });
    assert.equal(keyedCli.status, 201);
    expectError(await request(`${url}/api/v1/pastes`, { headers: { 'x-api-key': tampered } }), 403, 'api_key_invalid');
    for (const headers of [{ authorization: `Bearer ${key}` }, { cookie: `key=${key}` }] as Array<
      Record<string, string>
    >) {
      expectError(await request(`${url}/api/v1/pastes`, { headers }), 401, 'api_key_missing');
    }
    const second = await api('/api/v1/paste', { method: 'POST', json: { content: 'to be deleted' } });
    assert.equal((await api(`/api/v1/paste/${second.body.data.paste_id}`, { method: 'DELETE' })).status, 200);

    // A request Node cannot parse is logged at trace level (the control that the level is trace).
    await sendRaw(server.port, 'NOT HTTP AT ALL\r\n\r\n');
    const log = await logSoFar();
    // The controls: the log is at trace level and names the requests; the database search finds
    // what is stored (the content, the key's digest).
    assert.match(log, /"level":10/, 'trace lines are in the log');
    assert.ok(log.includes(`/raw/${id}`), 'the log names the requests');
    assert.ok(await databaseContains(db.url, content), 'the search finds stored content');
    assert.ok(await databaseContains(db.url, apiKeyDigest(key)), 'the key is stored as its SHA-256 digest');
    const [row] = await queryDatabase(db.url, `SELECT password_hash FROM pastes WHERE id = ${sqlText(id)}`);
    assert.match(String(row?.password_hash), /^\$argon2id\$/, 'the password is stored as an argon2id hash');

    const everything = { key, tampered, ...secrets };
    assertNotInLog(log, everything);
    await assertNotStored(everything);
  });

  it('a multipart upload and a request Node cannot parse: the key and the password are not in a trace log', {}, async () => {
    const uploadPassword = secret('uploadpw');
    const form = new FormData();
    form.append('file', new Blob(['uploaded text with a password'], { type: 'text/plain' }), 'notes.txt');
    form.append('password', uploadPassword);
    const uploaded = await api('/api/v1/paste', {
      method: 'POST',
      body: form,
      headers: { 'x-paste-password': uploadPassword, cookie: `session=${uploadPassword}` },
    });
    assert.equal(uploaded.status, 201, uploaded.text);
    const id = uploaded.body.data.paste_id as string;
    const [row] = await queryDatabase(db.url, `SELECT password_hash FROM pastes WHERE id = ${sqlText(id)}`);
    assert.match(String(row?.password_hash), /^\$argon2id\$/);
    await assertNotStored({ key, uploadPassword });
    // A request with a malformed header line, carrying the key and a password.
    const answer = await sendRaw(
      server.port,
      `GET /api/v1/pastes HTTP/1.1\r\nHost: x\r\nX-API-Key: ${key}\r\nX-Paste-Password: ${uploadPassword}\r\nNot A Header\r\n\r\n`,
    );
    assert.match(answer, /^HTTP\/1\.1 400/);
    assertNotInLog(await logSoFar(), { key, uploadPassword });
  });

  it('the server stops cleanly after all that (SIGTERM, exit 0), and the files still hold no secret', async () => {
    assert.equal(await server.stop('SIGTERM'), 0, server.output().slice(-2000));
    await assertNotStored({ key, tampered });
  });
});

// =============================================================================================
// (3) Security headers on every answer
// =============================================================================================

/** The CSP, checked directive by directive, and the other headers. */
function assertSecurityHeaders(result: { headers: Headers; status: number }, what: string): void {
  const csp = result.headers.get('content-security-policy');
  assert.ok(csp, `${what} (${result.status}): no Content-Security-Policy`);
  const directives = new Map(
    csp
      .split(';')
      .map((d) => d.trim().split(/\s+/))
      .filter((d) => d[0])
      .map((d) => [d[0]?.toLowerCase() as string, d.slice(1)]),
  );
  assert.deepEqual(directives.get('frame-ancestors'), ["'none'"], `${what}: frame-ancestors 'none'`);
  assert.deepEqual(directives.get('default-src'), ["'none'"], `${what}: default-src 'none'`);
  const scripts = directives.get('script-src') ?? directives.get('default-src') ?? [];
  for (const unsafe of ["'unsafe-inline'", "'unsafe-eval'", '*', 'data:', 'http:', 'https:']) {
    assert.ok(!scripts.includes(unsafe), `${what}: script-src allows ${unsafe}`);
  }
  assert.doesNotMatch(csp, /unsafe-inline/, `${what}: unsafe-inline somewhere in the CSP`);
  assert.equal(result.headers.get('referrer-policy'), 'no-referrer', `${what}: Referrer-Policy`);
  assert.equal(result.headers.get('x-content-type-options'), 'nosniff', `${what}: X-Content-Type-Options`);
}

/** What the CSP would block, so a page that needs it would be broken: inline script, handlers, styles. */
function assertNoInlineCode(html: string, what: string): void {
  for (const match of html.matchAll(/<script\b([^>]*)>/gi)) {
    assert.match(match[1] ?? '', /\bsrc="\/static\//, `${what}: an inline or foreign <script>`);
  }
  assert.doesNotMatch(html, /<[^>]+\son[a-z]+\s*=/i, `${what}: an inline event handler`);
  assert.doesNotMatch(html, /<[^>]+\sstyle\s*=/i, `${what}: an inline style attribute`);
  assert.doesNotMatch(html, /<style\b/i, `${what}: a <style> element`);
  assert.doesNotMatch(html, /javascript:/i, `${what}: a javascript: address`);
}

describe('security headers on every answer', () => {
  // quick-create-and-web.test.ts checks a page, JSON, raw, static, usage, 401, 404, 405, 413 and
  // malformed addresses; here every other status and route, each answered as it really is.
  let server: TestServer;
  let disabled: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({
      env: { TRUST_PROXY: 'true', ANON_HOURLY_LIMIT: '1', NOT_FOUND_LIMIT_PER_MINUTE: '3' },
    });
    disabled = await startServer({ env: { API_ENABLED: 'false' } });
    key = await server.createKey({ name: 'headers' });
  });
  after(async () => {
    await server.close();
    await disabled.close();
  });

  it('are on every status the service answers: 200, 201, 400, 401, 403, 404, 405, 413, 429, 503, pages and HEAD', async () => {
    const at = (path: string) => `${server.url}${path}`;
    const keyed = { 'x-api-key': key };
    /** Each scenario from an address of its own, so that the per-address limits meet only where meant. */
    let n = 0;
    const from = () => ({ 'x-forwarded-for': `198.51.100.${++n}` });
    const id = await createPaste(server, key, { content: 'def f():\n    return 42\n', language: 'python' });
    const burn = await createPaste(server, key, { content: 'view once', burn: true });
    const protectedId = await createPaste(server, key, { content: 'protected', password: 'right one' });
    const e2e = await encryptForTest('secret');
    const sealed = await createPaste(server, key, { content: e2e.wire, encrypt: true });
    const limitedKey = await server.createKey({ name: 'limited', hourly: 1 });
    const upload = new FormData();
    upload.append('file', new Blob(['a file'], { type: 'text/plain' }), 'a.txt');
    const viewPost = (target: string, fields: Record<string, string>) =>
      request(at(`/view/${target}`), {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'text/html', ...from() },
        body: new URLSearchParams(fields).toString(),
      });

    const answers: Array<[string, Result, number]> = [
      ['healthz', await request(at('/healthz')), 200],
      ['readyz', await request(at('/readyz')), 200],
      ['home', await request(at('/')), 200],
      ['view highlighted', await request(at(`/view/${id}`)), 200],
      ['view HEAD', await head(at(`/view/${id}`)), 200],
      ['view once gate', await request(at(`/view/${burn}`)), 200],
      ['password gate', await request(at(`/view/${protectedId}`)), 200],
      ['encrypted view', await request(at(`/view/${sealed}`)), 200],
      ['wrong password page', await viewPost(protectedId, { confirm: '1', password: 'wrong' }), 403],
      ['right password page', await viewPost(protectedId, { confirm: '1', password: 'right one' }), 200],
      ['confirm missing', await viewPost(burn, {}), 400],
      ['raw HEAD', await head(at(`/raw/${id}`)), 200],
      ['archive page 2', await request(at('/archive?page=2')), 200],
      ['style.css', await request(at('/static/style.css')), 200],
      [
        'create JSON',
        await request(at('/api/v1/paste'), { method: 'POST', headers: keyed, json: { content: 'abc' } }),
        201,
      ],
      ['create upload', await request(at('/api/v1/paste'), { method: 'POST', headers: keyed, body: upload }), 201],
      [
        'quick-create',
        await request(at('/api/v1/cli'), {
          method: 'POST',
          headers: { 'content-type': 'text/plain', ...from() },
          body: 'hello',
        }),
        201,
      ],
      [
        'update',
        await request(at(`/api/v1/paste/${id}`), { method: 'PUT', headers: keyed, json: { title: 't' } }),
        200,
      ],
      ['list', await request(at('/api/v1/pastes'), { headers: keyed }), 200],
      [
        'bad JSON',
        await request(at('/api/v1/paste'), {
          method: 'POST',
          headers: { ...keyed, 'content-type': 'application/json' },
          body: '{',
        }),
        400,
      ],
      [
        'content_rejected',
        await request(at('/api/v1/cli'), {
          method: 'POST',
          headers: { 'content-type': 'text/plain', ...from() },
          body: 'a\u0000b',
        }),
        400,
      ],
      [
        'gzip refused',
        await request(at('/api/v1/paste'), {
          method: 'POST',
          headers: { ...keyed, 'content-encoding': 'gzip', 'content-type': 'application/json' },
          body: 'x',
        }),
        400,
      ],
      ['api_key_invalid', await request(at('/api/v1/pastes'), { headers: { 'x-api-key': 'fp_nope' } }), 403],
      ['password_protected', await request(at(`/api/v1/paste/${protectedId}`), { headers: keyed }), 403],
      [
        'wrong_password',
        await request(at(`/raw/${protectedId}`), { headers: { 'x-paste-password': 'no', ...from() } }),
        403,
      ],
      ['not_downloadable', await request(at(`/download/${sealed}`)), 403],
      [
        'forbidden',
        await request(at(`/api/v1/paste/${id}`), {
          method: 'DELETE',
          headers: { 'x-api-key': await server.createKey({ name: 'stranger' }) },
        }),
        403,
      ],
      ['404 HEAD', await head(at('/raw/unknown0001'), from()), 404],
      ['404 static', await request(at('/static/nothing.js'), { headers: from() }), 404],
      ['404 page', await request(at('/view/unknown0002'), { headers: { accept: 'text/html', ...from() } }), 404],
      ['405 PATCH', await request(at(`/api/v1/paste/${id}`), { method: 'PATCH', headers: keyed }), 405],
      ['405 OPTIONS', await request(at('/'), { method: 'OPTIONS' }), 405],
      [
        '413 declared',
        await request(at('/api/v1/paste'), {
          method: 'POST',
          headers: { ...keyed, 'content-type': 'application/json' },
          body: 'x'.repeat(JSON_BODY_LIMIT + 1),
        }),
        413,
      ],
    ];
    // 429 of every kind: the anonymous limit, a key's quota, the password throttle, the 404 budget.
    const anonymous = from();
    await request(at('/api/v1/cli'), {
      method: 'POST',
      headers: { 'content-type': 'text/plain', ...anonymous },
      body: 'one',
    });
    answers.push([
      '429 anonymous',
      await request(at('/api/v1/cli'), {
        method: 'POST',
        headers: { 'content-type': 'text/plain', ...anonymous },
        body: 'two',
      }),
      429,
    ]);
    await request(at('/api/v1/pastes'), { headers: { 'x-api-key': limitedKey } });
    answers.push(['429 quota', await request(at('/api/v1/pastes'), { headers: { 'x-api-key': limitedKey } }), 429]);
    const guesser = from();
    for (let i = 0; i < 10; i++) {
      await request(at(`/raw/${protectedId}`), { headers: { 'x-paste-password': `guess ${i}`, ...guesser } });
    }
    answers.push([
      '429 too_many_attempts',
      await request(at(`/raw/${protectedId}`), { headers: { 'x-paste-password': 'guess', ...guesser } }),
      429,
    ]);
    const prober = from();
    for (let i = 0; i < 3; i++) await request(at(`/nothing/${i}`), { headers: prober });
    answers.push(['429 404 budget', await request(at('/'), { headers: prober }), 429]);
    answers.push(['503 api_disabled', await request(`${disabled.url}/api/v1/pastes`, { headers: keyed }), 503]);

    for (const [what, result, status] of answers) {
      assert.equal(result.status, status, `${what}: ${result.status} ${result.text.slice(0, 200)}`);
      assertSecurityHeaders(result, what);
    }
  });

  it('no page needs what the CSP forbids: no inline script, event handler, style or javascript: address', async () => {
    const at = (path: string) => `${server.url}${path}`;
    const id = await createPaste(server, key, {
      content: 'const x = "<script>alert(1)</script>";\n',
      language: 'javascript',
      title: '<img src=x onerror=alert(1)>',
      description: '<style>body{display:none}</style>',
      public: true,
    });
    const burn = await createPaste(server, key, { content: 'once', burn: true });
    const guarded = await createPaste(server, key, { content: 'guarded', password: 'pw' });
    const e2e = await encryptForTest('sealed');
    const sealed = await createPaste(server, key, { content: e2e.wire, encrypt: true, language: 'javascript' });
    const pages: Array<[string, Result]> = [
      ['home', await request(at('/'))],
      ['view', await request(at(`/view/${id}`))],
      ['gate', await request(at(`/view/${burn}`))],
      ['password gate', await request(at(`/view/${guarded}`))],
      ['encrypted', await request(at(`/view/${sealed}`))],
      ['archive', await request(at('/archive'))],
      [
        '404 page',
        await request(at('/view/nothing9'), { headers: { accept: 'text/html', 'x-forwarded-for': '192.0.2.77' } }),
      ],
    ];
    for (const [what, page] of pages) {
      assert.match(page.headers.get('content-type') ?? '', /^text\/html/, what);
      assertNoInlineCode(page.text, what);
    }
  });
});

// =============================================================================================
// (4) File names never reach a header or a page unescaped
// =============================================================================================

/** The file name a browser takes from Content-Disposition: filename* when present, else filename. */
function dispositionFilename(header: string): string | undefined {
  const extended = /;\s*filename\*=UTF-8''([^;\s]+)/i.exec(header);
  if (extended?.[1]) return decodeURIComponent(extended[1]);
  const quoted = /;\s*filename="((?:[^"\\]|\\.)*)"/i.exec(header);
  if (quoted?.[1] !== undefined) return quoted[1].replace(/\\(.)/g, '$1');
  return /;\s*filename=([^;\s]+)/i.exec(header)?.[1];
}

describe('API answers are kept by no cache', () => {
  it("every API answer, the fast lane's and the framework's, success or error, is Cache-Control: no-store", async () => {
    const server = await startServer();
    try {
      const key = await server.createKey({ name: 'no-store' });
      const keyed = { 'x-api-key': key };
      const at = (path: string) => `${server.url}${path}`;
      const id = await createPaste(server, key, { content: 'kept by no cache' });
      const burn = await createPaste(server, key, { content: 'view once', burn: true });
      const upload = new FormData();
      upload.append('file', new Blob(['a file'], { type: 'text/plain' }), 'a.txt');
      const answers: Array<[string, Result]> = [
        [
          'create (lane)',
          await request(at('/api/v1/paste'), { method: 'POST', headers: keyed, json: { content: 'abc' } }),
        ],
        ['by id (lane)', await request(at(`/api/v1/paste/${id}`), { headers: keyed })],
        ['by id (framework)', await request(at(`/api/v1/paste/${id}?via=framework`), { headers: keyed })],
        ['view-once by id', await request(at(`/api/v1/paste/${burn}`), { headers: keyed })],
        ['list (lane)', await request(at('/api/v1/pastes'), { headers: keyed })],
        ['list (framework)', await request(at('/api/v1/pastes?page=%31'), { headers: keyed })],
        ['raw', await request(at(`/api/v1/paste/${id}/raw`), { headers: keyed })],
        ['upload', await request(at('/api/v1/paste'), { method: 'POST', headers: keyed, body: upload })],
        ['update', await request(at(`/api/v1/paste/${id}`), { method: 'PUT', headers: keyed, json: { title: 't' } })],
        [
          'quick-create',
          await request(at('/api/v1/cli'), {
            method: 'POST',
            headers: { 'content-type': 'text/plain' },
            body: 'hello',
          }),
        ],
        ['usage', await request(at('/api/v1/cli'))],
        ['404', await request(at('/api/v1/paste/unknown0001'), { headers: keyed })],
        // Answered before the request hooks run (the path does not decode).
        ['undecodable', await request(at('/api/v1/paste/%E0%A4'), { headers: keyed })],
        ['401', await request(at('/api/v1/pastes'))],
        ['delete', await request(at(`/api/v1/paste/${id}`), { method: 'DELETE', headers: keyed })],
      ];
      for (const [what, answer] of answers) {
        assert.ok(answer.status < 500, `${what}: ${answer.status}`);
        assert.equal(answer.headers.get('cache-control'), 'no-store', what);
      }
    } finally {
      await server.close();
    }
  });
});

describe('uploaded file names never reach a header or a page unescaped (D17)', () => {
  // paste-create.test.ts checks that ../, U+202E and CR/LF are removed from the stored name and
  // the Content-Disposition; here the same names and HTML, through /download's raw headers, the
  // view page, the archive and raw, each compared with what was stored.
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer();
    key = await server.createKey({ name: 'uploads' });
  });
  after(() => server.close());
  const pasteCount = async () => Number((await server.sql<{ n: number }>('SELECT count(*) AS n FROM pastes'))[0]?.n);

  const NAMES: Array<[string, string]> = [
    ['path traversal', 'filename="../../../etc/cron.d/evil.txt"'],
    ['Windows traversal', 'filename="..\\..\\boot.ini.txt"'],
    ['HTML', 'filename="<img src=x onerror=alert(1)>.md"'],
    ['script through a path', "filename*=UTF-8''..%2F%3Cscript%3Ealert(1)%3C%2Fscript%3E.js"],
    ['CR/LF header injection', "filename*=UTF-8''a%0D%0ASet-Cookie%3A%20x%3Dy%0D%0A%0D%0A%3Ch1%3Ehi.txt"],
    ['bare LF', "filename*=UTF-8''b%0AContent-Type%3A%20text%2Fhtml.txt"],
    ['U+202E', "filename*=UTF-8''invoice%E2%80%AEfdp.js.txt"],
    ['U+202E in a plain filename', 'filename="report\u202Etxt.exe.md"'],
    ['quotes and semicolons', "filename*=UTF-8''%22q%22%3B%20filename%3D%22x.html%22%3B.txt"],
    ['NUL and controls', "filename*=UTF-8''nul%00bell%07esc%1B.txt"],
    ['only dots', 'filename="...."'],
    ['non-ASCII', "filename*=UTF-8''r%C3%A9sum%C3%A9%20%F0%9F%93%84%20%3Cb%3E.md"],
  ];

  for (const [what, filenameParam] of NAMES) {
    it(`${what}: stored clean, quoted safely in Content-Disposition, escaped on the pages`, async () => {
      const { body, contentType } = multipart([
        { disposition: `form-data; name="file"; ${filenameParam}`, type: 'text/plain', data: `uploaded: ${what}` },
        { disposition: 'form-data; name="public"', data: 'true' },
      ]);
      const before = await pasteCount();
      const created = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'content-type': contentType },
        body,
      });
      // A name the form parser cannot take, or with nothing left (no extension), is refused and
      // nothing is stored; never stored as something else.
      if (created.status === 400) {
        assert.equal(created.body.error, true);
        assert.equal(await pasteCount(), before, 'nothing stored');
        return;
      }
      assert.equal(created.status, 201, created.text);
      const id = created.body.data.paste_id as string;
      const stored = String((await pasteRow(server, id))?.original_filename);
      assert.doesNotMatch(
        stored,
        /[\u0000-\u001f\u007f\u202a-\u202e\u2066-\u2069/\\]/,
        `stored ${JSON.stringify(stored)}`,
      );
      assert.doesNotMatch(stored, /^\.\./, `stored ${JSON.stringify(stored)}`);

      const download = await rawGet(`${server.url}/download/${id}`);
      assert.equal(download.status, 200);
      const dispositions = download.raw.filter(
        (_, i) => i % 2 === 0 && /^content-disposition$/i.test(download.raw[i] ?? ''),
      );
      assert.equal(dispositions.length, 1, 'one Content-Disposition');
      const names = download.raw.filter((_, i) => i % 2 === 0).map((h) => h.toLowerCase());
      assert.ok(!names.includes('set-cookie'), 'no header injected');
      assert.equal(names.filter((h) => h === 'content-type').length, 1, 'one Content-Type');
      const header = download.raw[download.raw.indexOf(dispositions[0] as string) + 1] ?? '';
      assert.match(header, /^attachment;/);
      assert.doesNotMatch(header, /[\r\n\u0000-\u001f\u007f]|\u202e|%E2%80%AE/i, header);
      assert.equal(dispositionFilename(header), stored, `${header} names the stored file`);

      for (const path of [`/view/${id}`, '/archive']) {
        const page = await request(`${server.url}${path}`);
        assert.equal(page.status, 200);
        assert.ok(page.text.includes(escapeHtml(stored)), `${path} shows the name escaped`);
        if (/[<>"']/.test(stored)) assert.ok(!page.text.includes(stored), `${path} shows the name unescaped`);
        assert.doesNotMatch(
          page.text,
          /<(img|script|h1>hi|b>)(?![^<]*static\/view\.js)/i,
          `${path}: markup from the name`,
        );
      }
      const raw = await request(`${server.url}/raw/${id}`);
      assert.match(raw.headers.get('content-type') ?? '', /^text\/plain; charset=utf-8$/);
    });
  }

  it('an uploaded .html or .svg-like file with script is served only as text/plain attachment or raw, never as HTML', async () => {
    const { body, contentType } = multipart([
      {
        disposition: 'form-data; name="file"; filename="page.html"',
        type: 'text/html',
        data: '<!doctype html><script>alert(document.cookie)</script>',
      },
    ]);
    const created = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': contentType },
      body,
    });
    assert.equal(created.status, 201, created.text);
    const id = created.body.data.paste_id as string;
    for (const path of [`/raw/${id}`, `/download/${id}`, `/api/v1/paste/${id}/raw`]) {
      const answer = await request(`${server.url}${path}`, { headers: { 'x-api-key': key } });
      assert.equal(answer.status, 200);
      assert.equal(answer.headers.get('content-type'), 'text/plain; charset=utf-8', path);
      assert.equal(answer.headers.get('x-content-type-options'), 'nosniff', path);
      // Rendered anyway (a browser that ignores nosniff), it would run in a sandbox: no script, an origin of its own.
      const csp = answer.headers.get('content-security-policy') ?? '';
      assert.ok(
        csp.split(';').some((d) => d.trim() === 'sandbox'),
        `${path}: ${csp}`,
      );
    }
    // The same through the framework: HEAD, which the fast lane leaves to it.
    const headed = await request(`${server.url}/raw/${id}`, { method: 'HEAD' });
    assert.equal(headed.status, 200);
    assert.match(headed.headers.get('content-security-policy') ?? '', /; sandbox$/);
    const view = await request(`${server.url}/view/${id}`);
    assert.ok(!view.text.includes('<script>alert'), 'the view page escapes the content');
  });
});

// =============================================================================================
// (5) The webhook address guard (D21)
// =============================================================================================

/**
 * Every internal spelling: the forms issue 4 lists (127.1, 0x7f.1, [::ffff:127.0.0.1], [::],
 * 169.254.169.254, private and CGNAT ranges, fc00::/7, fe80::/10) and the other encodings of the
 * same addresses. webhooks.test.ts runs a shorter list through the service on SQLite only.
 */
const INTERNAL_URLS = [
  // loopback, every IPv4 spelling the WHATWG parser accepts
  'http://127.0.0.1/',
  'http://127.1/',
  'http://127.0.1/',
  'http://0x7f.1/',
  'http://0x7f.0x0.0x0.0x1/',
  'http://0x7f000001/',
  'http://2130706433/',
  'http://0177.0.0.1/',
  'http://017700000001/',
  'http://127.000.000.001/',
  'http://127.0.0.1./',
  'http://%31%32%37.0.0.1/',
  'http://127.255.255.254:8080/hook',
  'https://127.0.0.1:443/',
  // unspecified
  'http://0.0.0.0/',
  'http://0/',
  'http://[::]/',
  // IPv6 loopback and IPv4-mapped forms
  'http://[::1]/',
  'http://[0:0:0:0:0:0:0:1]/',
  'http://[::ffff:127.0.0.1]/',
  'http://[::ffff:7f00:1]/',
  'http://[0:0:0:0:0:ffff:127.0.0.1]/',
  'http://[::ffff:10.0.0.1]/',
  'http://[::ffff:169.254.169.254]/',
  'http://[::ffff:a9fe:a9fe]/',
  'http://[::ffff:0:127.0.0.1]/',
  // translated and tunnelled forms that embed an IPv4 address
  'http://[64:ff9b::127.0.0.1]/',
  'http://[64:ff9b::a9fe:a9fe]/',
  'http://[2002:7f00:1::]/',
  'http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/',
  // link-local, the cloud metadata address
  'http://169.254.169.254/',
  'http://169.254.169.254/latest/meta-data/',
  'http://0xa9fea9fe/',
  'http://2852039166/',
  'http://[fe80::1]/',
  'http://[febf::1]/',
  // private, CGNAT, unique-local, site-local
  'http://10.0.0.1/',
  'http://10.255.255.255/',
  'http://172.16.0.1/',
  'http://172.31.255.255/',
  'http://192.168.0.1/',
  'http://100.64.0.1/',
  'http://100.127.255.254/',
  'http://[fc00::1]/',
  'http://[fd12:3456::1]/',
  'http://[fec0::1]/',
  // multicast, broadcast, reserved
  'http://224.0.0.1/',
  'http://239.255.255.250/',
  'http://[ff02::1]/',
  'http://255.255.255.255/',
  'http://240.0.0.1/',
  'http://198.18.0.1/',
  'http://192.0.0.1/',
  // names that resolve to loopback on every machine
  'http://localhost/',
  'http://LOCALHOST:8080/',
  // not http, or with credentials
  'ftp://example.com/',
  'file:///etc/passwd',
  'gopher://127.0.0.1:6379/_INFO',
  'http://user:pass@example.com/',
  'http://example.com@127.0.0.1/',
];

/** Names in /etc/hosts that resolve only to loopback addresses here (machine-specific; may be none). */
async function loopbackHostNames(): Promise<string[]> {
  let hosts = '';
  try {
    hosts = readFileSync('/etc/hosts', 'utf8');
  } catch {
    return [];
  }
  const names = new Set<string>();
  for (const line of hosts.split('\n')) {
    const [address, ...aliases] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (!address || !ipaddr.isValid(address) || ipaddr.parse(address).range() !== 'loopback') continue;
    for (const alias of aliases) if (alias && alias.toLowerCase() !== 'localhost') names.add(alias);
  }
  const found: string[] = [];
  for (const name of names) {
    try {
      const addresses = await lookup(name, { all: true });
      if (addresses.length > 0 && addresses.every((a) => ipaddr.process(a.address).range() === 'loopback')) {
        found.push(name);
      }
    } catch {}
  }
  return found;
}

describe('webhook address guard without WEBHOOK_ALLOW_PRIVATE (D21)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ env: { WEBHOOK_ALLOW_PRIVATE: 'false' } });
  });
  after(() => server.close());

  it('the setting is off by default', () => {
    assert.equal(loadConfig({}).webhookAllowPrivate, false);
  });

  it('refuses every internal address spelling, non-http scheme and credential when the URL is checked', async () => {
    const accepted: string[] = [];
    for (const url of INTERNAL_URLS) {
      try {
        await checkWebhookUrl(url, { allowPrivate: false });
        accepted.push(url);
      } catch (err) {
        assert.equal((err as { code?: string }).code, 'invalid_request', url);
      }
    }
    assert.deepEqual(accepted, [], 'accepted internal addresses');
  });

  it('refuses them through the key service too (on this database), storing nothing', async () => {
    const created = await server.services.keys.create({ name: 'guarded' });
    for (const url of INTERNAL_URLS) {
      await assert.rejects(server.services.keys.setWebhook(created.apiKey.id, url), { code: 'invalid_request' }, url);
    }
    await assert.rejects(
      server.services.keys.create({ name: 'refused', webhookUrl: 'http://[::ffff:169.254.169.254]/' }),
      { code: 'invalid_request' },
    );
    const [row] = await server.sql<{ webhook_url: string | null }>(
      `SELECT webhook_url FROM api_keys WHERE id = ${sqlText(created.apiKey.id)}`,
    );
    assert.equal(row?.webhook_url, null);
    const keys = await server.sql<{ n: number }>('SELECT count(*) AS n FROM api_keys');
    assert.equal(Number(keys[0]?.n), 1, 'the refused create made no key');
  });

  it('refuses host names that resolve to 127.0.0.1 (localhost, and the /etc/hosts names of this machine)', async (t) => {
    const names = ['localhost', ...(await loopbackHostNames())];
    t.diagnostic(`names resolving to loopback: ${names.join(', ')}`);
    for (const name of names) {
      await assert.rejects(checkWebhookUrl(`http://${name}/hook`, { allowPrivate: false }), (err: Error) =>
        /resolves to|does not resolve/.test(err.message),
      );
    }
  });

  it('accepts a public address (the control), and with WEBHOOK_ALLOW_PRIVATE a loopback one', async () => {
    assert.equal(
      (await checkWebhookUrl('https://93.184.216.34/hook', { allowPrivate: false })).hostname,
      '93.184.216.34',
    );
    assert.equal((await checkWebhookUrl('http://127.0.0.1:9/', { allowPrivate: true })).hostname, '127.0.0.1');
  });

  it('at connection time, a receiver on 127.0.0.1 is never reached by a loopback literal or a name', async (t) => {
    let hits = 0;
    const receiver = http.createServer((_req, res) => {
      hits++;
      res.end('ok');
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    t.after(() => receiver.close());
    const port = (receiver.address() as AddressInfo).port;
    const hosts = ['127.0.0.1', '127.1', '0x7f.1', '2130706433', '[::ffff:127.0.0.1]', 'localhost'];
    hosts.push(...(await loopbackHostNames()));
    for (const host of hosts) {
      const sent = await sendWebhook(`http://${host}:${port}/`, {}, '{}', { timeoutMs: 2000, allowPrivate: false });
      assert.equal(sent.statusCode, null, host);
      assert.doesNotMatch(sent.error ?? '', /ECONNREFUSED|timed out/, `${host}: refused by the guard`);
    }
    assert.equal(hits, 0, 'the receiver was never called');
    // The control: allowed, the same receiver answers.
    const allowed = await sendWebhook(`http://127.0.0.1:${port}/`, {}, '{}', { timeoutMs: 2000, allowPrivate: true });
    assert.equal(allowed.statusCode, 200);
  });

  it('refuses an IPv4-compatible IPv6 address ([::127.0.0.1], ::/96, deprecated by RFC 4291)', {}, async () => {
    await assert.rejects(checkWebhookUrl('http://[::127.0.0.1]/', { allowPrivate: false }));
    await assert.rejects(checkWebhookUrl('http://[::a9fe:a9fe]/', { allowPrivate: false }));
  });
});

// =============================================================================================
// (6) X-Forwarded-For counts only with TRUST_PROXY (D2)
// =============================================================================================

describe('X-Forwarded-For is ignored unless TRUST_PROXY', () => {
  // quotas.test.ts checks the anonymous quick-create limit both ways and quick-create-and-web
  // the stored creator_ip; here the other per-address limits: the 404 budget and the
  // wrong-password throttle.
  const guessAll = async (server: TestServer, id: string, addresses: string[]) => {
    const statuses: number[] = [];
    for (const address of addresses) {
      const answer = await request(`${server.url}/raw/${id}`, {
        headers: { 'x-paste-password': 'wrong guess', 'x-forwarded-for': address },
      });
      statuses.push(answer.status);
    }
    return statuses;
  };
  const addresses = (n: number) => Array.from({ length: n }, (_, i) => `203.0.113.${i + 1}`);

  it('without it, changing X-Forwarded-For dodges neither the 404 budget nor the password throttle', async (t) => {
    const server = await startServer({ env: { NOT_FOUND_LIMIT_PER_MINUTE: '5' } });
    t.after(() => server.close());
    const statuses: number[] = [];
    for (const address of addresses(8)) {
      statuses.push(
        (
          await request(`${server.url}/raw/nothing${address.replaceAll('.', '')}`, {
            headers: { 'x-forwarded-for': address },
          })
        ).status,
      );
    }
    assert.deepEqual(statuses, [404, 404, 404, 404, 404, 429, 429, 429]);
    server.clock.advance(MINUTE);
    const key = await server.createKey();
    const id = await createPaste(server, key, { content: 'guarded', password: 'the right one' });
    const guesses = await guessAll(server, id, addresses(12));
    assert.deepEqual(guesses, [...Array(10).fill(403), 429, 429]);
  });

  it('with it, each forwarded address has its own 404 budget and its own password budget', async (t) => {
    const server = await startServer({ env: { NOT_FOUND_LIMIT_PER_MINUTE: '5', TRUST_PROXY: 'true' } });
    t.after(() => server.close());
    for (const address of addresses(8)) {
      for (let i = 0; i < 5; i++) {
        const answer = await request(`${server.url}/raw/nothing${i}`, { headers: { 'x-forwarded-for': address } });
        assert.equal(answer.status, 404, `${address} #${i + 1}`);
      }
    }
    const blocked = await request(`${server.url}/`, { headers: { 'x-forwarded-for': '203.0.113.1' } });
    expectError(blocked, 429, 'rate_limited');
    assert.equal((await request(`${server.url}/`, { headers: { 'x-forwarded-for': '203.0.113.99' } })).status, 200);
    const key = await server.createKey();
    const id = await createPaste(server, key, { content: 'guarded', password: 'the right one' });
    // Addresses of their own: those above have used up their 404 budget.
    const guessers = Array.from({ length: 12 }, (_, i) => `192.0.2.${i + 1}`);
    assert.deepEqual(await guessAll(server, id, guessers), Array(12).fill(403));
  });
});

describe('per-address limits count an IPv6 client per /64', () => {
  it('wrong passwords from the addresses of one /64 share one budget, as the 404 budget and the anonymous limit do', {}, async (t) => {
    const server = await startServer({ env: { TRUST_PROXY: 'true' } });
    t.after(() => server.close());
    const key = await server.createKey();
    const id = await createPaste(server, key, { content: 'guarded', password: 'the right one' });
    const statuses: number[] = [];
    for (let i = 1; i <= 12; i++) {
      const answer = await request(`${server.url}/raw/${id}`, {
        headers: { 'x-paste-password': 'wrong guess', 'x-forwarded-for': `2001:db8:7:7::${i}` },
      });
      statuses.push(answer.status);
    }
    assert.deepEqual(statuses, [...Array(10).fill(403), 429, 429]);
  });
});

// =============================================================================================
// (7) Unknown addresses answer 404 fast, and are throttled per address
// =============================================================================================

describe('404s are fast and throttled per client address (NOT_FOUND_LIMIT_PER_MINUTE)', () => {
  const LIMIT = 20;
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: { NOT_FOUND_LIMIT_PER_MINUTE: String(LIMIT), TRUST_PROXY: 'true' } });
    key = await server.createKey({ name: 'prober' });
  });
  after(() => server.close());

  let next = 0;
  /** A fresh client address for each test. */
  const client = () => ({ 'x-forwarded-for': `198.18.${Math.floor(++next / 250)}.${next % 250}` });

  it('the production default is a real budget (60 a minute); 0 turns it off; a bad value stops the start', () => {
    assert.equal(loadConfig({}).notFoundLimitPerMinute, 60);
    assert.equal(loadConfig({ NOT_FOUND_LIMIT_PER_MINUTE: '0' }).notFoundLimitPerMinute, 0);
    for (const bad of ['-1', 'lots', '1.5']) {
      assert.throws(() => loadConfig({ NOT_FOUND_LIMIT_PER_MINUTE: bad }), /NOT_FOUND_LIMIT_PER_MINUTE/);
    }
  });

  it(`unknown ids and paths answer 404 fast; past ${LIMIT} in a minute every request is 429 until the minute ends`, async (t) => {
    const headers = client();
    const id = await createPaste(server, key, { content: 'an existing paste', slug: 'existing-slug' });
    const started = performance.now();
    const probes = [
      (i: number) => `/view/guess${i}`,
      (i: number) => `/raw/guessed-slug-${i}`,
      (i: number) => `/download/a${i}`,
      (i: number) => `/api/v1/paste/guess${i}`,
      (i: number) => `/no/such/address/${i}`,
    ];
    for (let i = 0; i < LIMIT; i++) {
      const probe = probes[i % probes.length] as (i: number) => string;
      const answer = await request(`${server.url}${probe(i)}`, { headers: { ...headers, 'x-api-key': key } });
      expectError(answer, 404, 'not_found');
    }
    const elapsed = performance.now() - started;
    t.diagnostic(`${LIMIT} answers 404 in ${Math.round(elapsed)} ms`);
    assert.ok(elapsed < 2000, `${LIMIT} 404s took ${Math.round(elapsed)} ms`);

    // Now anything from that address is refused, existing pastes, pages and writes included.
    const refused: Array<[string, Promise<Result>]> = [
      ['unknown id', request(`${server.url}/view/guess-more`, { headers })],
      ['existing paste', request(`${server.url}/raw/${id}`, { headers })],
      ['home', request(`${server.url}/`, { headers })],
      [
        'create',
        request(`${server.url}/api/v1/paste`, {
          method: 'POST',
          headers: { ...headers, 'x-api-key': key },
          json: { content: 'while blocked' },
        }),
      ],
    ];
    for (const [what, pending] of refused) {
      const answer = await pending;
      expectError(answer, 429, 'rate_limited');
      assert.equal(answer.headers.get('retry-after'), '60', what);
    }
    const stored = await server.sql<{ n: number }>(`SELECT count(*) AS n FROM pastes WHERE content = 'while blocked'`);
    assert.equal(Number(stored[0]?.n), 0, 'a refused create stores nothing');
    // Health checks stay up (a load balancer is never locked out), and other addresses are served.
    assert.equal((await request(`${server.url}/healthz`, { headers })).status, 200);
    assert.equal((await request(`${server.url}/raw/${id}`, { headers: client() })).status, 200);

    server.clock.advance(MINUTE - 1_000);
    assert.equal((await request(`${server.url}/`, { headers })).headers.get('retry-after'), '1');
    server.clock.advance(1_000);
    assert.equal((await request(`${server.url}/raw/${id}`, { headers })).status, 200, 'free again the next minute');
    expectError(await request(`${server.url}/view/guess-again`, { headers }), 404, 'not_found');
  });

  it('only 404s count: successes, 400, 403 and 405 from one address do not use the budget', async () => {
    const headers = client();
    const id = await createPaste(server, key, { content: 'counted or not' });
    for (let i = 0; i < LIMIT * 2; i++) {
      assert.equal((await request(`${server.url}/raw/${id}`, { headers })).status, 200);
      assert.equal((await request(`${server.url}/raw/${id}`, { method: 'POST', headers })).status, 405);
      assert.equal((await request(`${server.url}/archive?page=x`, { headers })).status, 400);
      assert.equal(
        (await request(`${server.url}/api/v1/pastes`, { headers: { ...headers, 'x-api-key': 'fp_bad' } })).status,
        403,
      );
    }
    assert.equal((await request(`${server.url}/view/nothing-here`, { headers })).status, 404);
  });

  it('/favicon.ico, which browsers ask for on their own, is an icon and never uses the budget', async () => {
    const headers = client();
    for (let i = 0; i < LIMIT * 2; i++) {
      const icon = await fetch(`${server.url}/favicon.ico`, { headers });
      assert.equal(icon.status, 200);
      assert.equal(icon.headers.get('content-type'), 'image/svg+xml');
      assert.match(icon.headers.get('cache-control') ?? '', /^public, max-age=\d{6,}$/);
      assert.match(await icon.text(), /^<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    }
    // The whole budget is still there: LIMIT answers 404, then 429.
    for (let i = 0; i < LIMIT; i++)
      expectError(await request(`${server.url}/view/icon${i}`, { headers }), 404, 'not_found');
    expectError(await request(`${server.url}/view/icon-more`, { headers }), 429, 'rate_limited');
  });

  it('an IPv6 client counts per /64: another address in the same /64 is refused too, another /64 is not', async () => {
    for (let i = 0; i < LIMIT; i++) {
      await request(`${server.url}/view/v6guess${i}`, { headers: { 'x-forwarded-for': `2001:db8:1:2::${i + 1}` } });
    }
    const same = await request(`${server.url}/`, { headers: { 'x-forwarded-for': '2001:db8:1:2:ffff::1' } });
    expectError(same, 429, 'rate_limited');
    assert.equal((await request(`${server.url}/`, { headers: { 'x-forwarded-for': '2001:db8:1:3::1' } })).status, 200);
  });

  it(`a burst of ${5 * LIMIT} in parallel gets no more than ${LIMIT} answers 404, the rest 429`, async () => {
    const headers = client();
    const answers = await Promise.all(
      Array.from({ length: 5 * LIMIT }, (_, i) => request(`${server.url}/view/burst${i}`, { headers })),
    );
    const found = answers.filter((a) => a.status === 404).length;
    for (const answer of answers.filter((a) => a.status !== 404)) expectError(answer, 429, 'rate_limited');
    assert.ok(found <= LIMIT, `${found} answers 404 of ${5 * LIMIT}`);
    assert.ok(found > 0);
  });

  it('a hit pipelined behind the last 404 of the budget is 429 in the fast lane as in the framework', async (t) => {
    // No proxy trusted: the client is the socket's address, so plain reads take the fast lane.
    const budget = 5;
    const direct = await startServer({ env: { NOT_FOUND_LIMIT_PER_MINUTE: String(budget) } });
    t.after(() => direct.close());
    const owner = await direct.createKey({ name: 'pipeliner' });
    const id = await createPaste(direct, owner, { content: 'found' });
    await request(`${direct.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': owner } }); // the key looked up
    const get = (path: string, extra = '') =>
      `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: ${owner}\r\n${extra}\r\n`;
    for (const [prefix, via] of [
      ['/raw/', 'lane'],
      ['/view/', 'lane'],
      ['/api/v1/paste/', 'lane'],
      ['/raw/', 'framework'], // any Content-Encoding hands a request to the framework
    ] as const) {
      direct.clock.advance(MINUTE); // a fresh budget
      const extra = via === 'framework' ? 'Content-Encoding: identity\r\n' : '';
      const misses = Array.from({ length: budget }, (_, i) => get(`${prefix}missing-${i}`, extra));
      const answers = await pipelinedAnswers(direct.url, [...misses, get(`${prefix}${id}`, extra)]);
      assert.deepEqual(
        answers.map((answer) => answer.status),
        [...misses.map(() => 404), 429],
        `${prefix} through the ${via}`,
      );
      assert.equal(JSON.parse(answers[budget]?.body as string).code, 'rate_limited');
    }
  });

  it('NOT_FOUND_LIMIT_PER_MINUTE=0 turns it off', async (t) => {
    const open = await startServer({ env: { NOT_FOUND_LIMIT_PER_MINUTE: '0' } });
    t.after(() => open.close());
    for (let i = 0; i < 100; i++) assert.equal((await request(`${open.url}/view/none${i}`)).status, 404);
  });
});

describe('NotFoundThrottle', () => {
  it('tracks a bounded number of addresses, and forgets them when the minute changes', async () => {
    const clock = new ManualClock();
    const throttle = new NotFoundThrottle({ limitPerMinute: 3, clock: clock.read, maxTracked: 100 });
    for (let i = 0; i < 1000; i++) await throttle.record(`10.0.${Math.floor(i / 250)}.${i % 250}`);
    assert.equal(throttle.tracked, 100);
    for (let i = 0; i < 3; i++) await throttle.record('192.0.2.1');
    assert.throws(() => throttle.check('192.0.2.1'), { code: 'rate_limited' });
    clock.advance(MINUTE);
    throttle.check('192.0.2.1');
    assert.equal(throttle.tracked, 0);
  });

  it('with a shared counter store, instances add up their 404s', async () => {
    const clock = new ManualClock();
    const shared = new LimiterCounterStore(new RateLimiterMemory({ points: Number.MAX_SAFE_INTEGER, duration: 3600 }));
    const a = new NotFoundThrottle({ limitPerMinute: 4, clock: clock.read, counters: shared });
    const b = new NotFoundThrottle({ limitPerMinute: 4, clock: clock.read, counters: shared });
    await a.record('192.0.2.9');
    await a.record('192.0.2.9');
    await b.record('192.0.2.9');
    a.check('192.0.2.9');
    b.check('192.0.2.9');
    await b.record('192.0.2.9');
    assert.throws(() => b.check('192.0.2.9'), { code: 'rate_limited' }, 'four 404s in all');
    await a.record('192.0.2.9');
    assert.throws(() => a.check('192.0.2.9'), { code: 'rate_limited' }, 'the other instance learns it at its next 404');
  });
});

describe('a request Node cannot parse, pipelined behind whole ones', () => {
  it('is refused (400, connection closed) only after the requests before it are answered, lane and framework alike', async (t) => {
    const server = await startServer();
    t.after(() => server.close());
    const key = await server.createKey({ name: 'pipeliner' });
    const id = await createPaste(server, key, { content: 'answered before the broken one' });
    await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } }); // the key looked up
    const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: ${key}\r\n\r\n`;
    const answers = await pipelinedAnswers(server.url, [
      get(`/raw/${id}`), // the fast lane
      get(`/raw/${id}?via=framework`),
      get(`/api/v1/paste/${id}`), // the fast lane
      'BLAH BLAH\r\n\r\n',
    ]);
    assert.deepEqual(
      answers.map((answer) => answer.status),
      [200, 200, 200, 400],
    );
    assert.equal(answers[0]?.body, 'answered before the broken one');
    assert.equal(answers[1]?.body, 'answered before the broken one');
    assert.equal(JSON.parse(answers[2]?.body as string).data.content, 'answered before the broken one');
    assert.match(answers[3]?.head as string, /\r\nconnection: close/);
    expectError({ status: 400, body: JSON.parse(answers[3]?.body as string) }, 400, 'invalid_request');
  });

  it('a broken connection that goes on sending is refused once, after the answer the client is slow to read', async (t) => {
    const lines: string[] = [];
    const logger = pino({ level: 'trace' }, { write: (line: string) => void lines.push(line) });
    const server = await startServer({ logger });
    t.after(() => server.close());
    const key = await server.createKey({ name: 'slow reader' });
    // An answer larger than the socket buffers: it stays unfinished while the client reads nothing.
    const content = 'x'.repeat(4 * 1024 * 1024);
    const id = await createPaste(server, key, { content });
    const serverSockets: net.Socket[] = [];
    server.app.server.on('connection', (accepted: net.Socket) => serverSockets.push(accepted));
    const socket = net.connect(Number(new URL(server.url).port), '127.0.0.1');
    t.after(() => socket.destroy());
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.pause();
    socket.write(`GET /raw/${id} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nBLAH BLAH\r\n\r\n`);
    // Every later chunk makes Node report the broken request again.
    for (let i = 0; i < 5; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      socket.write('MORE GARBAGE\r\n\r\n');
    }
    // The premise: the 200 was still being written while the later chunks came.
    const inFlight = (serverSockets.at(-1) as net.Socket & { _httpMessage?: http.ServerResponse | null })._httpMessage;
    assert.ok(inFlight && !inFlight.writableFinished, 'the answer is still being written');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.resume();
    await ended;
    const received = Buffer.concat(chunks).toString('latin1');
    const statusLines = received.match(/HTTP\/1\.1 \d{3}/g) ?? [];
    assert.deepEqual(statusLines, ['HTTP/1.1 200', 'HTTP/1.1 400']);
    const body400 = received.slice(received.lastIndexOf('\r\n\r\n') + 4);
    expectError({ status: 400, body: JSON.parse(body400) }, 400, 'invalid_request');
    assert.ok(received.includes(content), 'the whole 200 answer before the refusal');
    // Node reports the broken request again for each of the five chunks after it: handled once.
    const clientErrors = lines.filter((line) => JSON.parse(line).msg === 'client error');
    assert.equal(clientErrors.length, 1);
  });

  it('a body that breaks the framing of its own request is refused at once, not after its time-out', async (t) => {
    const server = await startServer();
    t.after(() => server.close());
    const started = performance.now();
    const answers = await pipelinedAnswers(server.url, [
      'POST /api/v1/cli HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n',
    ]);
    assert.deepEqual(
      answers.map((answer) => answer.status),
      [400],
    );
    assert.ok(performance.now() - started < 2000, 'refused within 2 s');
  });
});
