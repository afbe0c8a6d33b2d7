/**
 * The life of a paste over HTTP (api-v1.md; D3-D16): reading by id and raw, passwords, burn
 * after read, expiry and the sweep, update, delete, the owner's list, and 404/405 routing.
 * Every test talks to a real server on 127.0.0.1; time moves only with the ManualClock.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { clientBucket } from '../src/client-address.js';
import { hashPassword } from '../src/pastes/passwords.js';
import { encryptForTest, expectError, onPostgres, request, sqlText, startServer, type TestServer } from './helpers.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** D5, written out independently of src/pastes/expiry.ts. */
const EXPIRY_MS: Array<[string, number]> = [
  ['10m', 10 * MINUTE],
  ['30m', 30 * MINUTE],
  ['1h', HOUR],
  ['3h', 3 * HOUR],
  ['6h', 6 * HOUR],
  ['12h', 12 * HOUR],
  ['1d', DAY],
  ['2d', 2 * DAY],
  ['3d', 3 * DAY],
  ['1w', 7 * DAY],
  ['2w', 14 * DAY],
  ['1m', 30 * DAY],
];

/**
 * Every server gets an explicit BASE_URL (D2) so that returned addresses can be checked exactly:
 * startServer's fix-up of config.baseUrl after buildApp comes too late for the presenter.
 */
const BASE_URL = 'https://paste.example.test';
const start = () => startServer({ env: { BASE_URL } });

const TIMESTAMP = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;

const DETAIL_FIELDS = [
  'paste_id',
  'title',
  'description',
  'content',
  'content_type',
  'original_filename',
  'language',
  'file_size',
  'sha256',
  'created_at',
  'expires_at',
  'view_count',
  'burn_after_read',
  'burned',
  'encrypted',
  'downloadable',
].sort();

const LIST_ITEM_FIELDS = [
  'paste_id',
  'url',
  'title',
  'content_type',
  'language',
  'file_size',
  'created_at',
  'expires_at',
  'view_count',
  'encrypted',
  'downloadable',
].sort();

/** D3: UTC `YYYY-MM-DD HH:MM:SS`, built by hand rather than with the code under test. */
function utc(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getUTCFullYear()}-${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())} ${p(d.getUTCHours())}:${p(
    d.getUTCMinutes(),
  )}:${p(d.getUTCSeconds())}`;
}

const sha256 = (text: string): string => createHash('sha256').update(Buffer.from(text, 'utf8')).digest('hex');

/** The id of `key` (whose hashes a PUT's password takes turns as). */
async function keyIdOf(server: TestServer, key: string): Promise<string> {
  const [row] = await server.sql<{ id: string }>(`SELECT id FROM api_keys WHERE digest = ${sqlText(sha256(key))}`);
  return row?.id as string;
}

interface CreatedData {
  paste_id: string;
  url: string;
  raw_url: string;
  download_url: string | null;
  expires_at: string | null;
  sha256: string;
  burn_after_read: boolean;
  encrypted: boolean;
  downloadable: boolean;
}

async function createPaste(
  server: TestServer,
  key: string,
  fields: Record<string, unknown> = {},
): Promise<CreatedData> {
  const res = await request(`${server.url}/api/v1/paste`, {
    method: 'POST',
    headers: { 'x-api-key': key },
    json: { content: 'hello lifecycle', ...fields },
  });
  assert.equal(res.status, 201, `create failed: ${res.text}`);
  return res.body.data as CreatedData;
}

function getDetail(server: TestServer, key: string, id: string) {
  return request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } });
}

function getApiRaw(server: TestServer, key: string, id: string) {
  return request(`${server.url}/api/v1/paste/${id}/raw`, { headers: { 'x-api-key': key } });
}

function getWeb(server: TestServer, path: string, password?: string) {
  return request(`${server.url}${path}`, {
    headers: password === undefined ? {} : { 'x-paste-password': password },
  });
}

function confirmView(server: TestServer, id: string, fields: Record<string, string> = { confirm: '1' }) {
  return request(`${server.url}/view/${id}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
  });
}

function put(server: TestServer, key: string, id: string, json: unknown) {
  return request(`${server.url}/api/v1/paste/${id}`, { method: 'PUT', headers: { 'x-api-key': key }, json });
}

function del(server: TestServer, key: string, id: string) {
  return request(`${server.url}/api/v1/paste/${id}`, { method: 'DELETE', headers: { 'x-api-key': key } });
}

function list(server: TestServer, key: string, query = '') {
  return request(`${server.url}/api/v1/pastes${query}`, { headers: { 'x-api-key': key } });
}

/** HEAD through fetch: the status and headers, and whether a body came (it must not). */
async function head(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; bodyLength: number }> {
  const res = await fetch(url, { method: 'HEAD', headers });
  return { status: res.status, bodyLength: (await res.arrayBuffer()).byteLength };
}

/**
 * A request whose path goes on the wire exactly as written: fetch would resolve `%2e%2e` and
 * `..` segments before sending.
 */
function rawPath(
  server: TestServer,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; body: unknown; text: string }> {
  const { port } = new URL(server.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method: 'GET', headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const type = String(res.headers['content-type'] ?? '');
        let body: unknown = text;
        if (type.includes('application/json')) {
          try {
            body = JSON.parse(text);
          } catch {
            body = text;
          }
        }
        const h = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          if (value !== undefined) h.set(name, Array.isArray(value) ? value.join(', ') : value);
        }
        resolve({ status: res.statusCode ?? 0, headers: h, body, text });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

async function fetchBytes(url: string): Promise<{ status: number; headers: Headers; bytes: Buffer }> {
  const res = await fetch(url);
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}

/** Every way of reading a paste answers 404 not_found (D7, D11, D12). */
async function expectGone(server: TestServer, key: string, id: string): Promise<void> {
  const attempts: Array<[string, Promise<{ status: number; body: unknown }>]> = [
    ['GET /api/v1/paste/{id}', getDetail(server, key, id)],
    ['GET /api/v1/paste/{id}/raw', getApiRaw(server, key, id)],
    ['GET /raw/{id}', getWeb(server, `/raw/${id}`)],
    ['GET /view/{id}', getWeb(server, `/view/${id}`)],
    ['GET /download/{id}', getWeb(server, `/download/${id}`)],
  ];
  for (const [name, pending] of attempts) {
    const res = await pending;
    assert.doesNotThrow(() => expectError(res, 404, 'not_found'), `${name} of a gone paste: ${JSON.stringify(res)}`);
  }
}

async function listedIds(server: TestServer, key: string): Promise<string[]> {
  const res = await list(server, key, '?limit=100');
  assert.equal(res.status, 200, res.text);
  return (res.body.data as Array<{ paste_id: string }>).map((item) => item.paste_id);
}

// ---------------------------------------------------------------------------------------------

describe('GET /api/v1/paste/{id} and raw', () => {
  let server: TestServer;
  let owner: string;
  let reader: string;
  before(async () => {
    server = await start();
    owner = await server.createKey({ name: 'owner' });
    reader = await server.createKey({ name: 'reader' });
  });
  after(() => server.close());

  it('answers 200 with every detail field, typed and valued as api-v1.md and D3/D6 say, and no message', async () => {
    const content = 'Grüße, 世界! 👋\r\nline two\n';
    const createdAt = server.clock.now;
    const created = await createPaste(server, owner, {
      content,
      title: 'A title',
      description: 'A description',
      language: 'python',
    });
    const res = await getDetail(server, owner, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.error, false);
    assert.ok(!('message' in res.body), 'GET by id carries no message');
    const data = res.body.data;
    assert.deepEqual(Object.keys(data).sort(), DETAIL_FIELDS);
    assert.equal(data.paste_id, created.paste_id);
    assert.equal(data.title, 'A title');
    assert.equal(data.description, 'A description');
    assert.equal(data.content, content);
    assert.equal(data.content_type, 'text');
    assert.equal(data.original_filename, null);
    assert.equal(data.language, 'python');
    assert.equal(data.file_size, Buffer.byteLength(content, 'utf8'));
    assert.notEqual(data.file_size, content.length, 'file_size counts UTF-8 bytes, not characters');
    assert.equal(data.sha256, sha256(content));
    assert.match(data.sha256, /^[0-9a-f]{64}$/);
    assert.match(data.created_at, TIMESTAMP);
    assert.equal(data.created_at, utc(createdAt));
    assert.equal(data.expires_at, utc(createdAt + DAY), 'default expiry is 1d');
    assert.equal(data.view_count, 1);
    assert.equal(data.burn_after_read, false);
    assert.equal(data.burned, false);
    assert.equal(data.encrypted, false);
    assert.equal(data.downloadable, true);
  });

  it('shows null title/description when none were given and expires_at null for never (D4)', async () => {
    const created = await createPaste(server, owner, { expiry: 'never' });
    assert.equal(created.expires_at, null);
    const res = await getDetail(server, owner, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.expires_at, null);
    assert.equal(res.body.data.title, null);
    assert.equal(res.body.data.description, null);
  });

  it('counts one view per retrieval', async () => {
    const created = await createPaste(server, owner);
    for (let expected = 1; expected <= 3; expected++) {
      const res = await getDetail(server, owner, created.paste_id);
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.data.view_count, expected);
    }
  });

  it('says downloadable true for a non-encrypted paste even when created with downloadable false (D16)', async () => {
    const created = await createPaste(server, owner, { downloadable: false });
    assert.equal(created.downloadable, true);
    const res = await getDetail(server, owner, created.paste_id);
    assert.equal(res.body.data.downloadable, true);
  });

  it('lets any valid key read any paste (D14)', async () => {
    const created = await createPaste(server, owner, { content: 'owned by someone else' });
    const res = await getDetail(server, reader, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.content, 'owned by someone else');
  });

  it('answers 404 not_found for an unknown id', async () => {
    expectError(await getDetail(server, owner, 'AAAAAAAAAA'), 404, 'not_found');
    expectError(await getApiRaw(server, owner, 'AAAAAAAAAA'), 404, 'not_found');
    expectError(await getWeb(server, '/raw/AAAAAAAAAA'), 404, 'not_found');
    expectError(await getWeb(server, '/view/AAAAAAAAAA'), 404, 'not_found');
    expectError(await getWeb(server, '/download/AAAAAAAAAA'), 404, 'not_found');
  });

  it('answers 404 not_found (never 500) for ids with odd characters or up to 200 characters', async () => {
    const odd = [
      '%2e%2e',
      '..',
      '.',
      'a'.repeat(70),
      'a'.repeat(200),
      'ab',
      '%00',
      '%20',
      'x%27%20OR%201%3D1--',
      '%F0%9F%92%A9%F0%9F%92%A9%F0%9F%92%A9',
      'abc%2Fdef',
      'abc%5C..%5Cdef',
      '%3Cscript%3E',
      'AAAAAAAAAA%00',
    ];
    const problems: string[] = [];
    for (const id of odd) {
      for (const path of [`/api/v1/paste/${id}`, `/api/v1/paste/${id}/raw`, `/raw/${id}`, `/view/${id}`]) {
        const res = await rawPath(server, path, { 'x-api-key': owner });
        try {
          expectError(res, 404, 'not_found');
        } catch (err) {
          problems.push(`${path}: ${(err as Error).message}`);
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  it('answers 404 not_found as a D7 envelope for ids past the router limit or not valid percent-encoding', async () => {
    const problems: string[] = [];
    for (const id of ['a'.repeat(300), '%ff%fe', '%E0%A4%A']) {
      for (const path of [`/api/v1/paste/${id}`, `/raw/${id}`, `/view/${id}`]) {
        const res = await rawPath(server, path, { 'x-api-key': owner });
        if (res.status >= 500) problems.push(`${path.slice(0, 40)}: ${res.status}`);
        try {
          expectError(res, 404, 'not_found');
        } catch (err) {
          problems.push(`${path.slice(0, 40)}…: ${(err as Error).message.slice(0, 160)}`);
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  it('GET raw answers text/plain; charset=utf-8 with nosniff and exactly the content bytes (D16)', async () => {
    const content = '\uFEFFfirst line\r\nsecond — ünïcödé 日本語 🎉\r\n\tindented\r\n\r\ntrailing  ';
    const created = await createPaste(server, owner, { content });
    const res = await fetch(`${server.url}/api/v1/paste/${created.paste_id}/raw`, {
      headers: { 'x-api-key': reader },
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/plain; charset=utf-8');
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    const bytes = Buffer.from(await res.arrayBuffer());
    assert.ok(bytes.equals(Buffer.from(content, 'utf8')), `raw bytes differ: ${JSON.stringify(bytes.toString())}`);
  });

  it('/raw/<id> answers the same headers and exact bytes', async () => {
    const content = 'a\r\nb\r\nç€𝄞\n';
    const created = await createPaste(server, owner, { content });
    const res = await fetchBytes(`${server.url}/raw/${created.paste_id}`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/plain; charset=utf-8');
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.ok(res.bytes.equals(Buffer.from(content, 'utf8')));
  });

  it('GET raw of an encrypted paste is its fpe1 string', async () => {
    const { wire } = await encryptForTest('secret plaintext');
    const created = await createPaste(server, owner, { content: wire, encrypt: true });
    const api = await getApiRaw(server, owner, created.paste_id);
    assert.equal(api.status, 200, api.text);
    assert.equal(api.text, wire);
    assert.equal(api.headers.get('content-type'), 'text/plain; charset=utf-8');
    const web = await getWeb(server, `/raw/${created.paste_id}`);
    assert.equal(web.status, 200, web.text);
    assert.equal(web.text, wire);
    const detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.content, wire);
    assert.equal(detail.body.data.encrypted, true);
    assert.equal(detail.body.data.sha256, sha256(wire));
  });
});

// ---------------------------------------------------------------------------------------------

describe('password-protected pastes (D7, D13)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await start();
    key = await server.createKey();
  });
  after(() => server.close());

  async function viewCount(id: string): Promise<number> {
    const res = await list(server, key, '?limit=100');
    const item = (res.body.data as Array<{ paste_id: string; view_count: number }>).find((i) => i.paste_id === id);
    assert.ok(item, `${id} is listed`);
    return item.view_count;
  }

  it('GET by id and GET raw answer 403 password_protected and change nothing', async () => {
    const created = await createPaste(server, key, { content: 'pw content', password: 'hunter2' });
    expectError(await getDetail(server, key, created.paste_id), 403, 'password_protected');
    expectError(await getApiRaw(server, key, created.paste_id), 403, 'password_protected');
    // Even with the password in the header, the API never returns it (D13).
    const withHeader = await request(`${server.url}/api/v1/paste/${created.paste_id}`, {
      headers: { 'x-api-key': key, 'x-paste-password': 'hunter2' },
    });
    expectError(withHeader, 403, 'password_protected');
    assert.equal(await viewCount(created.paste_id), 0);
    const raw = await getWeb(server, `/raw/${created.paste_id}`, 'hunter2');
    assert.equal(raw.status, 200, raw.text);
    assert.equal(raw.text, 'pw content');
  });

  /**
   * Fills the password hashing queue (two at a time) with wrong guesses on fresh pastes (at most
   * 10 guesses a paste and address): a check or hash asked for next waits for about eight rounds
   * of argon2. Resolves once the guesses have reached the queue; their answers are returned.
   */
  async function holdHashing(): Promise<Array<Promise<unknown>>> {
    const decoys = await Promise.all(
      [1, 2].map(() => createPaste(server, key, { content: 'decoy', password: 'decoy-pw' })),
    );
    const guesses = decoys.flatMap((decoy) =>
      Array.from({ length: 8 }, () => getWeb(server, `/raw/${decoy.paste_id}`, 'wrong')),
    );
    await new Promise((resolve) => setTimeout(resolve, 30));
    return guesses;
  }

  it('a right password checked while the paste expires or is deleted delivers nothing (D12)', async () => {
    // Password checks are slow and capped (two at a time): wrong guesses on another paste hold
    // the read's check back while the paste expires, then while it is deleted.
    const expiring = await createPaste(server, key, { content: 'expiring pw', password: 'pw-exp', expiry: '10m' });
    server.clock.advance(10 * 60_000 - 1);
    const guesses = await holdHashing();
    const read = getWeb(server, `/raw/${expiring.paste_id}`, 'pw-exp');
    await new Promise((resolve) => setTimeout(resolve, 40));
    server.clock.advance(1);
    expectError(await read, 404, 'not_found');
    await Promise.all(guesses);

    const deleted = await createPaste(server, key, { content: 'deleted pw', password: 'pw-del' });
    const more = await holdHashing();
    const readDeleted = getWeb(server, `/raw/${deleted.paste_id}`, 'pw-del');
    await new Promise((resolve) => setTimeout(resolve, 40));
    const removed = await del(server, key, deleted.paste_id);
    assert.equal(removed.status, 200, removed.text);
    expectError(await readDeleted, 404, 'not_found');
    await Promise.all(more);
  });

  it('a PUT of a password whose hash waits while the paste expires is 404 and brings nothing back (D12)', async () => {
    const expiring = await createPaste(server, key, { content: 'expires under a PUT', expiry: '10m' });
    server.clock.advance(10 * 60_000 - 1);
    // The owner's own hashes ahead of the PUT's (a client's hashes wait in turn with others').
    const ownerId = await keyIdOf(server, key);
    const held = Array.from({ length: 16 }, (_, i) => hashPassword(`held ${i}`, ownerId));
    const update = put(server, key, expiring.paste_id, { password: 'late-pw', expiry: '1h' });
    await new Promise((resolve) => setTimeout(resolve, 40));
    server.clock.advance(1); // expires_at, while the new password's hash waits its turn
    expectError(await update, 404, 'not_found');
    await Promise.all(held);
    await expectGone(server, key, expiring.paste_id);
  });

  it('a refused API read does not consume a burn + password paste', async () => {
    const created = await createPaste(server, key, { content: 'burn pw', password: 'pw-burn', burn: true });
    expectError(await getDetail(server, key, created.paste_id), 403, 'password_protected');
    expectError(await getApiRaw(server, key, created.paste_id), 403, 'password_protected');
    const raw = await getWeb(server, `/raw/${created.paste_id}`, 'pw-burn');
    assert.equal(raw.status, 200, raw.text);
    assert.equal(raw.text, 'burn pw');
    expectError(await getWeb(server, `/raw/${created.paste_id}`, 'pw-burn'), 404, 'not_found');
  });

  it('/raw/<id>: no header → 403 password_protected, wrong → 403 wrong_password, right → 200', async () => {
    const created = await createPaste(server, key, { content: 'raw pw content', password: 'correct horse' });
    expectError(await getWeb(server, `/raw/${created.paste_id}`), 403, 'password_protected');
    expectError(await getWeb(server, `/raw/${created.paste_id}`, ''), 403, 'password_protected');
    expectError(await getWeb(server, `/raw/${created.paste_id}`, 'wrong horse'), 403, 'wrong_password');
    const ok = await getWeb(server, `/raw/${created.paste_id}`, 'correct horse');
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.text, 'raw pw content');
    assert.equal(ok.headers.get('content-type'), 'text/plain; charset=utf-8');
  });

  it('/download/<id>: no header → 403 password_protected, wrong → 403 wrong_password, right → 200', async () => {
    const created = await createPaste(server, key, { content: 'download pw content', password: 's3cret' });
    expectError(await getWeb(server, `/download/${created.paste_id}`), 403, 'password_protected');
    expectError(await getWeb(server, `/download/${created.paste_id}`, 'S3cret'), 403, 'wrong_password');
    const ok = await getWeb(server, `/download/${created.paste_id}`, 's3cret');
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.text, 'download pw content');
    assert.match(ok.headers.get('content-disposition') ?? '', /^attachment/);
  });

  it('more than 10 wrong guesses from one address → 429 too_many_attempts with Retry-After', async () => {
    const created = await createPaste(server, key, { content: 'guess me', password: 'the-real-one' });
    for (let i = 1; i <= 10; i++) {
      const res = await getWeb(server, `/raw/${created.paste_id}`, `wrong-${i}`);
      assert.doesNotThrow(() => expectError(res, 403, 'wrong_password'), `guess ${i}: ${res.status} ${res.text}`);
    }
    const blocked = await getWeb(server, `/raw/${created.paste_id}`, 'wrong-11');
    expectError(blocked, 429, 'too_many_attempts');
    const retryAfter = blocked.headers.get('retry-after');
    assert.ok(retryAfter !== null && /^\d+$/.test(retryAfter) && Number(retryAfter) >= 1, `Retry-After ${retryAfter}`);
    // The throttle is per paste: another paste from the same address is still readable.
    const other = await createPaste(server, key, { content: 'other', password: 'pw2' });
    expectError(await getWeb(server, `/raw/${other.paste_id}`, 'nope'), 403, 'wrong_password');
  });

  it('HEAD never consumes a burn + password paste, on any address', async () => {
    const created = await createPaste(server, key, { content: 'head burn pw', password: 'hp', burn: true });
    const id = created.paste_id;
    const k = { 'x-api-key': key };
    assert.equal((await head(`${server.url}/api/v1/paste/${id}`, k)).status, 403);
    assert.equal((await head(`${server.url}/api/v1/paste/${id}/raw`, k)).status, 403);
    assert.deepEqual(await head(`${server.url}/raw/${id}`, { 'x-paste-password': 'hp' }), {
      status: 200,
      bodyLength: 0,
    });
    assert.equal((await head(`${server.url}/download/${id}`, { 'x-paste-password': 'hp' })).status, 200);
    assert.equal((await head(`${server.url}/raw/${id}`)).status, 403);
    assert.equal((await head(`${server.url}/raw/${id}`, { 'x-paste-password': 'bad' })).status, 403);
    assert.equal((await head(`${server.url}/view/${id}`)).status, 200);
    const ok = await getWeb(server, `/raw/${id}`, 'hp');
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.text, 'head burn pw');
  });
});

// ---------------------------------------------------------------------------------------------

describe('burn after read (D11)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await start();
    key = await server.createKey();
  });
  after(() => server.close());

  it('GET by id returns the content with burned true, then the paste is gone everywhere', async () => {
    const created = await createPaste(server, key, { content: 'read me once', burn: true });
    assert.equal(created.burn_after_read, true);
    const res = await getDetail(server, key, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.content, 'read me once');
    assert.equal(res.body.data.burn_after_read, true);
    assert.equal(res.body.data.burned, true);
    assert.equal(res.body.data.view_count, 1);
    await expectGone(server, key, created.paste_id);
    assert.ok(!(await listedIds(server, key)).includes(created.paste_id));
  });

  it('a paste made view-once after it was read shows every view on its burned read; its slug starts again at 0', async () => {
    const slug = `burn-views-${Date.now()}`;
    const created = await createPaste(server, key, { content: 'read, then view-once', slug });
    assert.equal(created.paste_id, slug);
    for (let i = 0; i < 2; i++) assert.equal((await getDetail(server, key, slug)).status, 200);
    await server.services.pastes.views.flush(); // two written beside the row...
    assert.equal((await getDetail(server, key, slug)).status, 200); // ...one held in memory
    assert.equal((await put(server, key, slug, { burn: true })).status, 200);
    const burned = await getDetail(server, key, slug);
    assert.equal(burned.status, 200, burned.text);
    assert.equal(burned.body.data.burned, true);
    assert.equal(burned.body.data.view_count, 4);
    await expectGone(server, key, slug);
    const again = await createPaste(server, key, { content: 'a new paste under the slug', slug });
    assert.equal(again.paste_id, slug);
    await server.services.pastes.views.flush();
    assert.equal((await getDetail(server, key, slug)).body.data.view_count, 1);
  });

  it('a burn (and a DELETE) whose cleanup of counted views fails after the delete still answers: the content is not lost (D11)', async () => {
    // The storage refuses every delete of counted views, as a pool out of connections or a lost
    // connection would refuse the statement after the paste's own delete committed.
    const refuse = onPostgres
      ? [
          `CREATE FUNCTION refuse_view_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
          'CREATE TRIGGER refuse_view_delete BEFORE DELETE ON paste_views FOR EACH ROW EXECUTE FUNCTION refuse_view_delete()',
        ]
      : [
          `CREATE TRIGGER refuse_view_delete BEFORE DELETE ON paste_views BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
        ];
    const made = async (content: string) => {
      const created = await createPaste(server, key, { content });
      assert.equal((await getDetail(server, key, created.paste_id)).status, 200);
      await server.services.pastes.views.flush(); // a count stored beside the paste
      return created.paste_id;
    };
    const burnId = await made('the one reader gets this');
    const deleteId = await made('deleted all the same');
    assert.equal((await put(server, key, burnId, { burn: true })).status, 200);
    for (const statement of refuse) await server.sql(statement);
    try {
      const burned = await getDetail(server, key, burnId);
      assert.equal(burned.status, 200, burned.text);
      assert.equal(burned.body.data.content, 'the one reader gets this');
      assert.equal(burned.body.data.burned, true);
      await expectGone(server, key, burnId);
      const removed = await del(server, key, deleteId);
      assert.equal(removed.status, 200, removed.text);
      await expectGone(server, key, deleteId);
    } finally {
      await server.sql('DROP TRIGGER refuse_view_delete' + (onPostgres ? ' ON paste_views' : ''));
      if (onPostgres) await server.sql('DROP FUNCTION refuse_view_delete()');
    }
  });

  it('a view-once paste whose reader left while its password was checked is left for the next reader', async () => {
    const created = await createPaste(server, key, {
      content: 'for a reader still there',
      password: 'pw-left',
      burn: true,
    });
    const atWork = () => server.app.requestsAtWork();
    const until = async (done: () => boolean, what: string) => {
      for (const started = Date.now(); !done(); await sleep(1)) assert.ok(Date.now() - started < 10_000, what);
    };
    // Forty hashes of this client (its address, as the read's check takes turns) ahead of the
    // read in the hashing queue: the read waits behind them while its client leaves.
    let hashed = 0;
    const ahead = Array.from({ length: 40 }, (_, i) =>
      hashPassword(`ahead ${i}`, clientBucket('127.0.0.1')).then(() => hashed++),
    );
    const socket = net.connect(Number(new URL(server.url).port), '127.0.0.1');
    socket.on('error', () => {});
    socket.write(`GET /raw/${created.paste_id} HTTP/1.1\r\nHost: x\r\nX-Paste-Password: pw-left\r\n\r\n`);
    await until(() => atWork() === 1, 'the read at work');
    socket.destroy();
    assert.ok(hashed < 40, 'the hashes ahead of the read were all done before it came: nothing was tested');
    await Promise.all(ahead);
    await until(() => atWork() === 0, 'the read done');
    const read = await getWeb(server, `/raw/${created.paste_id}`, 'pw-left');
    assert.equal(read.status, 200, read.text);
    assert.equal(read.text, 'for a reader still there');
    expectError(await getWeb(server, `/raw/${created.paste_id}`, 'pw-left'), 404, 'not_found');
  });

  it('a read checked before a PUT put the paste behind a password burns nothing and is refused, not handed the new content', async () => {
    const created = await createPaste(server, key, { content: 'before the change', burn: true });
    // What a read has checked (no password) when the owner's PUT lands before its burn.
    const checked = await server.services.pastes.peek(created.paste_id);
    const changed = await put(server, key, created.paste_id, { password: 'now-locked', content: 'the new secret' });
    assert.equal(changed.status, 200, changed.text);
    const reading = { consume: true, clientAddress: () => '127.0.0.1' };
    await assert.rejects(server.services.pastes.read(created.paste_id, 'api', reading, checked), (err: unknown) => {
      assert.equal((err as { code?: string }).code, 'password_protected');
      return true;
    });
    // Still there for the reader with the password, once.
    const read = await getWeb(server, `/raw/${created.paste_id}`, 'now-locked');
    assert.equal(read.status, 200, read.text);
    assert.equal(read.text, 'the new secret');
    await expectGone(server, key, created.paste_id);
  });

  it('GET raw returns the content, then the paste is gone everywhere', async () => {
    const created = await createPaste(server, key, { content: 'raw once', burn: true });
    const res = await getApiRaw(server, key, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, 'raw once');
    await expectGone(server, key, created.paste_id);
  });

  it('/raw/<id> consumes it too', async () => {
    const created = await createPaste(server, key, { content: 'web raw once', burn: true });
    const res = await getWeb(server, `/raw/${created.paste_id}`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, 'web raw once');
    await expectGone(server, key, created.paste_id);
  });

  it('/download/<id> consumes it too', async () => {
    const created = await createPaste(server, key, { content: 'download once', burn: true });
    const res = await getWeb(server, `/download/${created.paste_id}`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, 'download once');
    await expectGone(server, key, created.paste_id);
  });

  it('of 20 concurrent readers exactly one gets the content, 19 get 404', async () => {
    const created = await createPaste(server, key, { content: 'race for it', burn: true });
    const id = created.paste_id;
    const readers = Array.from({ length: 20 }, (_, i) =>
      i % 2 === 0 ? getDetail(server, key, id) : getWeb(server, `/raw/${id}`),
    );
    const results = await Promise.all(readers);
    const winners = results.filter((r) => r.status === 200);
    const losers = results.filter((r) => r.status !== 200);
    assert.equal(winners.length, 1, `statuses: ${results.map((r) => r.status).join(',')}`);
    const winner = winners[0]!;
    const content = typeof winner.body === 'object' ? winner.body.data.content : winner.text;
    assert.equal(content, 'race for it');
    assert.equal(losers.length, 19);
    for (const loser of losers) expectError(loser, 404, 'not_found');
    await expectGone(server, key, id);
  });

  it('HEAD on every address does not consume it', async () => {
    const created = await createPaste(server, key, { content: 'head does not burn', burn: true });
    const id = created.paste_id;
    const k = { 'x-api-key': key };
    for (let i = 0; i < 2; i++) {
      assert.deepEqual(await head(`${server.url}/api/v1/paste/${id}`, k), { status: 200, bodyLength: 0 });
      assert.deepEqual(await head(`${server.url}/api/v1/paste/${id}/raw`, k), { status: 200, bodyLength: 0 });
      assert.deepEqual(await head(`${server.url}/raw/${id}`), { status: 200, bodyLength: 0 });
      assert.deepEqual(await head(`${server.url}/download/${id}`), { status: 200, bodyLength: 0 });
      assert.deepEqual(await head(`${server.url}/view/${id}`), { status: 200, bodyLength: 0 });
    }
    const res = await getDetail(server, key, id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.content, 'head does not burn');
    assert.equal(res.body.data.burned, true);
  });

  it('a wrong password does not consume it', async () => {
    const created = await createPaste(server, key, { content: 'burn with pw', burn: true, password: 'right' });
    const id = created.paste_id;
    expectError(await getWeb(server, `/raw/${id}`, 'wrong'), 403, 'wrong_password');
    expectError(await getWeb(server, `/raw/${id}`), 403, 'password_protected');
    expectError(await getWeb(server, `/download/${id}`, 'wrong'), 403, 'wrong_password');
    const gate = await confirmView(server, id, { confirm: '1', password: 'wrong' });
    assert.equal(gate.status, 403);
    assert.ok(!gate.text.includes('burn with pw'));
    const ok = await getWeb(server, `/raw/${id}`, 'right');
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.text, 'burn with pw');
    expectError(await getWeb(server, `/raw/${id}`, 'right'), 404, 'not_found');
  });

  it('GET /view/<id> shows a confirmation page without the content and does not consume it', async () => {
    const created = await createPaste(server, key, { content: 'UNIQUE-BURN-MARKER-7731', burn: true });
    const id = created.paste_id;
    for (let i = 0; i < 3; i++) {
      const page = await getWeb(server, `/view/${id}`);
      assert.equal(page.status, 200);
      assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
      assert.ok(!page.text.includes('UNIQUE-BURN-MARKER-7731'), 'the gate page must not show the content');
      assert.match(page.text, /name="confirm"/);
      assert.match(page.text, /method="post"/i);
    }
    // A POST without confirm is refused and consumes nothing.
    expectError(await confirmView(server, id, {}), 400, 'invalid_request');
    const res = await getApiRaw(server, key, id);
    assert.equal(res.status, 200);
    assert.equal(res.text, 'UNIQUE-BURN-MARKER-7731');
  });

  it('POST /view/<id> with confirm=1 shows the content and consumes it', async () => {
    const created = await createPaste(server, key, { content: 'CONFIRMED-BURN-MARKER', burn: true });
    const id = created.paste_id;
    const page = await confirmView(server, id);
    assert.equal(page.status, 200, page.text);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    assert.ok(page.text.includes('CONFIRMED-BURN-MARKER'));
    await expectGone(server, key, id);
    expectError(await confirmView(server, id), 404, 'not_found');
  });

  it('a non-burn paste reports burned false on every retrieval', async () => {
    const created = await createPaste(server, key, { content: 'stays' });
    for (let i = 0; i < 2; i++) {
      const res = await getDetail(server, key, created.paste_id);
      assert.equal(res.status, 200);
      assert.equal(res.body.data.burned, false);
      assert.equal(res.body.data.burn_after_read, false);
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe('expiry (D5, D12)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await start();
    key = await server.createKey();
  });
  after(() => server.close());

  for (const [expiry, length] of EXPIRY_MS) {
    it(`${expiry}: readable 1 ms before expires_at, 404 everywhere and unlisted at expires_at`, async () => {
      const start = server.clock.now;
      const created = await createPaste(server, key, { content: `expiring ${expiry}`, expiry });
      assert.equal(created.expires_at, utc(start + length));
      server.clock.advance(length - 1);
      const before = await getDetail(server, key, created.paste_id);
      assert.equal(before.status, 200, before.text);
      assert.equal(before.body.data.expires_at, utc(start + length));
      const raw = await getWeb(server, `/raw/${created.paste_id}`);
      assert.equal(raw.status, 200);
      assert.ok((await listedIds(server, key)).includes(created.paste_id));
      server.clock.advance(1);
      await expectGone(server, key, created.paste_id);
      assert.ok(!(await listedIds(server, key)).includes(created.paste_id));
    });
  }

  it('made in the middle of a second: 404 at the expires_at it reports, not up to a second later (D3, D12)', async () => {
    server.clock.advance(1000 - (server.clock.now % 1000) + 700); // 700 ms into a second
    const second = server.clock.now - 700;
    const created = await createPaste(server, key, { content: 'mid-second', expiry: '10m' });
    assert.equal(created.expires_at, utc(second + 10 * 60_000));
    const detail = await getDetail(server, key, created.paste_id);
    assert.equal(detail.body.data.created_at, utc(second));
    server.clock.advance(10 * 60_000 - 700 - 1);
    assert.equal((await getWeb(server, `/raw/${created.paste_id}`)).status, 200);
    server.clock.advance(1); // the instant expires_at reports
    await expectGone(server, key, created.paste_id);

    // Re-timed by a PUT in the middle of a second: the same.
    server.clock.advance(300);
    const again = await createPaste(server, key, { content: 'mid-second again', expiry: '1h' });
    server.clock.advance(1200); // 500 ms into a later second
    const updatedAt = server.clock.now - 500;
    assert.equal(server.clock.now % 1000, 500);
    const put = await request(`${server.url}/api/v1/paste/${again.paste_id}`, {
      method: 'PUT',
      headers: { 'x-api-key': key },
      json: { expiry: '10m' },
    });
    assert.equal(put.status, 200, put.text);
    assert.equal((await getDetail(server, key, again.paste_id)).body.data.expires_at, utc(updatedAt + 10 * 60_000));
    server.clock.advance(10 * 60_000 - 500);
    await expectGone(server, key, again.paste_id);
  });

  it('never: expires_at null and still readable after 10 years', async () => {
    const created = await createPaste(server, key, { content: 'forever', expiry: 'never' });
    assert.equal(created.expires_at, null);
    server.clock.advance(3653 * DAY);
    const res = await getDetail(server, key, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.content, 'forever');
    assert.equal(res.body.data.expires_at, null);
    assert.equal((await getWeb(server, `/raw/${created.paste_id}`)).status, 200);
    assert.ok((await listedIds(server, key)).includes(created.paste_id));
  });

  it('an unknown expiry value is 400 invalid_request (D5)', async () => {
    const res = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': key },
      json: { content: 'bad expiry', expiry: '5m' },
    });
    expectError(res, 400, 'invalid_request');
  });
});

describe('expiry sweep (D12)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await start();
    key = await server.createKey();
  });
  after(() => server.close());

  /** Every stored id, sorted here (PostgreSQL's collation would order them differently). */
  async function rowIds(): Promise<string[]> {
    return (await server.sql<{ id: string }>('SELECT id FROM pastes')).map((r) => r.id).sort();
  }

  it('sweepExpired() removes the expired rows and leaves the live ones', async () => {
    const expired = [
      await createPaste(server, key, { expiry: '10m' }),
      await createPaste(server, key, { expiry: '1h' }),
      await createPaste(server, key, { expiry: '1d' }),
    ].map((c) => c.paste_id);
    const live = [
      await createPaste(server, key, { expiry: 'never' }),
      await createPaste(server, key, { expiry: '2d' }),
    ].map((c) => c.paste_id);
    server.clock.advance(DAY);
    assert.deepEqual(await rowIds(), [...expired, ...live].sort(), 'expired rows stay until the sweep');
    const removed = await server.services.pastes.sweepExpired();
    assert.equal(removed, 3);
    assert.deepEqual(await rowIds(), [...live].sort());
    assert.equal(await server.services.pastes.sweepExpired(), 0);
    for (const id of live) assert.equal((await getDetail(server, key, id)).status, 200);
  });

  it('sweeps in batches until every expired row is gone', async () => {
    const before = await rowIds();
    const expired: string[] = [];
    for (let i = 0; i < 5; i++) expired.push((await createPaste(server, key, { expiry: '10m' })).paste_id);
    server.clock.advance(10 * MINUTE);
    assert.equal(await server.services.pastes.sweepExpired({ firstBatch: 2 }), 5);
    assert.deepEqual(await rowIds(), before);
  });
});

// ---------------------------------------------------------------------------------------------

describe('PUT /api/v1/paste/{id}', () => {
  let server: TestServer;
  let owner: string;
  let other: string;
  before(async () => {
    server = await start();
    owner = await server.createKey({ name: 'owner' });
    other = await server.createKey({ name: 'other' });
  });
  after(() => server.close());

  it('another key gets 403 forbidden and the paste is unchanged', async () => {
    const created = await createPaste(server, owner, { content: 'original', title: 'orig' });
    expectError(await put(server, other, created.paste_id, { content: 'hijacked', title: 'x' }), 403, 'forbidden');
    const res = await getDetail(server, owner, created.paste_id);
    assert.equal(res.body.data.content, 'original');
    assert.equal(res.body.data.title, 'orig');
  });

  it('the update answer is {error:false, message, data:{paste_id, url, encrypted}}', async () => {
    const created = await createPaste(server, owner);
    const res = await put(server, owner, created.paste_id, { title: 'new' });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(Object.keys(res.body).sort(), ['data', 'error', 'message']);
    assert.equal(res.body.error, false);
    assert.equal(typeof res.body.message, 'string');
    assert.ok(res.body.message.length > 0);
    assert.deepEqual(res.body.data, {
      paste_id: created.paste_id,
      url: `${BASE_URL}/view/${created.paste_id}`,
      encrypted: false,
    });
  });

  it('content: changes the content, sha256 and file_size', async () => {
    const created = await createPaste(server, owner, { content: 'short one' });
    const next = 'ünïcödé content → 新しい\r\n';
    const res = await put(server, owner, created.paste_id, { content: next });
    assert.equal(res.status, 200, res.text);
    const detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.content, next);
    assert.equal(detail.body.data.sha256, sha256(next));
    assert.notEqual(detail.body.data.sha256, created.sha256);
    assert.equal(detail.body.data.file_size, Buffer.byteLength(next, 'utf8'));
    const raw = await fetchBytes(`${server.url}/raw/${created.paste_id}`);
    assert.ok(raw.bytes.equals(Buffer.from(next, 'utf8')));
  });

  it('title and description: set and cleared with null', async () => {
    const created = await createPaste(server, owner, { title: 'T0', description: 'D0' });
    assert.equal((await put(server, owner, created.paste_id, { title: 'T1', description: 'D1' })).status, 200);
    let detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.title, 'T1');
    assert.equal(detail.body.data.description, 'D1');
    const cleared = await put(server, owner, created.paste_id, { title: null, description: null });
    assert.equal(cleared.status, 200, cleared.text);
    detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.title, null);
    assert.equal(detail.body.data.description, null);
  });

  it('description longer than 500 characters is 400', async () => {
    const created = await createPaste(server, owner, { description: 'keep' });
    const res = await put(server, owner, created.paste_id, { description: 'x'.repeat(501) });
    expectError(res, 400, 'invalid_request');
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.description, 'keep');
  });

  it('language: changes the language', async () => {
    const created = await createPaste(server, owner, { language: 'python' });
    assert.equal((await put(server, owner, created.paste_id, { language: 'rust' })).status, 200);
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.language, 'rust');
  });

  it('expiry: restarts the clock from the time of the update (D12)', async () => {
    const start = server.clock.now;
    const created = await createPaste(server, owner, { content: 'retimed', expiry: '1h' });
    server.clock.advance(30 * MINUTE);
    const updateAt = server.clock.now;
    const res = await put(server, owner, created.paste_id, { expiry: '1h' });
    assert.equal(res.status, 200, res.text);
    let detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.expires_at, utc(updateAt + HOUR));
    assert.equal(detail.body.data.created_at, utc(start), 'created_at does not move');
    server.clock.advance(30 * MINUTE); // the original expiry
    detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.status, 200, 'still live past the original expiry');
    server.clock.advance(30 * MINUTE - 1);
    assert.equal((await getDetail(server, owner, created.paste_id)).status, 200);
    server.clock.advance(1);
    await expectGone(server, owner, created.paste_id);
  });

  it('expiry: never makes expires_at null; a bad value or null is 400', async () => {
    const created = await createPaste(server, owner, { expiry: '10m' });
    expectError(await put(server, owner, created.paste_id, { expiry: 'forever' }), 400, 'invalid_request');
    expectError(await put(server, owner, created.paste_id, { expiry: null }), 400, 'invalid_request');
    assert.equal((await put(server, owner, created.paste_id, { expiry: 'never' })).status, 200);
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.expires_at, null);
  });

  it('burn: true makes the next read consume it; false makes it readable again and again', async () => {
    const a = await createPaste(server, owner, { content: 'becomes burn' });
    assert.equal((await put(server, owner, a.paste_id, { burn: true })).status, 200);
    const first = await getDetail(server, owner, a.paste_id);
    assert.equal(first.body.data.burn_after_read, true);
    assert.equal(first.body.data.burned, true);
    expectError(await getDetail(server, owner, a.paste_id), 404, 'not_found');

    const b = await createPaste(server, owner, { content: 'stops being burn', burn: true });
    assert.equal((await put(server, owner, b.paste_id, { burn: false })).status, 200);
    for (let i = 0; i < 2; i++) {
      const res = await getDetail(server, owner, b.paste_id);
      assert.equal(res.status, 200);
      assert.equal(res.body.data.burn_after_read, false);
      assert.equal(res.body.data.burned, false);
    }
  });

  it('password: setting it protects the paste; "" removes the protection (D13)', async () => {
    const created = await createPaste(server, owner, { content: 'protect me' });
    assert.equal((await put(server, owner, created.paste_id, { password: 'pw-one' })).status, 200);
    expectError(await getDetail(server, owner, created.paste_id), 403, 'password_protected');
    expectError(await getWeb(server, `/raw/${created.paste_id}`, 'nope'), 403, 'wrong_password');
    assert.equal((await getWeb(server, `/raw/${created.paste_id}`, 'pw-one')).text, 'protect me');
    assert.equal((await put(server, owner, created.paste_id, { password: '' })).status, 200);
    const res = await getDetail(server, owner, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.content, 'protect me');
    assert.equal((await getWeb(server, `/raw/${created.paste_id}`)).status, 200);
  });

  it('password: null removes the protection (D13)', async () => {
    const created = await createPaste(server, owner, { content: 'protected at birth', password: 'pw-two' });
    expectError(await getDetail(server, owner, created.paste_id), 403, 'password_protected');
    assert.equal((await put(server, owner, created.paste_id, { password: null })).status, 200);
    const res = await getDetail(server, owner, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.content, 'protected at birth');
  });

  it('downloadable: switches /download of an encrypted paste on and off', async () => {
    const { wire } = await encryptForTest('e2e');
    const created = await createPaste(server, owner, { content: wire, encrypt: true });
    assert.equal(created.download_url, null);
    expectError(await getWeb(server, `/download/${created.paste_id}`), 403, 'not_downloadable');
    assert.equal((await put(server, owner, created.paste_id, { downloadable: true })).status, 200);
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.downloadable, true);
    const dl = await getWeb(server, `/download/${created.paste_id}`);
    assert.equal(dl.status, 200, dl.text);
    assert.equal(dl.text, wire);
    assert.equal((await put(server, owner, created.paste_id, { downloadable: false })).status, 200);
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.downloadable, false);
    assert.equal((await getWeb(server, `/download/${created.paste_id}`)).status, 403);
  });

  it('downloadable: false on a non-encrypted paste is accepted and it stays downloadable (D16)', async () => {
    const created = await createPaste(server, owner, { content: 'always downloadable' });
    for (const downloadable of [false, true]) {
      const res = await put(server, owner, created.paste_id, { downloadable });
      assert.equal(res.status, 200, `downloadable ${downloadable}: ${res.text}`);
      assert.equal((await getDetail(server, owner, created.paste_id)).body.data.downloadable, true);
      assert.equal((await getWeb(server, `/download/${created.paste_id}`)).status, 200);
    }
  });

  it('a PUT that changes no stored column (key alone) is answered, never a 500', async () => {
    const created = await createPaste(server, owner, { content: 'nothing to change' });
    const fragmentKey = Buffer.alloc(32, 9).toString('base64url');
    const res = await put(server, owner, created.paste_id, { key: fragmentKey });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.url, `${BASE_URL}/view/${created.paste_id}#${fragmentKey}`);
    const short = await put(server, owner, created.paste_id, { key: 'abc' });
    expectError(short, 400, 'invalid_request');
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.content, 'nothing to change');
  });

  it('encrypted content with encrypt true and key: url has #key, encrypted true, content is the fpe1 string', async () => {
    const created = await createPaste(server, owner, { content: 'plain first' });
    const { wire, key } = await encryptForTest('now secret');
    const res = await put(server, owner, created.paste_id, { content: wire, encrypt: true, key });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.url, `${BASE_URL}/view/${created.paste_id}#${key}`);
    assert.equal(res.body.data.encrypted, true);
    const detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.encrypted, true);
    assert.equal(detail.body.data.content, wire);
    assert.equal(detail.body.data.sha256, sha256(wire));
    assert.equal((await getApiRaw(server, owner, created.paste_id)).text, wire);
    // As an E2E paste created without `downloadable`: not downloadable (api-v1.md).
    assert.equal(detail.body.data.downloadable, false);
    assert.equal((await request(`${server.url}/download/${created.paste_id}`)).status, 403);
    // Asked for in the same PUT, it is.
    const other = await createPaste(server, owner, { content: 'plain too' });
    const again = await encryptForTest('secret, downloadable');
    const asked = await put(server, owner, other.paste_id, { content: again.wire, encrypt: true, downloadable: true });
    assert.equal(asked.status, 200, asked.text);
    assert.equal((await getDetail(server, owner, other.paste_id)).body.data.downloadable, true);
    assert.equal((await request(`${server.url}/download/${other.paste_id}`)).text, again.wire);
  });

  it('an E2E PUT that read the paste as E2E, while another PUT made it plain, leaves it not downloadable', async () => {
    // The E2E PUT hashes a password after it has read the paste: ten hashes ahead of it (two
    // run at a time) hold it there while the plain PUT lands. Should the machine be too slow
    // for that order, the race is run again (at most three times); it must have happened once.
    // The hashes ahead of it are the owner's own: a client's hashes wait in turn with others'.
    const ownerId = await keyIdOf(server, owner);
    let raced = 0;
    for (let attempt = 0; attempt < 3 && raced === 0; attempt++) {
      const first = await encryptForTest('secret one');
      const created = await createPaste(server, owner, { content: first.wire, encrypt: true });
      const blockers = Array.from({ length: 10 }, (_, i) => hashPassword(`slow ${attempt} ${i}`, ownerId));
      const order: string[] = [];
      const second = await encryptForTest('secret two');
      const e2e = put(server, owner, created.paste_id, {
        content: second.wire,
        encrypt: true,
        password: 'held back',
      }).then((res) => {
        order.push('e2e');
        return res;
      });
      await sleep(20);
      const plain = await put(server, owner, created.paste_id, { content: 'plain for a moment', encrypt: false });
      order.push('plain');
      assert.equal(plain.status, 200, plain.text);
      const answered = await e2e;
      assert.equal(answered.status, 200, answered.text);
      await Promise.all(blockers);
      if (order[0] !== 'plain') continue; // the E2E PUT was not held: no race to judge
      raced++;
      const [row] = await server.sql<{ encrypted: number; downloadable: number; content: string }>(
        `SELECT encrypted, downloadable, content FROM pastes WHERE id = ${sqlText(created.paste_id)}`,
      );
      assert.equal(row?.content, second.wire);
      assert.equal(Number(row?.encrypted), 1);
      // As an E2E paste made from a plain one, not downloadable unless asked (before: the plain
      // PUT's downloadable was kept, and /download handed the ciphertext out).
      assert.equal(Number(row?.downloadable), 0);
      const download = await request(`${server.url}/download/${created.paste_id}`, {
        headers: { 'x-paste-password': 'held back' },
      });
      assert.equal(download.status, 403, download.text);
    }
    assert.equal(raced, 1, 'the plain PUT never landed while the E2E one was hashing');
  });

  it('new content without encrypt keeps the paste as it is: an E2E paste stays E2E (its content must be ciphertext), a plain one plain', async () => {
    const { wire } = await encryptForTest('first secret');
    const created = await createPaste(server, owner, { content: wire, encrypt: true, downloadable: true });
    const next = await encryptForTest('second secret');
    const res = await put(server, owner, created.paste_id, { content: next.wire });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.encrypted, true);
    let detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.content, next.wire);
    assert.equal(detail.body.data.encrypted, true);
    assert.equal(detail.body.data.downloadable, true, 'its own downloadable kept');
    // Text without encrypt on an E2E paste: refused, nothing changed.
    expectError(await put(server, owner, created.paste_id, { content: 'plain words' }), 400, 'invalid_ciphertext');
    detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.content, next.wire);
    // encrypt false makes it plain.
    const plain = await put(server, owner, created.paste_id, { content: 'plain words', encrypt: false });
    assert.equal(plain.status, 200, plain.text);
    assert.equal(plain.body.data.encrypted, false);
    // A plain paste stays plain: an fpe1 string sent without encrypt is its text.
    const third = await encryptForTest('third');
    const kept = await put(server, owner, created.paste_id, { content: third.wire });
    assert.equal(kept.status, 200, kept.text);
    assert.equal(kept.body.data.encrypted, false);
  });

  it('encrypt true with content that is not a valid fpe1 string is 400 invalid_ciphertext, unchanged', async () => {
    const created = await createPaste(server, owner, { content: 'untouched' });
    for (const content of ['not a ciphertext', 'fpe1:AAAA:BBBB', 'fpe1:!!!:???']) {
      expectError(await put(server, owner, created.paste_id, { content, encrypt: true }), 400, 'invalid_ciphertext');
    }
    const detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.content, 'untouched');
    assert.equal(detail.body.data.encrypted, false);
  });

  it('an unknown field is 400 invalid_request naming it in details (D8), unchanged', async () => {
    const created = await createPaste(server, owner, { title: 'same' });
    const res = await put(server, owner, created.paste_id, { title: 'changed', tilte: 'typo' });
    const err = expectError(res, 400, 'invalid_request');
    assert.ok(
      err.details?.some((d) => d.field === 'tilte'),
      JSON.stringify(err.details),
    );
    // Fields allowed at creation only are not updatable either.
    for (const field of ['slug', 'public']) {
      const r = await put(server, owner, created.paste_id, { [field]: field === 'public' ? true : 'my-slug' });
      const e = expectError(r, 400, 'invalid_request');
      assert.ok(
        e.details?.some((d) => d.field === field),
        JSON.stringify(e.details),
      );
    }
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.title, 'same');
  });

  it('wrong types are 400 invalid_request', async () => {
    const created = await createPaste(server, owner, { content: 'typed' });
    const bad: Array<Record<string, unknown>> = [
      { title: 5 },
      { burn: 'yes' },
      { burn: 1 },
      { downloadable: 'true' },
      { content: null },
      { content: 12345 },
      { description: ['a'] },
      { language: { name: 'go' } },
      { expiry: 10 },
      { password: 1234 },
    ];
    for (const body of bad) {
      const res = await put(server, owner, created.paste_id, body);
      assert.doesNotThrow(() => expectError(res, 400, 'invalid_request'), `${JSON.stringify(body)} → ${res.text}`);
    }
    for (const body of ['[]', '"a string"', '42', '{not json']) {
      const res = await request(`${server.url}/api/v1/paste/${created.paste_id}`, {
        method: 'PUT',
        headers: { 'x-api-key': owner, 'content-type': 'application/json' },
        body,
      });
      assert.doesNotThrow(() => expectError(res, 400, 'invalid_request'), `${body} → ${res.text}`);
    }
    const detail = await getDetail(server, owner, created.paste_id);
    assert.equal(detail.body.data.content, 'typed');
    assert.equal(detail.body.data.burn_after_read, false);
  });

  it('an empty body {} is 400', async () => {
    const created = await createPaste(server, owner);
    expectError(await put(server, owner, created.paste_id, {}), 400, 'invalid_request');
  });

  it('content shorter than 3 characters or only white space is 400 content_too_short', async () => {
    const created = await createPaste(server, owner, { content: 'long enough' });
    for (const content of ['', 'ab', '  \n\t ', '👋👋']) {
      expectError(await put(server, owner, created.paste_id, { content }), 400, 'content_too_short');
    }
    assert.equal((await getDetail(server, owner, created.paste_id)).body.data.content, 'long enough');
  });

  it('an unknown or expired paste is 404 not_found', async () => {
    expectError(await put(server, owner, 'NoSuchPaste', { title: 'x' }), 404, 'not_found');
    const created = await createPaste(server, owner, { expiry: '10m' });
    server.clock.advance(10 * MINUTE);
    expectError(await put(server, owner, created.paste_id, { title: 'x' }), 404, 'not_found');
    expectError(await put(server, owner, created.paste_id, { expiry: '1d' }), 404, 'not_found');
    expectError(await getDetail(server, owner, created.paste_id), 404, 'not_found'); // a PUT does not revive it
  });
});

// ---------------------------------------------------------------------------------------------

describe('DELETE /api/v1/paste/{id}', () => {
  let server: TestServer;
  let owner: string;
  let other: string;
  before(async () => {
    server = await start();
    owner = await server.createKey({ name: 'owner' });
    other = await server.createKey({ name: 'other' });
  });
  after(() => server.close());

  it('the owner gets 200 {error:false, message}, then the paste is 404 everywhere', async () => {
    const created = await createPaste(server, owner);
    const res = await del(server, owner, created.paste_id);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(Object.keys(res.body).sort(), ['error', 'message']);
    assert.equal(res.body.error, false);
    assert.equal(typeof res.body.message, 'string');
    assert.ok(res.body.message.length > 0);
    await expectGone(server, owner, created.paste_id);
    expectError(await del(server, owner, created.paste_id), 404, 'not_found');
    assert.ok(!(await listedIds(server, owner)).includes(created.paste_id));
  });

  it('a client that sends a Content-Type on every request (JSON, text, form) deletes with no body all the same', async () => {
    for (const type of [
      'application/json',
      'application/json; charset=utf-8',
      'text/plain',
      'application/x-www-form-urlencoded',
    ]) {
      const created = await createPaste(server, owner);
      const res = await request(`${server.url}/api/v1/paste/${created.paste_id}`, {
        method: 'DELETE',
        headers: { 'x-api-key': owner, 'content-type': type },
      });
      assert.equal(res.status, 200, `${type}: ${res.text}`);
      await expectGone(server, owner, created.paste_id);
    }
  });

  it('another key gets 403 forbidden and the paste remains', async () => {
    const created = await createPaste(server, owner, { content: 'not yours' });
    expectError(await del(server, other, created.paste_id), 403, 'forbidden');
    const res = await getDetail(server, owner, created.paste_id);
    assert.equal(res.status, 200);
    assert.equal(res.body.data.content, 'not yours');
  });

  it('an ownerless paste (quick-create without a key) cannot be deleted or updated by a key', async () => {
    const created = await request(`${server.url}/api/v1/cli?json=1`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'anonymous content',
    });
    assert.equal(created.status, 201, created.text);
    const id = created.body.data.paste_id as string;
    expectError(await del(server, owner, id), 403, 'forbidden');
    expectError(await put(server, owner, id, { title: 'mine now' }), 403, 'forbidden');
    const res = await getDetail(server, other, id);
    assert.equal(res.status, 200);
    assert.equal(res.body.data.content, 'anonymous content');
    assert.equal(res.body.data.title, null);
  });

  it('an unknown or expired paste is 404 not_found', async () => {
    expectError(await del(server, owner, 'NoSuchPaste'), 404, 'not_found');
    const created = await createPaste(server, owner, { expiry: '10m' });
    server.clock.advance(10 * MINUTE);
    expectError(await del(server, owner, created.paste_id), 404, 'not_found');
  });
});

// ---------------------------------------------------------------------------------------------

describe('GET /api/v1/pastes (D15)', () => {
  let server: TestServer;
  let owner: string;
  let other: string;
  /** The owner's paste ids in creation order. */
  const ids: string[] = [];
  const createdAts: number[] = [];
  before(async () => {
    server = await start();
    owner = await server.createKey({ name: 'owner' });
    other = await server.createKey({ name: 'other' });
    for (let i = 0; i < 23; i++) {
      createdAts.push(server.clock.now);
      ids.push((await createPaste(server, owner, { content: `paste number ${i}`, expiry: 'never' })).paste_id);
      if (i % 5 === 0) await createPaste(server, other, { content: `other ${i}`, expiry: 'never' });
      server.clock.advance(1000);
    }
  });
  after(() => server.close());

  const newestFirst = () => [...ids].reverse();

  it('defaults to page 1, limit 20, newest first, only the caller’s pastes, exact pagination', async () => {
    const res = await list(server, owner);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.error, false);
    assert.ok(Array.isArray(res.body.data));
    assert.deepEqual(
      res.body.data.map((i: { paste_id: string }) => i.paste_id),
      newestFirst().slice(0, 20),
    );
    assert.deepEqual(res.body.pagination, { page: 1, limit: 20, total: 23, total_pages: 2 });
  });

  it('page 2 holds the rest', async () => {
    const res = await list(server, owner, '?page=2');
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(
      res.body.data.map((i: { paste_id: string }) => i.paste_id),
      newestFirst().slice(20),
    );
    assert.deepEqual(res.body.pagination, { page: 2, limit: 20, total: 23, total_pages: 2 });
  });

  it('paginates with any limit from 1 to 100', async () => {
    const one = await list(server, owner, '?limit=1&page=3');
    assert.deepEqual(
      one.body.data.map((i: { paste_id: string }) => i.paste_id),
      [newestFirst()[2]],
    );
    assert.deepEqual(one.body.pagination, { page: 3, limit: 1, total: 23, total_pages: 23 });
    const five = await list(server, owner, '?limit=5&page=5');
    assert.deepEqual(
      five.body.data.map((i: { paste_id: string }) => i.paste_id),
      newestFirst().slice(20),
    );
    assert.deepEqual(five.body.pagination, { page: 5, limit: 5, total: 23, total_pages: 5 });
    const all = await list(server, owner, '?limit=100');
    assert.equal(all.body.data.length, 23);
    assert.deepEqual(all.body.pagination, { page: 1, limit: 100, total: 23, total_pages: 1 });
  });

  it('the other key sees only its own pastes', async () => {
    const res = await list(server, other);
    assert.equal(res.status, 200);
    assert.equal(res.body.pagination.total, 5);
    assert.equal(res.body.data.length, 5);
    for (const item of res.body.data as Array<{ paste_id: string }>) assert.ok(!ids.includes(item.paste_id));
  });

  it('a page past the end is an empty array with the true pagination', async () => {
    const res = await list(server, owner, '?page=6&limit=5');
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.data, []);
    assert.deepEqual(res.body.pagination, { page: 6, limit: 5, total: 23, total_pages: 5 });
    const far = await list(server, owner, '?page=1000');
    assert.deepEqual(far.body.data, []);
    assert.deepEqual(far.body.pagination, { page: 1000, limit: 20, total: 23, total_pages: 2 });
    // Any page a JSON number holds exactly, past SQLite's and PostgreSQL's 32-bit range too.
    for (const page of [1_000_000_000, 2 ** 31 + 1, Number.MAX_SAFE_INTEGER]) {
      const huge = await list(server, owner, `?page=${page}&limit=100`);
      assert.equal(huge.status, 200, huge.text);
      assert.deepEqual(huge.body.data, []);
      assert.deepEqual(huge.body.pagination, { page, limit: 100, total: 23, total_pages: 1 });
    }
    // One past what a JSON number holds exactly is refused rather than answered as another page.
    expectError(await list(server, owner, `?page=${Number.MAX_SAFE_INTEGER + 1}`), 400, 'invalid_request');
  });

  it('a key with no pastes gets an empty list with total 0', async () => {
    const fresh = await server.createKey({ name: 'fresh' });
    const res = await list(server, fresh);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.data, []);
    assert.deepEqual(res.body.pagination, { page: 1, limit: 20, total: 0, total_pages: 0 });
  });

  it('limit outside 1..100, non-integers and page 0 are 400 invalid_request', async () => {
    for (const query of [
      '?limit=0',
      '?limit=101',
      '?limit=abc',
      '?limit=1.5',
      '?limit=-1',
      '?limit=',
      '?page=0',
      '?page=-1',
      '?page=1.5',
      '?page=abc',
    ]) {
      const res = await list(server, owner, query);
      assert.doesNotThrow(() => expectError(res, 400, 'invalid_request'), `${query} → ${res.status} ${res.text}`);
    }
  });

  it('list items have exactly the fields of api-v1.md, with their values', async () => {
    const res = await list(server, owner, '?limit=1');
    const item = res.body.data[0];
    assert.deepEqual(Object.keys(item).sort(), LIST_ITEM_FIELDS);
    const id = ids[22]!;
    assert.equal(item.paste_id, id);
    assert.equal(item.url, `${BASE_URL}/view/${id}`);
    assert.equal(item.title, null);
    assert.equal(item.content_type, 'text');
    assert.ok(item.language === null || typeof item.language === 'string');
    assert.equal(item.file_size, Buffer.byteLength('paste number 22', 'utf8'));
    assert.equal(item.created_at, utc(createdAts[22]!));
    assert.equal(item.expires_at, null);
    assert.equal(item.view_count, 0);
    assert.equal(item.encrypted, false);
    assert.equal(item.downloadable, true);
  });

  it('expired pastes are not listed', async () => {
    const third = await server.createKey({ name: 'third' });
    const short = await createPaste(server, third, { expiry: '10m' });
    const long = await createPaste(server, third, { expiry: '1h' });
    let res = await list(server, third);
    assert.equal(res.body.pagination.total, 2);
    server.clock.advance(10 * MINUTE);
    res = await list(server, third);
    assert.deepEqual(
      res.body.data.map((i: { paste_id: string }) => i.paste_id),
      [long.paste_id],
    );
    assert.deepEqual(res.body.pagination, { page: 1, limit: 20, total: 1, total_pages: 1 });
    assert.notEqual(short.paste_id, long.paste_id);
  });
});

// ---------------------------------------------------------------------------------------------

describe('routing: 405 and 404 (D7)', () => {
  let server: TestServer;
  let key: string;
  before(async () => {
    server = await start();
    key = await server.createKey();
  });
  after(() => server.close());

  it('a wrong method on a known path is 405 method_not_allowed with Allow', async () => {
    const cases: Array<[string, string, string[]]> = [
      ['PATCH', '/api/v1/paste/AAAAAAAAAA', ['GET', 'PUT', 'DELETE']],
      ['POST', '/api/v1/pastes', ['GET']],
      ['DELETE', '/api/v1/pastes', ['GET']],
      ['PUT', '/api/v1/paste/AAAAAAAAAA/raw', ['GET']],
      ['GET', '/api/v1/paste', ['POST']],
    ];
    for (const [method, path, mustAllow] of cases) {
      const res = await request(`${server.url}${path}`, { method, headers: { 'x-api-key': key } });
      assert.doesNotThrow(() => expectError(res, 405, 'method_not_allowed'), `${method} ${path} → ${res.text}`);
      const allow = (res.headers.get('allow') ?? '').split(',').map((m) => m.trim());
      for (const m of mustAllow) assert.ok(allow.includes(m), `${method} ${path}: Allow "${allow}" lacks ${m}`);
      assert.ok(!allow.includes(method), `${method} ${path}: Allow lists the refused method`);
    }
  });

  it('an unknown route is 404 not_found', async () => {
    for (const path of ['/api/v1/nope', '/api/v2/paste/AAAAAAAAAA', '/nothing/here', '/api/v1/paste/a/b/c']) {
      const res = await request(`${server.url}${path}`, { headers: { 'x-api-key': key } });
      assert.doesNotThrow(() => expectError(res, 404, 'not_found'), `${path} → ${res.status} ${res.text}`);
    }
  });
});
