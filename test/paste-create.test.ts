/**
 * POST /api/v1/paste over HTTP (api-v1.md "POST /api/v1/paste", D4-D9, D13, D16, D17, D22):
 * every input field, every field of the 201 answer, the limits and the error codes of D7, the
 * end-to-end ciphertext rules, slugs, the public archive, password hashing, multipart uploads,
 * the streaming cut-off of oversized bodies, authentication, and that a refused request never
 * changes what is stored. Each describe block runs one real server on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { generateApiKey } from '../src/keys/api-key-format.js';
import { isAllowedExtension } from '../src/pastes/uploads.js';
import { migrateToLatest } from '../src/storage/migrations.js';
import {
  databaseContains,
  encryptForTest,
  expectError,
  freshDatabase,
  request,
  sqlText,
  startServer,
  type TestServer,
} from './helpers.js';
import { startServerProcess } from './server-process.js';

const MiB = 1_048_576;
/** Set explicitly so that every returned address can be checked against it (D2). */
const BASE = 'https://paste.example.test';
const ENV = { BASE_URL: BASE };
const START = Date.UTC(2026, 0, 15, 12, 0, 0);

type Result = { status: number; headers: Headers; body: any; text: string };

const sha256 = (data: string | Buffer): string => createHash('sha256').update(data).digest('hex');

/** D3, computed here rather than with the code under test. */
const utc = (ms: number): string => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');

/** No answer anywhere in this file may be a 500. */
function no500(result: Result): Result {
  assert.notEqual(result.status, 500, `unexpected 500: ${result.text}`);
  assert.ok(result.status < 500, `unexpected ${result.status}: ${result.text}`);
  return result;
}

async function createJson(server: TestServer, key: string, json: unknown): Promise<Result> {
  return no500(await request(`${server.url}/api/v1/paste`, { method: 'POST', headers: { 'x-api-key': key }, json }));
}

async function postRaw(
  server: TestServer,
  key: string | undefined,
  body: BodyInit,
  headers: Record<string, string> = {},
): Promise<Result> {
  const all: Record<string, string> = { ...headers };
  if (key !== undefined) all['x-api-key'] = key;
  return no500(await request(`${server.url}/api/v1/paste`, { method: 'POST', headers: all, body }));
}

async function upload(server: TestServer, key: string, form: FormData): Promise<Result> {
  return postRaw(server, key, form);
}

function fileForm(
  data: BlobPart,
  filename: string,
  type = 'text/plain',
  fields: Record<string, string> = {},
): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  form.append('file', new Blob([data], { type }), filename);
  return form;
}

async function detail(server: TestServer, key: string, id: string): Promise<Result> {
  return no500(
    await request(`${server.url}/api/v1/paste/${encodeURIComponent(id)}`, { headers: { 'x-api-key': key } }),
  );
}

const rowCount = async (server: TestServer): Promise<number> =>
  Number((await server.sql<{ n: number }>('SELECT count(*) AS n FROM pastes'))[0]?.n);

const pasteRow = async (server: TestServer, id: string): Promise<Record<string, unknown> | undefined> =>
  (await server.sql(`SELECT * FROM pastes WHERE id = ${sqlText(id)}`))[0];

/** A multipart body built by hand, for file names fetch's FormData would escape. */
function multipartBody(
  boundary: string,
  parts: Array<{ disposition: string; type?: string; data: string | Buffer }>,
): Uint8Array<ArrayBuffer> {
  const chunks: Buffer[] = [];
  for (const part of parts) {
    let head = `--${boundary}\r\nContent-Disposition: ${part.disposition}\r\n`;
    if (part.type) head += `Content-Type: ${part.type}\r\n`;
    chunks.push(Buffer.from(`${head}\r\n`, 'utf8'), Buffer.from(part.data), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return new Uint8Array(Buffer.concat(chunks));
}

/** A valid `fpe1:` string from chosen IV and ciphertext bytes. */
const fpe1 = (iv: Buffer, ct: Buffer): string => `fpe1:${iv.toString('base64')}:${ct.toString('base64')}`;

interface StreamOutcome {
  status: number | undefined;
  body: string;
  /** Bytes handed to the socket before the answer arrived or the socket failed. */
  bytesWritten: number;
  socketError: string | undefined;
}

/**
 * Sends `preamble`, then 64 KiB chunks up to `total` bytes, stopping as soon as the server
 * answers or the socket fails. Nothing is sent after the answer.
 */
function streamUntilAnswered(
  server: TestServer,
  headers: Record<string, string | number>,
  preamble: Buffer,
  total: number,
): Promise<StreamOutcome> {
  const { port } = new URL(server.url);
  const chunk = Buffer.alloc(64 * 1024, 'a');
  return new Promise((resolve, reject) => {
    let written = 0;
    let writtenAtStop: number | undefined;
    let stopped = false;
    let socketError: string | undefined;
    const wakers = new Set<() => void>();
    const stop = () => {
      if (stopped) return;
      stopped = true;
      writtenAtStop = written;
      for (const wake of wakers) wake();
    };
    const watchdog = setTimeout(() => {
      req.destroy();
      reject(new Error(`no answer after writing ${written} bytes`));
    }, 30_000);
    const req = httpRequest({ host: '127.0.0.1', port: Number(port), method: 'POST', path: '/api/v1/paste', headers });
    let finished = false;
    const finish = (outcome: StreamOutcome) => {
      if (finished) return;
      finished = true;
      clearTimeout(watchdog);
      resolve(outcome);
    };
    req.on('response', (res) => {
      stop();
      const parts: Buffer[] = [];
      res.on('data', (b: Buffer) => parts.push(b));
      const done = () =>
        finish({
          status: res.statusCode,
          body: Buffer.concat(parts).toString('utf8'),
          bytesWritten: writtenAtStop ?? written,
          socketError,
        });
      res.on('end', done);
      res.on('error', done);
      res.on('close', done);
    });
    req.on('error', (err: Error) => {
      socketError = err.message;
      stop();
      // Give an answer already on its way a moment to be parsed.
      setTimeout(
        () => finish({ status: undefined, body: '', bytesWritten: writtenAtStop ?? written, socketError }),
        500,
      );
    });
    const pump = async () => {
      req.write(preamble);
      written += preamble.length;
      while (!stopped && written < total) {
        const ok = req.write(chunk);
        written += chunk.length;
        if (!ok) {
          await new Promise<void>((wake) => {
            const done = () => {
              wakers.delete(done);
              req.removeListener('drain', done);
              wake();
            };
            wakers.add(done);
            req.once('drain', done);
          });
        }
        // Let the event loop read before the next write: a write that meets the server's reset
        // would otherwise destroy the socket before an answer already received is parsed.
        await new Promise((wake) => setImmediate(wake));
      }
      if (!stopped) req.end();
    };
    pump().catch(reject);
  });
}

const EXPIRY_LENGTHS: Record<string, number> = {
  '10m': 10 * 60_000,
  '30m': 30 * 60_000,
  '1h': 3_600_000,
  '3h': 3 * 3_600_000,
  '6h': 6 * 3_600_000,
  '12h': 12 * 3_600_000,
  '1d': 24 * 3_600_000,
  '2d': 48 * 3_600_000,
  '3d': 72 * 3_600_000,
  '1w': 7 * 24 * 3_600_000,
  '2w': 14 * 24 * 3_600_000,
  '1m': 30 * 24 * 3_600_000,
};

/** The same lengths written out for a creation at 2026-01-15 12:00:00 UTC (D5). */
const EXPECTED_AT_START: Record<string, string> = {
  '10m': '2026-01-15 12:10:00',
  '30m': '2026-01-15 12:30:00',
  '1h': '2026-01-15 13:00:00',
  '3h': '2026-01-15 15:00:00',
  '6h': '2026-01-15 18:00:00',
  '12h': '2026-01-16 00:00:00',
  '1d': '2026-01-16 12:00:00',
  '2d': '2026-01-17 12:00:00',
  '3d': '2026-01-18 12:00:00',
  '1w': '2026-01-22 12:00:00',
  '2w': '2026-01-29 12:00:00',
  '1m': '2026-02-14 12:00:00',
};

/** `send` is answered 400 invalid_request with details naming `field`, and stores nothing. */
async function refusedNaming(server: TestServer, field: string, send: () => ReturnType<typeof request>): Promise<void> {
  const before = await rowCount(server);
  const err = expectError(await send(), 400, 'invalid_request');
  assert.ok(
    err.details?.some((p) => p.field === field),
    JSON.stringify(err),
  );
  assert.equal(await rowCount(server), before);
}

describe('POST /api/v1/paste: JSON create and the 201 answer', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  it('answers 201 with error false, a message and every create-response field', async () => {
    server.clock.now = START;
    const content = 'hello world';
    const r = await createJson(server, key, { content });
    assert.equal(r.status, 201);
    assert.equal(r.body.error, false);
    assert.equal(typeof r.body.message, 'string');
    assert.ok(r.body.message.length > 0);
    const d = r.body.data;
    assert.deepEqual(Object.keys(d).sort(), [
      'burn_after_read',
      'download_url',
      'downloadable',
      'encrypted',
      'expires_at',
      'paste_id',
      'raw_url',
      'sha256',
      'url',
    ]);
    assert.match(d.paste_id, /^[0-9A-Za-z]{10}$/);
    assert.equal(d.url, `${BASE}/view/${d.paste_id}`);
    assert.equal(d.raw_url, `${BASE}/raw/${d.paste_id}`);
    assert.equal(d.download_url, `${BASE}/download/${d.paste_id}`);
    assert.equal(d.expires_at, '2026-01-16 12:00:00');
    assert.equal(d.sha256, sha256(content));
    assert.equal(d.burn_after_read, false);
    assert.equal(d.encrypted, false);
    assert.equal(d.downloadable, true);
  });

  it('generates distinct 10-character base62 ids', async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 10; i++) {
      const r = await createJson(server, key, { content: `paste number ${i}` });
      assert.equal(r.status, 201);
      assert.match(r.body.data.paste_id, /^[0-9A-Za-z]{10}$/);
      ids.add(r.body.data.paste_id);
    }
    assert.equal(ids.size, 10);
  });

  it('sha256 is the lowercase hex digest of the stored UTF-8 bytes (multibyte content)', async () => {
    const content = 'Grüße, 世界 😀\nline two';
    const r = await createJson(server, key, { content });
    assert.equal(r.status, 201);
    assert.match(r.body.data.sha256, /^[0-9a-f]{64}$/);
    assert.equal(r.body.data.sha256, sha256(Buffer.from(content, 'utf8')));
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.body.data.content, content);
    assert.equal(read.body.data.sha256, r.body.data.sha256);
    assert.equal(read.body.data.file_size, Buffer.byteLength(content, 'utf8'));
  });

  it('stores title, description and language as sent; a JSON paste has content_type text', async () => {
    server.clock.now = START;
    const r = await createJson(server, key, {
      content: 'def f():\n    return 1\n',
      title: 'My title',
      description: 'A short description',
      language: 'python',
    });
    assert.equal(r.status, 201);
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.status, 200);
    const d = read.body.data;
    assert.equal(d.title, 'My title');
    assert.equal(d.description, 'A short description');
    assert.equal(d.language, 'python');
    assert.equal(d.content_type, 'text');
    assert.equal(d.original_filename, null);
    assert.equal(d.created_at, '2026-01-15 12:00:00');
    assert.equal(d.expires_at, r.body.data.expires_at);
  });

  it('title and description are null when not sent', async () => {
    const r = await createJson(server, key, { content: 'no title here' });
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.body.data.title, null);
    assert.equal(read.body.data.description, null);
  });

  it('defaults expiry to 1d (24 h after creation)', async () => {
    server.clock.now = Date.UTC(2026, 5, 30, 23, 15, 42);
    const r = await createJson(server, key, { content: 'default expiry' });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.expires_at, '2026-07-01 23:15:42');
  });

  for (const [expiry, expected] of Object.entries(EXPECTED_AT_START)) {
    it(`expiry ${expiry} expires ${EXPIRY_LENGTHS[expiry]! / 60_000} minutes after creation (D5)`, async () => {
      server.clock.now = START;
      const r = await createJson(server, key, { content: `expiry ${expiry}`, expiry });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.data.expires_at, expected);
      assert.match(r.body.data.expires_at, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
      const read = await detail(server, key, r.body.data.paste_id);
      assert.equal(read.body.data.expires_at, expected);
      assert.equal(read.body.data.created_at, '2026-01-15 12:00:00');
    });
  }

  it('expires_at follows the creation time, not a fixed moment (leap day, seconds kept, UTC)', async () => {
    server.clock.now = Date.UTC(2028, 1, 28, 23, 30, 15);
    for (const [expiry, length] of Object.entries(EXPIRY_LENGTHS)) {
      const r = await createJson(server, key, { content: `moving ${expiry}`, expiry });
      assert.equal(r.status, 201);
      assert.equal(r.body.data.expires_at, utc(server.clock.now + length), expiry);
    }
    const r = await createJson(server, key, { content: 'one day over a leap day', expiry: '1d' });
    assert.equal(r.body.data.expires_at, '2028-02-29 23:30:15');
  });

  it('expiry never gives expires_at null in the create answer and the detail (D4)', async () => {
    const r = await createJson(server, key, { content: 'forever and ever', expiry: 'never' });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.expires_at, null);
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.body.data.expires_at, null);
  });

  for (const bad of ['5m', '1D', '1y', 'forever', '', ' 1d', '24h']) {
    it(`expiry ${JSON.stringify(bad)} is 400 invalid_request naming expiry`, async () => {
      const before = await rowCount(server);
      const r = await createJson(server, key, { content: 'bad expiry', expiry: bad });
      const err = expectError(r, 400, 'invalid_request');
      assert.ok(err.details?.some((p) => p.field === 'expiry'));
      assert.equal(await rowCount(server), before);
    });
  }

  it('expiry as a number is 400 invalid_request', async () => {
    const r = await createJson(server, key, { content: 'bad expiry', expiry: 60 });
    const err = expectError(r, 400, 'invalid_request');
    assert.ok(err.details?.some((p) => p.field === 'expiry'));
  });

  it('burn true: burn_after_read true in the answer, stored as view-once', async () => {
    const r = await createJson(server, key, { content: 'read me once', burn: true });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.burn_after_read, true);
    const first = await detail(server, key, r.body.data.paste_id);
    assert.equal(first.status, 200);
    assert.equal(first.body.data.burn_after_read, true);
    assert.equal(first.body.data.content, 'read me once');
    const second = await detail(server, key, r.body.data.paste_id);
    expectError(second, 404, 'not_found');
  });

  it('burn false is the default', async () => {
    const r = await createJson(server, key, { content: 'read me often' });
    assert.equal(r.body.data.burn_after_read, false);
    await detail(server, key, r.body.data.paste_id);
    const again = await detail(server, key, r.body.data.paste_id);
    assert.equal(again.status, 200);
  });

  it('downloadable true without encrypt is accepted with a warning; the paste stays downloadable', async () => {
    const r = await createJson(server, key, { content: 'plain but downloadable', downloadable: true });
    assert.equal(r.status, 201);
    assert.equal(typeof r.body.data.warning, 'string');
    assert.ok(r.body.data.warning.length > 0);
    assert.equal(r.body.data.downloadable, true);
    assert.equal(r.body.data.encrypted, false);
    assert.equal(r.body.data.download_url, `${BASE}/download/${r.body.data.paste_id}`);
  });

  it('no warning when downloadable is false or absent on a plain paste (still downloadable, D16)', async () => {
    for (const body of [{ content: 'plain one' }, { content: 'plain two', downloadable: false }]) {
      const r = await createJson(server, key, body);
      assert.equal(r.status, 201);
      assert.equal('warning' in r.body.data, false);
      assert.equal(r.body.data.downloadable, true);
      assert.equal(r.body.data.download_url, `${BASE}/download/${r.body.data.paste_id}`);
    }
  });

  it('no warning when downloadable and encrypt are both true', async () => {
    const { wire } = await encryptForTest('secret');
    const r = await createJson(server, key, { content: wire, encrypt: true, downloadable: true });
    assert.equal(r.status, 201);
    assert.equal('warning' in r.body.data, false);
  });

  it('the stored paste downloads and reads raw as sent', async () => {
    const content = 'raw and download\nsecond line';
    const r = await createJson(server, key, { content });
    const raw = no500(await request(`${server.url}/raw/${r.body.data.paste_id}`));
    assert.equal(raw.status, 200);
    assert.equal(raw.text, content);
    const dl = no500(await request(`${server.url}/download/${r.body.data.paste_id}`));
    assert.equal(dl.status, 200);
    assert.equal(dl.text, content);
  });
});

describe('POST /api/v1/paste: content and field validation (D6, D7, D8)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  for (const content of ['', 'a', 'ab', '😀😀', 'é\u0301']) {
    it(`content ${JSON.stringify(content)} (fewer than 3 code points) is 400 content_too_short`, async () => {
      const before = await rowCount(server);
      expectError(await createJson(server, key, { content }), 400, 'content_too_short');
      assert.equal(await rowCount(server), before);
    });
  }

  for (const content of ['  \n  ', '   ', '\t\t\t\n', '\u3000\u3000\u3000']) {
    it(`white-space-only content ${JSON.stringify(content)} is 400 content_too_short`, async () => {
      expectError(await createJson(server, key, { content }), 400, 'content_too_short');
    });
  }

  it('three code points are enough: "abc" and three emoji (6 UTF-16 units) are accepted', async () => {
    for (const content of ['abc', '😀😀😀', ' a ']) {
      const r = await createJson(server, key, { content });
      assert.equal(r.status, 201, `${JSON.stringify(content)}: ${r.text}`);
      const read = await detail(server, key, r.body.data.paste_id);
      assert.equal(read.body.data.content, content);
    }
  });

  it('exactly 4 MiB of UTF-8 is accepted and stored whole', async () => {
    const content = 'a'.repeat(4 * MiB);
    const r = await createJson(server, key, { content });
    assert.equal(r.status, 201, r.text.slice(0, 300));
    assert.equal(r.body.data.sha256, sha256(content));
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.body.data.file_size, 4 * MiB);
  });

  it('4 MiB + 1 byte is 413 content_too_large and nothing is stored', async () => {
    const before = await rowCount(server);
    expectError(await createJson(server, key, { content: 'a'.repeat(4 * MiB + 1) }), 413, 'content_too_large');
    assert.equal(await rowCount(server), before);
  });

  it('multibyte content is measured in bytes: 2 Mi two-byte characters (4 MiB) pass', async () => {
    const content = 'é'.repeat(2 * MiB);
    const r = await createJson(server, key, { content });
    assert.equal(r.status, 201, r.text.slice(0, 300));
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.body.data.file_size, 4 * MiB);
  });

  it('multibyte content is measured in bytes: 4 MiB + 1 byte of mixed UTF-8 is 413', async () => {
    // 2 Mi characters is far below 4 Mi characters, but 4 MiB + 1 byte.
    expectError(await createJson(server, key, { content: `${'é'.repeat(2 * MiB)}a` }), 413, 'content_too_large');
    // Three-byte characters: 1,398,102 of them are 4,194,306 bytes.
    expectError(await createJson(server, key, { content: '€'.repeat(1_398_102) }), 413, 'content_too_large');
  });

  it('description of 500 characters is accepted', async () => {
    const r = await createJson(server, key, { content: 'described', description: 'd'.repeat(500) });
    assert.equal(r.status, 201);
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.body.data.description, 'd'.repeat(500));
  });

  it('description of 501 characters is 400 invalid_request naming description', async () => {
    await refusedNaming(server, 'description', () =>
      createJson(server, key, { content: 'described', description: 'd'.repeat(501) }),
    );
  });

  for (const [name, body] of [
    ['truncated object', '{"content": "hello"'],
    ['trailing comma', '{"content": "hello",}'],
    ['single quotes', "{'content': 'hello'}"],
    ['not JSON at all', 'content=hello'],
    ['empty body', ''],
  ] as const) {
    it(`malformed JSON (${name}) is 400 invalid_request`, async () => {
      const r = await postRaw(server, key, body, { 'content-type': 'application/json' });
      expectError(r, 400, 'invalid_request');
    });
  }

  it('burn as the string "true" is 400 invalid_request naming burn (JSON needs real booleans)', async () => {
    const err = expectError(await createJson(server, key, { content: 'hello', burn: 'true' }), 400, 'invalid_request');
    assert.ok(
      err.details?.some((p) => p.field === 'burn'),
      JSON.stringify(err),
    );
  });

  it('content as a number is 400 invalid_request naming content', async () => {
    const err = expectError(await createJson(server, key, { content: 5 }), 400, 'invalid_request');
    assert.ok(
      err.details?.some((p) => p.field === 'content'),
      JSON.stringify(err),
    );
  });

  for (const [field, value] of [
    ['content', null],
    ['content', ['a', 'b', 'c']],
    ['title', 42],
    ['description', { text: 'x' }],
    ['encrypt', 1],
    ['downloadable', 'yes'],
    ['public', 'true'],
    ['slug', 123],
    ['password', true],
    ['key', 7],
    ['language', ['python']],
  ] as const) {
    it(`${field}: ${JSON.stringify(value)} (wrong type) is 400 invalid_request naming ${field}`, async () => {
      const body: Record<string, unknown> = { content: 'hello world', [field]: value };
      const err = expectError(await createJson(server, key, body), 400, 'invalid_request');
      assert.ok(
        err.details?.some((p) => p.field === field),
        JSON.stringify(err),
      );
    });
  }

  it('an unknown field is 400 invalid_request naming it (D8)', async () => {
    const before = await rowCount(server);
    const err = expectError(
      await createJson(server, key, { content: 'hello world', expires: '1h' }),
      400,
      'invalid_request',
    );
    assert.ok(
      err.details?.some((p) => p.field === 'expires'),
      JSON.stringify(err),
    );
    assert.equal(await rowCount(server), before);
  });

  it('several unknown fields are each named', async () => {
    const err = expectError(
      await createJson(server, key, { content: 'hello world', colour: 'red', brun: true }),
      400,
      'invalid_request',
    );
    const fields = err.details?.map((p) => p.field) ?? [];
    assert.ok(fields.includes('colour') && fields.includes('brun'), JSON.stringify(err));
  });

  it('a JSON array body is 400 invalid_request', async () => {
    expectError(await createJson(server, key, [{ content: 'hello world' }]), 400, 'invalid_request');
  });

  for (const body of ['"hello world"', '42', 'null', 'true']) {
    it(`a JSON ${body} body (not an object) is 400 invalid_request`, async () => {
      expectError(await postRaw(server, key, body, { 'content-type': 'application/json' }), 400, 'invalid_request');
    });
  }

  it('a text/plain body is 400 invalid_request on this endpoint', async () => {
    const before = await rowCount(server);
    const r = await postRaw(server, key, 'hello world from text/plain', { 'content-type': 'text/plain' });
    expectError(r, 400, 'invalid_request');
    assert.equal(await rowCount(server), before);
  });

  it('a urlencoded form body is 400 on this endpoint (JSON or multipart only)', async () => {
    const r = await postRaw(server, key, 'content=hello+world', {
      'content-type': 'application/x-www-form-urlencoded',
    });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error, true);
  });

  it('missing content is 400 invalid_request naming content', async () => {
    const err = expectError(await createJson(server, key, { title: 'no content' }), 400, 'invalid_request');
    assert.ok(
      err.details?.some((p) => p.field === 'content'),
      JSON.stringify(err),
    );
  });

  it('an empty object is 400 invalid_request naming content', async () => {
    const err = expectError(await createJson(server, key, {}), 400, 'invalid_request');
    assert.ok(
      err.details?.some((p) => p.field === 'content'),
      JSON.stringify(err),
    );
  });

  it('every validation error has the D7 shape with details of field and message', async () => {
    const err = expectError(await createJson(server, key, { content: 'x y z', burn: 'no' }), 400, 'invalid_request');
    assert.ok(Array.isArray(err.details) && err.details.length > 0);
    for (const p of err.details) {
      assert.equal(typeof p.field, 'string');
      assert.equal(typeof p.message, 'string');
      assert.ok(p.message.length > 0);
    }
  });
});

describe('POST /api/v1/paste: end-to-end encrypted pastes', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  it('encrypt true with a valid fpe1 string is 201: encrypted, not downloadable, download_url null', async () => {
    const { wire } = await encryptForTest('top secret text');
    const r = await createJson(server, key, { content: wire, encrypt: true });
    assert.equal(r.status, 201, r.text);
    const d = r.body.data;
    assert.equal(d.encrypted, true);
    assert.equal(d.downloadable, false);
    assert.equal(d.download_url, null);
    assert.equal(d.url, `${BASE}/view/${d.paste_id}`);
    assert.equal(d.raw_url, `${BASE}/raw/${d.paste_id}`);
    assert.equal(d.sha256, sha256(wire));
    const read = await detail(server, key, d.paste_id);
    assert.equal(read.body.data.content, wire);
    assert.equal(read.body.data.encrypted, true);
    assert.equal(read.body.data.downloadable, false);
  });

  it('/download of a non-downloadable E2E paste answers 403', async () => {
    const { wire } = await encryptForTest('not for download');
    const r = await createJson(server, key, { content: wire, encrypt: true });
    const dl = no500(await request(`${server.url}/download/${r.body.data.paste_id}`));
    assert.equal(dl.status, 403);
    assert.equal(dl.body.error, true);
  });

  it('encrypt and downloadable true: download_url set and /download delivers the fpe1 string', async () => {
    const { wire } = await encryptForTest('downloadable secret');
    const r = await createJson(server, key, { content: wire, encrypt: true, downloadable: true });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.downloadable, true);
    assert.equal(r.body.data.download_url, `${BASE}/download/${r.body.data.paste_id}`);
    const dl = no500(await request(`${server.url}/download/${r.body.data.paste_id}`));
    assert.equal(dl.status, 200);
    assert.equal(dl.text, wire);
  });

  it('url gets #<key> when key is sent', async () => {
    const { wire, key: secret } = await encryptForTest('keyed');
    const r = await createJson(server, key, { content: wire, encrypt: true, key: secret });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.url, `${BASE}/view/${r.body.data.paste_id}#${secret}`);
    assert.equal(r.body.data.raw_url.includes('#'), false);
  });

  it('a key with base64 padding (as Python urlsafe_b64encode writes it) is base64url too; = inside it is not', async () => {
    const { wire, key: secret } = await encryptForTest('keyed, padded');
    const padded = Buffer.from(secret, 'base64url').toString('base64url').padEnd(44, '=');
    assert.equal(padded.endsWith('='), true);
    const r = await createJson(server, key, { content: wire, encrypt: true, key: padded });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.data.url, `${BASE}/view/${r.body.data.paste_id}#${padded}`);
    const shortKey = (bytes: number) => Buffer.alloc(bytes, 7).toString('base64url');
    for (const bad of [
      '=',
      'ab=c',
      'abc===',
      `${padded}=`,
      `${secret}A`,
      `${secret}AA`,
      secret.slice(0, 42),
      shortKey(16), // AES-128's key: the format is AES-GCM with a 256-bit key
      shortKey(24),
      `${shortKey(16)}==`,
      shortKey(64),
    ]) {
      const refused = await createJson(server, key, { content: wire, encrypt: true, key: bad });
      const error = expectError(refused, 400, 'invalid_request');
      assert.ok(
        error.details?.some((d) => d.field === 'key'),
        JSON.stringify(error),
      );
    }
  });

  it('url has no fragment when no key is sent (or an empty one)', async () => {
    const { wire } = await encryptForTest('keyless');
    for (const body of [
      { content: wire, encrypt: true },
      { content: wire, encrypt: true, key: '' },
    ]) {
      const r = await createJson(server, key, body);
      assert.equal(r.status, 201);
      assert.equal(r.body.data.url, `${BASE}/view/${r.body.data.paste_id}`);
    }
  });

  it('the decryption key is never stored: not in the row, not anywhere in the database files', async () => {
    const { wire, key: secret } = await encryptForTest('the key must stay on the client');
    const r = await createJson(server, key, { content: wire, encrypt: true, key: secret, downloadable: true });
    assert.equal(r.status, 201);
    const row = await pasteRow(server, r.body.data.paste_id);
    assert.ok(row, 'row stored');
    for (const [column, value] of Object.entries(row)) {
      assert.equal(String(value).includes(secret), false, `column ${column} holds the key`);
    }
    assert.equal(await databaseContains(server.databaseUrl, secret), false, 'key found in the database');
    const read = await detail(server, key, r.body.data.paste_id);
    assert.equal(read.text.includes(secret), false);
  });

  it('encrypt true with plain text content is 400 invalid_ciphertext', async () => {
    expectError(
      await createJson(server, key, { content: 'not encrypted at all', encrypt: true }),
      400,
      'invalid_ciphertext',
    );
  });

  // Hand-made IV and ciphertext so that exactly one thing is wrong in each case.
  const iv12 = Buffer.alloc(12, 7);
  const ct17 = Buffer.alloc(17, 9); // base64 ends with one "=".
  const ct16 = Buffer.alloc(16, 9);

  it('the hand-made control cases are valid: 12-byte IV with 16 and 17 bytes of ciphertext', async () => {
    for (const content of [fpe1(iv12, ct16), fpe1(iv12, ct17)]) {
      const r = await createJson(server, key, { content, encrypt: true });
      assert.equal(r.status, 201, `${content}: ${r.text}`);
    }
  });

  const invalid: Array<[string, () => Promise<string>]> = [
    ['wrong prefix fpe2:', async () => (await encryptForTest('x')).wire.replace(/^fpe1:/, 'fpe2:')],
    ['upper-case prefix FPE1:', async () => (await encryptForTest('x')).wire.replace(/^fpe1:/, 'FPE1:')],
    ['no prefix (2 parts of base64)', async () => (await encryptForTest('x')).wire.replace(/^fpe1:/, '')],
    ['2 parts (no ciphertext)', async () => `fpe1:${iv12.toString('base64')}`],
    ['4 parts (extra colon and part)', async () => `${(await encryptForTest('x')).wire}:AAAA`],
    ['4 parts (trailing colon)', async () => `${(await encryptForTest('x')).wire}:`],
    ['leading space', async () => ` ${(await encryptForTest('x')).wire}`],
    [
      'bad base64 characters in the ciphertext',
      async () => `fpe1:${iv12.toString('base64')}:AAAA!!!!AAAAAAAAAAAAAAAAAAAA`,
    ],
    ['bad base64 characters in the IV', async () => `fpe1:AAAAAAAA*AAAAAAA:${ct16.toString('base64')}`],
    [
      'base64url instead of base64',
      async () => `fpe1:${iv12.toString('base64')}:${Buffer.alloc(18, 0xfb).toString('base64url')}`,
    ],
    ['unpadded base64 ciphertext', async () => fpe1(iv12, ct17).replace(/=+$/, '')],
    [
      'unpadded base64 IV (11 bytes)',
      async () => `fpe1:${Buffer.alloc(11, 1).toString('base64').replace(/=+$/, '')}:${ct16.toString('base64')}`,
    ],
    ['IV of 11 bytes', async () => fpe1(Buffer.alloc(11, 1), ct16)],
    ['IV of 13 bytes', async () => fpe1(Buffer.alloc(13, 1), ct16)],
    ['empty IV', async () => `fpe1::${ct16.toString('base64')}`],
    ['ciphertext of 15 bytes (shorter than the GCM tag)', async () => fpe1(iv12, Buffer.alloc(15, 2))],
    ['empty ciphertext', async () => `fpe1:${iv12.toString('base64')}:`],
    [
      'whitespace inside base64',
      async () =>
        `fpe1:${iv12.toString('base64')}:${ct16.toString('base64').slice(0, 8)} ${ct16.toString('base64').slice(8)}`,
    ],
  ];
  for (const [name, make] of invalid) {
    it(`invalid fpe1 (${name}) is 400 invalid_ciphertext`, async () => {
      const content = await make();
      const before = await rowCount(server);
      expectError(await createJson(server, key, { content, encrypt: true }), 400, 'invalid_ciphertext');
      assert.equal(await rowCount(server), before);
    });
  }
});

describe('POST /api/v1/paste: custom slugs (D9)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  it('a free slug becomes the paste_id and /view/<slug> shows the paste', async () => {
    const r = await createJson(server, key, { content: 'slugged paste body', slug: 'My_slug-1' });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.data.paste_id, 'My_slug-1');
    assert.equal(r.body.data.url, `${BASE}/view/My_slug-1`);
    assert.equal(r.body.data.raw_url, `${BASE}/raw/My_slug-1`);
    const view = no500(await request(`${server.url}/view/My_slug-1`));
    assert.equal(view.status, 200);
    assert.ok(view.text.includes('slugged paste body'));
    const read = await detail(server, key, 'My_slug-1');
    assert.equal(read.body.data.content, 'slugged paste body');
  });

  it('slugs are case-sensitive: a differently-cased slug is a different free address', async () => {
    const r = await createJson(server, key, { content: 'other case', slug: 'my_slug-1' });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.paste_id, 'my_slug-1');
  });

  it('3 and 64 characters are accepted', async () => {
    for (const slug of ['abc', 'x'.repeat(64)]) {
      const r = await createJson(server, key, { content: 'boundary slug', slug });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.data.paste_id, slug);
    }
  });

  it('a taken slug gets <slug>-XXXX (4 base62) and the message says so; the first paste is untouched', async () => {
    const first = await createJson(server, key, { content: 'first owner of taken', slug: 'taken' });
    assert.equal(first.body.data.paste_id, 'taken');
    const ids = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const r = await createJson(server, key, { content: `second try ${i}`, slug: 'taken' });
      assert.equal(r.status, 201);
      const id = r.body.data.paste_id as string;
      assert.match(id, /^taken-[0-9A-Za-z]{4}$/);
      assert.equal(r.body.data.url, `${BASE}/view/${id}`);
      assert.ok(r.body.message.includes(id), r.body.message);
      assert.ok(r.body.message.includes('taken'), r.body.message);
      assert.notEqual(r.body.message, first.body.message);
      const read = await detail(server, key, id);
      assert.equal(read.body.data.content, `second try ${i}`);
      ids.add(id);
    }
    assert.equal(ids.size, 3);
    const original = await detail(server, key, 'taken');
    assert.equal(original.body.data.content, 'first owner of taken');
  });

  it('creates of one slug at once: one gets it, every other a suffixed id, each paste with its own content', async () => {
    const racers = Array.from({ length: 12 }, (_, i) => `racer ${i}`);
    // A create ahead of them keeps a commit busy, so that the racers meet in the next one.
    const [, ...created] = await Promise.all([
      createJson(server, key, { content: 'ahead of the racers' }),
      ...racers.map((content) => createJson(server, key, { content, slug: 'raced-slug' })),
    ]);
    const ids = created.map((r) => {
      assert.equal(r.status, 201, r.text);
      return r.body.data.paste_id as string;
    });
    assert.equal(ids.filter((id) => id === 'raced-slug').length, 1);
    assert.equal(new Set(ids).size, racers.length);
    for (const [i, id] of ids.entries()) {
      assert.equal((await detail(server, key, id)).body.data.content, racers[i]);
    }
  });

  it('the message of a free slug does not claim it was taken', async () => {
    const r = await createJson(server, key, { content: 'fresh slug', slug: 'fresh-one' });
    assert.equal(r.body.data.paste_id, 'fresh-one');
    assert.equal(/taken|instead/i.test(r.body.message), false, r.body.message);
  });

  for (const [name, slug] of [
    ['too short (2)', 'ab'],
    ['too short (1)', 'a'],
    ['65 characters', 'y'.repeat(65)],
    ['a space', 'my slug'],
    ['a slash', 'a/b/c'],
    ['a dot', 'file.txt'],
    ['an exclamation mark', 'wow!'],
    ['non-ASCII letters', 'grüße'],
    ['percent-encoding', 'a%20b'],
  ] as const) {
    it(`a malformed slug (${name}) is 400 invalid_request naming slug`, async () => {
      const before = await rowCount(server);
      const err = expectError(await createJson(server, key, { content: 'bad slug', slug }), 400, 'invalid_request');
      assert.ok(
        err.details?.some((p) => p.field === 'slug'),
        JSON.stringify(err),
      );
      assert.equal(await rowCount(server), before);
    });
  }

  for (const slug of ['api', 'view', 'raw', 'download', 'archive']) {
    it(`the reserved slug "${slug}" is 400 invalid_request naming slug`, async () => {
      const err = expectError(await createJson(server, key, { content: 'reserved', slug }), 400, 'invalid_request');
      assert.ok(
        err.details?.some((p) => p.field === 'slug'),
        JSON.stringify(err),
      );
      assert.equal(await pasteRow(server, slug), undefined);
    });
  }
});

describe('POST /api/v1/paste: public flag (D22) and password (D13)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  const listed = async (id: string): Promise<{ archive: boolean; sitemap: boolean }> => {
    const archive = no500(await request(`${server.url}/archive`));
    const sitemap = no500(await request(`${server.url}/sitemap.xml`));
    assert.equal(archive.status, 200);
    assert.equal(sitemap.status, 200);
    return { archive: archive.text.includes(`/view/${id}"`), sitemap: sitemap.text.includes(`/view/${id}</loc>`) };
  };

  it('public true: listed on /archive and in /sitemap.xml', async () => {
    const r = await createJson(server, key, { content: 'for everyone', title: 'Public one', public: true });
    assert.equal(r.status, 201);
    assert.deepEqual(await listed(r.body.data.paste_id), { archive: true, sitemap: true });
  });

  it('public omitted or false: not listed', async () => {
    for (const body of [{ content: 'private by default' }, { content: 'private on purpose', public: false }]) {
      const r = await createJson(server, key, body);
      assert.equal(r.status, 201);
      assert.deepEqual(await listed(r.body.data.paste_id), { archive: false, sitemap: false });
    }
  });

  it('public with a password: accepted but not listed', async () => {
    const r = await createJson(server, key, { content: 'public but locked', public: true, password: 'pw-1234' });
    assert.equal(r.status, 201);
    assert.deepEqual(await listed(r.body.data.paste_id), { archive: false, sitemap: false });
  });

  it('public with burn: accepted but not listed', async () => {
    const r = await createJson(server, key, { content: 'public but view-once', public: true, burn: true });
    assert.equal(r.status, 201);
    assert.deepEqual(await listed(r.body.data.paste_id), { archive: false, sitemap: false });
  });

  it('public with encrypt: accepted but not listed', async () => {
    const { wire } = await encryptForTest('public but encrypted');
    const r = await createJson(server, key, { content: wire, public: true, encrypt: true });
    assert.equal(r.status, 201);
    assert.deepEqual(await listed(r.body.data.paste_id), { archive: false, sitemap: false });
  });

  it('rows stored public with a password, burn or encryption before it was ignored are made unlisted by the migration', async () => {
    const stored = await createJson(server, key, { content: 'stored before', public: true });
    const plain = await createJson(server, key, { content: 'plain and public', public: true });
    const id = stored.body.data.paste_id;
    await server.sql(`UPDATE pastes SET password_hash = 'x' WHERE id = '${id}'`);
    await server.sql(`DELETE FROM kysely_migration WHERE name >= '0009'`);
    assert.deepEqual(await migrateToLatest(server.services.storage), [
      '0009_public_only_where_it_applies',
      '0010_counts_past_2_31',
      '0011_webhook_deliveries_finished',
    ]);
    const rows = await server.sql<{ id: string; is_public: number }>(
      `SELECT id, is_public FROM pastes WHERE id IN ('${id}', '${plain.body.data.paste_id}') ORDER BY id`,
    );
    const publicOf = Object.fromEntries(rows.map((r) => [r.id, Number(r.is_public)]));
    assert.deepEqual(publicOf, { [id]: 0, [plain.body.data.paste_id]: 1 });
  });

  it('public ignored for a password or burn stays ignored when PUT lifts them: never listed', async () => {
    const put = async (id: string, json: Record<string, unknown>) => {
      const answer = no500(
        await request(`${server.url}/api/v1/paste/${id}`, { method: 'PUT', headers: { 'x-api-key': key }, json }),
      );
      assert.equal(answer.status, 200, answer.text);
    };
    const locked = await createJson(server, key, { content: 'locked, then not', public: true, password: 'pw-1234' });
    const once = await createJson(server, key, { content: 'view-once, then not', public: true, burn: true });
    await put(locked.body.data.paste_id, { password: null });
    await put(once.body.data.paste_id, { burn: false });
    for (const id of [locked.body.data.paste_id, once.body.data.paste_id]) {
      assert.deepEqual(await listed(id), { archive: false, sitemap: false });
    }
  });

  it('password: stored only as an argon2id hash, never in clear in any column', async () => {
    const password = 'correct horse battery staple';
    const r = await createJson(server, key, { content: 'locked content', password });
    assert.equal(r.status, 201);
    const row = await pasteRow(server, r.body.data.paste_id);
    assert.ok(row);
    const hash = row.password_hash;
    assert.equal(typeof hash, 'string');
    assert.ok((hash as string).startsWith('$argon2id$'), String(hash));
    for (const [column, value] of Object.entries(row)) {
      assert.equal(String(value).includes(password), false, `column ${column} holds the password`);
    }
    assert.equal(await databaseContains(server.databaseUrl, password), false, 'password found in the database');
  });

  it('password: the API refuses the content (403 password_protected); the hash verifies on /raw', async () => {
    const password = 'open sesame';
    const r = await createJson(server, key, { content: 'behind the door', password });
    const id = r.body.data.paste_id;
    expectError(await detail(server, key, id), 403, 'password_protected');
    const raw = no500(await request(`${server.url}/raw/${id}`, { headers: { 'x-paste-password': password } }));
    assert.equal(raw.status, 200);
    assert.equal(raw.text, 'behind the door');
    const wrong = no500(await request(`${server.url}/raw/${id}`, { headers: { 'x-paste-password': 'nope' } }));
    assert.equal(wrong.status, 403);
  });

  it('a password that is not ASCII opens /raw and /download through X-Paste-Password sent as UTF-8', async () => {
    for (const password of ['пароль-1234', 'pässwort', '密码🔑密码']) {
      const r = await createJson(server, key, { content: `behind ${password}`, password });
      const id = r.body.data.paste_id;
      // What curl sends: the password's UTF-8 bytes (fetch takes a header as latin1, a byte a character).
      const sent = Buffer.from(password, 'utf8').toString('latin1');
      for (const path of ['raw', 'download']) {
        const read = no500(await request(`${server.url}/${path}/${id}`, { headers: { 'x-paste-password': sent } }));
        assert.equal(read.status, 200, `${path} ${password}: ${read.text}`);
        assert.equal(read.text, `behind ${password}`);
      }
      // Another password sent the same way is refused.
      const wrong = Buffer.from(`${password}!`, 'utf8').toString('latin1');
      assert.equal((await request(`${server.url}/raw/${id}`, { headers: { 'x-paste-password': wrong } })).status, 403);
    }
  });

  it('no password: password_hash is null', async () => {
    const r = await createJson(server, key, { content: 'open content' });
    assert.equal((await pasteRow(server, r.body.data.paste_id))?.password_hash, null);
  });
});

describe('POST /api/v1/paste: multipart uploads (D17)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  it('a .py file is 201: content_type file, original_filename, title from the name, language python', async () => {
    server.clock.now = START;
    const text = 'def main():\n    print("hi")\n';
    const r = await upload(server, key, fileForm(text, 'script.py', 'text/x-python'));
    assert.equal(r.status, 201, r.text);
    const d = r.body.data;
    assert.match(d.paste_id, /^[0-9A-Za-z]{10}$/);
    assert.equal(d.url, `${BASE}/view/${d.paste_id}`);
    assert.equal(d.download_url, `${BASE}/download/${d.paste_id}`);
    assert.equal(d.sha256, sha256(text));
    assert.equal(d.expires_at, '2026-01-16 12:00:00');
    assert.equal(d.encrypted, false);
    assert.equal(d.downloadable, true);
    const read = await detail(server, key, d.paste_id);
    const p = read.body.data;
    assert.equal(p.content_type, 'file');
    assert.equal(p.original_filename, 'script.py');
    assert.equal(p.title, 'script.py');
    assert.equal(p.language, 'python');
    assert.equal(p.content, text);
    assert.equal(p.file_size, Buffer.byteLength(text));
  });

  it("blank title, description and language fields are not given: the title and language are the file name's (D17)", async () => {
    const text = 'package main\n\nfunc main() {}\n';
    const r = await upload(
      server,
      key,
      fileForm(text, 'main.go', 'text/plain', { title: '', description: '', language: '' }),
    );
    assert.equal(r.status, 201, r.text);
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(p.title, 'main.go');
    assert.equal(p.description, null);
    assert.equal(p.language, 'go');
  });

  for (const [filename, language] of [
    ['main.go', 'go'],
    ['lib.rs', 'rust'],
    ['app.ts', 'typescript'],
    ['index.js', 'javascript'],
    ['query.sql', 'sql'],
  ] as const) {
    it(`language follows the extension: ${filename} → ${language}`, async () => {
      const r = await upload(server, key, fileForm('some code here\n', filename, 'text/plain'));
      assert.equal(r.status, 201, r.text);
      assert.equal((await detail(server, key, r.body.data.paste_id)).body.data.language, language);
    });
  }

  it('the extension check is case-insensitive (MAIN.PY is python)', async () => {
    const r = await upload(server, key, fileForm('print(1)\n', 'MAIN.PY', 'text/plain'));
    assert.equal(r.status, 201, r.text);
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(p.language, 'python');
    assert.equal(p.original_filename, 'MAIN.PY');
  });

  it('form fields apply: title, description, expiry, burn (form boolean "yes"), language, slug', async () => {
    server.clock.now = START;
    const r = await upload(
      server,
      key,
      fileForm('x = 1\ny = 2\n', 'vars.py', 'text/plain', {
        title: 'Chosen title',
        description: 'uploaded with fields',
        expiry: '1h',
        burn: 'yes',
        language: 'ruby',
        slug: 'uploaded-slug',
      }),
    );
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.data.paste_id, 'uploaded-slug');
    assert.equal(r.body.data.expires_at, '2026-01-15 13:00:00');
    assert.equal(r.body.data.burn_after_read, true);
    const p = (await detail(server, key, 'uploaded-slug')).body.data;
    assert.equal(p.title, 'Chosen title');
    assert.equal(p.description, 'uploaded with fields');
    assert.equal(p.language, 'ruby');
    assert.equal(p.original_filename, 'vars.py');
  });

  it('downloadable in a form without encrypt gets the warning', async () => {
    const r = await upload(server, key, fileForm('a b c d', 'notes.txt', 'text/plain', { downloadable: 'true' }));
    assert.equal(r.status, 201, r.text);
    assert.equal(typeof r.body.data.warning, 'string');
  });

  it('an encrypted upload: fpe1 file with encrypt=1 and key', async () => {
    const { wire, key: secret } = await encryptForTest('uploaded secret');
    const r = await upload(server, key, fileForm(wire, 'secret.txt', 'text/plain', { encrypt: '1', key: secret }));
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.data.encrypted, true);
    assert.equal(r.body.data.download_url, null);
    assert.ok(r.body.data.url.endsWith(`#${secret}`));
  });

  it('an upload with encrypt=1 and a file that is not fpe1 is 400 invalid_ciphertext', async () => {
    expectError(
      await upload(server, key, fileForm('plain text file', 'plain.txt', 'text/plain', { encrypt: 'on' })),
      400,
      'invalid_ciphertext',
    );
  });

  it('an upload with encrypt=1 of an fpe1 file that ends with a line break is refused saying so', async () => {
    const { wire } = await encryptForTest('written by echo');
    const err = expectError(
      await upload(server, key, fileForm(`${wire}\n`, 'secret.txt', 'text/plain', { encrypt: 'on' })),
      400,
      'invalid_ciphertext',
    );
    assert.match(err.message, /ends with a line break/);
    assert.equal(
      (await upload(server, key, fileForm(wire, 'secret.txt', 'text/plain', { encrypt: 'on' }))).status,
      201,
    );
  });

  it('a bad form boolean is 400 invalid_request naming it', async () => {
    const err = expectError(
      await upload(server, key, fileForm('a b c d', 'notes.txt', 'text/plain', { burn: 'maybe' })),
      400,
      'invalid_request',
    );
    assert.ok(
      err.details?.some((p) => p.field === 'burn'),
      JSON.stringify(err),
    );
  });

  it('a form field far over its length is 400 invalid_request naming it, not 413 for content (D7)', async () => {
    await refusedNaming(server, 'description', () =>
      upload(server, key, fileForm('a b c d', 'notes.txt', 'text/plain', { description: 'd'.repeat(5 * 1024 * 1024) })),
    );
  });

  for (const [filename, type] of [
    ['tool.exe', 'application/octet-stream'],
    ['image.png', 'image/png'],
    ['README', 'text/plain'],
    ['Makefile', 'text/plain'],
    ['archive.tar.gz', 'application/gzip'],
    ['script.sh', 'application/x-sh'],
    ['page.php', 'text/plain'],
    ['notes.txt.exe', 'text/plain'],
  ] as const) {
    it(`extension not in the list (${filename}, ${type}) is 400 file_type_not_allowed`, async () => {
      const before = await rowCount(server);
      expectError(
        await upload(server, key, fileForm('plain words here', filename, type)),
        400,
        'file_type_not_allowed',
      );
      assert.equal(await rowCount(server), before);
    });
  }

  it('a textual MIME type does not save a disallowed extension (.exe as text/plain)', async () => {
    expectError(
      await upload(server, key, fileForm('plain words here', 'run.exe', 'text/plain')),
      400,
      'file_type_not_allowed',
    );
  });

  for (const type of ['image/png', 'application/pdf', 'application/zip', 'video/mp4', 'audio/mpeg']) {
    it(`an allowed extension with MIME ${type} is 400 file_type_not_allowed`, async () => {
      expectError(
        await upload(server, key, fileForm('plain words here', 'notes.txt', type)),
        400,
        'file_type_not_allowed',
      );
    });
  }

  for (const type of ['application/octet-stream', 'application/json', 'text/markdown', 'text/plain; charset=utf-8']) {
    it(`MIME ${type} is accepted`, async () => {
      const r = await upload(server, key, fileForm('{"a": 1}', 'data.json', type));
      assert.equal(r.status, 201, r.text);
    });
  }

  // The types the common MIME tables give these allowed extensions (Debian's /etc/mime.types,
  // read by Python's mimetypes and so by requests and httpx; mime-db, read by Node's form-data
  // and so by axios), though their names do not say text.
  for (const [filename, type] of [
    ['build.tcl', 'application/x-tcl'],
    ['run.bat', 'application/x-msdos-program'],
    ['notes.org', 'application/vnd.lotus-organizer'],
    ['app.ts', 'video/mp2t'],
    ['query.sql', 'application/x-sql'],
    ['data.csv', 'application/vnd.ms-excel'],
    ['count.awk', 'application/x-awk'],
    ['types.ts', 'video/vnd.dlna.mpeg-tts'],
  ] as const) {
    it(`${filename} declared as ${type}, the type the MIME tables give it, is accepted`, async () => {
      const r = await upload(server, key, fileForm('plain words here\n', filename, type));
      assert.equal(r.status, 201, r.text);
      const read = await detail(server, key, r.body.data.paste_id);
      assert.equal(read.body.data.original_filename, filename);
      assert.equal(read.body.data.content, 'plain words here\n');
    });
  }

  it("a table's type is taken only with its own extension (a Lotus Organizer type named .txt is refused)", async () => {
    expectError(
      await upload(server, key, fileForm('plain words here', 'notes.txt', 'application/vnd.lotus-organizer')),
      400,
      'file_type_not_allowed',
    );
    expectError(
      await upload(server, key, fileForm('plain words here', 'notes.org', 'application/x-msdos-program')),
      400,
      'file_type_not_allowed',
    );
    expectError(
      await upload(server, key, fileForm('plain words here', 'clip.txt', 'video/mp2t')),
      400,
      'file_type_not_allowed',
    );
  });

  it('every allowed extension is accepted with the type /etc/mime.types gives it', async (t) => {
    let table: string;
    try {
      table = readFileSync('/etc/mime.types', 'utf8');
    } catch {
      t.skip('no /etc/mime.types on this machine');
      return;
    }
    const typeOf = new Map<string, string>();
    for (const line of table.split('\n')) {
      if (line.startsWith('#')) continue;
      const [type, ...extensions] = line.trim().split(/\s+/);
      for (const extension of extensions) if (type && !typeOf.has(extension)) typeOf.set(extension, type);
    }
    const refused: string[] = [];
    let tried = 0;
    for (const [extension, type] of typeOf) {
      if (!isAllowedExtension(`file.${extension}`)) continue;
      tried++;
      const r = await upload(server, key, fileForm('plain words here\n', `file.${extension}`, type));
      if (r.status !== 201) refused.push(`.${extension} as ${type}: ${r.status}`);
    }
    assert.ok(tried >= 20, `only ${tried} allowed extensions found in /etc/mime.types`);
    assert.deepEqual(refused, []);
  });

  it('a .gitignore file (its name is its extension) is accepted', async () => {
    const r = await upload(server, key, fileForm('node_modules/\n', '.gitignore', 'text/plain'));
    assert.equal(r.status, 201, r.text);
  });

  it('non-UTF-8 bytes are 400 file_type_not_allowed', async () => {
    const before = await rowCount(server);
    const bytes = new Uint8Array([0x68, 0x65, 0x6c, 0x6c, 0x6f, 0xff, 0xfe, 0x20, 0xc3, 0x28]);
    expectError(await upload(server, key, fileForm(bytes, 'latin.txt')), 400, 'file_type_not_allowed');
    assert.equal(await rowCount(server), before);
  });

  it('Latin-1 text (not UTF-8) is 400 file_type_not_allowed', async () => {
    expectError(
      await upload(server, key, fileForm(Buffer.from('Grüße aus Köln', 'latin1'), 'latin1.txt')),
      400,
      'file_type_not_allowed',
    );
  });

  it('a NUL byte is 400 file_type_not_allowed', async () => {
    expectError(await upload(server, key, fileForm('abc\u0000def', 'nul.txt')), 400, 'file_type_not_allowed');
  });

  it('a file too short (2 characters) is 400 content_too_short', async () => {
    expectError(await upload(server, key, fileForm('ab', 'short.txt')), 400, 'content_too_short');
  });

  it('a form without a file is 400 invalid_request naming file', async () => {
    const form = new FormData();
    form.append('title', 'no file');
    const err = expectError(await upload(server, key, form), 400, 'invalid_request');
    assert.ok(
      err.details?.some((p) => p.field === 'file'),
      JSON.stringify(err),
    );
  });

  it('an unknown form field is 400 invalid_request naming it', async () => {
    const before = await rowCount(server);
    const err = expectError(
      await upload(server, key, fileForm('some text', 'notes.txt', 'text/plain', { colour: 'red' })),
      400,
      'invalid_request',
    );
    assert.ok(
      err.details?.some((p) => p.field === 'colour'),
      JSON.stringify(err),
    );
    assert.equal(await rowCount(server), before);
  });

  it('a file in a field other than "file" is 400', async () => {
    const form = new FormData();
    form.append('document', new Blob(['some text'], { type: 'text/plain' }), 'notes.txt');
    const r = await upload(server, key, form);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error, true);
  });

  it('two files are 400', async () => {
    const form = fileForm('first file', 'one.txt');
    form.append('file', new Blob(['second file'], { type: 'text/plain' }), 'two.txt');
    const r = await upload(server, key, form);
    assert.equal(r.status, 400, r.text);
  });

  it('a file of exactly 10 MiB is accepted', async () => {
    const bytes = Buffer.alloc(10 * MiB, 'x');
    const r = await upload(server, key, fileForm(bytes, 'big.log'));
    assert.equal(r.status, 201, r.text.slice(0, 300));
    assert.equal(r.body.data.sha256, sha256(bytes));
    const row = await pasteRow(server, r.body.data.paste_id);
    assert.equal(row?.file_size, 10 * MiB);
  });

  it('a file of 10 MiB + 1 byte is 413 file_too_large and no paste is stored', async () => {
    const before = await rowCount(server);
    const r = await upload(server, key, fileForm(Buffer.alloc(10 * MiB + 1, 'x'), 'too-big.log'));
    expectError(r, 413, 'file_too_large');
    assert.equal(await rowCount(server), before);
  });

  it('a filename with ../ path components is stored without them', async () => {
    for (const name of ['../../etc/passwd.txt', '..\\..\\windows\\passwd.txt']) {
      const boundary = `b${randomBytes(8).toString('hex')}`;
      const body = multipartBody(boundary, [
        { disposition: `form-data; name="file"; filename="${name}"`, type: 'text/plain', data: 'root:x:0:0' },
      ]);
      const r = await postRaw(server, key, body, { 'content-type': `multipart/form-data; boundary=${boundary}` });
      assert.equal(r.status, 201, r.text);
      const p = (await detail(server, key, r.body.data.paste_id)).body.data;
      assert.equal(p.original_filename, 'passwd.txt', name);
      assert.equal(p.title, 'passwd.txt');
      const dl = no500(await request(`${server.url}/download/${r.body.data.paste_id}`));
      assert.equal(dl.status, 200);
      const disposition = dl.headers.get('content-disposition') ?? '';
      assert.ok(disposition.startsWith('attachment'), disposition);
      assert.equal(/\.\.|[/\\]/.test(disposition), false, disposition);
    }
  });

  it('a filename with U+202E (right-to-left override) is stored without it', async () => {
    const r = await upload(server, key, fileForm('innocent text', 'invoice\u202Efdp.txt'));
    assert.equal(r.status, 201, r.text);
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(p.original_filename, 'invoicefdp.txt');
    assert.equal(p.title, 'invoicefdp.txt');
    const dl = no500(await request(`${server.url}/download/${r.body.data.paste_id}`));
    assert.equal(dl.status, 200);
    const disposition = dl.headers.get('content-disposition') ?? '';
    assert.equal(/[\r\n\u202E]/.test(disposition), false, disposition);
    assert.equal(/%E2%80%AE/i.test(disposition), false, disposition);
  });

  /** An upload of one text file part whose Content-Disposition is given as is. */
  const uploadDisposed = (disposition: string, data: string) => {
    const boundary = `b${randomBytes(8).toString('hex')}`;
    const body = multipartBody(boundary, [{ disposition, type: 'text/plain', data }]);
    return postRaw(server, key, body, { 'content-type': `multipart/form-data; boundary=${boundary}` });
  };

  it('a file part without a file name is 400 invalid_request naming the file, not an unreadable body', async () => {
    const boundary = `b${randomBytes(8).toString('hex')}`;
    const noName = multipartBody(boundary, [
      { disposition: 'form-data; name="file"', type: 'application/octet-stream', data: 'some notes' },
    ]);
    const r = await postRaw(server, key, noName, { 'content-type': `multipart/form-data; boundary=${boundary}` });
    expectError(r, 400, 'invalid_request');
    assert.deepEqual(r.body.details, [{ field: 'file', message: 'is required, with its file name' }]);
    // A browser's file input left empty: filename="" and no bytes.
    const empty = await uploadDisposed('form-data; name="file"; filename=""', '');
    expectError(empty, 400, 'invalid_request');
    assert.deepEqual(empty.body.details, [{ field: 'file', message: 'is required, with its file name' }]);
  });

  it('a filename with U+202E sent as RFC 5987 filename* is stored without it', async () => {
    const r = await uploadDisposed(`form-data; name="file"; filename*=UTF-8''report%E2%80%AEtxt.md`, 'some markdown');
    assert.equal(r.status, 201, r.text);
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(p.original_filename, 'reporttxt.md');
  });

  it('a filename sent as UTF-16 holding half of a surrogate pair is stored without it, as UTF-8 text', async () => {
    // U+D800 alone, then ".txt", as UTF-16LE: busboy decodes it to "\ud800.txt".
    const r = await uploadDisposed(
      `form-data; name="file"; filename*=utf-16le''%00%D8%2E%00%74%00%78%00%74%00`,
      'some text',
    );
    assert.equal(r.status, 201, r.text);
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(p.original_filename, '.txt');
    const row = await pasteRow(server, r.body.data.paste_id);
    assert.equal(row?.original_filename, '.txt');
    assert.equal(row?.title, '.txt');
  });

  it('a filename over 200 characters is cut before its extension, which still decides type and language', async () => {
    const stem = `${'long-name-'.repeat(30)}x`;
    const r = await upload(server, key, fileForm('print("hi")\n', `${stem}.py`));
    assert.equal(r.status, 201, r.text);
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(p.original_filename, `${stem.slice(0, 197)}.py`);
    assert.equal(p.original_filename.length, 200);
    assert.equal(p.language, 'python');
    // An extension too long to be one is cut with the rest (and refused: no such extension).
    const odd = await upload(server, key, fileForm('text', `${stem}.${'x'.repeat(40)}`));
    assert.equal(odd.status, 400, odd.text);
  });

  it('a filename with CR/LF (as a browser or fetch sends it) never stores or emits a raw CR/LF', async () => {
    const r = await upload(server, key, fileForm('header injection?', 'evil\r\nSet-Cookie: a=b.txt'));
    assert.equal(r.status, 201, r.text);
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(/[\r\n]/.test(p.original_filename), false, JSON.stringify(p.original_filename));
    const row = await pasteRow(server, r.body.data.paste_id);
    assert.equal(/[\r\n]/.test(String(row?.original_filename)), false);
    const dl = no500(await request(`${server.url}/download/${r.body.data.paste_id}`));
    assert.equal(dl.status, 200);
    assert.equal(dl.headers.get('set-cookie'), null);
    assert.equal(/[\r\n\u202E]/.test(dl.headers.get('content-disposition') ?? ''), false);
  });

  it('a filename decoding to raw CR/LF (filename*=...%0D%0A) is never stored with them', async () => {
    const boundary = `b${randomBytes(8).toString('hex')}`;
    const body = multipartBody(boundary, [
      {
        disposition: `form-data; name="file"; filename*=UTF-8''evil%0D%0ASet-Cookie%3A%20a%3Db.txt`,
        type: 'text/plain',
        data: 'header injection?',
      },
    ]);
    const before = await rowCount(server);
    const r = await postRaw(server, key, body, { 'content-type': `multipart/form-data; boundary=${boundary}` });
    // Either refused (400) or stored with the line break removed; never stored with it.
    assert.ok(r.status === 201 || r.status === 400, r.text);
    if (r.status === 400) {
      assert.equal(r.body.error, true);
      assert.equal(await rowCount(server), before);
      return;
    }
    const p = (await detail(server, key, r.body.data.paste_id)).body.data;
    assert.equal(/[\r\n]/.test(p.original_filename), false, JSON.stringify(p.original_filename));
    const dl = no500(await request(`${server.url}/download/${r.body.data.paste_id}`));
    assert.equal(dl.headers.get('set-cookie'), null);
    assert.equal(/[\r\n]/.test(dl.headers.get('content-disposition') ?? ''), false);
  });

  it('a malformed multipart body (no closing boundary, bad framing) is a 400, not a 500', async () => {
    const boundary = 'xyzboundary';
    const r = await postRaw(
      server,
      key,
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nabc`,
      {
        'content-type': `multipart/form-data; boundary=${boundary}`,
      },
    );
    assert.equal(r.status, 400, r.text);
    const r2 = await postRaw(server, key, 'not multipart at all', { 'content-type': 'multipart/form-data' });
    assert.equal(r2.status, 400, r2.text);
  });
});

describe('POST /api/v1/paste: oversized bodies are cut off while streaming (D17)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  const preamble = (boundary: string) =>
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="huge.txt"\r\nContent-Type: text/plain\r\n\r\n`,
    );

  it('a chunked 100 MB multipart upload is answered 413 file_too_large long before its end', async () => {
    const before = await rowCount(server);
    const boundary = 'streamboundary42';
    const outcome = await streamUntilAnswered(
      server,
      {
        'x-api-key': key,
        'content-type': `multipart/form-data; boundary=${boundary}`,
        'transfer-encoding': 'chunked',
      },
      preamble(boundary),
      100 * 1_000_000,
    );
    assert.equal(outcome.status, 413, JSON.stringify({ ...outcome, body: outcome.body.slice(0, 300) }));
    assert.equal(JSON.parse(outcome.body).code, 'file_too_large');
    // The limit is 6 bytes of JSON per byte of content (\u00e9 escapes): 24 MiB + 64 KiB.
    assert.ok(outcome.bytesWritten < 32 * MiB, `wrote ${outcome.bytesWritten} bytes before the answer`);
    assert.equal(await rowCount(server), before);
  });

  it('a body refused mid-way is answered, then the connection half-closed, never reset', async () => {
    // A client still writing when the 413 comes (Node's own client, as scripts use it) lost the
    // answer to the reset that closing with unread data sends: EPIPE instead of the 413. The
    // server now reads nothing more, sends FIN after the answer and lets the client write on for
    // a while; this client keeps writing for 500 ms after the answer and must see no error.
    const db = await freshDatabase();
    const served = await startServerProcess({ DATABASE_URL: db.url, ANON_HOURLY_LIMIT: '0' });
    try {
      const { port } = new URL(served.url);
      const outcome = await new Promise<{ answer: string; errors: string[]; ended: boolean }>((resolve) => {
        const socket = net.connect({ port: Number(port), host: '127.0.0.1', allowHalfOpen: true });
        const chunk = Buffer.alloc(64 * 1024, 'a');
        const framed = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]);
        let answer = '';
        const errors: string[] = [];
        let ended = false;
        let answeredAt = 0;
        socket.on('data', (data) => {
          answer += data.toString('latin1');
          if (!answeredAt && answer.includes('\r\n\r\n')) answeredAt = Date.now();
        });
        socket.on('end', () => {
          ended = true;
        });
        socket.on('error', (err) => errors.push(err.message));
        socket.write(
          'POST /api/v1/cli HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n',
        );
        const timer = setInterval(() => {
          if (!socket.destroyed && socket.writableLength < 1024 * 1024) socket.write(framed);
          if ((answeredAt && Date.now() - answeredAt > 500) || errors.length > 0) {
            clearInterval(timer);
            socket.destroy();
            resolve({ answer, errors, ended });
          }
        }, 2);
      });
      assert.match(outcome.answer, /^HTTP\/1\.1 413 /);
      assert.match(outcome.answer, /"code":"content_too_large"/);
      assert.deepEqual(outcome.errors, [], 'no reset while the client writes on');
      assert.equal(outcome.ended, true, 'FIN after the answer');
    } finally {
      await served.stop();
      await db.drop();
    }
  });

  it('a multipart upload declaring Content-Length 100 MB is answered 413 file_too_large at once', async () => {
    const boundary = 'streamboundary43';
    const outcome = await streamUntilAnswered(
      server,
      {
        'x-api-key': key,
        'content-type': `multipart/form-data; boundary=${boundary}`,
        'content-length': 100 * 1_000_000,
      },
      preamble(boundary),
      100 * 1_000_000,
    );
    assert.equal(outcome.status, 413, JSON.stringify({ ...outcome, body: outcome.body.slice(0, 300) }));
    assert.equal(JSON.parse(outcome.body).code, 'file_too_large');
    assert.ok(outcome.bytesWritten < 2 * MiB, `wrote ${outcome.bytesWritten} bytes before the answer`);
  });

  it('a JSON body declaring Content-Length 50 MB is answered 413 content_too_large right away', async () => {
    const outcome = await streamUntilAnswered(
      server,
      { 'x-api-key': key, 'content-type': 'application/json', 'content-length': 50 * MiB },
      Buffer.from('{"content": "'),
      50 * MiB,
    );
    assert.equal(outcome.status, 413, JSON.stringify({ ...outcome, body: outcome.body.slice(0, 300) }));
    assert.equal(JSON.parse(outcome.body).code, 'content_too_large');
    assert.ok(outcome.bytesWritten < 2 * MiB, `wrote ${outcome.bytesWritten} bytes before the answer`);
  });

  it('a chunked 100 MB JSON body is answered 413 content_too_large long before its end', async () => {
    const outcome = await streamUntilAnswered(
      server,
      { 'x-api-key': key, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      Buffer.from('{"content": "'),
      100 * 1_000_000,
    );
    assert.equal(outcome.status, 413, JSON.stringify({ ...outcome, body: outcome.body.slice(0, 300) }));
    assert.equal(JSON.parse(outcome.body).code, 'content_too_large');
    // The limit is 6 bytes of JSON per byte of content (\u00e9 escapes): 24 MiB + 64 KiB.
    assert.ok(outcome.bytesWritten < 32 * MiB, `wrote ${outcome.bytesWritten} bytes before the answer`);
  });

  it('the server still answers normally after the cut-offs', async () => {
    const r = await createJson(server, key, { content: 'still alive' });
    assert.equal(r.status, 201);
  });
});

describe('POST /api/v1/paste: authentication', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  const attempt = (apiKey: string | undefined) =>
    postRaw(server, apiKey, JSON.stringify({ content: 'auth check content' }), { 'content-type': 'application/json' });

  it('the control: a valid active key creates a paste', async () => {
    assert.equal((await attempt(key)).status, 201);
  });

  it('no X-API-Key is 401 api_key_missing and stores nothing', async () => {
    const before = await rowCount(server);
    expectError(await attempt(undefined), 401, 'api_key_missing');
    assert.equal(await rowCount(server), before);
  });

  it('an empty X-API-Key is 401 api_key_missing', async () => {
    expectError(await attempt(''), 401, 'api_key_missing');
  });

  it('no key on a multipart upload is 401 too', async () => {
    const r = no500(
      await request(`${server.url}/api/v1/paste`, { method: 'POST', body: fileForm('some text', 'notes.txt') }),
    );
    expectError(r, 401, 'api_key_missing');
  });

  for (const bad of ['not-a-key', 'fp_short', `${'fp_'}${'A'.repeat(49)}`]) {
    it(`a malformed key (${bad.slice(0, 12)}...) is 403`, async () => {
      const before = await rowCount(server);
      const r = await attempt(bad);
      assert.equal(r.status, 403, r.text);
      assert.equal(r.body.error, true);
      assert.equal(typeof r.body.code, 'string');
      assert.equal(await rowCount(server), before);
    });
  }

  it('a key with one character changed (checksum fails) is 403', async () => {
    const last = key.at(-1) === 'A' ? 'B' : 'A';
    const r = await attempt(`${key.slice(0, -1)}${last}`);
    assert.equal(r.status, 403, r.text);
  });

  it('a well-formed but unknown key is 403', async () => {
    const before = await rowCount(server);
    const r = await attempt(generateApiKey());
    assert.equal(r.status, 403, r.text);
    assert.equal(r.body.error, true);
    assert.equal(await rowCount(server), before);
  });

  it('a deactivated key is 403; re-activated it works again', async () => {
    const other = await server.createKey({ name: 'to deactivate' });
    const found = await server.services.keys.find(other);
    assert.ok(found);
    assert.equal((await attempt(other)).status, 201);
    await server.services.keys.setActive(found.id, false);
    const before = await rowCount(server);
    const r = await attempt(other);
    assert.equal(r.status, 403, r.text);
    assert.equal(r.body.error, true);
    assert.equal(await rowCount(server), before);
    await server.services.keys.setActive(found.id, true);
    assert.equal((await attempt(other)).status, 201);
  });

  it('authentication comes before validation: no key with a bad body is still 401', async () => {
    const r = await postRaw(server, undefined, '{not json', { 'content-type': 'application/json' });
    expectError(r, 401, 'api_key_missing');
  });
});

describe('POST /api/v1/paste: a refused request never changes stored pastes', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
  });
  after(() => server.close());

  it('after a batch of refused creates, the earlier paste reads back identical and the count is unchanged', async () => {
    const original = await createJson(server, key, {
      content: 'the original content',
      slug: 'keepme',
      title: 'Original',
      expiry: 'never',
    });
    assert.equal(original.status, 201);
    const rowBefore = await pasteRow(server, 'keepme');
    const countBefore = await rowCount(server);
    const { wire } = await encryptForTest('x');
    const json = (body: unknown) => createJson(server, key, body);
    const refused: Result[] = [
      await json({ content: 'ab', slug: 'keepme' }),
      await json({ content: '   ', slug: 'keepme' }),
      await json({ content: 'replacement content', slug: 'keepme', expiry: '5y' }),
      await json({ content: 'replacement content', slug: 'keepme', unknown: 1 }),
      await json({ content: 'replacement content', slug: 'keepme', burn: 'true' }),
      await json({ content: 'replacement content', slug: 'keepme', description: 'd'.repeat(501) }),
      await json({ content: 'not ciphertext', slug: 'keepme', encrypt: true }),
      await json({ content: `${wire}:extra`, slug: 'keepme', encrypt: true }),
      await json({ content: 'a'.repeat(4 * MiB + 1), slug: 'keepme' }),
      await json([{ content: 'replacement content', slug: 'keepme' }]),
      await postRaw(server, key, '{"content": "replacement content", "slug": "keepme"', {
        'content-type': 'application/json',
      }),
      await postRaw(server, undefined, JSON.stringify({ content: 'replacement content', slug: 'keepme' }), {
        'content-type': 'application/json',
      }),
      await postRaw(server, generateApiKey(), JSON.stringify({ content: 'replacement content', slug: 'keepme' }), {
        'content-type': 'application/json',
      }),
      await upload(server, key, fileForm('replacement content', 'keepme.exe', 'text/plain', { slug: 'keepme' })),
      await upload(server, key, fileForm('replacement content', 'keepme.txt', 'image/png', { slug: 'keepme' })),
      await upload(server, key, fileForm('bad\u0000bytes', 'keepme.txt', 'text/plain', { slug: 'keepme' })),
      await upload(
        server,
        key,
        fileForm(Buffer.alloc(10 * MiB + 1, 'z'), 'keepme.txt', 'text/plain', { slug: 'keepme' }),
      ),
      await upload(
        server,
        key,
        fileForm('replacement content', 'keepme.txt', 'text/plain', { slug: 'keepme', x: '1' }),
      ),
    ];
    for (const [i, r] of refused.entries()) {
      assert.ok(r.status >= 400 && r.status < 500, `request ${i}: ${r.status} ${r.text.slice(0, 200)}`);
      assert.equal(r.body.error, true, `request ${i}`);
    }
    assert.equal(await rowCount(server), countBefore);
    assert.deepEqual(await pasteRow(server, 'keepme'), rowBefore);
    const read = await detail(server, key, 'keepme');
    assert.equal(read.body.data.content, 'the original content');
    assert.equal(read.body.data.sha256, original.body.data.sha256);
    assert.equal(read.body.data.title, 'Original');
    assert.equal(read.body.data.expires_at, null);
    const [suffixed] = await server.sql<{ n: number }>("SELECT count(*) AS n FROM pastes WHERE id LIKE 'keepme-%'");
    assert.equal(Number(suffixed?.n), 0);
  });
});
