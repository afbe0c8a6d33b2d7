/**
 * Property-based tests of every endpoint (issue 7, "Reliability and security"). fast-check sends a
 * real server on 127.0.0.1, over a socket, random and malformed JSON, urlencoded, multipart and raw
 * bodies, random headers and query strings, wrong types, huge and empty values, bytes that are not
 * UTF-8 and broken `fpe1:` strings, and after every answer checks that:
 *
 * - it came within REQUEST_TIMEOUT_MS (no hang), and its status is never 5xx (a documented 503 aside);
 * - an error is the D7 envelope with the status of its code (an HTML page on the web pages), every
 *   answer carries X-Content-Type-Options, a 405 an Allow header, a 429 a Retry-After; a success
 *   has the documented shape;
 * - where an input was built to be valid, or to break one named rule, the answer is the one the
 *   contract promises: 201 and the exact bytes stored, or the D7 code naming the faulty field;
 * - a refused request changes nothing: no row is added or removed, and the seeded pastes (owned by
 *   another key, password-protected, view-once, encrypted, uploaded, anonymous) stay
 *   byte-identical. Both are checked after every single input.
 *
 * The file logs "properties: N inputs tried" at the end, N counting every input run (shrinking
 * included). PROPERTY_RUNS scales the number of runs (default 1); PROPERTY_SEED replays a run.
 */
import assert from 'node:assert/strict';
import { isUtf8 } from 'node:buffer';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import querystring from 'node:querystring';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { formatTimestamp } from '../src/clock.js';
import { ERROR_STATUS } from '../src/errors.js';
import { JSON_BODY_LIMIT } from '../src/http/api/paste-routes.js';
import { parseUrlEncoded } from '../src/http/request-bodies.js';
import { generateApiKey } from '../src/keys/api-key-format.js';
import { ViewTable } from '../src/pastes/view-table.js';
import { encryptForTest, sqlText, startServer, type TestServer } from './helpers.js';

const MiB = 1_048_576;
/** An answer slower than this is a hang. */
const REQUEST_TIMEOUT_MS = 15_000;
const RUN_SCALE = Number(process.env.PROPERTY_RUNS ?? '1') || 1;
const SEED = process.env.PROPERTY_SEED === undefined ? undefined : Number(process.env.PROPERTY_SEED);
/** Off: the 404 budget and the anonymous hourly limit would turn most answers here into 429s. */
const ENV = { ANON_HOURLY_LIMIT: '1000000000', NOT_FOUND_LIMIT_PER_MINUTE: '0' };

function runs<T>(numRuns: number): fc.Parameters<T> {
  return {
    numRuns: Math.max(1, Math.round(numRuns * RUN_SCALE)),
    includeErrorInReport: true,
    ...(SEED === undefined ? {} : { seed: SEED }),
  };
}

// ---------------------------------------------------------------------------------------------
// The contract, written out here rather than taken from the code under test.

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** D5, and D4 for `never`. */
const EXPIRY_MS: Record<string, number | null> = {
  '10m': 10 * MINUTE,
  '30m': 30 * MINUTE,
  '1h': HOUR,
  '3h': 3 * HOUR,
  '6h': 6 * HOUR,
  '12h': 12 * HOUR,
  '1d': DAY,
  '2d': 2 * DAY,
  '3d': 3 * DAY,
  '1w': 7 * DAY,
  '2w': 14 * DAY,
  '1m': 30 * DAY,
  never: null,
};
const EXPIRIES = Object.keys(EXPIRY_MS);

/** D7's table and api-v1.md's Errors section: the status each code comes with. */
const CODE_STATUS: Record<string, number> = {
  invalid_request: 400,
  content_too_short: 400,
  content_too_large: 413,
  file_too_large: 413,
  file_type_not_allowed: 400,
  invalid_ciphertext: 400,
  password_protected: 403,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  content_rejected: 400,
  api_key_missing: 401,
  api_key_invalid: 403,
  rate_limited: 429,
  api_disabled: 503,
};
/** Codes D7 does not list (wrong_password, not_downloadable, ...) keep the status of errors.ts. */
const statusOfCode = (code: string): number | undefined =>
  CODE_STATUS[code] ?? (ERROR_STATUS as Record<string, number>)[code];

/** api-v1.md "Allowed file extensions". */
const ALLOWED_EXTENSIONS = (
  '.txt .log .csv .json .xml .yaml .yml .toml .ini .cfg .conf .properties .md .rst .adoc .org .wiki .tex .bib ' +
  '.html .htm .css .scss .sass .less .js .jsx .ts .tsx .vue .svelte .py .java .go .rs .c .cpp .h .hpp .lua .rb ' +
  '.swift .kt .kts .scala .pl .pm .tcl .r .sql .awk .sed .graphql .proto .dockerfile .makefile .mak .cmake ' +
  '.gradle .tf .hcl .bat .ps1 .gitignore .diff .patch'
).split(' ');

const CREATE_FIELDS = new Set([
  'content',
  'title',
  'description',
  'expiry',
  'password',
  'burn',
  'encrypt',
  'key',
  'downloadable',
  'language',
  'public',
  'slug',
]);
const UPDATE_FIELDS = new Set([
  'content',
  'title',
  'description',
  'expiry',
  'burn',
  'password',
  'language',
  'downloadable',
  'encrypt',
  'key',
]);

// ---------------------------------------------------------------------------------------------
// Small helpers.

const utf8 = (text: string): Buffer => Buffer.from(text, 'utf8');
const sha256 = (data: string | Uint8Array): string =>
  createHash('sha256')
    .update(typeof data === 'string' ? utf8(data) : data)
    .digest('hex');
/** The string as it is once stored: a lone surrogate becomes U+FFFD in UTF-8. */
const wellFormed = (text: string): string => utf8(text).toString('utf8');
const isObject = (value: unknown): value is Record<string, any> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const utc = (ms: number): string => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
const fatalUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
/** The bytes as text when they are UTF-8 without NUL (D17), else null. */
function textOf(bytes: Uint8Array): string | null {
  if (bytes.includes(0)) return null;
  try {
    return fatalUtf8.decode(bytes);
  } catch {
    return null;
  }
}
/** HTTP drops spaces and tabs around a header value (and only those). */
const httpTrim = (value: string): string => value.replace(/^[ \t]+|[ \t]+$/g, '');
const formBooleanValue = (value: string): boolean | undefined =>
  ({ true: true, false: false, '1': true, '0': false, yes: true, no: false, on: true, off: false })[
    value.trim().toLowerCase()
  ];

// ---------------------------------------------------------------------------------------------
// HTTP over a real socket, with a deadline.

interface Req {
  method: string;
  /** Path and query, sent as is. */
  path: string;
  headers?: Record<string, string | string[] | undefined>;
  body?: Uint8Array;
  /** Send the body with chunked transfer encoding (no Content-Length). */
  chunked?: boolean;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  text: string;
}

interface Envelope {
  error: true;
  message: string;
  code: string;
  details?: Array<{ field: string; message: string }>;
}

let server: TestServer;
let port = 0;
let base = '';
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function send(req: Req, retried = false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(req.headers ?? {})) if (value !== undefined) headers[name] = value;
    if (req.body !== undefined) {
      if (req.chunked) headers['transfer-encoding'] = 'chunked';
      else headers['content-length'] = String(req.body.length);
    }
    let answered = false;
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn();
    };
    const outgoing = http.request({ host: '127.0.0.1', port, method: req.method, path: req.path, headers, agent });
    const timer = setTimeout(() => {
      outgoing.destroy();
      settle(() => reject(new Error(`no complete answer within ${REQUEST_TIMEOUT_MS} ms: ${where(req)}`)));
    }, REQUEST_TIMEOUT_MS);
    outgoing.on('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        settle(() => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text: body.toString('utf8') }));
      });
      res.on('error', (err) => settle(() => reject(new Error(`answer cut off (${err.message}): ${where(req)}`))));
      res.on('close', () => {
        if (!res.complete) settle(() => reject(new Error(`answer cut off: ${where(req)}`)));
      });
    });
    outgoing.on('error', (err: NodeJS.ErrnoException) => {
      // An answer given before the whole body was sent closes the connection: writing the rest
      // then fails, and the answer already received stands.
      if (answered) return;
      if (!retried && outgoing.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE')) {
        settle(() => send(req, true).then(resolve, reject));
        return;
      }
      settle(() => reject(new Error(`${err.message}: ${where(req)}`)));
    });
    const body = req.body;
    if (body !== undefined && body.length > 0) {
      if (req.chunked && body.length > 1) {
        const middle = Math.floor(body.length / 2);
        outgoing.write(body.subarray(0, middle));
        outgoing.end(body.subarray(middle));
      } else {
        outgoing.end(body);
      }
    } else {
      outgoing.end();
    }
  });
}

function where(req: Req, answer?: Answer): string {
  const body = req.body
    ? ` body (${req.body.length} bytes) ${JSON.stringify(Buffer.from(req.body.subarray(0, 160)).toString('latin1'))}`
    : '';
  const headers = JSON.stringify(req.headers ?? {}).slice(0, 400);
  const out = answer ? `\n  → ${answer.status} ${answer.text.slice(0, 400)}` : '';
  return `${req.method} ${req.path.slice(0, 200)} ${headers}${body}${out}`;
}

const headerOf = (req: Req, name: string): string | undefined => {
  const value = req.headers?.[name];
  return Array.isArray(value) ? value.join(', ') : value;
};
const isPagePath = (path: string): boolean => path === '/' || path.startsWith('/view/') || path.startsWith('/archive');
/** The rule of D7 for the web pages: a browser asking for HTML gets an error page. */
const wantsPage = (req: Req): boolean => isPagePath(req.path) && (headerOf(req, 'accept') ?? '').includes('text/html');

function checkEnvelope(answer: Answer, w: string): Envelope {
  assert.match(String(answer.headers['content-type']), /^application\/json; charset=utf-8$/i, `not JSON: ${w}`);
  let body: unknown;
  try {
    body = JSON.parse(answer.text);
  } catch {
    assert.fail(`the body is not JSON: ${w}`);
  }
  assert.ok(isObject(body), `not an object: ${w}`);
  const extra = Object.keys(body).filter((k) => !['error', 'message', 'code', 'details'].includes(k));
  assert.deepEqual(extra, [], `fields outside D7: ${w}`);
  assert.equal(body.error, true, `error is not true: ${w}`);
  assert.ok(typeof body.message === 'string' && body.message.trim() !== '', `no message: ${w}`);
  assert.ok(typeof body.code === 'string' && /^[a-z]+(?:_[a-z]+)*$/.test(body.code), `code not snake_case: ${w}`);
  assert.equal(statusOfCode(body.code), answer.status, `code ${body.code} does not go with ${answer.status}: ${w}`);
  if (body.details !== undefined) {
    assert.ok(Array.isArray(body.details) && body.details.length > 0, `details not a list: ${w}`);
    for (const detail of body.details) {
      assert.ok(isObject(detail), `a detail is not an object: ${w}`);
      assert.deepEqual(Object.keys(detail).sort(), ['field', 'message'], `a detail's fields: ${w}`);
      assert.ok(typeof detail.field === 'string' && typeof detail.message === 'string', `a detail's types: ${w}`);
      assert.ok(detail.message.trim() !== '', `a detail without message: ${w}`);
    }
  }
  return body as unknown as Envelope;
}

/** What every answer must be, whatever the input. Returns the envelope of an error. */
function checkAnswer(req: Req, answer: Answer): Envelope | undefined {
  const w = where(req, answer);
  assert.ok(answer.status >= 200 && answer.status < 600, `status ${answer.status}: ${w}`);
  assert.equal(answer.headers['x-content-type-options'], 'nosniff', `no X-Content-Type-Options: ${w}`);
  if (answer.status === 405) assert.ok(answer.headers.allow, `405 without Allow: ${w}`);
  if (answer.status === 429) assert.ok(answer.headers['retry-after'], `429 without Retry-After: ${w}`);
  if (req.method === 'HEAD') {
    assert.ok(answer.status < 500, `server error: ${w}`);
    assert.equal(answer.body.length, 0, `a body on HEAD: ${w}`);
    return undefined;
  }
  if (answer.status < 400) return undefined;
  const type = String(answer.headers['content-type'] ?? '');
  if (type.startsWith('text/html')) {
    assert.ok(isPagePath(req.path), `an HTML error off the web pages: ${w}`);
    assert.match(answer.text, /^<!doctype html>/i, `not a page: ${w}`);
    assert.ok(answer.status < 500, `server error: ${w}`);
    return undefined;
  }
  assert.ok(!wantsPage(req), `a browser asking for a page got ${type}: ${w}`);
  const envelope = checkEnvelope(answer, w);
  assert.ok(answer.status < 500 || (answer.status === 503 && envelope.code === 'api_disabled'), `server error: ${w}`);
  return envelope;
}

// ---------------------------------------------------------------------------------------------
// The state every property checks against.

const keys = { A: '', B: '', inactive: '', unknown: '' };
let keyBId = '';

interface Seed {
  id: string;
  content: string;
  /** Password-protected: the API never returns it, /raw and /download want the password. */
  protected: boolean;
  encrypted: boolean;
  downloadable: boolean;
}
/** Pastes of key A (one anonymous): nothing in this file may change them. */
const seeds: Seed[] = [];
let seedBaseline = '';
/** Pastes key B made here: the only ones a PUT or DELETE may change. */
const bPastes: string[] = [];
let expectedRows = 0;
const tried = new Map<string, number>();

const SNAPSHOT_COLUMNS =
  'id, owner_key_id, title, description, content, content_type, original_filename, language, file_size, sha256, ' +
  'created_at, expires_at, burn_after_read, encrypted, downloadable, is_public, password_hash, source, creator_ip';

async function seedSnapshot(): Promise<string> {
  const ids = seeds.map((seed) => sqlText(seed.id)).join(', ');
  return JSON.stringify(await server.sql(`SELECT ${SNAPSHOT_COLUMNS} FROM pastes WHERE id IN (${ids}) ORDER BY id`));
}

async function rowCount(): Promise<number> {
  return Number((await server.sql<{ n: number | string }>('SELECT COUNT(*) AS n FROM pastes'))[0]?.n);
}

interface Exchange {
  req: Req;
  answer: Answer;
  envelope: Envelope | undefined;
  w: string;
}

/**
 * Sends one input and checks what must hold for any input: the answer (checkAnswer), the rows
 * (one more for a 201 of a create, one fewer for a 200 of a DELETE, else the same), and the
 * seeded pastes, unchanged.
 */
async function exchange(req: Req, effect: 'none' | 'create' | 'delete' = 'none'): Promise<Exchange> {
  const before = await rowCount();
  const answer = await send(req);
  const w = where(req, answer);
  const envelope = checkAnswer(req, answer);
  const delta = (await rowCount()) - before;
  const expected =
    effect === 'create' && answer.status === 201 ? 1 : effect === 'delete' && answer.status === 200 ? -1 : 0;
  assert.equal(delta, expected, `the number of pastes changed by ${delta}, expected ${expected}: ${w}`);
  expectedRows += expected;
  assert.equal(await seedSnapshot(), seedBaseline, `a seeded paste changed: ${w}`);
  return { req, answer, envelope, w };
}

function expectAnswer(x: Exchange, status: number, code?: string, fields: string[] = []): void {
  assert.equal(x.answer.status, status, `expected ${status}${code ? ` ${code}` : ''}: ${x.w}`);
  if (code === undefined || x.envelope === undefined) return;
  assert.equal(x.envelope.code, code, `expected ${code}: ${x.w}`);
  for (const field of fields) {
    assert.ok(
      x.envelope.details?.some((d) => d.field === field),
      `details do not name "${field}": ${x.w}`,
    );
  }
}

/** Content-Types that are media types, sure to get past Fastify's check of the header. */
const SOUND_TYPES = new Set([
  'application/json',
  'application/json; charset=utf-8',
  'APPLICATION/JSON',
  'application/json;charset=UTF-8',
  'application/x-www-form-urlencoded',
  'text/plain',
  'text/plain; charset=utf-8',
]);

/**
 * The answer decided by routing alone (404, 405) for a request that may carry a body: a
 * Content-Type that is not a media type at all is refused first, with 400 invalid_request.
 */
function expectRouted(x: Exchange, contentType: string | undefined, status: number, code: string): void {
  const sent = x.req.body !== undefined && contentType !== undefined;
  if (sent && !SOUND_TYPES.has(contentType) && x.answer.status === 400) expectAnswer(x, 400, 'invalid_request');
  else expectAnswer(x, status, code);
}

/** A property run counted under its name. */
function counted<T>(name: string, predicate: (value: T) => Promise<void>): (value: T) => Promise<void> {
  return (value) => {
    tried.set(name, (tried.get(name) ?? 0) + 1);
    return predicate(value);
  };
}

// ---------------------------------------------------------------------------------------------
// Generators shared by the properties.

/** Characters Node lets a client put in a header value (latin1 without controls but tab). */
const headerChar = fc
  .oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0x80, max: 0xff }), fc.constant(0x09))
  .map((c) => String.fromCharCode(c));
const headerText = fc.string({ unit: headerChar, maxLength: 40 });
/** Printable text of any script, without NUL or other controls. */
const printable = fc.string({ unit: 'grapheme', maxLength: 40 });
const withNul = printable.map((s) => `${s}\u0000${s}`);
/** Not storable as text: NUL, or half a surrogate pair (JSON escapes it as \ud800). */
const notText = fc.oneof(
  withNul,
  fc
    .tuple(printable, fc.constantFrom('\ud800', '\udbff', '\udc00', '\udfff', '\ude00\ud83d'), printable)
    .map(([a, half, b]) => a + half + b),
);
/** A value of any JSON type but string. */
const nonString = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.array(fc.string({ maxLength: 4 }), { maxLength: 2 }),
  fc.dictionary(fc.string({ maxLength: 4 }), fc.string({ maxLength: 4 }), { maxKeys: 2 }),
);
/** A value of any JSON type but boolean (strings that a form would take included). */
const nonBoolean = fc.oneof(
  fc.constantFrom<unknown>('true', 'false', '1', '0', 'yes', 'on', '', null),
  fc.integer({ min: -1, max: 2 }),
  fc.array(fc.boolean(), { maxLength: 1 }),
  fc.dictionary(fc.string({ maxLength: 3 }), fc.boolean(), { maxKeys: 1 }),
);

type KeyKind = 'A' | 'B' | 'padded' | 'none' | 'empty' | 'inactive' | 'unknown' | 'typo' | 'twice' | 'huge' | 'junk';
type KeyClass = 'valid' | 'missing' | 'invalid';
interface KeyChoice {
  kind: KeyKind;
  junk: string;
}
const BAD_KEYS: KeyKind[] = ['none', 'empty', 'inactive', 'unknown', 'typo', 'twice', 'huge', 'junk'];
const keyArb = (valid: KeyKind[], validWeight = 4) =>
  fc.record({
    kind: fc.oneof(
      { weight: validWeight, arbitrary: fc.constantFrom(...valid) },
      { weight: 1, arbitrary: fc.constantFrom(...BAD_KEYS) },
    ),
    junk: headerText,
  });

function keyHeader(choice: KeyChoice): {
  value: string | string[] | undefined;
  cls: KeyClass;
  owner: 'A' | 'B' | null;
} {
  switch (choice.kind) {
    case 'A':
      return { value: keys.A, cls: 'valid', owner: 'A' };
    case 'B':
      return { value: keys.B, cls: 'valid', owner: 'B' };
    case 'padded':
      // HTTP drops the white space around a header value.
      return { value: ` ${keys.B}\t`, cls: 'valid', owner: 'B' };
    case 'none':
      return { value: undefined, cls: 'missing', owner: null };
    case 'empty':
      return { value: '', cls: 'missing', owner: null };
    case 'inactive':
      return { value: keys.inactive, cls: 'invalid', owner: null };
    case 'unknown':
      return { value: keys.unknown, cls: 'invalid', owner: null };
    case 'typo': {
      const at = 7;
      const swapped = keys.B[at] === 'a' ? 'b' : 'a';
      return { value: keys.B.slice(0, at) + swapped + keys.B.slice(at + 1), cls: 'invalid', owner: null };
    }
    case 'twice':
      return { value: [keys.B, keys.B], cls: 'invalid', owner: null };
    case 'huge':
      return { value: `fp_${'a'.repeat(8000)}`, cls: 'invalid', owner: null };
    case 'junk':
      return { value: choice.junk, cls: httpTrim(choice.junk) === '' ? 'missing' : 'invalid', owner: null };
  }
}

/** Headers a client may send that mean nothing to fastpaste. */
const noiseArb = fc.dictionary(
  fc.oneof(
    fc.constantFrom(
      'accept-encoding',
      'accept-language',
      'x-forwarded-for',
      'x-real-ip',
      'forwarded',
      'cookie',
      'authorization',
      'range',
      'if-none-match',
      'if-modified-since',
      'origin',
      'referer',
      'user-agent',
      'x-http-method-override',
      'x-requested-with',
      'cache-control',
      'content-language',
    ),
    fc.stringMatching(/^x-[a-z0-9-]{1,16}$/).filter((name) => name !== 'x-api-key' && name !== 'x-paste-password'),
  ),
  headerText,
  { maxKeys: 3 },
);

/** Content-Encoding, rarely: anything but identity is refused before authentication. */
const encodingArb = fc.oneof(
  { weight: 10, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constantFrom('gzip', 'identity', 'IDENTITY', 'br', 'deflate', '', 'gzip, identity') },
);
const encodingPasses = (encoding: string | undefined): boolean =>
  encoding === undefined || encoding.trim().toLowerCase() === 'identity';

/** A path segment meant as a paste id, from the seeded ids to undecodable junk. */
type IdKind = 'seed' | 'seed-encoded' | 'plausible' | 'implausible' | 'too-long' | 'junk';
interface IdChoice {
  kind: IdKind;
  n: number;
  s: string;
}
const junkSegment = fc.oneof(
  fc.constantFrom(
    '%',
    '%zz',
    '%E0%A4%A',
    '%00',
    '%ff%fe',
    '%2F',
    '%2e%2e',
    '..',
    '.',
    '%C0%AF',
    '%ED%A0%80',
    '%u0041',
    ';',
    ',',
    '*',
    '~',
    "'",
    '%22%3Cscript%3E',
    '%0d%0aSet-Cookie:x=1',
    '%25',
    '+',
    '%20',
    'a%2Fb',
  ),
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }).map(encodeURIComponent),
  fc
    .string({
      unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
      minLength: 1,
      maxLength: 12,
    })
    .filter((s) => !/[?#/%]/.test(s)),
  fc
    .uint8Array({ minLength: 1, maxLength: 6 })
    .map((b) => [...b].map((x) => `%${x.toString(16).padStart(2, '0')}`).join('')),
);
const idArb: fc.Arbitrary<IdChoice> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant<IdKind>('seed'), n: fc.nat(), s: fc.constant('') }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant<IdKind>('seed-encoded'), n: fc.nat(), s: fc.constant('') }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant<IdKind>('plausible'),
      n: fc.constant(0),
      s: fc.stringMatching(/^[A-Za-z0-9_-]{3,69}$/),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant<IdKind>('implausible'),
      n: fc.constant(0),
      s: fc.oneof(fc.stringMatching(/^[A-Za-z0-9_-]{1,2}$/), fc.stringMatching(/^[A-Za-z0-9_-]{70,200}$/)),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant<IdKind>('too-long'),
      n: fc.constant(0),
      s: fc.constantFrom('a'.repeat(201), 'b'.repeat(3000)),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant<IdKind>('junk'), n: fc.constant(0), s: junkSegment }) },
);

interface Target {
  kind: IdKind | 'b';
  segment: string;
  /** The seeded paste the segment names, once the router has decoded it. */
  seed: Seed | undefined;
  /** The router hands the segment to the route (no decoding error, within the length limit). */
  routed: boolean;
  /** The paste does not exist (404 once authentication and the body pass). */
  missing: boolean;
  /** A key-B paste. */
  b: string | undefined;
}

function resolveId(choice: IdChoice): Target {
  const seed = seeds[choice.n % seeds.length] as Seed;
  switch (choice.kind) {
    case 'seed':
      return { kind: 'seed', segment: seed.id, seed, routed: true, missing: false, b: undefined };
    case 'seed-encoded':
      return {
        kind: 'seed-encoded',
        segment: [...utf8(seed.id)].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join(''),
        seed,
        routed: true,
        missing: false,
        b: undefined,
      };
    case 'plausible':
    case 'implausible':
      return { kind: choice.kind, segment: choice.s, seed: undefined, routed: true, missing: true, b: undefined };
    case 'too-long':
      return { kind: 'too-long', segment: choice.s, seed: undefined, routed: false, missing: true, b: undefined };
    case 'junk':
      return { kind: 'junk', segment: choice.s, seed: undefined, routed: false, missing: false, b: undefined };
  }
}

/** A seeded paste, a key-B paste or any id. */
const targetArb = fc.oneof(
  { weight: 4, arbitrary: fc.record({ pool: fc.constant<'b'>('b'), n: fc.nat(), id: idArb }) },
  { weight: 5, arbitrary: fc.record({ pool: fc.constant<'any'>('any'), n: fc.nat(), id: idArb }) },
);
function resolveTarget(choice: { pool: 'b' | 'any'; n: number; id: IdChoice }): Target {
  if (choice.pool === 'b' && bPastes.length > 0) {
    const id = bPastes[choice.n % bPastes.length] as string;
    return { kind: 'b', segment: id, seed: undefined, routed: true, missing: false, b: id };
  }
  return resolveId(choice.id);
}

const queryPairArb = fc.tuple(
  fc.oneof(
    fc.constantFrom('page', 'limit', 'json', 'expiry', 'x', '', '__proto__', 'constructor'),
    fc.string({ maxLength: 8 }),
  ),
  fc.oneof(fc.string({ maxLength: 8 }), printable, fc.integer().map(String)),
);
const encodeQuery = (pairs: Array<[string, string]>): string =>
  pairs.length === 0 ? '' : `?${pairs.map(([n, v]) => `${encodeURIComponent(n)}=${encodeURIComponent(v)}`).join('&')}`;
const queryArb = fc.oneof(
  { weight: 4, arbitrary: fc.constant('') },
  { weight: 3, arbitrary: fc.array(queryPairArb, { maxLength: 4 }).map(encodeQuery) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '?',
      '?%zz',
      '?&&&',
      '?=',
      '?a[b]=1',
      '?__proto__[x]=1',
      '?constructor[prototype][x]=1',
      '?a=1&a=2',
      `?x=${'y'.repeat(4000)}`,
      '?%E0%A4%A=1',
      '?a=%ff',
    ),
  },
);

// The content of a paste, tagged with the rule it keeps or breaks.

type ContentKind = 'ok' | 'cipher' | 'short' | 'large' | 'field' | 'missing';
interface ContentChoice {
  kind: ContentKind;
  value: unknown;
  /** For a `fpe1:` string: whether it is a valid one (undefined: not known). */
  valid?: boolean | undefined;
}
const FOUR_MIB_ASCII = 'a'.repeat(4 * MiB);
const LARGE_CONTENT = ['a'.repeat(4 * MiB + 1), 'é'.repeat(2 * MiB + 1), '😀'.repeat(MiB + 1)];
/** At least 3 characters, not only white space, no NUL (D6). */
const goodText = fc.oneof(
  { weight: 12, arbitrary: fc.tuple(fc.stringMatching(/^[!-~]{3}$/), printable).map(([a, b]) => a + b) },
  {
    weight: 2,
    arbitrary: fc.constantFrom('abc', '😀😀😀', 'e\u0301e\u0301x', 'tab\there\r\nline', '\u00a0\u00a0x y z'),
  },
  // Exactly 4 MiB of UTF-8, one byte or four per character: the largest content accepted.
  { weight: 1, arbitrary: fc.constantFrom(FOUR_MIB_ASCII, 'é'.repeat(2 * MiB)) },
);
const shortText = fc.constantFrom(
  '',
  'a',
  'ab',
  '   ',
  ' \n\t ',
  '😀😀',
  '\u00a0\u2003\u3000',
  'e\u0301',
  '\n\n\n\n',
  '\u0085\u0085\u0085',
  '\ufeff\ufeff\ufeff',
);

const b64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64');
const ivArb = fc.uint8Array({ minLength: 12, maxLength: 12 });
const ctArb = fc.uint8Array({ minLength: 16, maxLength: 64 });
const BASE64_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
/** `fpe1:` strings, valid ones and ones broken in one known way each. */
const cipherArb: fc.Arbitrary<{ text: string; valid: boolean | undefined }> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.tuple(ivArb, ctArb).map(([iv, ct]) => ({ text: `fpe1:${b64(iv)}:${b64(ct)}`, valid: true })),
  },
  {
    weight: 8,
    arbitrary: fc
      .oneof(
        // An IV that is not 12 bytes.
        fc
          .tuple(fc.oneof(fc.uint8Array({ maxLength: 11 }), fc.uint8Array({ minLength: 13, maxLength: 32 })), ctArb)
          .map(([iv, ct]) => `fpe1:${b64(iv)}:${b64(ct)}`),
        // A ciphertext shorter than the GCM tag.
        fc.tuple(ivArb, fc.uint8Array({ maxLength: 15 })).map(([iv, ct]) => `fpe1:${b64(iv)}:${b64(ct)}`),
        // A character outside base64 in the IV or the ciphertext.
        fc
          .tuple(
            ivArb,
            ctArb,
            fc.constantFrom('!', '#', '$', '%', '*', '.', '~', '-', '_', ' ', '\n', 'é', '='),
            fc.nat(),
            fc.boolean(),
          )
          .map(([iv, ct, ch, at, inIv]) => {
            const part = inIv ? b64(iv) : b64(ct);
            const i = at % part.length;
            const broken = ch === '=' ? `=${part}` : part.slice(0, i) + ch + part.slice(i);
            return inIv ? `fpe1:${broken}:${b64(ct)}` : `fpe1:${b64(iv)}:${broken}`;
          }),
        // Padding removed or added.
        fc.tuple(ivArb, ctArb, fc.boolean()).map(([iv, ct, inIv]) => {
          const part = inIv ? b64(iv) : b64(ct);
          const broken = part.endsWith('=') ? part.slice(0, -1) : `${part}=`;
          return inIv ? `fpe1:${broken}:${b64(ct)}` : `fpe1:${b64(iv)}:${broken}`;
        }),
        // Padding bits that are not zero: decodes, but not canonical.
        fc
          .tuple(
            ivArb,
            fc.uint8Array({ minLength: 16, maxLength: 64 }).filter((b) => b.length % 3 !== 0),
          )
          .map(([iv, ct]) => {
            const part = b64(ct);
            const at = part.length - (part.endsWith('==') ? 3 : 2);
            const index = BASE64_ALPHABET.indexOf(part[at] as string);
            return `fpe1:${b64(iv)}:${part.slice(0, at)}${BASE64_ALPHABET[index | 1]}${part.slice(at + 1)}`;
          }),
        // base64url instead of base64.
        fc
          .tuple(ivArb, ctArb)
          .map(([iv, ct]) => `fpe1:${b64(iv)}:-${b64(ct).replaceAll('+', '-').replaceAll('/', '_')}`),
        // Colons too many or too few.
        fc
          .tuple(ivArb, ctArb, fc.constantFrom('front', 'middle', 'end', 'four', 'two'))
          .map(([iv, ct, how]) =>
            how === 'front'
              ? `fpe1::${b64(iv)}:${b64(ct)}`
              : how === 'middle'
                ? `fpe1:${b64(iv)}::${b64(ct)}`
                : how === 'end'
                  ? `fpe1:${b64(iv)}:${b64(ct)}:`
                  : how === 'four'
                    ? `fpe1:${b64(iv)}:${b64(ct)}:${b64(iv)}`
                    : `fpe1:${b64(iv)}${b64(ct)}`,
          ),
        // Another prefix.
        fc
          .tuple(ivArb, ctArb, fc.constantFrom('FPE1', 'fpe2', 'fpe', ' fpe1', 'fpe1 ', 'fpe0', '', 'fpe1.'))
          .map(([iv, ct, prefix]) => `${prefix}:${b64(iv)}:${b64(ct)}`),
        fc.constantFrom('fpe1:', 'fpe1::', 'fpe1:::', ':::', 'fpe1:AAAAAAAAAAAAAAAA:'),
      )
      .map((text) => ({ text, valid: false })),
  },
  // Anything after the prefix: almost surely invalid, but not known to be.
  { weight: 1, arbitrary: fc.string({ maxLength: 60 }).map((s) => ({ text: `fpe1:${s}`, valid: undefined })) },
);

const contentArb = (missingWeight = 1): fc.Arbitrary<ContentChoice> =>
  fc.oneof(
    { weight: 10, arbitrary: goodText.map((value) => ({ kind: 'ok' as const, value })) },
    { weight: 6, arbitrary: cipherArb.map((c) => ({ kind: 'cipher' as const, value: c.text, valid: c.valid })) },
    { weight: 2, arbitrary: shortText.map((value) => ({ kind: 'short' as const, value })) },
    { weight: 1, arbitrary: fc.constantFrom(...LARGE_CONTENT).map((value) => ({ kind: 'large' as const, value })) },
    {
      weight: 2,
      arbitrary: fc
        .oneof(nonString, fc.constant(null), notText)
        .map((value) => ({ kind: 'field' as const, value: value as unknown })),
    },
    { weight: missingWeight, arbitrary: fc.constant({ kind: 'missing' as const, value: undefined }) },
  );

// The other fields, each a good value or one that breaks a rule of its own (400 naming it).

interface FieldValue {
  value: unknown;
  bad: boolean;
}
const field = (good: fc.Arbitrary<unknown>, bad: fc.Arbitrary<unknown>): fc.Arbitrary<FieldValue> =>
  fc.oneof(
    { weight: 6, arbitrary: good.map((value) => ({ value, bad: false })) },
    { weight: 1, arbitrary: bad.map((value) => ({ value, bad: true })) },
  );
const booleanField = field(fc.boolean(), nonBoolean);
const titleField = field(
  fc.oneof(printable, fc.constantFrom(null, '', 'é'.repeat(200), '😀'.repeat(200))),
  fc.oneof(nonString, notText, fc.constantFrom('x'.repeat(201), '😀'.repeat(201))),
);
const descriptionField = field(
  fc.oneof(printable, fc.constantFrom(null, '', 'd'.repeat(500))),
  fc.oneof(nonString, notText, fc.constant('d'.repeat(501))),
);
const expiryField = (nullIsBad: boolean) =>
  field(
    nullIsBad ? fc.constantFrom(...EXPIRIES) : fc.constantFrom(...EXPIRIES, null),
    fc.oneof(
      nonString,
      fc.constantFrom('', '1D', ' 1d', '1d ', '0m', '5m', '1y', 'forever', 'Never', '24h', 'toString', '__proto__'),
      nullIsBad ? fc.constant(null) : fc.constant('1d\u0000'),
    ),
  );
const passwordField = field(
  // Hashing is slow on purpose (argon2id): a real password now and then is enough.
  fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(null, '') },
    { weight: 1, arbitrary: fc.stringMatching(/^[!-~]{1,12}$/) },
  ),
  fc.oneof(nonString, notText, fc.constant('p'.repeat(1025))),
);
const keyField = field(
  fc.oneof(
    fc.stringMatching(/^[A-Za-z0-9_-]{43}$/),
    fc.stringMatching(/^[A-Za-z0-9_-]{43}=$/),
    fc.constantFrom('', null),
  ),
  fc.oneof(
    nonString,
    notText,
    fc.constant('k'.repeat(257)),
    fc.stringMatching(/^[A-Za-z0-9_-]{0,5}[+/. ~!é][A-Za-z0-9_-]{0,5}$/),
    fc.stringMatching(/^[A-Za-z0-9_-]{0,5}=[A-Za-z0-9_-]{1,5}$/),
    fc.constantFrom('=', '==', 'abc===', 'a=b='),
    fc.stringMatching(/^[A-Za-z0-9_-]{1,42}={0,2}$/),
    fc.stringMatching(/^[A-Za-z0-9_-]{44,60}$/),
  ),
);
const languageField = field(
  fc.oneof(
    fc.constantFrom('python', 'javascript', 'c++', 'c#', 'objective-c', 'PYTHON', ' go ', '', null),
    fc.stringMatching(/^[a-z][a-z0-9]{0,20}$/),
  ),
  fc.oneof(nonString, notText, fc.constantFrom(' ', '!', '-x', '.x', 'py thon', 'x'.repeat(41), 'русский', 'a/b')),
);
const slugField = field(
  fc.oneof(
    fc.tuple(fc.stringMatching(/^[A-Za-z0-9_-]{1,30}$/), fc.nat(9)).map(([s, n]) => `${s}_${n}`),
    fc.constantFrom('', null),
  ),
  fc.oneof(
    nonString,
    notText,
    fc.constantFrom(
      'ab',
      'a b c',
      'api',
      'API',
      'View',
      'raw',
      'download',
      'archive',
      'x'.repeat(65),
      'héllo',
      'a/b',
      'a.b',
    ),
  ),
);
const unknownFieldsArb = fc.dictionary(
  fc
    .string({ minLength: 1, maxLength: 12 })
    .filter((n) => !CREATE_FIELDS.has(n) && n !== '__proto__' && n !== 'constructor'),
  // Nor inside a value: a body with a `__proto__` key anywhere (or `constructor.prototype`) is
  // refused as invalid JSON before its fields are looked at (request-bodies.ts; such bodies are
  // tested on their own, below); fast-check's JSON values do hold such keys at times.
  fc.jsonValue({ maxDepth: 2 }).filter((value) => !/"(__proto__|constructor)"/.test(JSON.stringify(value) ?? '')),
  { minKeys: 1, maxKeys: 2 },
);
const optionalUnknown = fc.oneof(
  { weight: 8, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: unknownFieldsArb },
);

const createFieldsArb = fc.record(
  {
    title: titleField,
    description: descriptionField,
    expiry: expiryField(false),
    password: passwordField,
    burn: booleanField,
    encrypt: booleanField,
    key: keyField,
    downloadable: booleanField,
    language: languageField,
    public: booleanField,
    slug: slugField,
  },
  { requiredKeys: [] },
);
const updateFieldsArb = fc.record(
  {
    title: titleField,
    description: descriptionField,
    expiry: expiryField(true),
    burn: booleanField,
    password: passwordField,
    language: languageField,
    downloadable: booleanField,
    encrypt: booleanField,
    key: keyField,
  },
  { requiredKeys: [] },
);

const JSON_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'APPLICATION/JSON',
  'application/json;charset=UTF-8',
];
const jsonTypeArb = fc.constantFrom(...JSON_TYPES);
/** Any Content-Type, sane or not. */
const anyTypeArb = fc.oneof(
  fc.constantFrom(
    undefined,
    'application/json',
    'text/plain',
    'text/plain; charset=utf-8',
    'application/x-www-form-urlencoded',
    'multipart/form-data',
    'multipart/form-data; boundary=',
    'multipart/form-data; boundary=abc',
    'application/octet-stream',
    '*/*',
    ';',
    ',',
    'application/json, text/plain',
    'application/json; charset=utf-16',
    'application/vnd.api+json',
    'application/jsonx',
    'json',
    'application/',
    '/',
  ),
  headerText,
);
const styleArb = fc.constantFrom<'compact' | 'pretty' | 'ascii'>('compact', 'compact', 'pretty', 'ascii');

/**
 * The style to send `content` in: escaped to ASCII (as Python's json.dumps does by default) only
 * while the body stays under the JSON limit. 4 MiB of 'é' escaped is 12 MiB of JSON, which the
 * server refuses though the content is within D6: see the todo test at the end of this file.
 */
function jsonStyle(content: unknown, style: 'compact' | 'pretty' | 'ascii'): 'compact' | 'pretty' | 'ascii' {
  return style === 'ascii' && typeof content === 'string' && content.length > MiB && content.length <= 2 * MiB
    ? 'compact'
    : style;
}

function serialize(value: unknown, style: 'compact' | 'pretty' | 'ascii'): string {
  const text = style === 'pretty' ? JSON.stringify(value, null, 2) : JSON.stringify(value);
  return style === 'ascii'
    ? text.replace(/[\u007f-\uffff]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`)
    : text;
}

/** Byte sequences that are not UTF-8 (a lone continuation, an overlong form, a surrogate, ...). */
const badBytesArb = fc
  .constantFrom(
    [0xff],
    [0xfe],
    [0xc0, 0x80],
    [0xed, 0xa0, 0x80],
    [0xe2, 0x82],
    [0xf4, 0x90, 0x80, 0x80],
    [0x80],
    [0xf8, 0x88, 0x80, 0x80, 0x80],
  )
  .map((bytes) => Buffer.from(bytes));

/** Bodies of every kind, most of them broken. `notUtf8` marks JSON whose strings hold bytes that are not UTF-8. */
interface ChaosBody {
  bytes: Buffer;
  notUtf8: boolean;
}
const chaosBodyArb: fc.Arbitrary<ChaosBody> = fc.oneof(
  fc.json({ maxDepth: 3 }).map((t) => ({ bytes: utf8(t), notUtf8: false })),
  fc
    .json({ maxDepth: 3 })
    .chain((t) => fc.nat({ max: t.length }).map((i) => ({ bytes: utf8(t.slice(0, i)), notUtf8: false }))),
  fc.uint8Array({ maxLength: 300 }).map((b) => ({ bytes: Buffer.from(b), notUtf8: false })),
  fc.tuple(printable, badBytesArb, printable).map(([a, bad, b]) => ({
    bytes: Buffer.concat([
      utf8(`{"content":"abc${JSON.stringify(a).slice(1, -1)}`),
      bad,
      utf8(`${JSON.stringify(b).slice(1, -1)}"}`),
    ]),
    notUtf8: true,
  })),
  fc
    .dictionary(fc.constantFrom(...CREATE_FIELDS, 'x'), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 })
    .map((o) => ({ bytes: utf8(JSON.stringify(o)), notUtf8: false })),
  fc
    .constantFrom(
      '',
      ' ',
      'null',
      '[]',
      '{}',
      '"abc"',
      '123',
      'true',
      '{"content":"abc","content":{}}',
      '{"__proto__":{"content":"abc"}}',
      '{"content":"abc","constructor":{"prototype":{"x":1}}}',
      '\ufeff{"content":"hello"}',
      '{"content":"hello"}garbage',
      '{"content":"hello"}\n{"content":"again"}',
      '{"content":"\\ud800\\udc00abc"}',
      '{"content":"\\ud800abc"}',
      '{"content":"\\u0000abc"}',
      '{"content": 1e999}',
      '{"content":"abc", "burn": "true"}',
      "{'content':'single quotes'}",
      '{"content":"abc",}',
      '{"content":"abc"',
    )
    .map((t) => ({ bytes: utf8(t), notUtf8: false })),
  fc
    .integer({ min: 1000, max: 100_000 })
    .map((n) => ({ bytes: utf8(`${'['.repeat(n)}${']'.repeat(n)}`), notUtf8: false })),
  fc
    .integer({ min: 1000, max: 50_000 })
    .map((n) => ({ bytes: utf8(`${'{"a":'.repeat(n)}1${'}'.repeat(n)}`), notUtf8: false })),
);
/** A body past the JSON limit (paste-routes.ts JSON_BODY_LIMIT), rarely (it costs 24 MB a time). */
let hugeJson: Buffer | undefined;
const hugeJsonBody = (): Buffer => {
  hugeJson ??= utf8(`{"content":"${'a'.repeat(JSON_BODY_LIMIT)}"}`);
  return hugeJson;
};

// ---------------------------------------------------------------------------------------------
// Multipart bodies, built by hand so that they can be broken.

interface PartSpec {
  name: string;
  filename?: string | undefined;
  type?: string | undefined;
  data: Uint8Array;
}
type Framing =
  | 'ok'
  | 'quoted-boundary'
  | 'preamble'
  | 'epilogue'
  | 'lf'
  | 'no-close'
  | 'truncate'
  | 'no-boundary-param'
  | 'wrong-boundary'
  | 'no-disposition';
const SOUND_FRAMINGS: Framing[] = ['ok', 'quoted-boundary', 'preamble', 'epilogue'];
const framingArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom<Framing>('ok', 'quoted-boundary', 'preamble', 'epilogue') },
  {
    weight: 3,
    arbitrary: fc.constantFrom<Framing>(
      'lf',
      'no-close',
      'truncate',
      'no-boundary-param',
      'wrong-boundary',
      'no-disposition',
    ),
  },
);

function buildMultipart(
  parts: PartSpec[],
  framing: Framing,
  boundary: string,
  cut: number,
): { body: Buffer; contentType: string } {
  const nl = framing === 'lf' ? '\n' : '\r\n';
  const chunks: Buffer[] = [];
  if (framing === 'preamble') chunks.push(utf8(`This is the preamble, to be ignored.${nl}`));
  parts.forEach((part, index) => {
    let head = `--${boundary}${nl}`;
    if (!(framing === 'no-disposition' && index === 0)) {
      head += `Content-Disposition: form-data; name="${part.name}"`;
      if (part.filename !== undefined) head += `; filename="${part.filename}"`;
      head += nl;
    }
    if (part.type !== undefined) head += `Content-Type: ${part.type}${nl}`;
    chunks.push(utf8(head + nl), Buffer.from(part.data), utf8(nl));
  });
  if (framing !== 'no-close') chunks.push(utf8(`--${boundary}--${nl}`));
  if (framing === 'epilogue') chunks.push(utf8('This is the epilogue, to be ignored.'));
  let body = Buffer.concat(chunks);
  if (framing === 'truncate') body = body.subarray(0, Math.floor(body.length * cut));
  const declared = framing === 'wrong-boundary' ? `${boundary}x` : boundary;
  const contentType =
    framing === 'no-boundary-param'
      ? 'multipart/form-data'
      : framing === 'quoted-boundary'
        ? `multipart/form-data; boundary="${declared}"`
        : `multipart/form-data; boundary=${declared}`;
  return { body, contentType };
}

const boundaryArb = fc.stringMatching(/^[A-Za-z0-9_-]{1,60}$/);
const goodFilename = fc.oneof(
  fc
    .tuple(
      fc.stringMatching(/^[A-Za-z0-9_-][A-Za-z0-9 _-]{0,20}$/),
      fc.constantFrom(...ALLOWED_EXTENSIONS),
      fc.boolean(),
    )
    .map(([stem, ext, upper]) => stem + (upper ? ext.toUpperCase() : ext)),
  // Over 200 characters: cut before its extension, which is kept.
  fc.constant(`${'a'.repeat(300)}.txt`),
);
const badFilename = fc.oneof(
  fc
    .tuple(
      fc.stringMatching(/^[A-Za-z0-9_-]{1,20}$/),
      fc.constantFrom('.exe', '.png', '.pdf', '.zip', '', '.txt.exe', '.', '.txt%00', '.tx', '.jpeg'),
    )
    .map(([stem, ext]) => stem + ext),
  // Over 200 characters with an "extension" too long to be one: cut through it.
  fc.constantFrom('.', '..', '...', `${'a'.repeat(300)}.${'t'.repeat(40)}`),
);
/** Names whose fate depends on how they are cleaned: no expectation beyond the invariants. */
const oddFilename = fc.constantFrom(
  '',
  '../../etc/passwd.txt',
  'C:\\Users\\me\\notes.md',
  '\u202egpj.txt',
  'a\u0000.txt',
  'файл.md',
  '"quoted".txt',
  'a\r\nX-Injected: 1.txt',
  ' spaced .py ',
  "name; filename*=UTF-8''x.exe",
);
const GOOD_TYPES = [
  'text/plain',
  'text/plain; charset=utf-8',
  'text/x-python',
  'application/json',
  'application/octet-stream',
  'TEXT/PLAIN',
  'application/vnd.example+json',
  'application/xml',
  undefined,
];
const BAD_TYPES = ['image/png', 'application/pdf', 'application/zip', 'video/mp4', 'application/x-msdownload'];

type DataKind = 'good' | 'short' | 'binary' | 'huge';
const HUGE_FILE = Buffer.alloc(10 * MiB + 1, 'a');
const fileDataArb: fc.Arbitrary<{ kind: DataKind; data: Uint8Array }> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc
      .tuple(fc.stringMatching(/^[!-~]{3}$/), printable)
      .map(([a, b]) => ({ kind: 'good' as const, data: utf8(a + b) })),
  },
  { weight: 1, arbitrary: shortText.map((t) => ({ kind: 'short' as const, data: utf8(t) })) },
  {
    weight: 2,
    arbitrary: fc.oneof(
      fc
        .tuple(printable, badBytesArb)
        .map(([t, bad]) => ({ kind: 'binary' as const, data: Buffer.concat([utf8(`abc${t}`), bad]) })),
      fc.constant({ kind: 'binary' as const, data: utf8('abc\u0000def') }),
      // Random bytes, made not to be text when they happen to be.
      fc.uint8Array({ minLength: 1, maxLength: 100 }).map((b) => ({
        kind: 'binary' as const,
        data: textOf(b) === null ? b : Buffer.concat([b, Buffer.from([0])]),
      })),
    ),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'huge' as const, data: HUGE_FILE }) },
);

/** Text fields of a multipart or urlencoded create, as strings, good or bad. */
const formBool = fc.constantFrom('true', 'false', '1', '0', 'yes', 'no', 'on', 'off', 'TRUE', ' on ');
const formFieldArb: fc.Arbitrary<{ name: string; value: string; bad: boolean }> = fc.oneof(
  { weight: 2, arbitrary: printable.map((value) => ({ name: 'title', value, bad: false })) },
  { weight: 1, arbitrary: printable.map((value) => ({ name: 'description', value, bad: false })) },
  { weight: 2, arbitrary: fc.constantFrom(...EXPIRIES).map((value) => ({ name: 'expiry', value, bad: false })) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.constantFrom('burn', 'encrypt', 'downloadable', 'public'), formBool)
      .map(([name, value]) => ({ name, value, bad: name === 'encrypt' && formBooleanValue(value) === true })),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom('python', 'markdown', '').map((value) => ({ name: 'language', value, bad: false })),
  },
  {
    weight: 2,
    arbitrary: fc.oneof(
      fc.constantFrom('1y', 'forever', '').map((value) => ({ name: 'expiry', value, bad: true })),
      fc.constantFrom('maybe', '2', '').map((value) => ({ name: 'burn', value, bad: true })),
      withNul.map((value) => ({ name: 'title', value, bad: true })),
      fc.constantFrom('x'.repeat(501)).map((value) => ({ name: 'description', value, bad: true })),
      goodText.filter((t) => t.length < 1000).map((value) => ({ name: 'content', value, bad: true })),
      fc
        .stringMatching(/^[a-z_]{1,10}$/)
        .filter((n) => !CREATE_FIELDS.has(n))
        .map((name) => ({ name, value: 'x', bad: true })),
      fc.constantFrom('__proto__', 'constructor', 'toString').map((name) => ({ name, value: 'x', bad: true })),
    ),
  },
);

// ---------------------------------------------------------------------------------------------

describe('properties: every endpoint under random and malformed input', () => {
  before(async () => {
    server = await startServer({ env: ENV });
    base = server.url;
    port = Number(new URL(base).port);
    keys.A = await server.createKey({ name: 'owner of the seeded pastes' });
    keys.B = await server.createKey({ name: 'the fuzzer' });
    keys.inactive = await server.createKey({ name: 'deactivated' });
    await server.services.keys.setActive(keys.inactive, false);
    keys.unknown = generateApiKey();
    keyBId = (await server.services.keys.authenticate(keys.B)).id;

    const password = randomBytes(12).toString('hex');
    const createA = async (json: Record<string, unknown>, protectedPaste = false): Promise<void> => {
      const answer = await send({
        method: 'POST',
        path: '/api/v1/paste',
        headers: { 'x-api-key': keys.A, 'content-type': 'application/json' },
        body: utf8(JSON.stringify(json)),
      });
      assert.equal(answer.status, 201, answer.text);
      const data = JSON.parse(answer.text).data;
      seeds.push({
        id: data.paste_id,
        content: json.content as string,
        protected: protectedPaste,
        encrypted: data.encrypted,
        downloadable: data.downloadable,
      });
    };
    await createA({
      content: 'print("héllo, wörld") # 😀\n',
      title: 'seed',
      description: 'a seeded paste',
      language: 'python',
      expiry: 'never',
    });
    await createA({ content: (await encryptForTest('secret one')).wire, encrypt: true });
    await createA({ content: (await encryptForTest('secret two')).wire, encrypt: true, downloadable: true });
    await createA({ content: 'view once, behind a password', password, burn: true }, true);
    await createA({ content: 'behind a password', password }, true);
    await createA({ content: 'a public paste', public: true });
    await createA({ content: 'a paste with a slug', slug: 'seeded-slug_1' });
    // An upload and an anonymous quick-create.
    const upload = buildMultipart(
      [{ name: 'file', filename: 'notes.md', type: 'text/markdown', data: utf8('# Notes\n\nuploaded\n') }],
      'ok',
      'seedboundary',
      1,
    );
    const uploaded = await send({
      method: 'POST',
      path: '/api/v1/paste',
      headers: { 'x-api-key': keys.A, 'content-type': upload.contentType },
      body: upload.body,
    });
    assert.equal(uploaded.status, 201, uploaded.text);
    seeds.push({
      id: JSON.parse(uploaded.text).data.paste_id,
      content: '# Notes\n\nuploaded\n',
      protected: false,
      encrypted: false,
      downloadable: true,
    });
    const anonymous = await send({
      method: 'POST',
      path: '/api/v1/cli',
      headers: { 'content-type': 'text/plain' },
      body: utf8('an anonymous paste\n'),
    });
    assert.equal(anonymous.status, 201, anonymous.text);
    seeds.push({
      id: anonymous.text.trim().split('/').pop() as string,
      content: 'an anonymous paste\n',
      protected: false,
      encrypted: false,
      downloadable: true,
    });
    seedBaseline = await seedSnapshot();
    assert.equal(JSON.parse(seedBaseline).length, seeds.length);
    expectedRows = await rowCount();
  });

  after(async () => {
    const total = [...tried.values()].reduce((sum, n) => sum + n, 0);
    const each = [...tried.entries()].map(([name, n]) => `${name} ${n}`).join(', ');
    console.log(`properties: ${total} inputs tried (${each})`);
    agent.destroy();
    await server?.close();
  });

  /** Checks a 201 of POST /api/v1/paste (or quick-create's JSON answer) against what was sent. */
  async function checkCreated(
    x: Exchange,
    sent: {
      content: string | Uint8Array;
      encrypt?: boolean;
      burn?: boolean;
      downloadable?: boolean;
      key?: string | undefined;
      expiry?: string | undefined;
      slug?: string | undefined;
    },
  ): Promise<string> {
    const body = JSON.parse(x.answer.text);
    assert.equal(body.error, false, x.w);
    assert.equal(typeof body.message, 'string', x.w);
    const data = body.data;
    const encrypt = sent.encrypt ?? false;
    const warning = (sent.downloadable ?? false) && !encrypt;
    const expected = [
      'paste_id',
      'url',
      'raw_url',
      'download_url',
      'expires_at',
      'sha256',
      'burn_after_read',
      'encrypted',
      'downloadable',
      ...(warning ? ['warning'] : []),
    ];
    assert.deepEqual(Object.keys(data).sort(), expected.sort(), x.w);
    const id = data.paste_id as string;
    assert.match(id, /^[A-Za-z0-9_-]{3,69}$/, x.w);
    if (sent.slug) assert.ok(id === sent.slug || new RegExp(`^${sent.slug}-[A-Za-z0-9]{4}$`).test(id), x.w);
    assert.equal(data.url, `${base}/view/${id}${sent.key ? `#${sent.key}` : ''}`, x.w);
    assert.equal(data.raw_url, `${base}/raw/${id}`, x.w);
    const downloadable = encrypt ? (sent.downloadable ?? false) : true;
    assert.equal(data.download_url, downloadable ? `${base}/download/${id}` : null, x.w);
    assert.equal(data.encrypted, encrypt, x.w);
    assert.equal(data.downloadable, downloadable, x.w);
    assert.equal(data.burn_after_read, sent.burn ?? false, x.w);
    const length = EXPIRY_MS[sent.expiry ?? '1d'];
    assert.equal(data.expires_at, length === null ? null : utc(server.clock.now + (length as number)), x.w);
    const bytes = typeof sent.content === 'string' ? utf8(sent.content) : sent.content;
    assert.equal(data.sha256, sha256(bytes), x.w);
    const [row] = await server.sql<{ content: string; sha256: string; file_size: number | string }>(
      `SELECT content, sha256, file_size FROM pastes WHERE id = ${sqlText(id)}`,
    );
    assert.ok(row, x.w);
    assert.ok(row.content === Buffer.from(bytes).toString('utf8'), `the stored content differs: ${x.w}`);
    assert.equal(row.sha256, data.sha256, x.w);
    assert.equal(Number(row.file_size), bytes.length, x.w);
    return id;
  }

  it('POST /api/v1/paste with JSON bodies built field by field: 201 exactly when every rule holds, else the D7 code naming the field', async () => {
    const caseArb = fc.record({
      key: keyArb(['B', 'padded']),
      fields: createFieldsArb,
      content: contentArb(),
      unknown: optionalUnknown,
      contentType: jsonTypeArb,
      style: styleArb,
      chunked: fc.boolean(),
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('create-json', async (c) => {
          const obj: Record<string, unknown> = {};
          const badFields: string[] = [];
          if (c.content.kind !== 'missing') obj.content = c.content.value;
          if (c.content.kind === 'field' || c.content.kind === 'missing') badFields.push('content');
          for (const [name, f] of Object.entries(c.fields) as Array<[string, FieldValue]>) {
            obj[name] = f.value;
            if (f.bad) badFields.push(name);
          }
          for (const [name, value] of Object.entries(c.unknown ?? {})) {
            obj[name] = value;
            badFields.push(name);
          }
          const key = keyHeader(c.key);
          const body = utf8(serialize(obj, jsonStyle(c.content.value, c.style)));
          const x = await exchange(
            {
              method: 'POST',
              path: '/api/v1/paste',
              headers: { ...c.noise, 'content-type': c.contentType, 'x-api-key': key.value },
              body,
              chunked: c.chunked,
            },
            'create',
          );
          // A declared length past the limit is refused before anything else (D17), a chunked one
          // once authenticated, while it is read.
          const tooLong = body.length > JSON_BODY_LIMIT;
          if (tooLong && !c.chunked) return expectAnswer(x, 413, 'content_too_large');
          if (key.cls === 'missing') return expectAnswer(x, 401, 'api_key_missing');
          if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');
          if (tooLong) return expectAnswer(x, 413, 'content_too_large');
          const encrypt = c.fields.encrypt?.value === true;
          if (badFields.length > 0) return expectAnswer(x, 400, 'invalid_request', badFields);
          if (c.content.kind === 'short') return expectAnswer(x, 400, 'content_too_short');
          if (c.content.kind === 'large') return expectAnswer(x, 413, 'content_too_large');
          if (encrypt && c.content.kind === 'cipher' && c.content.valid === undefined) return;
          if (encrypt && !(c.content.kind === 'cipher' && c.content.valid)) {
            return expectAnswer(x, 400, 'invalid_ciphertext', ['content']);
          }
          expectAnswer(x, 201);
          const id = await checkCreated(x, {
            content: c.content.value as string,
            encrypt,
            burn: c.fields.burn?.value === true,
            downloadable: c.fields.downloadable?.value === true,
            key: (c.fields.key?.value as string | null | undefined) || undefined,
            expiry: (c.fields.expiry?.value as string | null | undefined) ?? undefined,
            slug: (c.fields.slug?.value as string | null | undefined) || undefined,
          });
          bPastes.push(id);
        }),
      ),
      runs(250),
    );
  });

  it('POST /api/v1/paste with any bytes under any Content-Type: an envelope, never a 5xx, nothing stored unless 201', async () => {
    const caseArb = fc.record({
      key: keyArb(['B'], 3),
      body: fc.oneof({ weight: 40, arbitrary: chaosBodyArb }, { weight: 1, arbitrary: fc.constant(null) }),
      contentType: fc.oneof({ weight: 2, arbitrary: jsonTypeArb }, { weight: 3, arbitrary: anyTypeArb }),
      encoding: encodingArb,
      chunked: fc.boolean(),
      query: queryArb,
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('create-any-body', async (c) => {
          const body = c.body ?? { bytes: hugeJsonBody(), notUtf8: false };
          const key = keyHeader(c.key);
          const x = await exchange(
            {
              method: 'POST',
              path: `/api/v1/paste${c.query}`,
              headers: {
                ...c.noise,
                'content-type': c.contentType,
                'content-encoding': c.encoding,
                'x-api-key': key.value,
              },
              body: body.bytes,
              chunked: c.chunked,
            },
            'create',
          );
          const declaredTooLarge = !c.chunked && body.bytes.length > JSON_BODY_LIMIT;
          if (encodingPasses(c.encoding) && !declaredTooLarge) {
            if (key.cls === 'missing') return expectAnswer(x, 401, 'api_key_missing');
            if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');
          }
          if (x.answer.status !== 201) {
            // JSON that is not UTF-8 is malformed JSON (RFC 8259): refused, never stored mangled.
            if (body.notUtf8 && JSON_TYPES.includes(c.contentType as string) && encodingPasses(c.encoding)) {
              expectAnswer(x, 400, 'invalid_request');
            }
            return;
          }
          assert.ok(!body.notUtf8, `JSON that is not UTF-8 was stored: ${x.w}`);
          assert.equal(key.cls, 'valid', x.w);
          const sent = JSON.parse(body.bytes.toString('utf8').replace(/^\ufeff/, ''));
          const id = await checkCreated(x, {
            content: sent.content,
            encrypt: sent.encrypt,
            burn: sent.burn,
            downloadable: sent.downloadable,
            key: sent.key || undefined,
            expiry: sent.expiry ?? undefined,
            slug: sent.slug || undefined,
          });
          bPastes.push(id);
        }),
      ),
      runs(200),
    );
  });

  it('POST /api/v1/paste with multipart uploads, well and badly framed: 201 only for one allowed UTF-8 text file, stored exactly', async () => {
    const fileArb = fc.record({
      name: fc.oneof(
        { weight: 8, arbitrary: fc.constant('file') },
        { weight: 1, arbitrary: fc.constantFrom('upload', 'content', 'File', '') },
      ),
      filename: fc.oneof(
        { weight: 8, arbitrary: goodFilename.map((value) => ({ kind: 'good' as const, value })) },
        { weight: 2, arbitrary: badFilename.map((value) => ({ kind: 'bad' as const, value })) },
        { weight: 1, arbitrary: oddFilename.map((value) => ({ kind: 'odd' as const, value })) },
        { weight: 1, arbitrary: fc.constant({ kind: 'none' as const, value: undefined }) },
      ),
      type: fc.oneof(
        { weight: 8, arbitrary: fc.constantFrom(...GOOD_TYPES).map((value) => ({ kind: 'good' as const, value })) },
        { weight: 2, arbitrary: fc.constantFrom(...BAD_TYPES).map((value) => ({ kind: 'bad' as const, value })) },
        {
          weight: 1,
          arbitrary: fc
            .oneof(fc.constantFrom('', 'garbage', 'text', ';'), headerText)
            .map((value) => ({ kind: 'odd' as const, value })),
        },
      ),
      data: fileDataArb,
    });
    const caseArb = fc.record({
      key: keyArb(['B'], 6),
      file: fileArb,
      fields: fc.array(formFieldArb, { maxLength: 4 }),
      filePosition: fc.nat(),
      extraFile: fc.oneof({ weight: 10, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fileArb }),
      framing: framingArb,
      boundary: boundaryArb,
      cut: fc.double({ min: 0, max: 1, noNaN: true }),
      chunked: fc.boolean(),
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('create-multipart', async (c) => {
          const filePart: PartSpec = {
            name: c.file.name,
            filename: c.file.filename.value,
            type: c.file.type.value,
            data: c.file.data.data,
          };
          const parts: PartSpec[] = c.fields.map((f) => ({ name: f.name, data: utf8(f.value) }));
          const position = c.filePosition % (parts.length + 1);
          parts.splice(position, 0, filePart);
          if (c.extraFile) {
            parts.push({
              name: c.extraFile.name,
              filename: c.extraFile.filename.value,
              type: c.extraFile.type.value,
              data: c.extraFile.data.data,
            });
          }
          const { body, contentType } = buildMultipart(parts, c.framing, c.boundary, c.cut);
          const key = keyHeader(c.key);
          const x = await exchange(
            {
              method: 'POST',
              path: '/api/v1/paste',
              headers: { ...c.noise, 'content-type': contentType, 'x-api-key': key.value },
              body,
              chunked: c.chunked,
            },
            'create',
          );
          if (key.cls === 'missing') return expectAnswer(x, 401, 'api_key_missing');
          if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');

          const names = parts.map((p) => p.name);
          const sound = SOUND_FRAMINGS.includes(c.framing) && c.extraFile === null;
          const fieldsGood = c.fields.every((f) => !f.bad) && new Set(names).size === names.length;
          const fileShaped = c.file.name === 'file' && c.file.filename.kind === 'good';
          if (sound && fieldsGood && fileShaped && c.file.type.kind === 'good') {
            if (c.file.data.kind === 'huge') return expectAnswer(x, 413, 'file_too_large');
            if (c.file.data.kind === 'binary') return expectAnswer(x, 400, 'file_type_not_allowed', ['file']);
            if (c.file.data.kind === 'short') return expectAnswer(x, 400, 'content_too_short');
            expectAnswer(x, 201);
          }
          // A file part that comes first is checked before anything else is read (D17).
          if (sound && position === 0 && c.file.name === 'file') {
            if (c.file.filename.kind === 'bad') {
              // A name of only dots is no name once the parser takes its last path part: none sent.
              if (/^\.{1,2}$/.test(c.file.filename.value)) return expectAnswer(x, 400, 'invalid_request', ['file']);
              return expectAnswer(x, 400, 'file_type_not_allowed', ['file']);
            }
            if (c.file.filename.kind === 'good' && c.file.type.kind === 'bad') {
              return expectAnswer(x, 400, 'file_type_not_allowed', ['file']);
            }
          }
          if (x.answer.status !== 201) return;
          // Whatever the framing, a 201 stored one allowed UTF-8 text file named `file`, as sent.
          // (A part without Content-Disposition names nothing: it is skipped.)
          const heard = c.framing === 'no-disposition' ? parts.slice(1) : parts;
          const data = JSON.parse(x.answer.text).data;
          const stored = heard.filter(
            (p) =>
              p.name === 'file' &&
              p.filename !== undefined &&
              textOf(p.data) !== null &&
              sha256(p.data) === data.sha256 &&
              !BAD_TYPES.includes(p.type ?? ''),
          );
          assert.equal(stored.length >= 1, true, `a 201 for no acceptable file part: ${x.w}`);
          assert.ok(!heard.some((p) => p.name === 'content'), `a 201 with a content field: ${x.w}`);
          const file = stored[0] as PartSpec;
          const [row] = await server.sql<{ original_filename: string }>(
            `SELECT original_filename FROM pastes WHERE id = ${sqlText(data.paste_id)}`,
          );
          const storedName = String(row?.original_filename);
          assert.ok(
            ALLOWED_EXTENSIONS.some((ext) => storedName.toLowerCase().endsWith(ext)),
            `a 201 for a file name without an allowed extension: ${x.w}`,
          );
          assert.doesNotMatch(storedName, /[/\\\u0000-\u001f\u007f\u202e]/, `an unsafe stored file name: ${x.w}`);
          const form: Record<string, string> = Object.fromEntries(
            heard.filter((p) => p.filename === undefined).map((p) => [p.name, Buffer.from(p.data).toString('utf8')]),
          );
          const id = await checkCreated(x, {
            content: file.data,
            encrypt: false,
            burn: formBooleanValue(form.burn ?? '') === true,
            downloadable: formBooleanValue(form.downloadable ?? '') === true,
            expiry: form.expiry,
          });
          bPastes.push(id);
        }),
      ),
      runs(200),
    );
  });

  it('GET and HEAD /api/v1/paste/{id} and /raw with any id, key, query and headers: the paste as stored, or the D7 refusal', async () => {
    const caseArb = fc.record({
      method: fc.constantFrom('GET', 'GET', 'HEAD'),
      raw: fc.boolean(),
      id: idArb,
      key: keyArb(['A', 'B', 'padded']),
      query: queryArb,
      password: fc.option(headerText),
      encoding: encodingArb,
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('read-api', async (c) => {
          const target = resolveId(c.id);
          const key = keyHeader(c.key);
          const x = await exchange({
            method: c.method,
            path: `/api/v1/paste/${target.segment}${c.raw ? '/raw' : ''}${c.query}`,
            headers: {
              ...c.noise,
              'x-api-key': key.value,
              'x-paste-password': c.password ?? undefined,
              'content-encoding': c.encoding,
            },
          });
          // Content-Encoding is refused before routing, for any address.
          if (!encodingPasses(c.encoding)) return;
          if (c.id.kind === 'too-long') return expectAnswer(x, 404, 'not_found');
          if (!target.routed) return;
          if (key.cls === 'missing') return expectAnswer(x, 401, 'api_key_missing');
          if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');
          const seed = target.seed;
          if (!seed) return expectAnswer(x, 404, 'not_found');
          if (seed.protected) return expectAnswer(x, 403, 'password_protected');
          expectAnswer(x, 200);
          if (c.method === 'HEAD') return;
          if (c.raw) {
            assert.equal(x.answer.headers['content-type'], 'text/plain; charset=utf-8', x.w);
            assert.ok(x.answer.body.equals(utf8(seed.content)), `raw differs from the stored content: ${x.w}`);
            return;
          }
          const body = JSON.parse(x.answer.text);
          assert.deepEqual(Object.keys(body).sort(), ['data', 'error'], x.w);
          const data = body.data;
          assert.equal(data.paste_id, seed.id, x.w);
          assert.equal(data.content, seed.content, x.w);
          assert.equal(data.sha256, sha256(seed.content), x.w);
          assert.equal(data.file_size, utf8(seed.content).length, x.w);
          assert.equal(data.encrypted, seed.encrypted, x.w);
          assert.equal(data.downloadable, seed.downloadable, x.w);
          assert.equal(data.burned, false, x.w);
          assert.ok(Number.isInteger(data.view_count) && data.view_count >= 0, x.w);
          assert.match(data.created_at, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/, x.w);
        }),
      ),
      runs(200),
    );
  });

  it('PUT and PATCH /api/v1/paste/{id}: only the owner changes only its own paste, every refusal changes nothing', async () => {
    const caseArb = fc.record({
      method: fc.oneof({ weight: 9, arbitrary: fc.constant('PUT') }, { weight: 1, arbitrary: fc.constant('PATCH') }),
      target: targetArb,
      key: keyArb(['A', 'B', 'B', 'padded']),
      fields: updateFieldsArb,
      content: contentArb(6),
      unknown: optionalUnknown,
      createOnly: fc.oneof(
        { weight: 8, arbitrary: fc.constant(null) },
        { weight: 1, arbitrary: fc.constantFrom('public', 'slug') },
      ),
      chaos: fc.oneof({ weight: 6, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: chaosBodyArb }),
      contentType: fc.oneof({ weight: 6, arbitrary: jsonTypeArb }, { weight: 1, arbitrary: anyTypeArb }),
      style: styleArb,
      encoding: encodingArb,
      chunked: fc.boolean(),
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('update', async (c) => {
          const target = resolveTarget(c.target);
          const structured = c.chaos === null && JSON_TYPES.includes(c.contentType as string);
          // Key A sends its own seeded pastes only bodies built to be refused.
          const key = keyHeader(c.key.kind === 'A' && target.seed && !structured ? { ...c.key, kind: 'B' } : c.key);
          const obj: Record<string, unknown> = {};
          const badFields: string[] = [];
          if (c.content.kind !== 'missing') obj.content = c.content.value;
          if (c.content.kind === 'field') badFields.push('content');
          if (c.createOnly) {
            obj[c.createOnly] = c.createOnly === 'public' ? true : 'a-slug_1';
            badFields.push(c.createOnly);
          }
          for (const [name, f] of Object.entries(c.fields) as Array<[string, FieldValue]>) {
            obj[name] = f.value;
            if (f.bad) badFields.push(name);
          }
          for (const [name, value] of Object.entries(c.unknown ?? {})) {
            if (UPDATE_FIELDS.has(name)) continue;
            obj[name] = value;
            badFields.push(name);
          }
          if (c.fields.encrypt !== undefined && !c.fields.encrypt.bad && c.content.kind === 'missing') {
            badFields.push('encrypt');
          }
          if (Object.keys(obj).length === 0) badFields.push('(body)');
          const encrypt = c.fields.encrypt?.value === true;
          const cipherKnownBad =
            c.content.kind === 'ok' ||
            (c.content.kind === 'cipher' && c.content.valid === false) ||
            c.content.kind === 'short' ||
            c.content.kind === 'large';
          const surelyRefused =
            badFields.length > 0 ||
            c.content.kind === 'short' ||
            c.content.kind === 'large' ||
            (encrypt && c.content.kind !== 'missing' && cipherKnownBad);
          if (key.owner === 'A' && target.seed && !surelyRefused) {
            obj.not_a_field = true;
            badFields.push('not_a_field');
          }
          const body = c.chaos ? c.chaos.bytes : utf8(serialize(obj, jsonStyle(c.content.value, c.style)));
          // New content without `encrypt` keeps the paste as it is: what it is before this PUT.
          const [before] = target.b
            ? await server.sql<{ encrypted: number | boolean }>(
                `SELECT encrypted FROM pastes WHERE id = ${sqlText(target.b)}`,
              )
            : [];
          const wasEncrypted = Boolean(Number(before?.encrypted ?? 0));
          const x = await exchange({
            method: c.method,
            path: `/api/v1/paste/${target.segment}`,
            headers: {
              ...c.noise,
              'content-type': c.contentType,
              'content-encoding': c.encoding,
              'x-api-key': key.value,
            },
            body,
            chunked: c.chunked,
          });
          if (x.answer.status === 200) {
            // Success only for key B on its own paste.
            assert.equal(c.method, 'PUT', x.w);
            assert.ok(target.b !== undefined && key.owner === 'B', `a PUT changed a paste it may not: ${x.w}`);
          }
          if (!encodingPasses(c.encoding)) return;
          if (target.kind === 'too-long') return expectRouted(x, c.contentType, 404, 'not_found');
          if (!target.routed) return;
          if (c.method === 'PATCH') {
            // A Content-Type that is not a media type at all may be refused first (400), and a
            // body past the server's default limit (1 MiB: no route, no route limit) with 413.
            if (body.length > MiB && x.answer.status === 413) return;
            if (target.segment.length > 100) return; // see the todo test on 405 at the end
            expectRouted(x, c.contentType, 405, 'method_not_allowed');
            if (x.answer.status === 405) assert.ok(String(x.answer.headers.allow).includes('PUT'), x.w);
            return;
          }
          const tooLong = body.length > JSON_BODY_LIMIT;
          if (tooLong && !c.chunked) return expectAnswer(x, 413, 'content_too_large');
          if (key.cls === 'missing') return expectAnswer(x, 401, 'api_key_missing');
          if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');
          if (tooLong) return;
          if (!structured) return;
          if (target.kind === 'implausible') return expectAnswer(x, 404, 'not_found');
          if (badFields.length > 0) return expectAnswer(x, 400, 'invalid_request', badFields);
          if (c.content.kind === 'short') return expectAnswer(x, 400, 'content_too_short');
          if (c.content.kind === 'large') return expectAnswer(x, 413, 'content_too_large');
          if (encrypt && c.content.kind !== 'missing') {
            if (cipherKnownBad) return expectAnswer(x, 400, 'invalid_ciphertext', ['content']);
            if (c.content.valid === undefined) return;
          }
          if (target.missing) return expectAnswer(x, 404, 'not_found');
          if (target.seed || key.owner !== 'B') return expectAnswer(x, 403, 'forbidden');
          const encryptSent = c.fields.encrypt !== undefined;
          if (c.content.kind !== 'missing' && !encryptSent && wasEncrypted) {
            if (cipherKnownBad) return expectAnswer(x, 400, 'invalid_ciphertext', ['content']);
            if (c.content.valid === undefined) return;
          }
          expectAnswer(x, 200);
          const reply = JSON.parse(x.answer.text);
          assert.deepEqual(Object.keys(reply.data).sort(), ['encrypted', 'paste_id', 'url'], x.w);
          const keyValue = (c.fields.key?.value as string | null | undefined) || undefined;
          assert.equal(reply.data.url, `${base}/view/${target.b}${keyValue ? `#${keyValue}` : ''}`, x.w);
          const [row] = await server.sql<{ content: string; encrypted: number | boolean }>(
            `SELECT content, encrypted FROM pastes WHERE id = ${sqlText(target.b as string)}`,
          );
          assert.equal(reply.data.encrypted, Boolean(Number(row?.encrypted)), x.w);
          if (c.content.kind !== 'missing') {
            assert.equal(row?.content, wellFormed(c.content.value as string), `content not stored: ${x.w}`);
            assert.equal(reply.data.encrypted, encryptSent ? encrypt : wasEncrypted, x.w);
          }
        }),
      ),
      runs(200),
    );
  });

  it('DELETE /api/v1/paste/{id}: only the owner deletes, only its own paste, one row', async () => {
    const caseArb = fc.record({
      target: targetArb,
      key: keyArb(['A', 'B', 'B', 'padded']),
      body: fc.oneof({ weight: 6, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: chaosBodyArb }),
      contentType: anyTypeArb,
      query: queryArb,
      encoding: encodingArb,
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('delete', async (c) => {
          const target = resolveTarget(c.target);
          // Key A's own seeded pastes are the ones that must survive.
          const choice = c.key.kind === 'A' && target.seed ? { ...c.key, kind: 'B' as const } : c.key;
          const key = keyHeader(choice);
          const x = await exchange(
            {
              method: 'DELETE',
              path: `/api/v1/paste/${target.segment}${c.query}`,
              headers: {
                ...c.noise,
                'content-type': c.body ? c.contentType : undefined,
                'content-encoding': c.encoding,
                'x-api-key': key.value,
              },
              ...(c.body ? { body: c.body.bytes } : {}),
            },
            'delete',
          );
          if (x.answer.status === 200) {
            assert.ok(target.b !== undefined && key.owner === 'B', `a DELETE removed a paste it may not: ${x.w}`);
            const body = JSON.parse(x.answer.text);
            assert.deepEqual(body, { error: false, message: body.message }, x.w);
            assert.equal(typeof body.message, 'string', x.w);
            bPastes.splice(bPastes.indexOf(target.b as string), 1);
          }
          if (!encodingPasses(c.encoding)) return;
          if (target.kind === 'too-long') return expectRouted(x, c.contentType, 404, 'not_found');
          if (!target.routed) return;
          if (key.cls === 'missing') return expectAnswer(x, 401, 'api_key_missing');
          if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');
          if (c.body) return;
          if (target.missing) return expectAnswer(x, 404, 'not_found');
          if (target.seed || key.owner !== 'B') return expectAnswer(x, 403, 'forbidden');
          expectAnswer(x, 200);
        }),
      ),
      runs(150),
    );
  });

  it('GET /api/v1/pastes with any query: 200 exactly when page and limit follow D15, with the true pagination', async () => {
    const valueArb = fc.oneof(
      fc.integer({ min: -3, max: 130 }).map(String),
      fc.constantFrom(
        '',
        ' 1',
        '1 ',
        '01',
        '1.0',
        '1e1',
        '0x10',
        '+1',
        '999999999',
        '1000000000',
        '2147483649',
        '9007199254740991',
        '9007199254740992',
        '99999999999999999999',
        'NaN',
        'Infinity',
        '½',
        '١',
        'null',
        '[]',
      ),
      printable,
    );
    const caseArb = fc.record({
      pairs: fc.array(
        fc.tuple(
          fc.oneof(
            { weight: 8, arbitrary: fc.constantFrom('page', 'limit') },
            { weight: 1, arbitrary: fc.constantFrom('Page', 'offset', 'sort', '', 'x') },
          ),
          valueArb,
        ),
        { maxLength: 3 },
      ),
      junk: fc.oneof({ weight: 8, arbitrary: fc.constant('') }, { weight: 1, arbitrary: queryArb }),
      key: keyArb(['B', 'padded'], 6),
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('list', async (c) => {
          const key = keyHeader(c.key);
          const query = c.junk || encodeQuery(c.pairs);
          const x = await exchange({
            method: 'GET',
            path: `/api/v1/pastes${query}`,
            headers: { ...c.noise, 'x-api-key': key.value },
          });
          if (key.cls === 'missing') return expectAnswer(x, 401, 'api_key_missing');
          if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');
          if (c.junk) return;
          const names = c.pairs.map(([n]) => n);
          const value = (name: string) => c.pairs.find(([n]) => n === name)?.[1];
          const whole = (v: string | undefined, max: number) =>
            v === undefined || (/^\d{1,16}$/.test(v) && Number(v) >= 1 && Number(v) <= max);
          const valid =
            names.every((n) => n === 'page' || n === 'limit') &&
            new Set(names).size === names.length &&
            whole(value('page'), Number.MAX_SAFE_INTEGER) &&
            whole(value('limit'), 100);
          if (!valid) return expectAnswer(x, 400, 'invalid_request');
          expectAnswer(x, 200);
          const page = Number(value('page') ?? 1);
          const limit = Number(value('limit') ?? 20);
          const body = JSON.parse(x.answer.text);
          assert.deepEqual(Object.keys(body).sort(), ['data', 'error', 'pagination'], x.w);
          const [row] = await server.sql<{ n: number | string }>(
            `SELECT COUNT(*) AS n FROM pastes WHERE owner_key_id = ${sqlText(keyBId)}`,
          );
          const total = Number(row?.n);
          assert.deepEqual(body.pagination, { page, limit, total, total_pages: Math.ceil(total / limit) }, x.w);
          assert.ok(Array.isArray(body.data), x.w);
          assert.equal(body.data.length, Math.max(0, Math.min(limit, total - (page - 1) * limit)), x.w);
          for (const item of body.data) {
            assert.ok(bPastes.includes(item.paste_id) || !seeds.some((s) => s.id === item.paste_id), x.w);
            assert.equal(item.url, `${base}/view/${item.paste_id}`, x.w);
          }
        }),
      ),
      runs(150),
    );
  });

  it('POST /api/v1/cli with raw, urlencoded and multipart bodies, any parameters: the URL or the envelope, the exact bytes stored', async () => {
    type CliBody =
      | { kind: 'raw'; type: string | undefined; known: boolean; data: { kind: DataKind | 'safe'; bytes: Buffer } }
      | { kind: 'form'; fields: Array<[string, string]>; rawText: string | null }
      | { kind: 'multipart'; parts: PartSpec[]; framing: Framing; boundary: string; cut: number }
      | { kind: 'none' };
    /** Text the anonymous content check lets through (no links, no controls). */
    const safeText = fc.stringMatching(/^[A-Za-z][A-Za-z0-9 .,;:!?'"()-]{2,80}\n?$/);
    const rawDataArb = fc.oneof(
      { weight: 8, arbitrary: safeText.map((t) => ({ kind: 'safe' as const, bytes: utf8(t) })) },
      {
        weight: 3,
        arbitrary: fileDataArb
          .filter((d) => d.kind !== 'huge')
          .map((d) => ({ kind: d.kind, bytes: Buffer.from(d.data) })),
      },
      { weight: 1, arbitrary: fc.constant({ kind: 'huge' as const, bytes: Buffer.from(LARGE_CONTENT[0] as string) }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'safe' as const, bytes: utf8(FOUR_MIB_ASCII) }) },
    );
    const contentField = fc.constantFrom('content', 'paste', 'f:1');
    const bodyArb: fc.Arbitrary<CliBody> = fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          kind: fc.constant('raw' as const),
          type: fc.constantFrom(
            undefined,
            'text/plain',
            'text/plain; charset=utf-8',
            'TEXT/PLAIN',
            'application/octet-stream',
            'application/json',
            'application/json; charset=utf-8',
            'text/x-python',
            'application/xml',
          ),
          known: fc.constant(true),
          data: rawDataArb,
        }),
      },
      {
        weight: 1,
        arbitrary: fc.record({
          kind: fc.constant('raw' as const),
          type: headerText,
          known: fc.constant(false),
          data: rawDataArb,
        }),
      },
      {
        weight: 3,
        arbitrary: fc.record({
          kind: fc.constant('form' as const),
          fields: fc.array(
            fc.tuple(
              fc.oneof(contentField, fc.constantFrom('expiry', 'title', 'lang', 'burn', 'json', 'colour', '')),
              fc.oneof(safeText, printable, fc.constantFrom(...EXPIRIES), formBool),
            ),
            { maxLength: 4 },
          ),
          rawText: fc.option(fc.oneof(safeText, printable), { freq: 3 }),
        }),
      },
      {
        weight: 2,
        arbitrary: fc.record({
          kind: fc.constant('multipart' as const),
          parts: fc.array(
            fc.oneof(
              fc.record({
                name: contentField,
                filename: fc.option(goodFilename, { nil: undefined }),
                type: fc.constantFrom(...GOOD_TYPES),
                data: rawDataArb.map((d) => d.bytes),
              }),
              fc.record({
                name: fc.constantFrom('expiry', 'title', 'lang', 'burn', 'json', 'other'),
                data: fc.oneof(safeText, formBool, fc.constantFrom(...EXPIRIES)).map(utf8),
              }),
            ),
            { minLength: 1, maxLength: 3 },
          ),
          framing: framingArb,
          boundary: boundaryArb,
          cut: fc.double({ min: 0, max: 1, noNaN: true }),
        }),
      },
      { weight: 1, arbitrary: fc.constant({ kind: 'none' as const }) },
    );
    const paramArb = fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom(...EXPIRIES).map((v) => ({ name: 'expiry', value: v, bad: false })) },
      { weight: 2, arbitrary: printable.map((v) => ({ name: 'title', value: v, bad: false })) },
      {
        weight: 2,
        arbitrary: fc.constantFrom('python', 'go', 'markdown').map((v) => ({ name: 'lang', value: v, bad: false })),
      },
      { weight: 2, arbitrary: formBool.map((v) => ({ name: 'burn', value: v, bad: false })) },
      { weight: 2, arbitrary: formBool.map((v) => ({ name: 'json', value: v, bad: false })) },
      {
        weight: 2,
        arbitrary: fc.oneof(
          fc.constantFrom('1y', '').map((v) => ({ name: 'expiry', value: v, bad: true })),
          fc.constantFrom('maybe', '').map((v) => ({ name: 'burn', value: v, bad: true })),
          fc.constantFrom('maybe', '2').map((v) => ({ name: 'json', value: v, bad: true })),
          fc.constantFrom('!!', 'x'.repeat(41)).map((v) => ({ name: 'lang', value: v, bad: true })),
          withNul.map((v) => ({ name: 'title', value: v, bad: true })),
          fc.constantFrom('colour', 'content', 'key', '__proto__').map((n) => ({ name: n, value: 'x', bad: true })),
        ),
      },
    );
    const caseArb = fc.record({
      key: keyArb(['none', 'none', 'B', 'padded'], 6),
      body: bodyArb,
      params: fc.array(paramArb, { maxLength: 3 }),
      accept: fc.option(fc.oneof(fc.constantFrom('application/json', 'text/plain', '*/*', 'text/html'), headerText), {
        nil: undefined,
      }),
      encoding: encodingArb,
      chunked: fc.boolean(),
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('cli-create', async (c) => {
          const key = keyHeader(c.key);
          // No key header, or an empty one (a script's unset variable): quick-create without a key.
          const anonymous = key.cls === 'missing';
          let body: Buffer | undefined;
          let contentType: string | undefined;
          switch (c.body.kind) {
            case 'raw':
              body = c.body.data.bytes;
              contentType = c.body.type;
              break;
            case 'form':
              body = utf8(c.body.rawText ?? new URLSearchParams(c.body.fields).toString());
              contentType = 'application/x-www-form-urlencoded';
              break;
            case 'multipart':
              ({ body, contentType } = buildMultipart(c.body.parts, c.body.framing, c.body.boundary, c.body.cut));
              break;
            case 'none':
              break;
          }
          const query = encodeQuery(c.params.map((p) => [p.name, p.value]));
          const x = await exchange(
            {
              method: 'POST',
              path: `/api/v1/cli${query}`,
              headers: {
                ...c.noise,
                'content-type': contentType,
                'content-encoding': c.encoding,
                accept: c.accept,
                ...(key.value === undefined ? {} : { 'x-api-key': key.value }),
              },
              ...(body ? { body } : {}),
              chunked: c.chunked,
            },
            'create',
          );
          if (!encodingPasses(c.encoding)) return;
          // A declared length past what its kind of body may carry is refused before the key:
          // 4 MB raw, 4 MB and the framing in a multipart form, three times that urlencoded.
          const type = (contentType ?? '').toLowerCase();
          const declaredLimit = type.startsWith('multipart/')
            ? 4 * MiB + 64 * 1024
            : type.startsWith('application/x-www-form-urlencoded')
              ? 12 * MiB + 64 * 1024
              : 4 * MiB;
          if (!c.chunked && body !== undefined && body.length > declaredLimit) {
            return expectAnswer(x, 413, 'content_too_large');
          }
          if (key.cls === 'invalid') return expectAnswer(x, 403, 'api_key_invalid');
          const names = c.params.map((p) => p.name);
          const paramsGood = c.params.every((p) => !p.bad) && new Set(names).size === names.length;
          const jsonParam = c.params.find((p) => p.name === 'json');
          const wantsJson =
            (jsonParam !== undefined && formBooleanValue(jsonParam.value) === true) ||
            (c.accept ?? '').includes('application/json');

          if (c.body.kind === 'raw' && c.body.known) {
            const data = c.body.data;
            if (data.kind === 'huge') return expectAnswer(x, 413, 'content_too_large');
            if (data.kind === 'binary') {
              // D6's length first, whatever the bytes hold (as decoded with U+FFFD for bad bytes).
              const text = data.bytes.toString('utf8');
              if ([...text].length < 3 || /^[\s\p{White_Space}]*$/u.test(text)) {
                return expectAnswer(x, 400, 'content_too_short');
              }
              return anonymous ? expectAnswer(x, 400, 'content_rejected') : expectAnswer(x, 400, 'invalid_request');
            }
            // An empty body without a Content-Type is no body at all: 400 either way.
            if (data.bytes.length === 0 && c.body.type === undefined && !c.chunked) return expectAnswer(x, 400);
            if (!paramsGood) {
              if (data.kind === 'safe' || !anonymous) return expectAnswer(x, 400, 'invalid_request');
            } else if (data.kind === 'short') {
              return expectAnswer(x, 400, 'content_too_short');
            } else if (data.kind === 'safe' || !anonymous) {
              // D18: any content type but the two form types is the raw content, JSON included.
              expectAnswer(x, 201);
            }
          }
          if (x.answer.status !== 201) return;
          // JSON on `Accept: application/json` or json=1 (from the query, or the form).
          let id: string;
          const jsonAnswer = String(x.answer.headers['content-type']).startsWith('application/json');
          if (wantsJson) assert.ok(jsonAnswer, `JSON was asked for: ${x.w}`);
          if (jsonAnswer) {
            const reply = JSON.parse(x.answer.text);
            assert.equal(reply.error, false, x.w);
            assert.equal(reply.data.url, `${base}/view/${reply.data.paste_id}`, x.w);
            id = reply.data.paste_id;
          } else {
            assert.equal(x.answer.headers['content-type'], 'text/plain; charset=utf-8', x.w);
            const match = new RegExp(`^${base.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}/view/([A-Za-z0-9_-]+)\\n$`).exec(
              x.answer.text,
            );
            assert.ok(match, `not "<base>/view/<id>\\n": ${x.w}`);
            id = match[1] as string;
          }
          const [row] = await server.sql<{ content: string; owner_key_id: string | null; source: string }>(
            `SELECT content, owner_key_id, source FROM pastes WHERE id = ${sqlText(id)}`,
          );
          assert.ok(row, x.w);
          assert.equal(row.source, 'cli', x.w);
          assert.equal(row.owner_key_id, anonymous ? null : keyBId, x.w);
          if (c.body.kind === 'raw' && c.body.known) {
            assert.ok(row.content === c.body.data.bytes.toString('utf8'), `the stored content is not the body: ${x.w}`);
          }
          if (!anonymous) bPastes.push(id);
        }),
      ),
      runs(250),
    );
  });

  it('the web pages, /raw, /download, /archive, /sitemap.xml, /static and GET /api/v1/cli with any method, id, query and headers', async () => {
    type Route = 'home' | 'view' | 'raw' | 'download' | 'archive' | 'sitemap' | 'static' | 'cli' | 'healthz' | 'random';
    const caseArb = fc.record({
      method: fc.oneof(
        { weight: 8, arbitrary: fc.constantFrom('GET', 'HEAD') },
        { weight: 3, arbitrary: fc.constant('POST') },
        { weight: 2, arbitrary: fc.constantFrom('PUT', 'DELETE', 'PATCH', 'OPTIONS') },
      ),
      route: fc.constantFrom<Route>(
        'home',
        'view',
        'view',
        'raw',
        'raw',
        'download',
        'download',
        'archive',
        'sitemap',
        'static',
        'cli',
        'healthz',
        'random',
      ),
      id: idArb,
      query: queryArb,
      archivePage: fc.oneof(
        fc.constant(undefined),
        fc.integer({ min: 0, max: 1_000_000 }).map(String),
        fc.constantFrom('', '-1', '1.5', 'x', '01', '9999999', '1e3', ' 2'),
      ),
      staticFile: fc.constantFrom('view.js', 'style.css', 'nope.js', '..%2Fapp.ts', '%2e%2e', 'VIEW.JS'),
      randomPath: fc.array(fc.oneof(junkSegment, fc.constantFrom('api', 'v1', 'paste', 'view', 'raw', 'cli')), {
        minLength: 1,
        maxLength: 4,
      }),
      accept: fc.option(
        fc.oneof(
          fc.constantFrom('text/html,application/xhtml+xml,*/*;q=0.8', 'application/json', '*/*', 'text/plain'),
          headerText,
        ),
        {
          nil: undefined,
        },
      ),
      password: fc.option(headerText, { nil: undefined }),
      form: fc.array(
        fc.tuple(fc.constantFrom('confirm', 'password', 'x', 'confirm'), fc.oneof(printable, fc.constantFrom('', '1'))),
        {
          maxLength: 3,
        },
      ),
      formType: fc.oneof(
        { weight: 6, arbitrary: fc.constant('application/x-www-form-urlencoded') },
        { weight: 1, arbitrary: anyTypeArb },
      ),
      encoding: encodingArb,
      noise: noiseArb,
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('web', async (c) => {
          const target = resolveId(c.id);
          let path: string;
          switch (c.route) {
            case 'home':
              path = `/${c.query}`;
              break;
            case 'view':
            case 'raw':
            case 'download':
              path = `/${c.route}/${target.segment}${c.query}`;
              break;
            case 'archive':
              path = c.archivePage === undefined ? '/archive' : `/archive?page=${encodeURIComponent(c.archivePage)}`;
              break;
            case 'sitemap':
              path = '/sitemap.xml';
              break;
            case 'static':
              path = `/static/${c.staticFile}`;
              break;
            case 'cli':
              path = `/api/v1/cli${c.query}`;
              break;
            case 'healthz':
              path = '/healthz';
              break;
            case 'random':
              path = `/${c.randomPath.join('/')}${c.query}`;
              break;
          }
          const withBody = c.method === 'POST' || c.method === 'PUT';
          const formBody = utf8(new URLSearchParams(c.form).toString());
          // A POST to a random path may reach quick-create, which creates anonymously.
          const x = await exchange(
            {
              method: c.method,
              path,
              headers: {
                ...c.noise,
                accept: c.accept,
                'x-paste-password': c.password,
                'content-encoding': c.encoding,
                'content-type': withBody ? c.formType : undefined,
              },
              ...(withBody ? { body: formBody } : {}),
            },
            c.method === 'POST' ? 'create' : 'none',
          );
          const status = x.answer.status;
          const type = String(x.answer.headers['content-type'] ?? '');
          if (!encodingPasses(c.encoding)) return;
          const read = c.method === 'GET' || c.method === 'HEAD';
          const idRoute = c.route === 'view' || c.route === 'raw' || c.route === 'download';
          if (idRoute && c.id.kind === 'too-long') {
            if (withBody && c.formType !== 'application/x-www-form-urlencoded' && status === 400) return;
            return expectAnswer(x, 404);
          }
          if (idRoute && !target.routed) return;
          if (c.route === 'random') return;
          if (c.route === 'home' && c.method === 'POST') {
            // The home page's form (D10 source web): these forms never carry `content` (or carry
            // fields it does not know), so the create is refused, 400, or the address's
            // anonymous budget is spent, 429. Never a paste, never 5xx.
            assert.ok(status === 400 || status === 429, x.w);
            if (status === 400) expectAnswer(x, 400, 'invalid_request');
            return;
          }
          if (!read && !(c.route === 'view' && c.method === 'POST')) {
            // Known addresses, wrong method: 405 naming the methods allowed (D7). A body in a
            // Content-Type that cannot be parsed may be refused first.
            // (Ids past 100 characters are left out: see the todo test at the end.)
            const wellTyped = !withBody || c.formType === 'application/x-www-form-urlencoded';
            const shortPath = !idRoute || target.segment.length <= 100;
            if (!(c.route === 'cli' && c.method === 'POST') && wellTyped && shortPath) {
              expectAnswer(x, 405, 'method_not_allowed');
            }
            return;
          }
          if (c.route === 'home' && c.query === '') {
            expectAnswer(x, 200);
            assert.match(type, /^text\/html; charset=utf-8/, x.w);
          } else if (c.route === 'sitemap') {
            expectAnswer(x, 200);
            assert.match(type, /^application\/xml/, x.w);
          } else if (c.route === 'healthz') {
            expectAnswer(x, 200);
          } else if (c.route === 'static') {
            if (['view.js', 'style.css'].includes(c.staticFile)) expectAnswer(x, 200);
            else expectAnswer(x, 404);
          } else if (c.route === 'cli') {
            // The switch given twice, or not a boolean, is a refusal (as on POST), anything else the usage.
            const switches = new URLSearchParams(c.query).getAll('json');
            if (switches.length > 1) return expectAnswer(x, 400, 'invalid_request');
            if (switches.length === 1 && formBooleanValue(switches[0] as string) === undefined) {
              return expectAnswer(x, 400, 'invalid_request');
            }
            expectAnswer(x, 200);
            if (c.method === 'GET') {
              if (type.startsWith('application/json')) {
                const body = JSON.parse(x.answer.text);
                assert.equal(body.error, false, x.w);
                assert.equal(body.data.endpoint, `${base}/api/v1/cli`, x.w);
              } else {
                assert.equal(type, 'text/plain; charset=utf-8', x.w);
                assert.ok(x.answer.text.includes(`${base}/api/v1/cli`), x.w);
              }
            }
          } else if (c.route === 'archive') {
            const page = c.archivePage;
            if (page === undefined || (/^\d{1,6}$/.test(page) && Number(page) >= 1)) expectAnswer(x, 200);
            else expectAnswer(x, 400);
          } else if (idRoute) {
            const seed = target.seed;
            if (c.method === 'POST') {
              // The id, then the confirmation, then the paste (D11: nothing read unconfirmed).
              if (c.formType !== 'application/x-www-form-urlencoded') return;
              if (c.id.kind === 'implausible') return expectAnswer(x, 404);
              if (c.form.filter(([n]) => n === 'confirm').length !== 1) return expectAnswer(x, 400);
            }
            if (!seed) return expectAnswer(x, 404);
            if (c.route === 'view' && c.method === 'POST') {
              if (seed.protected) {
                assert.ok(status === 403 || status === 429, x.w);
                assert.match(type, /^text\/html/, x.w);
                return;
              }
              expectAnswer(x, 200);
              assert.match(type, /^text\/html; charset=utf-8/, x.w);
              return;
            }
            if (c.route === 'view') {
              // A protected or view-once paste shows the gate page, and consumes nothing.
              expectAnswer(x, 200);
              assert.match(type, /^text\/html; charset=utf-8/, x.w);
              return;
            }
            if (c.route === 'download' && seed.encrypted && !seed.downloadable)
              return expectAnswer(x, 403, 'not_downloadable');
            if (seed.protected) {
              const given = httpTrim(c.password ?? '');
              if (given === '') return expectAnswer(x, 403, 'password_protected');
              assert.ok(status === 403 || status === 429, x.w);
              if (x.envelope) assert.ok(['wrong_password', 'too_many_attempts'].includes(x.envelope.code), x.w);
              return;
            }
            expectAnswer(x, 200);
            assert.equal(type, 'text/plain; charset=utf-8', x.w);
            if (c.method === 'GET')
              assert.ok(x.answer.body.equals(utf8(seed.content)), `not the stored content: ${x.w}`);
            if (c.route === 'download') {
              assert.match(String(x.answer.headers['content-disposition']), /^attachment;/, x.w);
            }
          }
        }),
      ),
      runs(300),
    );
  });

  it('malformed HTTP itself (bad request lines, header bytes, framing, Expect): an answer in time, never 5xx, a D7 envelope', {}, async () => {
    const lineArb = fc.oneof(
      fc.constantFrom(
        'GET / HTTP/1.1',
        'GET /api/v1/pastes HTTP/1.1',
        'POST /api/v1/cli HTTP/1.1',
        'GET /raw/abc HTTP/1.0',
        'GET /raw/\xff\xfe HTTP/1.1',
        'GET /raw/a b HTTP/1.1',
        'get / HTTP/1.1',
        'GET / HTTP/9.9',
        'GET /',
        'GET http://evil.example/ HTTP/1.1',
        '\x00GET / HTTP/1.1',
        'BREW /coffee HTTP/1.1',
        `GET /${'a'.repeat(20_000)} HTTP/1.1`,
      ),
      fc.string({ unit: 'binary-ascii', maxLength: 40 }),
    );
    const headerLineArb = fc.oneof(
      fc.constantFrom(
        'Host: x',
        'Bad Header: y',
        'X-Api-Key: \x00',
        ' folded: line',
        'Content-Length: 5',
        'Content-Length: -1',
        'Content-Length: 1, 2',
        'Transfer-Encoding: chunked',
        'Transfer-Encoding: gzip, chunked',
        'Expect: 100-continue',
        'Expect: the unexpected',
        'Content-Type: text/plain',
        'Content-Encoding: gzip',
        `X-Big: ${'b'.repeat(20_000)}`,
        'Connection: upgrade',
        'Upgrade: websocket',
      ),
      fc.string({ unit: 'binary-ascii', maxLength: 30 }),
    );
    const caseArb = fc.record({
      line: lineArb,
      headers: fc.array(headerLineArb, { maxLength: 4 }),
      body: fc.oneof(
        fc.constant(''),
        fc.constantFrom('0\r\n\r\n', 'zz\r\nhello\r\n0\r\n\r\n', 'hello'),
        fc.string({ unit: 'binary-ascii', maxLength: 40 }),
      ),
      lf: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(
        caseArb,
        counted('protocol', async (c) => {
          const rowsBefore = await rowCount();
          const nl = c.lf ? '\n' : '\r\n';
          const request = Buffer.from(
            `${c.line}${nl}${[...c.headers, 'Connection: close'].join(nl)}${nl}${nl}${c.body}`,
            'latin1',
          );
          const reply = await new Promise<Buffer>((resolve, reject) => {
            const socket = net.connect(port, '127.0.0.1');
            const chunks: Buffer[] = [];
            const timer = setTimeout(() => {
              socket.destroy();
              reject(
                new Error(
                  `no answer, connection still open after 5 s: ${JSON.stringify(request.toString('latin1').slice(0, 200))}`,
                ),
              );
            }, 5_000);
            socket.on('data', (chunk) => chunks.push(chunk));
            socket.on('error', () => {});
            socket.on('close', () => {
              clearTimeout(timer);
              resolve(Buffer.concat(chunks));
            });
            socket.end(request);
          });
          const text = reply.toString('latin1');
          const w = `${JSON.stringify(request.toString('latin1').slice(0, 200))} → ${JSON.stringify(text.slice(0, 300))}`;
          // A random request may be a valid quick-create (POST /api/v1/cli with a body): each 201
          // answered is one more paste, and nothing else changes the number.
          const created = (text.match(/HTTP\/1\.[01] 201 /g) ?? []).length;
          const delta = (await rowCount()) - rowsBefore;
          assert.equal(delta, created, `the number of pastes changed by ${delta} for ${created} answers 201: ${w}`);
          expectedRows += created;
          assert.equal(await seedSnapshot(), seedBaseline, `a seeded paste changed: ${w}`);
          if (text === '') return;
          const status = /^HTTP\/1\.[01] (\d{3}) /.exec(text);
          assert.ok(status, `not an HTTP answer: ${w}`);
          assert.ok(Number(status[1]) < 500, `server error: ${w}`);
          const split = text.indexOf('\r\n\r\n');
          const head = text.slice(0, split);
          // An empty header line among the random ones ends the request early, and what follows
          // is a second request with an answer of its own: only the first answer's body is read.
          const length = /content-length: (\d+)/i.exec(head);
          const body = text.slice(split + 4, length ? split + 4 + Number(length[1]) : undefined);
          if (Number(status[1]) >= 400 && !/^HEAD /.test(c.line)) {
            assert.match(head, /content-type: application\/json|content-type: text\/html/i, `no envelope: ${w}`);
            if (/content-type: application\/json/i.test(head) && !/transfer-encoding: chunked/i.test(head)) {
              const parsed = JSON.parse(Buffer.from(body, 'latin1').toString('utf8'));
              assert.equal(parsed.error, true, `not a D7 envelope: ${w}`);
              assert.equal(typeof parsed.code, 'string', `not a D7 envelope: ${w}`);
            }
          }
        }),
      ),
      runs(100),
    );
  });

  it("content within D6 sent as ASCII-escaped JSON (json.dumps' default) is accepted, whatever its size", {}, async () => {
    const content = 'é'.repeat(2 * MiB);
    const x = await exchange(
      {
        method: 'POST',
        path: '/api/v1/paste',
        headers: { 'content-type': 'application/json', 'x-api-key': keys.B },
        body: utf8(serialize({ content }, 'ascii')),
      },
      'create',
    );
    expectAnswer(x, 201);
    bPastes.push(await checkCreated(x, { content }));
  });

  it('a wrong method on a known address is 405 whatever the length of the id the router accepts (up to 200)', {}, async () => {
    for (const length of [100, 101, 200]) {
      const x = await exchange({ method: 'PUT', path: `/raw/${'a'.repeat(length)}` });
      expectAnswer(x, 405, 'method_not_allowed');
    }
  });

  it('afterwards, the seeded pastes read back byte-identical and the number of pastes is exactly what the 201s and 200s account for', async () => {
    assert.equal(await seedSnapshot(), seedBaseline);
    assert.equal(await rowCount(), expectedRows);
    for (const seed of seeds) {
      const raw = await send({ method: 'GET', path: `/raw/${seed.id}` });
      if (seed.protected) {
        assert.equal(raw.status, 403, raw.text);
        continue;
      }
      assert.equal(raw.status, 200, raw.text);
      assert.equal(sha256(raw.body), sha256(seed.content));
      const detail = await send({ method: 'GET', path: `/api/v1/paste/${seed.id}`, headers: { 'x-api-key': keys.A } });
      assert.equal(detail.status, 200, detail.text);
      const data = JSON.parse(detail.text).data;
      assert.equal(data.content, seed.content);
      assert.equal(data.sha256, sha256(seed.content));
    }
  });
});

describe('properties: timestamps (D3)', () => {
  it('formatTimestamp writes every instant as the ISO form does, to the second', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 253_402_300_799_999 }), (ms) => {
        assert.equal(formatTimestamp(ms), new Date(ms).toISOString().slice(0, 19).replace('T', ' '));
      }),
      { numRuns: 20_000 },
    );
  });
});

describe('properties: view counts kept off the heap', () => {
  // Ids from a small alphabet (so they collide and share prefixes), slugs, and a few that are not
  // ASCII (the table's rare path); the table starts tiny so that it grows many times.
  const id = fc.oneof(
    fc.stringMatching(/^[ab0-9_-]{1,12}$/),
    fc.stringMatching(/^[A-Za-z0-9]{10}$/),
    fc.constantFrom('aé', 'a€b', '日本', 'a', 'ab', 'abc', 'abcd', 'abcde'),
  );
  const op = fc.oneof(
    fc.record({ add: id, n: fc.integer({ min: 1, max: 5 }), createdAt: fc.integer({ min: 1, max: 4 }) }),
    fc.record({ get: id }),
    fc.record({ forget: id, createdAt: fc.integer({ min: 1, max: 4 }) }),
    fc.record({ clear: fc.constant(true) }),
  );

  it('ViewTable orders thousands of ids that share a prefix, and shrinks after a burst', () => {
    const table = new ViewTable();
    const byBytes = (a: [string, number], b: [string, number]) => Buffer.compare(Buffer.from(a[0]), Buffer.from(b[0]));
    const listed = () =>
      [...table.sortedSlots()].map((slot): [string, number] => [table.idAt(slot), table.countAt(slot)]);
    const burst = new Map<string, number>();
    for (let i = 0; i < 5_000; i++) {
      const id = `my-${randomBytes(6).toString('base64url')}`;
      burst.set(id, (burst.get(id) ?? 0) + 1 + (i % 3));
      table.add(id, 1 + (i % 3), 1);
    }
    assert.deepEqual(listed(), [...burst].sort(byBytes));
    for (let round = 0; round < 4; round++) {
      table.clear();
      const few = new Map<string, number>();
      for (let i = 0; i < 100; i++) {
        const id = `my-${round}-${i}`;
        few.set(id, i + 1);
        assert.equal(table.add(id, i + 1, 1), i + 1);
      }
      assert.equal(table.get('my-0-0'), round === 0 ? 1 : 0);
      assert.deepEqual(listed(), [...few].sort(byBytes));
    }
  });

  it("ViewTable counts as a Map does, one paste an id (a later one starts afresh, an earlier one's late views dropped), forgets a paste's counts (not a newer one's), and lists its ids in the byte order of their UTF-8", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400, size: 'max' }), (ops) => {
        const table = new ViewTable(16);
        const model = new Map<string, [number, number]>();
        for (const o of ops) {
          if ('add' in o) {
            // One paste a slot: a later paste's first views start it afresh, an earlier one's are dropped.
            const held = model.get(o.add);
            if (held && o.createdAt < held[1]) {
              assert.equal(table.add(o.add, o.n, o.createdAt), 0);
              continue;
            }
            const want = (held && held[1] === o.createdAt ? held[0] : 0) + o.n;
            model.set(o.add, [want, o.createdAt]);
            assert.equal(table.add(o.add, o.n, o.createdAt), want);
          } else if ('get' in o) {
            const [count, createdAt] = model.get(o.get) ?? [0, 0];
            assert.equal(table.get(o.get), count);
            assert.equal(table.get(o.get, createdAt), count, 'its own paste');
            assert.equal(table.get(o.get, createdAt + 1), 0, "another paste's");
          } else if ('forget' in o) {
            // Only the counts of the paste made then: not a newer one's under the id.
            table.forget(o.forget, o.createdAt);
            const kept = model.get(o.forget);
            if (kept && kept[1] === o.createdAt) model.set(o.forget, [0, kept[1]]);
          } else {
            table.clear();
            model.clear();
          }
        }
        assert.equal(table.size, model.size);
        const listed = [...table.sortedSlots()].map((slot) => [
          table.idAt(slot),
          [table.countAt(slot), table.createdAtOf(slot)],
        ]);
        const want = [...model].sort((a, b) => Buffer.compare(Buffer.from(a[0]), Buffer.from(b[0])));
        assert.deepEqual(listed, want);
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('properties: urlencoded forms', () => {
  it('parse as URLSearchParams does, and name exactly the fields whose escapes decode to bytes that are not UTF-8', () => {
    const piece = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 6 }),
      fc.constantFrom('%', '+', '=', '&', '%2', '%zz', '%41', '%C3%A9', '%E9', '%FF%FE', '%F0%9F%98', '%2B', '%25'),
    );
    // An independent decoding of each name and value to bytes (Node's own unescapeBuffer), fed
    // one character a byte (the text's UTF-8 as latin1), as a body comes.
    const toBytes = (querystring as unknown as { unescapeBuffer(s: string, spaces: boolean): Buffer }).unescapeBuffer;
    const lenient = new TextDecoder('utf-8', { ignoreBOM: true });
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 12 }), (pieces) => {
        const text = pieces.join('');
        const parsed = parseUrlEncoded(Buffer.from(text, 'utf8'));
        const expected: Record<string, string | string[]> = {};
        const notUtf8 = new Set<string>();
        for (const pair of Buffer.from(text, 'utf8').toString('latin1').split('&')) {
          if (pair === '') continue;
          const at = pair.indexOf('=');
          const [nameBytes, valueBytes] = (at < 0 ? [pair, ''] : [pair.slice(0, at), pair.slice(at + 1)]).map((part) =>
            toBytes(part, true),
          ) as [Buffer, Buffer];
          const [name, value] = [lenient.decode(nameBytes), lenient.decode(valueBytes)];
          if (!isUtf8(nameBytes) || !isUtf8(valueBytes)) notUtf8.add(name);
          const previous = expected[name];
          expected[name] = previous === undefined ? value : [previous, value].flat();
        }
        assert.deepEqual({ ...parsed.fields }, expected);
        assert.deepEqual([...parsed.notUtf8].sort(), [...notUtf8].sort());
        // As the platform's own parser reads it, but where Node 20's URLSearchParams goes wrong:
        // after escapes that are not UTF-8 ('a=%F0%9F%98◂' gives four U+FFFD, '◂' lost), and
        // in a text that is not ASCII after a `%` that starts no escape ('%ϙ%C3%A9' gives
        // '%\ufffdé', '%(𒊿%2B' gives '%(\b\ufffd+').
        const loneEscape = /%(?![0-9A-Fa-f]{2})/.test(text) && /[^\x00-\x7f]/.test(text);
        if (notUtf8.size === 0 && !loneEscape) {
          const platform: Record<string, string | string[]> = {};
          // URLSearchParams's constructor drops a leading '?' (a query's), which a form body has
          // not: behind '&', an empty pair, it is read as a body's first character.
          for (const [name, value] of new URLSearchParams(`&${text}`)) {
            const previous = platform[name];
            platform[name] = previous === undefined ? value : [previous, value].flat();
          }
          assert.deepEqual({ ...parsed.fields }, platform);
        }
      }),
      { numRuns: 3000 },
    );
  });
});
