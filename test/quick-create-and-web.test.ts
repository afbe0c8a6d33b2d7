/**
 * Quick-create (POST/GET /api/v1/cli, D18), its keys and switches (Authentication, D2), the public
 * pages (/view, /raw, /download, /archive, /sitemap.xml: D11, D13, D16, D22), the security
 * headers, the error envelope through HTTP (D7) and TRUST_PROXY (D2). Every test talks to a real
 * server on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { gzipSync } from 'node:zlib';
import { browserLanguages } from '../src/http/web/browser-highlighter.js';
import { PAGE_TEXT_MAX } from '../src/http/web/pages.js';
import { generateApiKey } from '../src/keys/api-key-format.js';
import { parseCreateInput } from '../src/pastes/paste-input.js';
import { encryptForTest, expectError, request, sqlText, startServer, type TestServer } from './helpers.js';

const BASE = 'https://paste.example.test';
const MiB = 1_048_576;
/** Quick-create is anonymous in most tests here: a per-address limit must not get in the way. */
const ENV = { BASE_URL: BASE, ANON_HOURLY_LIMIT: '1000000' };

type Result = Awaited<ReturnType<typeof request>>;

/** The id in a quick-create answer `<BASE_URL>/view/<id>\n`; fails on any other shape. */
function idFromTextAnswer(result: Result, base = BASE): string {
  assert.equal(result.status, 201, `expected 201, got ${result.status}: ${result.text}`);
  assert.match(result.headers.get('content-type') ?? '', /^text\/plain/);
  const escaped = base.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  const match = new RegExp(`^${escaped}/view/([A-Za-z0-9_-]+)\\n$`).exec(result.text);
  assert.ok(match, `not "<base_url>/view/<id>\\n": ${JSON.stringify(result.text)}`);
  return match[1] as string;
}

function toUtc(timestamp: string): number {
  assert.match(timestamp, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
  return Date.parse(`${timestamp.replace(' ', 'T')}Z`);
}

/** Every header of a security-relevant answer (pages, API, raw, errors). */
function assertSecurityHeaders(result: { headers: Headers }, what: string): void {
  const csp = result.headers.get('content-security-policy');
  assert.ok(csp, `${what}: no Content-Security-Policy`);
  assert.match(csp, /frame-ancestors 'none'/, `${what}: CSP without frame-ancestors 'none'`);
  assert.doesNotMatch(csp, /unsafe-inline/, `${what}: CSP allows unsafe-inline`);
  assert.equal(result.headers.get('referrer-policy'), 'no-referrer', `${what}: Referrer-Policy`);
  assert.equal(result.headers.get('x-content-type-options'), 'nosniff', `${what}: X-Content-Type-Options`);
}

function allowOf(result: Result): string[] {
  return (result.headers.get('allow') ?? '')
    .split(',')
    .map((m) => m.trim().toUpperCase())
    .filter(Boolean)
    .sort();
}

/** The file name of a `Content-Disposition: attachment` header (quoted or a bare token). */
function filenameOf(result: Result): string | undefined {
  const header = result.headers.get('content-disposition') ?? '';
  assert.match(header, /^attachment\s*;/i, `not an attachment: ${header}`);
  const match = /;\s*filename=(?:"([^"]*)"|([^;\s]+))/i.exec(header);
  return match?.[1] ?? match?.[2];
}

/** The text a browser would show: tags (such as highlighting spans) removed, entities decoded. */
function textOf(html: string): string {
  return html
    .replace(/<[^>]*>/g, '')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&amp;/g, '&');
}

/** POSTs `total` bytes in 64 KiB chunks without Content-Length, stopping as soon as an answer comes. */
function streamLargeBody(
  url: string,
  total: number,
): Promise<{ status: number | undefined; written: number; body: string; error: string | undefined }> {
  return new Promise((resolve) => {
    const target = new URL(url);
    const chunk = Buffer.alloc(64 * 1024, 'a');
    let written = 0;
    let stopped = false;
    let status: number | undefined;
    let body = '';
    let error: string | undefined;
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      resolve({ status, written, body, error });
    };
    const timer = setTimeout(() => {
      error = 'timed out';
      finish();
    }, 30_000);
    const req = http.request({
      host: target.hostname,
      port: target.port,
      path: target.pathname + target.search,
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
    });
    req.on('response', (res) => {
      status = res.statusCode;
      stopped = true;
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', finish);
      res.on('error', finish);
    });
    req.on('error', (err) => {
      stopped = true;
      error = err.message;
      // Give a response that is already on its way a moment to be parsed.
      setTimeout(finish, 200);
    });
    req.on('close', () => setTimeout(finish, 200));
    const pump = () => {
      while (!stopped && written < total) {
        written += chunk.length;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      if (!stopped) req.end();
    };
    pump();
  });
}

describe('quick-create, web pages and HTTP rules', () => {
  let server: TestServer;
  let key: string;
  let otherKey: string;

  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey({ name: 'owner' });
    otherKey = await server.createKey({ name: 'other' });
  });
  after(() => server.close());

  const cli = (query = '', init: Parameters<typeof request>[1] = {}) =>
    request(`${server.url}/api/v1/cli${query}`, { method: 'POST', ...init });
  /** The detail through the API (consumes a burn paste). */
  const detail = async (id: string) => {
    const read = await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } });
    assert.equal(read.status, 200, `GET /api/v1/paste/${id}: ${read.text}`);
    return read.body.data;
  };
  const apiCreate = async (json: Record<string, unknown>, apiKey = key) => {
    const created = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': apiKey },
      json,
    });
    assert.equal(created.status, 201, `POST /api/v1/paste: ${created.text}`);
    return created.body.data.paste_id as string;
  };
  const listIds = async (apiKey: string): Promise<string[]> => {
    const list = await request(`${server.url}/api/v1/pastes?limit=100`, { headers: { 'x-api-key': apiKey } });
    assert.equal(list.status, 200);
    return list.body.data.map((item: { paste_id: string }) => item.paste_id);
  };
  const pasteRow = async (id: string): Promise<Record<string, unknown> | undefined> =>
    (await server.sql(`SELECT * FROM pastes WHERE id = ${sqlText(id)}`))[0];
  const pasteCount = async (): Promise<number> =>
    Number((await server.sql<{ n: number }>('SELECT count(*) AS n FROM pastes'))[0]?.n);

  describe('POST /api/v1/cli: content', () => {
    it('keeps = and & of a text/plain raw body exactly', async () => {
      const content = 'a=1&b=2&c\nx+y%20z=&&==\n  ünïcode ✓\n';
      const id = idFromTextAnswer(await cli('', { headers: { 'content-type': 'text/plain' }, body: content }));
      const data = await detail(id);
      assert.equal(data.content, content);
      assert.equal(data.content_type, 'text');
    });

    it('takes a curl --data-binary body (urlencoded, no content field) as the raw content, as sent', async () => {
      const content = 'key=value&other=1 2+3%20four\nnext=line&x';
      const id = idFromTextAnswer(
        await cli('', { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: content }),
      );
      assert.equal((await detail(id)).content, content);
    });

    it('takes the content from an urlencoded field content, paste or f:1', async () => {
      for (const field of ['content', 'paste', 'f:1']) {
        const content = `from ${field}: a=b&c=d + %41`;
        const id = idFromTextAnswer(await cli('', { body: new URLSearchParams({ [field]: content }) }));
        const data = await detail(id);
        assert.equal(data.content, content, field);
        assert.equal(data.content_type, 'text', field);
      }
    });

    it('takes the content from a multipart field content, paste or f:1, and from f:1 as a file part', async () => {
      for (const field of ['content', 'paste', 'f:1']) {
        const form = new FormData();
        const content = `multipart ${field}: a=b&c=d`;
        form.append(field, content);
        const id = idFromTextAnswer(await cli('', { body: form }));
        const data = await detail(id);
        assert.equal(data.content, content, field);
        assert.equal(data.content_type, 'text', field);
      }
      const form = new FormData();
      const content = 'file part content\nwith = and & kept\n';
      form.append('f:1', new Blob([content], { type: 'text/plain' }), 'notes.txt');
      const id = idFromTextAnswer(await cli('', { body: form }));
      const data = await detail(id);
      assert.equal(data.content, content);
      assert.equal(data.content_type, 'text', 'a quick-create paste is text even from a file part (D10)');
    });

    it('takes expiry, title, lang and burn from the query, a blank one as not given', async () => {
      const id = idFromTextAnswer(
        await cli('?expiry=1h&title=Query%20title&lang=ocaml&burn=1', {
          headers: { 'content-type': 'text/plain' },
          body: 'just a few plain words\n',
        }),
      );
      const data = await detail(id);
      assert.equal(data.title, 'Query title');
      assert.equal(data.language, 'ocaml');
      assert.equal(data.burn_after_read, true);
      assert.equal(toUtc(data.expires_at) - toUtc(data.created_at), 3_600_000);
      // Default expiry is 1d.
      const plain = idFromTextAnswer(await cli('', { headers: { 'content-type': 'text/plain' }, body: 'defaults' }));
      const defaults = await detail(plain);
      assert.equal(toUtc(defaults.expires_at) - toUtc(defaults.created_at), 86_400_000);
      assert.equal(defaults.burn_after_read, false);
      // A blank title or lang is not given: no empty title stored, the language detected.
      const python = '#!/usr/bin/env python3\nimport sys\n\ndef main():\n    print(sys.argv)\n';
      const blanks = await detail(
        idFromTextAnswer(await cli('?title=&lang=', { headers: { 'content-type': 'text/plain' }, body: python })),
      );
      assert.deepEqual([blanks.title, blanks.language], [null, 'python']);
      // A language refused is named as it was sent: lang.
      const refused = await cli('?lang=objective%20c', { headers: { 'content-type': 'text/plain' }, body: 'words' });
      expectError(refused, 400, 'invalid_request');
      assert.deepEqual(
        refused.body.details.map((d: { field: string }) => d.field),
        ['lang'],
      );
    });

    it('takes expiry, title, lang and burn from an urlencoded or multipart form', async () => {
      const urlencoded = new URLSearchParams({
        content: 'just a few plain words',
        expiry: '10m',
        title: 'Form title',
        lang: 'erlang',
        burn: 'yes',
      });
      const a = await detail(idFromTextAnswer(await cli('', { body: urlencoded })));
      assert.equal(a.title, 'Form title');
      assert.equal(a.language, 'erlang');
      assert.equal(a.burn_after_read, true);
      assert.equal(toUtc(a.expires_at) - toUtc(a.created_at), 600_000);

      const form = new FormData();
      form.append('expiry', 'never');
      form.append('title', 'Multipart title');
      form.append('lang', 'haskell');
      form.append('burn', 'false');
      form.append('f:1', new Blob(['just a few plain words\n'], { type: 'text/plain' }), 'words.txt');
      const b = await detail(idFromTextAnswer(await cli('', { body: form })));
      assert.equal(b.title, 'Multipart title');
      assert.equal(b.language, 'haskell');
      assert.equal(b.burn_after_read, false);
      assert.equal(b.expires_at, null);
    });

    it('a multipart content field holds up to 4 MB; any other field far over its length is 400 naming it', async () => {
      const content = 'word '.repeat(40_000); // 200,000 bytes: past a small field's cap, well under 4 MB
      const big = new FormData();
      big.append('title', 'a big field');
      big.append('content', content);
      const id = idFromTextAnswer(await cli('', { headers: { 'x-api-key': key }, body: big }));
      assert.equal((await detail(id)).content, content);

      const form = new FormData();
      form.append('title', 't'.repeat(200_000));
      form.append('content', 'some content');
      const err = expectError(await cli('', { headers: { 'x-api-key': key }, body: form }), 400, 'invalid_request');
      // Refused at the field's 64 KB, not read whole (to 4 MB) and then told the title's rule.
      assert.deepEqual(err.details, [{ field: 'title', message: 'is longer than 64 KB' }]);
    });

    it('answers 201 text/plain "<base_url>/view/<id>\\n" for a view URL that works', async () => {
      const result = await cli('', { headers: { 'content-type': 'text/plain' }, body: 'plain answer' });
      assert.equal(result.headers.get('content-type'), 'text/plain; charset=utf-8');
      const id = idFromTextAnswer(result);
      const raw = await request(`${server.url}/raw/${id}`);
      assert.equal(raw.status, 200);
      assert.equal(raw.text, 'plain answer');
    });

    it('answers the create envelope of POST /api/v1/paste with Accept: application/json or json=1', async () => {
      const reference = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        json: { content: 'reference paste' },
      });
      assert.equal(reference.status, 201);
      const variants: Array<[string, Parameters<typeof request>[1]]> = [
        ['', { headers: { 'content-type': 'text/plain', accept: 'application/json' }, body: 'json by accept' }],
        ['?json=1', { headers: { 'content-type': 'text/plain' }, body: 'json by query' }],
      ];
      for (const [query, init] of variants) {
        const result = await cli(query, init);
        assert.equal(result.status, 201, result.text);
        assert.match(result.headers.get('content-type') ?? '', /^application\/json/);
        assert.deepEqual(Object.keys(result.body).sort(), Object.keys(reference.body).sort());
        assert.equal(result.body.error, false);
        assert.equal(typeof result.body.message, 'string');
        assert.deepEqual(Object.keys(result.body.data).sort(), Object.keys(reference.body.data).sort());
        const data = result.body.data;
        assert.match(data.paste_id, /^[0-9A-Za-z]{10}$/);
        assert.equal(data.url, `${BASE}/view/${data.paste_id}`);
        assert.equal(data.raw_url, `${BASE}/raw/${data.paste_id}`);
        assert.equal(data.download_url, `${BASE}/download/${data.paste_id}`);
        assert.match(data.expires_at, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
        assert.equal(data.burn_after_read, false);
        assert.equal(data.encrypted, false);
        assert.equal(data.downloadable, true);
        assert.equal((await detail(data.paste_id)).sha256, data.sha256);
      }
    });
  });

  describe('POST /api/v1/cli: errors (D7)', () => {
    it('refuses content shorter than 3 characters or only white space: 400 content_too_short', async () => {
      expectError(await cli('', { headers: { 'content-type': 'text/plain' }, body: 'ab' }), 400, 'content_too_short');
      expectError(
        await cli('', { headers: { 'content-type': 'text/plain' }, body: ' \n\t  ' }),
        400,
        'content_too_short',
      );
      expectError(await cli('', { body: new URLSearchParams({ content: 'xy' }) }), 400, 'content_too_short');
      // Anonymous content that is also binary-looking: D6's rule is told first, as on the home page.
      expectError(await cli('', { body: new URLSearchParams({ content: '\u0001\u0002' }) }), 400, 'content_too_short');
      // White space as Unicode has it (NEL, U+0085) and the BOM: blank-looking content.
      for (const blank of ['\u0085\u0085\u0085', '\ufeff\ufeff\ufeff', '\u2028 \u3000\u00a0']) {
        expectError(
          await cli('', { headers: { 'content-type': 'text/plain', 'x-api-key': key }, body: blank }),
          400,
          'content_too_short',
        );
      }
    });

    it('anonymous content over 4 MiB is 413 whatever it holds, not content_rejected', async () => {
      const binaryish = '\u0001'.repeat(4 * MiB + 1);
      expectError(await cli('', { body: new URLSearchParams({ content: binaryish }) }), 413, 'content_too_large');
    });

    it('bytes that are not UTF-8 text get D6 first: 413 over 4 MiB, content_too_short under 3 characters', async () => {
      // `curl --data-binary @file` sends a file as an urlencoded body, read whole as the content.
      const binary = Buffer.alloc(4 * MiB + 1, 0xff);
      const short = Buffer.from('a\0');
      for (const headers of [{}, { 'x-api-key': key }] as Array<Record<string, string>>) {
        expectError(
          await cli('', { headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' }, body: binary }),
          413,
          'content_too_large',
        );
        for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
          expectError(
            await cli('', { headers: { ...headers, 'content-type': type }, body: short }),
            400,
            'content_too_short',
          );
        }
      }
    });

    it('accepts exactly 4 MiB and refuses 4 MiB + 1 byte: 413 content_too_large (raw, urlencoded raw, form)', async () => {
      const exact = 'a'.repeat(4 * MiB);
      const ok = await cli('?lang=text', { headers: { 'content-type': 'text/plain' }, body: exact });
      assert.equal(ok.status, 201, ok.text);
      const over = `${exact}b`;
      expectError(await cli('', { headers: { 'content-type': 'text/plain' }, body: over }), 413, 'content_too_large');
      expectError(
        await cli('', { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: over }),
        413,
        'content_too_large',
      );
      expectError(await cli('', { body: new URLSearchParams({ content: over }) }), 413, 'content_too_large');
      // Fewer than 4 Mi characters, but over 4 MiB of UTF-8: the limit is in bytes (D6).
      const wide = 'é'.repeat(2 * MiB + 1);
      expectError(await cli('', { headers: { 'content-type': 'text/plain' }, body: wide }), 413, 'content_too_large');
      expectError(await cli('', { body: new URLSearchParams({ content: wide }) }), 413, 'content_too_large');
    });

    it('refuses a bad expiry (query and form) or burn value: 400 invalid_request naming it', async () => {
      const a = expectError(
        await cli('?expiry=5y', { headers: { 'content-type': 'text/plain' }, body: 'some content' }),
        400,
        'invalid_request',
      );
      assert.ok(
        a.details?.some((d) => d.field === 'expiry'),
        JSON.stringify(a),
      );
      const b = expectError(
        await cli('', { body: new URLSearchParams({ content: 'some content', expiry: '1y' }) }),
        400,
        'invalid_request',
      );
      assert.ok(
        b.details?.some((d) => d.field === 'expiry'),
        JSON.stringify(b),
      );
      const c = expectError(
        await cli('?burn=maybe', { headers: { 'content-type': 'text/plain' }, body: 'some content' }),
        400,
        'invalid_request',
      );
      assert.ok(
        c.details?.some((d) => d.field === 'burn'),
        JSON.stringify(c),
      );
    });

    it('refuses an unknown parameter: 400 invalid_request naming it (query and form)', async () => {
      const a = expectError(
        await cli('?colour=red', { headers: { 'content-type': 'text/plain' }, body: 'some content' }),
        400,
        'invalid_request',
      );
      assert.ok(
        a.details?.some((d) => d.field === 'colour'),
        JSON.stringify(a),
      );
      const b = expectError(
        await cli('', { body: new URLSearchParams({ content: 'some content', colour: 'red' }) }),
        400,
        'invalid_request',
      );
      assert.ok(
        b.details?.some((d) => d.field === 'colour'),
        JSON.stringify(b),
      );
      const form = new FormData();
      form.append('content', 'some content');
      form.append('password', 'not a quick-create parameter');
      expectError(await cli('', { body: form }), 400, 'invalid_request');
    });

    it('refuses a body that is not UTF-8: 400 (invalid_request, or content_rejected when anonymous)', async () => {
      const bytes = Buffer.from([0x68, 0x69, 0xff, 0xfe, 0x21, 0x21]);
      const form = new FormData();
      form.append('f:1', new Blob([bytes], { type: 'text/plain' }), 'latin1.txt');
      const bodies: Array<Parameters<typeof request>[1]> = [
        { headers: { 'content-type': 'text/plain' }, body: bytes },
        { headers: { 'content-type': 'application/octet-stream' }, body: bytes },
        { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: bytes },
        { body: form },
      ];
      for (const init of bodies) {
        // With a key the content check does not apply: the body is simply invalid.
        expectError(
          await cli('', { ...init, headers: { ...init?.headers, 'x-api-key': key } }),
          400,
          'invalid_request',
        );
        // Anonymously the content check may refuse it first (D7 content_rejected); either way a 400.
        const anonymous = await cli('', init);
        assert.equal(anonymous.status, 400, anonymous.text);
        expectError(
          anonymous,
          400,
          anonymous.body.code === 'content_rejected' ? 'content_rejected' : 'invalid_request',
        );
      }
    });

    /** A multipart body of text parts with no file name, each with the Content-Type given. */
    const textParts = (parts: Array<{ name: string; type?: string; bytes: Buffer | string }>) => {
      const boundary = 'fastpaste-test-boundary';
      const chunks: Buffer[] = [];
      for (const part of parts) {
        const type = part.type ? `Content-Type: ${part.type}\r\n` : '';
        chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"\r\n${type}\r\n`));
        chunks.push(Buffer.from(part.bytes), Buffer.from('\r\n'));
      }
      chunks.push(Buffer.from(`--${boundary}--\r\n`));
      const body: BodyInit = Buffer.concat(chunks);
      return { headers: { 'content-type': `multipart/form-data; boundary=${boundary}` }, body };
    };

    it('stores a form field typed application/json as the text sent, not as what it parses to', async () => {
      const json = '{\n  "a": 1,\n  "list": [1, 2]\n}\n';
      for (const type of ['application/json', 'application/json; charset=utf-8', 'text/plain; charset=utf-8']) {
        const form = textParts([
          { name: 'f:1', type, bytes: json },
          { name: 'title', type: 'application/json', bytes: '"quoted"' },
        ]);
        const answer = await cli('?json=1', { headers: { ...form.headers, 'x-api-key': key }, body: form.body });
        assert.equal(answer.status, 201, answer.text);
        const data = await detail(answer.body.data.paste_id);
        assert.equal(data.content, json, type);
        assert.equal(data.title, '"quoted"', type);
      }
    });

    it('refuses a form field that is not UTF-8 (multipart or urlencoded): 400 naming it, nothing stored', async () => {
      const before = await pasteCount();
      const latin1 = Buffer.from([0x63, 0x61, 0x66, 0xe9]); // "café" in latin1
      const bodies: Array<{ field: string; init: { headers: Record<string, string>; body: BodyInit } }> = [
        { field: 'content', init: textParts([{ name: 'content', bytes: latin1 }]) },
        { field: 'content', init: textParts([{ name: 'content', type: 'text/plain', bytes: latin1 }]) },
        {
          field: 'title',
          init: textParts([
            { name: 'content', bytes: 'fine' },
            { name: 'title', bytes: latin1 },
          ]),
        },
        {
          field: 'content',
          init: { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'content=caf%E9' },
        },
        {
          field: 'title',
          init: { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'paste=fine&title=%FF%FE' },
        },
      ];
      for (const { field, init } of bodies) {
        const answer = await cli('', { headers: { ...init.headers, 'x-api-key': key }, body: init.body });
        const error = expectError(answer, 400, 'invalid_request');
        assert.ok(
          error.details?.some((d) => d.field === field && /UTF-8/.test(d.message)),
          JSON.stringify(error),
        );
      }
      assert.equal(await pasteCount(), before);
      // Escapes that are UTF-8 are decoded; a `%` that starts none is kept, as browsers send it.
      const kept = await cli('?json=1', {
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-api-key': key },
        body: 'content=caf%C3%A9+100%+%zz%2',
      });
      assert.equal(kept.status, 201, kept.text);
      assert.equal((await detail(kept.body.data.paste_id)).content, 'café 100% %zz%2');
    });

    it('refuses a raw body over 4 MiB while it streams, long before 50 MB are sent', async () => {
      const total = 50 * 1_000_000;
      const result = await streamLargeBody(`${server.url}/api/v1/cli`, total);
      assert.equal(result.status, 413, `status ${result.status}, error ${result.error}, body ${result.body}`);
      assert.equal(JSON.parse(result.body).code, 'content_too_large');
      assert.ok(result.written < 20 * MiB, `wrote ${result.written} bytes before the answer`);
    });
  });

  describe('POST /api/v1/cli: keys', () => {
    it('without a key creates a paste with no owner (in no key list)', async () => {
      const id = idFromTextAnswer(await cli('', { headers: { 'content-type': 'text/plain' }, body: 'anonymous one' }));
      assert.ok(!(await listIds(key)).includes(id));
      assert.ok(!(await listIds(otherKey)).includes(id));
      assert.equal((await pasteRow(id))?.owner_key_id, null);
    });

    it('with a valid key creates a paste owned by that key', async () => {
      const id = idFromTextAnswer(
        await cli('', { headers: { 'content-type': 'text/plain', 'x-api-key': key }, body: 'owned one' }),
      );
      assert.ok((await listIds(key)).includes(id));
      assert.ok(!(await listIds(otherKey)).includes(id));
    });

    it('with an invalid key answers 403 api_key_invalid and creates nothing', async () => {
      const countBefore = await pasteCount();
      for (const bad of [generateApiKey(), 'fp_not-a-key', `${key.slice(0, -1)}${key.endsWith('a') ? 'b' : 'a'}`]) {
        expectError(
          await cli('', { headers: { 'content-type': 'text/plain', 'x-api-key': bad }, body: 'never stored' }),
          403,
          'api_key_invalid',
        );
      }
      assert.equal(await pasteCount(), countBefore);
    });

    it('an empty X-API-Key is no key: an anonymous create, as the usage page is open', async () => {
      const answer = await cli('', { headers: { 'content-type': 'text/plain', 'x-api-key': '' }, body: 'no key here' });
      assert.equal(answer.status, 201, answer.text);
      const id = idFromTextAnswer(answer);
      assert.ok(!(await listIds(key)).includes(id));
      assert.equal((await detail(id)).content, 'no key here');
      const usage = await request(`${server.url}/api/v1/cli`, { headers: { 'x-api-key': '' } });
      assert.equal(usage.status, 200, usage.text);
    });
  });

  describe('GET /api/v1/cli', () => {
    it('answers plain-text usage with curl lines naming BASE_URL, and JSON on json=1', async () => {
      const text = await request(`${server.url}/api/v1/cli`);
      assert.equal(text.status, 200);
      assert.match(text.headers.get('content-type') ?? '', /^text\/plain/);
      const curlLines = text.text.split('\n').filter((line) => line.includes('curl '));
      assert.ok(curlLines.length >= 2, text.text);
      for (const line of curlLines) assert.ok(line.includes(`${BASE}/api/v1/cli`), line);
      assert.ok(!text.text.includes('localhost'), 'usage names another address than BASE_URL');

      const json = await request(`${server.url}/api/v1/cli?json=1`);
      assert.equal(json.status, 200);
      assert.match(json.headers.get('content-type') ?? '', /^application\/json/);
      assert.equal(json.body.error, false);
      assert.ok(JSON.stringify(json.body.data).includes(`${BASE}/api/v1/cli`));

      const byAccept = await request(`${server.url}/api/v1/cli`, { headers: { accept: 'application/json' } });
      assert.match(byAccept.headers.get('content-type') ?? '', /^application\/json/);
    });

    it('needs no key, but a key sent is checked (403 when invalid or inactive) and counted', async () => {
      expectError(
        await request(`${server.url}/api/v1/cli`, { headers: { 'x-api-key': 'fp_not_a_key' } }),
        403,
        'api_key_invalid',
      );
      const limited = await server.createKey({ name: 'usage-reader', hourly: 5 });
      const first = await request(`${server.url}/api/v1/cli`, { headers: { 'x-api-key': limited } });
      assert.equal(first.status, 200);
      assert.equal(first.headers.get('ratelimit-remaining'), '4', 'counted against the key');
      const anonymous = await request(`${server.url}/api/v1/cli`);
      assert.equal(anonymous.status, 200);
      assert.equal(anonymous.headers.get('ratelimit-remaining'), null, 'nothing counted without a key');
    });

    it("a switch named like an object's own property (burn=constructor, json=__proto__) is no boolean: 400", async () => {
      for (const query of ['?burn=constructor', '?json=__proto__', '?burn=toString']) {
        const answer = await cli(query, { headers: { 'content-type': 'text/plain', 'x-api-key': key }, body: 'x' });
        expectError(answer, 400, 'invalid_request');
      }
    });

    it("takes the create's switch (D18): json=0 leaves it to Accept, a json that is not a boolean is 400", async () => {
      for (const method of ['GET', 'POST']) {
        const init = (accept: string) => ({
          method,
          headers: { accept, 'content-type': 'text/plain' },
          ...(method === 'POST' ? { body: 'switch test' } : {}),
        });
        const off = await request(`${server.url}/api/v1/cli?json=0`, init('application/json'));
        assert.match(off.headers.get('content-type') ?? '', /^application\/json/, `${method} json=0, Accept JSON`);
        const plain = await request(`${server.url}/api/v1/cli?json=0`, init('*/*'));
        assert.match(plain.headers.get('content-type') ?? '', /^text\/plain/, `${method} json=0`);
        const bad = await request(`${server.url}/api/v1/cli?json=maybe`, init('*/*'));
        const error = expectError(bad, 400, 'invalid_request');
        assert.ok(
          error.details?.some((d) => d.field === 'json'),
          `${method}: ${JSON.stringify(error)}`,
        );
      }
    });
  });

  describe('web pages', () => {
    it('/view escapes content and title and links to /raw and /download', async () => {
      const title = '<img src=x onerror=alert(1)>';
      const content = '<script>alert(1)</script>\n"quoted" & \'single\'';
      for (const language of ['html', 'plaintext-nope', null]) {
        const json: Record<string, unknown> = { content, title };
        if (language !== null) json.language = language;
        const id = await apiCreate(json);
        const page = await request(`${server.url}/view/${id}`);
        assert.equal(page.status, 200);
        assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
        assert.ok(!page.text.includes('<script'), `a script tag on a plain paste page (language ${language})`);
        assert.ok(!page.text.includes('<img'), 'the title is not escaped');
        assert.ok(!page.text.includes('onerror=alert(1)>'), 'the title is not escaped');
        assert.ok(page.text.includes('&lt;img src=x onerror=alert(1)&gt;'), 'the title is missing');
        assert.ok(page.text.includes(`href="${BASE}/raw/${id}"`), 'no link to /raw');
        assert.ok(page.text.includes(`href="${BASE}/download/${id}"`), 'no link to /download');
      }
    });

    it('an empty title shows the id (page and archive); a title keeps its direction controls inside its own link', async () => {
      const empty = await apiCreate({ content: 'titled with nothing', title: '', public: true });
      const page = await request(`${server.url}/view/${empty}`);
      assert.match(page.text, new RegExp(`<h1>${empty}</h1>`));
      assert.match(page.text, new RegExp(`<title>${empty}`));
      const spoof = await apiCreate({ content: 'reversed', title: 'invoice\u202Efdp.exe', public: true });
      const archive = await request(`${server.url}/archive`);
      assert.ok(archive.text.includes(`<a href="/view/${empty}"><bdi>${empty}</bdi></a>`), 'no id for the empty title');
      assert.ok(
        archive.text.includes(`<a href="/view/${spoof}"><bdi>invoice\u202Efdp.exe</bdi></a>`),
        'title not isolated',
      );
    });

    it('a long paste cut on its page is cut between characters, never inside a surrogate pair', async () => {
      const content = `${'a'.repeat(PAGE_TEXT_MAX - 1)}\u{1F600}${'b'.repeat(100)}`;
      const id = await apiCreate({ content, language: 'plaintext' });
      const page = await request(`${server.url}/view/${id}`);
      assert.equal(page.status, 200);
      assert.match(page.text, /first 256K characters/);
      assert.ok(!page.text.includes('\ufffd'), 'half a surrogate pair on the page');
      assert.ok(
        page.text.includes(`${'a'.repeat(100)}</code>`),
        'the page does not end its code at the last whole character',
      );
    });

    it('a password protected paste that is not downloadable tells nothing on /download without its password', async () => {
      const { wire } = await encryptForTest('locked and encrypted');
      const id = await apiCreate({ content: wire, encrypt: true, password: 'pw-5678' });
      expectError(await request(`${server.url}/download/${id}`), 403, 'password_protected');
      const withPassword = await request(`${server.url}/download/${id}`, {
        headers: { 'x-paste-password': 'pw-5678' },
      });
      expectError(withPassword, 403, 'not_downloadable');
    });

    it('the sitemap holds at most 50,000 addresses, the home page and the archive among them', async (t) => {
      const own = await startServer({ env: ENV });
      t.after(() => own.close());
      const now = Date.now();
      await own.sql(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000)
        INSERT INTO pastes (id, title, content, content_type, language, file_size, sha256, created_at, view_count,
          burn_after_read, encrypted, downloadable, is_public, source)
        SELECT 'sitemap' || i, 't', 'x', 'text', 'plaintext', 1, 'ab', ${now} - i, 0, 0, 0, 1, 1, 'api' FROM n`);
      const sitemap = await request(`${own.url}/sitemap.xml`);
      assert.equal(sitemap.status, 200);
      const urls = sitemap.text.match(/<url>/g)?.length ?? 0;
      assert.equal(urls, 50_000);
      assert.ok(sitemap.text.includes(`/view/sitemap1<`), 'the newest paste is missing');
    });

    it('the sitemap is made again at most every minute, and at once when this instance changes a listed paste', async (t) => {
      const own = await startServer({ env: ENV });
      t.after(() => own.close());
      const ownKey = await own.createKey();
      const sitemapHas = async (id: string) => {
        const sitemap = await request(`${own.url}/sitemap.xml`);
        assert.equal(sitemap.status, 200);
        assert.match(sitemap.headers.get('content-type') ?? '', /^application\/xml/);
        return sitemap.text.includes(`/view/${id}</loc>`);
      };
      const created = await request(`${own.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': ownKey },
        json: { content: 'listed in the sitemap', public: true },
      });
      const listed = (created.body as { data: { paste_id: string } }).data.paste_id;
      assert.equal(await sitemapHas(listed), true);
      // A paste stored behind the service's back (another instance's, say) waits for the minute.
      const insertPublic = (id: string) =>
        own.sql(`INSERT INTO pastes (id, title, content, content_type, language, file_size, sha256, created_at,
          view_count, burn_after_read, encrypted, downloadable, is_public, source)
          VALUES ('${id}', 't', 'x', 'text', 'plaintext', 1, 'ab', ${own.clock.now - 1}, 0, 0, 0, 1, 1, 'api')`);
      await insertPublic('elsewhere1');
      assert.equal(await sitemapHas('elsewhere1'), false, 'the sitemap was read again within the minute');
      // A listed paste put behind a password here leaves it at once (D22).
      const put = await request(`${own.url}/api/v1/paste/${listed}`, {
        method: 'PUT',
        headers: { 'x-api-key': ownKey },
        json: { password: 'now-protected' },
      });
      assert.equal(put.status, 200, put.text);
      assert.equal(await sitemapHas(listed), false, 'a paste made unlisted stayed in the sitemap');
      assert.equal(await sitemapHas('elsewhere1'), true);
      await insertPublic('elsewhere2');
      assert.equal(await sitemapHas('elsewhere2'), false);
      own.clock.now += 60_000;
      assert.equal(await sitemapHas('elsewhere2'), true, 'the sitemap was not read again after the minute');
      // A listed paste that expires within the minute leaves it when it expires (D12, D22).
      await own.sql(`UPDATE pastes SET expires_at = ${own.clock.now + 90_000} WHERE id = 'elsewhere2'`);
      own.clock.now += 60_000;
      assert.equal(await sitemapHas('elsewhere2'), true, 'not yet expired');
      own.clock.now += 30_000;
      assert.equal(await sitemapHas('elsewhere2'), false, 'an expired paste stayed in the sitemap');
    });

    it('a burn paste: GET /view asks to confirm and consumes nothing; POST confirm=1 shows it once, then 404', async () => {
      const content = 'secret burn content 1234';
      const id = await apiCreate({ content, burn: true });
      for (let i = 0; i < 3; i++) {
        const page = await request(`${server.url}/view/${id}`);
        assert.equal(page.status, 200);
        assert.ok(!textOf(page.text).includes(content), 'GET /view delivered a view-once paste');
        assert.match(page.text, /<form[^>]*method="post"/i);
        assert.ok(page.text.includes('name="confirm"'));
        // The script that keeps an E2E key (the #fragment) through the confirmation.
        assert.match(page.text, /<script src="\/static\/gate\.js"><\/script>/);
      }
      const head = await fetch(`${server.url}/view/${id}`, { method: 'HEAD' });
      assert.equal(head.status, 200);
      // A POST without the confirmation is refused and consumes nothing either.
      const unconfirmed = await request(`${server.url}/view/${id}`, { method: 'POST', body: new URLSearchParams() });
      assert.equal(unconfirmed.status, 400);
      assert.ok(await server.services.pastes.peek(id), 'the paste was consumed before the confirmation');

      const shown = await request(`${server.url}/view/${id}`, {
        method: 'POST',
        body: new URLSearchParams({ confirm: '1' }),
      });
      assert.equal(shown.status, 200);
      assert.ok(textOf(shown.text).includes(content));
      const again = await request(`${server.url}/view/${id}`, {
        method: 'POST',
        body: new URLSearchParams({ confirm: '1' }),
      });
      assert.equal(again.status, 404);
      assert.ok(!textOf(again.text).includes(content));
      assert.equal((await request(`${server.url}/view/${id}`)).status, 404);
      assert.equal((await request(`${server.url}/raw/${id}`)).status, 404);
    });

    it('a password paste: GET /view shows a POST form with a password input; wrong → 403 page, right → content', async () => {
      const content = 'password protected content 5678';
      const id = await apiCreate({ content, password: 'hunter2' });
      const gate = await request(`${server.url}/view/${id}`);
      assert.equal(gate.status, 200);
      assert.ok(!textOf(gate.text).includes(content));
      assert.match(gate.text, /<form[^>]*method="post"/i);
      assert.match(gate.text, /<input[^>]*type="password"[^>]*name="password"/);
      assert.ok(!gate.text.includes('hunter2'));

      const wrong = await request(`${server.url}/view/${id}`, {
        method: 'POST',
        body: new URLSearchParams({ confirm: '1', password: 'wrong' }),
      });
      assert.equal(wrong.status, 403);
      assert.match(wrong.headers.get('content-type') ?? '', /^text\/html/);
      assert.ok(!textOf(wrong.text).includes(content));

      const right = await request(`${server.url}/view/${id}`, {
        method: 'POST',
        body: new URLSearchParams({ confirm: '1', password: 'hunter2' }),
      });
      assert.equal(right.status, 200);
      assert.ok(textOf(right.text).includes(content));
      // Raw takes the password in the header only.
      assert.equal((await request(`${server.url}/raw/${id}`)).status, 403);
      assert.equal((await request(`${server.url}/raw/${id}?password=hunter2`)).status, 403);
      const raw = await request(`${server.url}/raw/${id}`, { headers: { 'x-paste-password': 'hunter2' } });
      assert.equal(raw.status, 200);
      assert.equal(raw.text, content);
    });

    it('a password paste too long for its page shows its first 256K characters and a form that downloads it whole with the password', async () => {
      // Escaped, 4 MB of "<" is 16 MB of page: once per POST with the password, a quarter of a second each.
      const content = `${'<'.repeat(PAGE_TEXT_MAX + 10)}the end`;
      const id = await apiCreate({ content, password: 'pw-long', language: 'plaintext' });
      const post = (fields: Record<string, string>) =>
        request(`${server.url}/view/${id}`, { method: 'POST', body: new URLSearchParams(fields) });
      const page = await post({ confirm: '1', password: 'pw-long' });
      assert.equal(page.status, 200);
      assert.match(page.text, /first 256K characters/);
      assert.ok(!page.text.includes('the end'), 'the page holds the whole paste');
      assert.ok(page.text.length < PAGE_TEXT_MAX * 4 + 10_000, `a page of ${page.text.length} characters`);
      assert.ok(!page.text.includes('pw-long'), 'the password is written into the page');
      const form = /<form method="post" action="([^"]+)" class="download-whole">([\s\S]*?)<\/form>/.exec(page.text);
      assert.ok(form, 'no form to download it whole');
      assert.equal(form[1], `/view/${id}`);
      assert.match(form[2] ?? '', /name="download"/);
      assert.match(form[2] ?? '', /<input type="password" name="password"/);

      const whole = await post({ confirm: '1', download: '1', password: 'pw-long' });
      assert.equal(whole.status, 200);
      assert.equal(whole.text, content);
      assert.match(whole.headers.get('content-type') ?? '', /^text\/plain/);
      assert.match(whole.headers.get('content-disposition') ?? '', /^attachment; filename="?[A-Za-z0-9_-]+\.txt"?$/);
      const wrong = await post({ confirm: '1', download: '1', password: 'wrong' });
      assert.equal(wrong.status, 403);
      assert.ok(!wrong.text.includes('the end'));
      // A short protected paste is shown whole, with no such form.
      const short = await apiCreate({ content: 'short and protected', password: 'pw-short' });
      const shortPage = await request(`${server.url}/view/${short}`, {
        method: 'POST',
        body: new URLSearchParams({ confirm: '1', password: 'pw-short' }),
      });
      assert.ok(textOf(shortPage.text).includes('short and protected'));
      assert.ok(!shortPage.text.includes('download-whole'));
    });

    it('a burn paste with a password: a wrong password consumes nothing, the right one shows it once', async () => {
      const content = 'burn and password 9012';
      const id = await apiCreate({ content, password: 'pw-right', burn: true });
      const gate = await request(`${server.url}/view/${id}`);
      assert.equal(gate.status, 200);
      assert.match(gate.text, /<input[^>]*type="password"/);
      for (const password of ['pw-wrong', '']) {
        const refused = await request(`${server.url}/view/${id}`, {
          method: 'POST',
          body: new URLSearchParams({ confirm: '1', password }),
        });
        assert.equal(refused.status, 403, `password ${JSON.stringify(password)}`);
        assert.ok(!textOf(refused.text).includes(content));
      }
      assert.equal((await request(`${server.url}/raw/${id}`, { headers: { 'x-paste-password': 'nope' } })).status, 403);
      const shown = await request(`${server.url}/view/${id}`, {
        method: 'POST',
        body: new URLSearchParams({ confirm: '1', password: 'pw-right' }),
      });
      assert.equal(shown.status, 200, 'a refused attempt consumed the paste');
      assert.ok(textOf(shown.text).includes(content));
      const later = await request(`${server.url}/view/${id}`, {
        method: 'POST',
        body: new URLSearchParams({ confirm: '1', password: 'pw-right' }),
      });
      assert.equal(later.status, 404);
    });

    it('an encrypted paste page carries the ciphertext and loads /static/view.js, never the key', async () => {
      const { wire, key: e2eKey } = await encryptForTest('plaintext never seen by the server');
      const created = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        json: { content: wire, encrypt: true, key: e2eKey },
      });
      assert.equal(created.status, 201);
      assert.equal(created.body.data.url, `${BASE}/view/${created.body.data.paste_id}#${e2eKey}`);
      const page = await request(`${server.url}/view/${created.body.data.paste_id}`);
      assert.equal(page.status, 200);
      assert.ok(page.text.includes(wire), 'the ciphertext is not on the page');
      assert.match(page.text, /<script src="\/static\/view\.js"><\/script>/);
      assert.ok(!page.text.includes(e2eKey), 'the decryption key is on the page');
      assert.ok(!page.text.includes('plaintext never seen'));
      const row = await pasteRow(created.body.data.paste_id);
      assert.ok(row && !Object.values(row).some((v) => typeof v === 'string' && v.includes(e2eKey)), 'key stored');
    });

    it('serves /static/view.js, /static/gate.js and /static/style.css', async () => {
      for (const name of ['view.js', 'gate.js']) {
        const js = await request(`${server.url}/static/${name}`);
        assert.equal(js.status, 200, name);
        assert.match(js.headers.get('content-type') ?? '', /javascript/);
        assert.equal(js.text, readFileSync(new URL(`../src/http/web/static/${name}`, import.meta.url), 'utf8'));
      }
      const css = await request(`${server.url}/static/style.css`);
      assert.equal(css.status, 200);
      assert.match(css.headers.get('content-type') ?? '', /^text\/css/);
      assert.equal(css.text, readFileSync(new URL('../src/http/web/static/style.css', import.meta.url), 'utf8'));
      expectError(await request(`${server.url}/static/nothing.js`), 404, 'not_found');
      // Names every object has are no files either (they were 500s).
      for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
        expectError(await request(`${server.url}/static/${name}`), 404, 'not_found');
      }
    });

    it('serves /static/highlight.js: the browser bundle view.js highlights with, the same one bin/build.js writes', async () => {
      // Running from the sources, the server bundles it on the first request (a few at once share it).
      const answers = await Promise.all([1, 2, 3].map(() => request(`${server.url}/static/highlight.js`)));
      for (const answer of answers) {
        assert.equal(answer.status, 200);
        assert.match(answer.headers.get('content-type') ?? '', /^text\/javascript/);
        assert.equal(answer.text, answers[0]?.text);
      }
      const served = answers[0]?.text ?? '';
      assert.match(served, /globalThis\.fastpasteHighlight\s*=/);
      assert.ok(served.length < 400_000, `${served.length} bytes: the whole of highlight.js?`);
      // The languages fastpaste names are in it, the others are not.
      for (const name of browserLanguages()) assert.ok(served.includes(`"${name}"`), `${name} is missing`);
      assert.ok(browserLanguages().length >= 40 && !browserLanguages().includes('haskell'));
      // What `npm start` serves: the build made by bin/build.js holds the same bytes.
      const built = await new Promise<string>((resolve, reject) =>
        execFile(
          process.execPath,
          ['-e', "import('./bin/build.js').then((b) => b.ensureBuilt()).then((d) => process.stdout.write(d))"],
          (err, stdout) => (err ? reject(err) : resolve(stdout)),
        ),
      );
      assert.equal(readFileSync(`${built}/src/http/web/static/highlight.js`, 'utf8'), served);
    });

    it('/download names the file <id>.txt, the upload name, or <id>.fpe1', async () => {
      const textId = await apiCreate({ content: 'download me' });
      const text = await request(`${server.url}/download/${textId}`);
      assert.equal(text.status, 200);
      assert.equal(filenameOf(text), `${textId}.txt`);
      assert.equal(text.text, 'download me');

      const form = new FormData();
      form.append('file', new Blob(['# Notes\n\nsome markdown\n'], { type: 'text/markdown' }), 'my-notes.md');
      const upload = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        body: form,
      });
      assert.equal(upload.status, 201, upload.text);
      const uploaded = await request(`${server.url}/download/${upload.body.data.paste_id}`);
      assert.equal(uploaded.status, 200);
      assert.equal(filenameOf(uploaded), 'my-notes.md');

      const { wire } = await encryptForTest('downloadable secret');
      const encId = await apiCreate({ content: wire, encrypt: true, downloadable: true });
      const enc = await request(`${server.url}/download/${encId}`);
      assert.equal(enc.status, 200);
      assert.equal(filenameOf(enc), `${encId}.fpe1`);
      assert.equal(enc.text, wire);
    });

    it('/download of a non-downloadable encrypted paste is 403 not_downloadable and consumes nothing', async () => {
      const { wire } = await encryptForTest('not downloadable');
      const id = await apiCreate({ content: wire, encrypt: true, burn: true });
      for (let i = 0; i < 2; i++) {
        const refused = await request(`${server.url}/download/${id}`);
        expectError(refused, 403, 'not_downloadable');
        assert.equal(refused.headers.get('content-disposition'), null);
      }
      const raw = await request(`${server.url}/raw/${id}`);
      assert.equal(raw.status, 200, 'the refused /download consumed the view-once paste');
      assert.equal(raw.text, wire);
    });

    it('/raw of an encrypted paste is its fpe1 string as text/plain', async () => {
      const { wire } = await encryptForTest('raw ciphertext');
      const id = await apiCreate({ content: wire, encrypt: true });
      const raw = await request(`${server.url}/raw/${id}`);
      assert.equal(raw.status, 200);
      assert.equal(raw.headers.get('content-type'), 'text/plain; charset=utf-8');
      assert.equal(raw.text, wire);
      assert.match(raw.text, /^fpe1:/);
    });

    it('an unknown /view answers an HTML 404 page to a browser', async () => {
      const page = await request(`${server.url}/view/unknownid`, { headers: { accept: 'text/html' } });
      assert.equal(page.status, 404);
      assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
      assert.match(page.text, /<!doctype html>/i);
      assertSecurityHeaders(page, 'HTML 404');
    });
  });

  describe('security headers', () => {
    it('are on a page, an API JSON answer, raw text, static files and errors', async () => {
      const id = await apiCreate({ content: 'headers everywhere' });
      const answers: Array<[string, Result]> = [
        ['page', await request(`${server.url}/view/${id}`)],
        ['home', await request(`${server.url}/`)],
        ['archive', await request(`${server.url}/archive`)],
        ['sitemap', await request(`${server.url}/sitemap.xml`)],
        ['API JSON', await request(`${server.url}/api/v1/paste/${id}`, { headers: { 'x-api-key': key } })],
        ['API raw', await request(`${server.url}/api/v1/paste/${id}/raw`, { headers: { 'x-api-key': key } })],
        ['raw', await request(`${server.url}/raw/${id}`)],
        ['download', await request(`${server.url}/download/${id}`)],
        ['static', await request(`${server.url}/static/view.js`)],
        ['cli usage', await request(`${server.url}/api/v1/cli`)],
        ['404 JSON', await request(`${server.url}/api/v1/paste/nope12345`, { headers: { 'x-api-key': key } })],
        ['404 route', await request(`${server.url}/no/such/address`)],
        ['401', await request(`${server.url}/api/v1/pastes`)],
        ['405', await request(`${server.url}/api/v1/cli`, { method: 'DELETE' })],
        ['413', await cli('', { headers: { 'content-type': 'text/plain' }, body: 'x'.repeat(4 * MiB + 1) })],
      ];
      for (const [what, result] of answers) {
        assert.ok(result.status !== 500, `${what}: 500`);
        assertSecurityHeaders(result, what);
      }
    });

    it('are on the 404 of a malformed or over-long address too (page and JSON)', async () => {
      const paths = ['/view/%zz', '/raw/%E0%A4%A', '/api/v1/paste/%zz', `/view/${'a'.repeat(300)}`];
      for (const path of paths) {
        for (const accept of ['text/html', 'application/json']) {
          const result = await request(`${server.url}${path}`, { headers: { accept, 'x-api-key': key } });
          assert.ok(result.status >= 400 && result.status < 500, `${path}: ${result.status}`);
          assertSecurityHeaders(result, `${path.slice(0, 20)} (${accept}) ${result.status}`);
        }
      }
    });
  });

  describe('errors through HTTP (D7)', () => {
    it('invalid_request for an unknown JSON field and for malformed JSON', async () => {
      const unknown = expectError(
        await request(`${server.url}/api/v1/paste`, {
          method: 'POST',
          headers: { 'x-api-key': key },
          json: { content: 'hello there', colour: 'red' },
        }),
        400,
        'invalid_request',
      );
      assert.ok(unknown.details?.some((d) => d.field === 'colour'));
      expectError(
        await request(`${server.url}/api/v1/paste`, {
          method: 'POST',
          headers: { 'x-api-key': key, 'content-type': 'application/json' },
          body: '{"content": ',
        }),
        400,
        'invalid_request',
      );
    });

    it('not_found for an unknown paste and an unknown route', async () => {
      expectError(
        await request(`${server.url}/api/v1/paste/doesnotexist`, { headers: { 'x-api-key': key } }),
        404,
        'not_found',
      );
      expectError(await request(`${server.url}/raw/doesnotexist`), 404, 'not_found');
      expectError(await request(`${server.url}/download/doesnotexist`), 404, 'not_found');
      expectError(await request(`${server.url}/view/doesnotexist`), 404, 'not_found');
      expectError(await request(`${server.url}/api/v1/nothing`), 404, 'not_found');
    });

    it('method_not_allowed with an Allow header listing the methods of the path', async () => {
      const cases: Array<[string, string, string[]]> = [
        ['DELETE', '/api/v1/cli', ['GET', 'HEAD', 'POST']],
        ['GET', '/api/v1/paste', ['POST']],
        ['POST', '/api/v1/paste/abcdef1234', ['DELETE', 'GET', 'HEAD', 'PUT']],
        ['PUT', '/api/v1/pastes', ['GET', 'HEAD']],
        ['POST', '/raw/abcdef1234', ['GET', 'HEAD']],
        ['DELETE', '/view/abcdef1234', ['GET', 'HEAD', 'POST']],
      ];
      for (const [method, path, allow] of cases) {
        const result = await request(`${server.url}${path}`, { method });
        expectError(result, 405, 'method_not_allowed');
        assert.deepEqual(allowOf(result), allow, `${method} ${path}`);
      }
    });

    it('api_key_missing 401 and api_key_invalid 403 on the API', async () => {
      expectError(await request(`${server.url}/api/v1/pastes`), 401, 'api_key_missing');
      expectError(
        await request(`${server.url}/api/v1/pastes`, { headers: { 'x-api-key': generateApiKey() } }),
        403,
        'api_key_invalid',
      );
      expectError(
        await request(`${server.url}/api/v1/pastes`, { headers: { 'x-api-key': 'fp_short' } }),
        403,
        'api_key_invalid',
      );
      // content_too_short, content_too_large: see the quick-create errors above; api_disabled: below.
    });

    it('a gzip Content-Encoding is a 400 envelope, never a 500', async () => {
      // Even when the bytes happen to be readable text, they are not stored as if uncompressed.
      expectError(
        await cli('', { headers: { 'content-type': 'text/plain', 'content-encoding': 'gzip' }, body: 'not gzip' }),
        400,
        'invalid_request',
      );
      const gz = gzipSync(Buffer.from('compressed content here'));
      expectError(
        await cli('', { headers: { 'content-type': 'text/plain', 'content-encoding': 'gzip' }, body: gz }),
        400,
        'invalid_request',
      );
      expectError(
        await request(`${server.url}/api/v1/paste`, {
          method: 'POST',
          headers: { 'x-api-key': key, 'content-type': 'application/json', 'content-encoding': 'gzip' },
          body: gzipSync(Buffer.from(JSON.stringify({ content: 'compressed json' }))),
        }),
        400,
        'invalid_request',
      );
    });
  });

  describe('TRUST_PROXY', () => {
    it('is off by default: X-Forwarded-For is ignored', async () => {
      const id = idFromTextAnswer(
        await cli('', {
          headers: { 'content-type': 'text/plain', 'x-forwarded-for': '203.0.113.9' },
          body: 'who made me',
        }),
      );
      assert.equal((await pasteRow(id))?.creator_ip, '127.0.0.1');
    });
  });
});

describe('TRUST_PROXY=true', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ env: { ...ENV, TRUST_PROXY: 'true' } });
  });
  after(() => server.close());

  it('takes the client address from X-Forwarded-For', async () => {
    const result = await request(`${server.url}/api/v1/cli`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'x-forwarded-for': '203.0.113.9' },
      body: 'who made me',
    });
    const id = idFromTextAnswer(result);
    const [row] = await server.sql<{ creator_ip: string }>(`SELECT creator_ip FROM pastes WHERE id = ${sqlText(id)}`);
    assert.equal(row?.creator_ip, '203.0.113.9');
  });
});

describe('ANONYMOUS_CLI=false', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ env: { ...ENV, ANONYMOUS_CLI: 'false' } });
  });
  after(() => server.close());

  it('refuses a keyless quick-create with 401 api_key_missing and accepts a keyed one', async () => {
    const key = await server.createKey();
    expectError(
      await request(`${server.url}/api/v1/cli`, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: 'no key here',
      }),
      401,
      'api_key_missing',
    );
    const keyed = await request(`${server.url}/api/v1/cli`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'x-api-key': key },
      body: 'with a key',
    });
    idFromTextAnswer(keyed);
  });
});

describe('API_ENABLED=false', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ env: { ...ENV, API_ENABLED: 'false' } });
  });
  after(() => server.close());

  it('answers 503 api_disabled on every /api/v1 route while /raw and /view still work', async () => {
    const key = await server.createKey();
    const { paste } = await server.services.pastes.create(parseCreateInput({ content: 'still readable' }, 'json'), {
      owner: null,
      source: 'web',
      ip: null,
    });
    const routes: Array<[string, string, Parameters<typeof request>[1]?]> = [
      ['GET', '/api/v1/cli'],
      ['POST', '/api/v1/cli', { headers: { 'content-type': 'text/plain' }, body: 'quick create' }],
      ['POST', '/api/v1/paste', { json: { content: 'json create' } }],
      ['GET', `/api/v1/paste/${paste.id}`],
      ['GET', `/api/v1/paste/${paste.id}/raw`],
      ['PUT', `/api/v1/paste/${paste.id}`, { json: { title: 'new' } }],
      ['DELETE', `/api/v1/paste/${paste.id}`],
      ['GET', '/api/v1/pastes'],
      ['GET', '/api/v1/nothing-here'],
    ];
    for (const [method, path, init] of routes) {
      const variants: Array<Record<string, string>> = [{}, { 'x-api-key': key }];
      for (const headers of variants) {
        const result = await request(`${server.url}${path}`, {
          method,
          ...init,
          headers: { ...init?.headers, ...headers },
        });
        expectError(result, 503, 'api_disabled');
        assertSecurityHeaders(result, `503 ${method} ${path}`);
      }
    }
    const raw = await request(`${server.url}/raw/${paste.id}`);
    assert.equal(raw.status, 200);
    assert.equal(raw.text, 'still readable');
    assert.equal((await request(`${server.url}/view/${paste.id}`)).status, 200);
  });
});

describe('/archive and /sitemap.xml (D22)', () => {
  let server: TestServer;
  let key: string;
  let listed: string[] = [];
  let unlisted: string[] = [];
  /** Pages of every kind, for the ASCII check: a plain one, a gate, an encrypted one, a highlighted one. */
  let pageIds: string[] = [];

  before(async () => {
    server = await startServer({ env: ENV });
    key = await server.createKey();
    const create = async (json: Record<string, unknown>) => {
      const created = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        json,
      });
      assert.equal(created.status, 201, created.text);
      server.clock.advance(1000);
      return created.body.data.paste_id as string;
    };
    const expired = await create({ content: 'public but soon expired', public: true, expiry: '10m' });
    server.clock.advance(11 * 60_000);
    const { wire } = await encryptForTest('public encrypted');
    const a = await create({ content: 'public one', public: true, title: 'Public A' });
    const privateOne = await create({ content: 'private one' });
    const b = await create({ content: 'public two', public: true });
    const withPassword = await create({ content: 'public with password', public: true, password: 'pw' });
    const burn = await create({ content: 'public burn', public: true, burn: true });
    const encrypted = await create({ content: wire, encrypt: true, public: true });
    const quick = await request(`${server.url}/api/v1/cli`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'quick-create paste',
    });
    const quickId = idFromTextAnswer(quick);
    server.clock.advance(1000);
    const c = await create({ content: 'public three', public: true, slug: 'public-three' });
    const highlighted = await create({ content: 'def f(x):\n    return [x * 2]  # done', language: 'python' });
    listed = [c, b, a];
    unlisted = [expired, privateOne, withPassword, burn, encrypted, quickId, highlighted];
    pageIds = [a, withPassword, burn, encrypted, highlighted];
  });
  after(() => server.close());

  it('/archive lists only public plain pastes, newest first', async () => {
    const page = await request(`${server.url}/archive`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    const ids = [...page.text.matchAll(/href="(?:[^"]*)\/view\/([^"#]+)"/g)].map((m) => m[1]);
    assert.deepEqual(ids, listed);
    for (const id of unlisted) assert.ok(!page.text.includes(id), `${id} is on the archive`);
  });

  it('serves pages whose template is ASCII throughout (the fast path of a client decoding UTF-8)', async () => {
    const paths = ['/', '/archive', '/view/unknownid', ...pageIds.map((id) => `/view/${id}`)];
    for (const path of paths) {
      const page = await request(`${server.url}${path}`, { headers: { accept: 'text/html' } });
      assert.match(page.headers.get('content-type') ?? '', /^text\/html/, path);
      if (path === '/archive')
        assert.match(page.text, /<span class="meta">text &middot; \d{4}-/, 'the rows separate with an entity');
      const outside = [...page.text].filter((c) => c.charCodeAt(0) > 0x7f);
      assert.deepEqual(outside, [], `${path} has characters outside ASCII`);
    }
  });

  it('/sitemap.xml is XML with their /view URLs and no other paste', async () => {
    const sitemap = await request(`${server.url}/sitemap.xml`);
    assert.equal(sitemap.status, 200);
    assert.match(sitemap.headers.get('content-type') ?? '', /xml/);
    assert.match(sitemap.text, /^<\?xml version="1\.0" encoding="UTF-8"\?>/);
    assert.match(sitemap.text, /<urlset xmlns="http:\/\/www\.sitemaps\.org\/schemas\/sitemap\/0\.9">/);
    const locs = [...sitemap.text.matchAll(/<loc>([^<]*)<\/loc>/g)].map((m) => m[1] as string);
    const views = locs.filter((loc) => loc.includes('/view/'));
    assert.deepEqual(
      views,
      listed.map((id) => `${BASE}/view/${id}`),
    );
    for (const loc of locs) assert.ok(loc.startsWith(`${BASE}/`), loc);
    for (const id of unlisted) assert.ok(!sitemap.text.includes(id), `${id} is in the sitemap`);
  });
});

describe('the home page form (POST /; D10 source web)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ env: { ...ENV, ANON_HOURLY_LIMIT: '8' } });
  });
  after(() => server.close());

  const post = (fields: Record<string, string>, accept = 'text/html') =>
    fetch(`${server.url}/`, {
      method: 'POST',
      headers: { accept, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(fields).toString(),
      redirect: 'manual',
    });
  const stored = async (id: string) =>
    (
      await server.sql<Record<string, unknown>>(
        `SELECT content, title, language, content_type, source, owner_key_id, burn_after_read, encrypted, password_hash, expires_at, created_at FROM pastes WHERE id = ${sqlText(id)}`,
      )
    )[0];

  it('text sent to / from a script is told where scripts send it, not to send JSON', async () => {
    const answer = await request(`${server.url}/`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', accept: 'application/json' },
      body: 'echo hello from a script',
    });
    expectError(answer, 400, 'invalid_request');
    assert.match(
      answer.body.message,
      /application\/x-www-form-urlencoded; from a script, POST the text to \/api\/v1\/cli/,
    );
  });

  it('the home page holds the form, which posts to / and loads create.js', async () => {
    const home = await request(`${server.url}/`);
    assert.equal(home.status, 200);
    assert.match(home.text, /<form id="create-form" method="post" action="\/">/);
    assert.match(home.text, /<textarea id="content" name="content"/);
    assert.match(home.text, /<option value="1d" selected>1d<\/option>/);
    assert.match(home.text, /<script src="\/static\/create.js"><\/script>/);
    const script = await request(`${server.url}/static/create.js`);
    assert.equal(script.status, 200);
    assert.match(script.headers.get('content-type') ?? '', /^text\/javascript/);
  });

  it('a browser post creates a text paste with source web and is sent to its page (303); blanks are not given', async () => {
    const text = 'from the browser: ünïcode ✓ <b>&</b>\n';
    const res = await post({ content: text, title: '', language: 'python', expiry: '1h', password: '' });
    assert.equal(res.status, 303, await res.text());
    const location = res.headers.get('location') ?? '';
    const match = /^\/view\/([A-Za-z0-9]{10})$/.exec(location);
    assert.ok(match, location);
    const id = match[1] as string;
    const row = await stored(id);
    assert.equal(row?.content, text);
    assert.equal(row?.title, null);
    assert.equal(row?.language, 'python');
    assert.equal(row?.content_type, 'text');
    assert.equal(row?.source, 'web');
    assert.equal(row?.owner_key_id, null);
    assert.equal(row?.password_hash, null);
    assert.equal(Number(row?.expires_at) - Number(row?.created_at), 3_600_000);
    const page = await request(`${server.url}${location}`);
    assert.equal(page.status, 200);
    assert.ok(page.text.includes('ünïcode'));
  });

  it("a browser's CRLF line breaks are stored as the LFs of the text it showed", async () => {
    const res = await post({ content: 'one\r\ntwo\r\n\r\nfour\r\n', title: 'line breaks' });
    assert.equal(res.status, 303, await res.text());
    const id = (res.headers.get('location') ?? '').slice('/view/'.length);
    const row = await stored(id);
    assert.equal(row?.content, 'one\ntwo\n\nfour\n');
    assert.equal(row?.title, 'line breaks');
  });

  it('asked for JSON (create.js), it answers the create envelope; an E2E paste stores only the ciphertext', async () => {
    const { wire } = await encryptForTest('secret from the browser');
    const res = await post({ content: wire, encrypt: 'true', burn: 'true', expiry: '10m' }, 'application/json');
    assert.equal(res.status, 201);
    const body = (await res.json()) as { error: boolean; message: string; data: Record<string, unknown> };
    assert.equal(body.error, false);
    assert.equal(body.message, 'Paste created.');
    const id = body.data.paste_id as string;
    assert.equal(body.data.url, `${BASE}/view/${id}`);
    assert.equal(body.data.encrypted, true);
    const row = await stored(id);
    assert.equal(row?.content, wire);
    assert.equal(Number(row?.encrypted), 1);
    assert.equal(Number(row?.burn_after_read), 1);
    assert.equal(row?.source, 'web');
  });

  it('refuses what a create refuses, with a page for a browser and the envelope for a script', async () => {
    const unknown = await post({ content: 'x', slug: 'mine' }, 'application/json');
    assert.equal(unknown.status, 400);
    const envelope = (await unknown.json()) as { code: string; details: Array<{ field: string }> };
    assert.equal(envelope.code, 'invalid_request');
    assert.ok(envelope.details.some((d) => d.field === 'slug'));
    const page = await post({ content: '' });
    assert.equal(page.status, 400);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    const notCiphertext = await post({ content: 'plain', encrypt: 'true' }, 'application/json');
    assert.equal(notCiphertext.status, 400);
    assert.equal(((await notCiphertext.json()) as { code: string }).code, 'invalid_ciphertext');
  });

  it('is anonymous use: counted per client address with quick-create, and its text checked', async () => {
    // Eight an hour here; six used above (the refusals counted too, as quick-create counts them).
    const spam = Array.from({ length: 10 }, (_, i) => `https://spam${i}.example.com/offer?id=${i}`).join('\n');
    const rejected = await post({ content: spam }, 'application/json');
    assert.equal(rejected.status, 400);
    assert.equal(((await rejected.json()) as { code: string }).code, 'content_rejected');
    let last: Response | undefined;
    for (let i = 0; i < 6; i++) {
      last = await post({ content: `one more ${i}` }, 'application/json');
      if (last.status === 429) break;
    }
    assert.equal(last?.status, 429);
    assert.equal(((await last?.json()) as { code: string }).code, 'rate_limited');
    // The same budget as quick-create's.
    const cli = await request(`${server.url}/api/v1/cli`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'over the budget',
    });
    assert.equal(cli.status, 429);
  });
});

describe('the home page with ANONYMOUS_CLI=false', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ env: { ...ENV, ANONYMOUS_CLI: 'false' } });
  });
  after(() => server.close());

  it('offers no form, and a keyless post is 401', async () => {
    const home = await request(`${server.url}/`);
    assert.doesNotMatch(home.text, /create-form/);
    assert.match(home.text, /needs an API key/);
    const res = await fetch(`${server.url}/`, {
      method: 'POST',
      headers: { accept: 'application/json', 'content-type': 'application/x-www-form-urlencoded' },
      body: 'content=hello',
    });
    assert.equal(res.status, 401);
  });
});
