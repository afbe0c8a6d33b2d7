/**
 * The pages in a real browser (Debian's Chromium driven by playwright-core): an end-to-end
 * encrypted paste decrypted by /static/view.js with the key from the address's #fragment, which
 * never reaches the server; a wrong, malformed or missing key; a view-once paste's confirmation
 * (D11), which keeps the key; highlighting after decryption; a highlighted page under its
 * Content-Security-Policy. One browser for the file, a fresh context per test, a real server on
 * 127.0.0.1 (SQLite, or PostgreSQL with TEST_DATABASE_URL).
 *
 * Without Chromium (/usr/bin/chromium, or TEST_CHROMIUM) the suite is skipped on a developer
 * machine and fails when CI=true.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { MAX_HIGHLIGHT_BYTES } from '../src/http/web/highlight.js';
import { createPaste, encryptForTest, request, sqlText, startServer, type TestServer } from './helpers.js';

const CHROMIUM = process.env.TEST_CHROMIUM ?? '/usr/bin/chromium';
const INSTALL = 'apt-get install -y chromium';
const onCi = /^(1|true|yes)$/i.test(process.env.CI ?? '');
const missing = !existsSync(CHROMIUM);
const absent = `no Chromium at ${CHROMIUM}; install it with \`${INSTALL}\``;
if (missing && onCi) {
  // CI must run these tests: a machine without the browser is a failure, not a skip.
  it('Chromium is installed (required when CI=true)', () => assert.fail(absent));
} else if (missing) {
  console.warn(`browser.test.ts skipped: ${absent}`);
}

/** What one page did: the requests it sent, what the server answered, what it logged. */
interface Recorded {
  requests: Array<Promise<{ url: string; headers: Record<string, string>; body: string | null }>>;
  /** Bodies of the answers the page received (documents, scripts, styles). */
  bodies: Array<Promise<{ url: string; body: string }>>;
  /** Console errors and warnings (CSP refusals among them), uncaught exceptions, answers ≥ 400. */
  problems: string[];
  /** The page's securitypolicyviolation events: directive and blocked address. */
  violations: string[];
}

/** A token that is in no template: present on a page only if the paste's content put it there. */
const token = (what: string): string => `${what}-${randomBytes(8).toString('hex')}`;

describe('pages in a real browser', {
  skip: missing ? absent : false,
}, () => {
  let server: TestServer;
  let apiKey: string;
  let browser: Browser;
  let context: BrowserContext;
  /** Every request the server received (all of its lanes): the address and the raw headers. */
  const received: Array<{ url: string; headers: string }> = [];

  before(async () => {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        // A name that is not localhost for the same server: a page there is not a secure context.
        '--host-resolver-rules=MAP fastpaste.test 127.0.0.1',
      ],
    });
    server = await startServer();
    apiKey = await server.createKey({ name: 'browser' });
    // A listener besides the server's own sees every request, the fast lane's too.
    server.app.server.prependListener('request', (req: IncomingMessage) => {
      received.push({ url: req.url ?? '', headers: req.rawHeaders.join('\n') });
    });
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });
  beforeEach(async () => {
    context = await browser.newContext();
  });
  afterEach(() => context.close());

  /** A new page whose requests, answers and problems are recorded. */
  async function openPage(): Promise<{ page: Page; seen: Recorded }> {
    const page = await context.newPage();
    const seen: Recorded = { requests: [], bodies: [], problems: [], violations: [] };
    // Recorded from inside the page: CSP violations as the page itself is told of them.
    await page.exposeFunction('__recordViolation', (text: string) => seen.violations.push(text));
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => {
        (window as any).__recordViolation(`${e.violatedDirective} ${e.blockedURI}`);
      });
    });
    page.on('request', (req) => {
      const headers = req.allHeaders().catch(() => req.headers());
      seen.requests.push(headers.then((all) => ({ url: req.url(), headers: all, body: req.postData() })));
    });
    page.on('response', (res) => {
      if (res.status() >= 400) seen.problems.push(`answer ${res.status()}: ${res.url()}`);
      seen.bodies.push(
        res.body().then(
          (body) => ({ url: res.url(), body: body.toString('utf8') }),
          () => ({ url: res.url(), body: '' }),
        ),
      );
    });
    page.on('console', (message) => {
      if (message.type() === 'error' || message.type() === 'warning') {
        seen.problems.push(`console ${message.type()}: ${message.text()} (${message.location().url})`);
      }
    });
    page.on('pageerror', (err) => seen.problems.push(`pageerror: ${err.message}`));
    return { page, seen };
  }

  const rowCount = async (id: string): Promise<number> =>
    Number((await server.sql<{ n: number }>(`SELECT count(*) AS n FROM pastes WHERE id = ${sqlText(id)}`))[0]?.n);

  /** Waits until view.js has put text into the plaintext element and returns it. */
  async function decrypted(page: Page): Promise<string> {
    await page.waitForFunction(() => (document.getElementById('plaintext')?.textContent ?? '') !== '', undefined, {
      timeout: 5_000,
    });
    return (await page.textContent('#plaintext')) ?? '';
  }

  /** Waits until view.js has left its first status ("Decrypting …") and returns the new one. */
  async function settledStatus(page: Page, timeout = 5_000): Promise<string> {
    await page.waitForFunction(
      () =>
        !document
          .getElementById('e2e-status')
          ?.textContent?.startsWith('This paste is encrypted end to end. Decrypting'),
      undefined,
      { timeout },
    );
    return (await page.textContent('#e2e-status')) ?? '';
  }

  /** An encrypted paste made as a client would: the server gets the ciphertext, never the key. */
  async function encryptedPaste(plaintext: string, extra: Record<string, unknown> = {}) {
    const { wire, key } = await encryptForTest(plaintext);
    const id = await createPaste(server, apiKey, { content: wire, encrypt: true, ...extra });
    return { id, wire, key };
  }

  /** Asserts that neither the browser's requests nor the server's received ones carry `secret`. */
  async function assertNeverSent(seen: Recorded, since: number, secret: string, origin = server.url): Promise<void> {
    assert.ok(seen.requests.length > 0, 'no request recorded');
    for (const req of await Promise.all(seen.requests)) {
      // Playwright reports a navigation's address with its fragment; what goes on the wire stops at '#'.
      const sent = req.url.split('#')[0] as string;
      assert.ok(!sent.includes(secret), `the key is in the address of a request: ${sent}`);
      assert.ok(!JSON.stringify(req.headers).includes(secret), `the key is in a header of ${sent}`);
      assert.ok(!(req.body ?? '').includes(secret), `the key is in the body of ${sent}`);
      assert.ok(sent.startsWith(`${origin}/`), `a request left the server's origin: ${sent}`);
    }
    const atServer = received.slice(since);
    assert.ok(atServer.length > 0, 'the server received no request');
    for (const req of atServer) {
      assert.ok(!req.url.includes(secret), `the server received the key in ${req.url}`);
      assert.ok(!req.headers.includes(secret), `the server received the key in a header of ${req.url}`);
    }
  }

  it('decrypts an E2E paste with the key from the #fragment, which never reaches the server', async () => {
    const secretWord = token('plaintext');
    const plaintext = `${secretWord}\n<b>not bold</b> & "quoted" ünïcode ✓\n`;
    const { id, wire, key } = await encryptedPaste(plaintext, { language: 'python' });
    const since = received.length;
    const { page, seen } = await openPage();
    const response = await page.goto(`${server.url}/view/${id}#${key}`);
    assert.equal(response?.status(), 200);

    assert.equal(await decrypted(page), plaintext, 'the decrypted text, exactly');
    assert.equal(await page.textContent('#e2e-status'), 'Decrypted in your browser.');
    assert.equal(await page.locator('#plaintext b').count(), 0, 'the plaintext was put in as HTML');
    assert.equal(await page.isVisible('#plaintext'), true);
    assert.equal(await page.isVisible('#ciphertext'), false, 'the ciphertext is shown');
    assert.equal(await page.isVisible('#e2e-key-form'), false, 'the key form is shown after decryption');
    // What the reader sees is the plaintext, not the ciphertext.
    const visible = await page.innerText('body');
    assert.ok(visible.includes(secretWord));
    assert.ok(!visible.includes(wire.split(':')[2] as string), 'the ciphertext is what the reader sees');

    await assertNeverSent(seen, since, key);
    const bodies = await Promise.all(seen.bodies);
    const html = bodies.find((b) => b.url.startsWith(`${server.url}/view/${id}`));
    assert.ok(html?.body.includes(wire), 'the page did not carry the ciphertext');
    for (const { url, body } of bodies) {
      assert.ok(!body.includes(secretWord), `the server sent the plaintext in ${url}`);
      assert.ok(!body.includes(key), `the server sent the key in ${url}`);
    }
    assert.ok(
      bodies.some((b) => b.url === `${server.url}/static/view.js`),
      'view.js was not loaded',
    );
    assert.deepEqual([...seen.problems, ...seen.violations], []);
  });

  it('served over plain HTTP on an address other than localhost, the page says decrypting needs a secure connection, not that the key is wrong', async () => {
    const { id, key } = await encryptedPaste(`${token('insecure')} body`);
    const { page, seen } = await openPage();
    const insecure = new URL(server.url);
    insecure.hostname = 'fastpaste.test';
    await page.goto(`${insecure.origin}/view/${id}#${key}`);
    assert.equal(await page.evaluate(() => window.isSecureContext), false);
    assert.match(await settledStatus(page), /needs a secure connection/);
    assert.equal(await page.textContent('#plaintext'), '');
    // Chromium says it ignores Cross-Origin-Opener-Policy on an origin that is not secure.
    const problems = seen.problems.filter(
      (problem) => !/Cross-Origin-Opener-Policy header has been ignored/.test(problem),
    );
    assert.deepEqual([...problems, ...seen.violations], []);
  });

  it('without JavaScript, the page of an encrypted paste says decrypting needs it and links to the ciphertext', async () => {
    const { id, wire } = await encryptedPaste(`${token('no-script')} body`);
    const quiet = await browser.newContext({ javaScriptEnabled: false });
    try {
      const page = await quiet.newPage();
      await page.goto(`${server.url}/view/${id}`);
      assert.match(await page.innerText('main'), /Decrypting it needs JavaScript/);
      const raw = await page.getAttribute('noscript a', 'href');
      assert.ok(raw?.endsWith(`/raw/${id}`), String(raw));
      assert.equal((await request(raw as string)).text, wire);
    } finally {
      await quiet.close();
    }
  });

  it('a view-once E2E paste burned where this browser cannot decrypt shows its ciphertext, its last copy', async () => {
    // Without JavaScript: the gate's form still burns it; the page shows the ciphertext.
    const first = await encryptedPaste(`${token('burned-no-script')} body`, { burn: true });
    const quiet = await browser.newContext({ javaScriptEnabled: false });
    try {
      const page = await quiet.newPage();
      await page.goto(`${server.url}/view/${first.id}`);
      await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Show and delete' }).click()]);
      assert.equal(await rowCount(first.id), 0);
      assert.match(await page.innerText('main'), /Its ciphertext, deleted from the server, is below/);
      assert.equal((await page.innerText('noscript pre.ciphertext, pre.ciphertext')).trim(), first.wire);
    } finally {
      await quiet.close();
    }
    // Over plain HTTP on an address other than localhost (no Web Crypto): the same.
    const second = await encryptedPaste(`${token('burned-insecure')} body`, { burn: true });
    const { page } = await openPage();
    const insecure = new URL(server.url);
    insecure.hostname = 'fastpaste.test';
    await page.goto(`${insecure.origin}/view/${second.id}#${second.key}`);
    await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Show and delete' }).click()]);
    assert.equal(await rowCount(second.id), 0);
    assert.match(await settledStatus(page), /needs a secure connection.*Its ciphertext is below/);
    assert.equal(await page.isVisible('#ciphertext'), true);
    assert.equal((await page.innerText('#ciphertext')).trim(), second.wire);
  });

  it('a view-once E2E paste burned in a browser that can decrypt, without its key or with a wrong one, shows its ciphertext, its last copy; the key typed then decrypts it', async () => {
    const otherKey = randomBytes(32).toString('base64url');
    for (const fragment of ['', `#${otherKey}`, '#cut-short']) {
      const secretWord = token('burned-keyless');
      const { id, wire, key } = await encryptedPaste(`${secretWord} body`, { burn: true });
      const { page, seen } = await openPage();
      await page.goto(`${server.url}/view/${id}${fragment}`);
      await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Show and delete' }).click()]);
      assert.equal(await rowCount(id), 0);
      assert.match(await settledStatus(page), /It was deleted from the server: its ciphertext is below/, fragment);
      assert.equal(await page.isVisible('#ciphertext'), true, `no ciphertext shown for ${JSON.stringify(fragment)}`);
      assert.equal((await page.innerText('#ciphertext')).trim(), wire);
      assert.ok(!(await page.innerText('body')).includes(secretWord));
      if (fragment === '') {
        await page.click('#e2e-key-form button'); // nothing typed: the page is still the last copy
        assert.match((await page.textContent('#e2e-status')) ?? '', /^Enter the key.*It was deleted from the server/);
        assert.equal(await page.isVisible('#ciphertext'), true);
      }
      await page.fill('#e2e-key', key);
      await page.click('#e2e-key-form button');
      assert.equal(await decrypted(page), `${secretWord} body`);
      assert.equal(await page.isVisible('#ciphertext'), false, 'the ciphertext stays shown after decrypting');
      assert.deepEqual([...seen.problems, ...seen.violations], []);
      await page.close();
    }
  });

  it('the home page form encrypts in the browser: only the ciphertext is sent, and the page it leads to decrypts', async () => {
    const secretWord = token('created-e2e');
    const plaintext = `${secretWord}\n<i>not italic</i> & \u00fcn\u00efcode \u2713\n`;
    const since = received.length;
    const { page, seen } = await openPage();
    // Opened under another name than the server's BASE_URL (127.0.0.1): the browser stays on it.
    const home = new URL(server.url);
    home.hostname = 'localhost';
    await page.goto(`${home.origin}/`);
    assert.equal(await page.isVisible('#e2e-option'), true, 'the option is offered on a secure page');
    await page.fill('#content', plaintext);
    await page.fill('input[name="title"]', 'made in a browser');
    await page.check('#encrypt');
    await Promise.all([page.waitForURL(/\/view\/[A-Za-z0-9]{10}#/), page.click('button[type="submit"]')]);
    const address = new URL(page.url());
    assert.equal(address.origin, home.origin, 'the paste opens where the form was');
    const id = address.pathname.slice('/view/'.length);
    const key = address.hash.slice(1);
    assert.match(key, /^[A-Za-z0-9_-]{43}$/, 'a 256-bit key, base64url');
    assert.equal(await decrypted(page), plaintext);
    assert.equal(await page.textContent('h1'), 'made in a browser');
    const [row] = await server.sql<{ content: string; encrypted: number; source: string }>(
      `SELECT content, encrypted, source FROM pastes WHERE id = ${sqlText(id)}`,
    );
    assert.match(row?.content ?? '', /^fpe1:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/);
    assert.equal(Number(row?.encrypted), 1);
    assert.equal(row?.source, 'web');
    await assertNeverSent(seen, since, key, home.origin);
    for (const req of await Promise.all(seen.requests)) {
      assert.ok(!(req.body ?? '').includes(secretWord), `the plaintext was sent to ${req.url}`);
    }
    assert.deepEqual([...seen.problems, ...seen.violations], []);
  });

  it('the home page form without JavaScript, or where it cannot encrypt, posts the text and shows its page', async () => {
    const quiet = await browser.newContext({ javaScriptEnabled: false });
    try {
      const page = await quiet.newPage();
      await page.goto(`${server.url}/`);
      assert.equal(await page.isVisible('#e2e-option'), false);
      // Browsers post a textarea's line breaks as CRLF: the paste keeps the LFs that were typed.
      const text = `${token('created-plain')} <b>as text</b>\nline two\n\nline four`;
      await page.fill('#content', text);
      await Promise.all([page.waitForURL(/\/view\/[A-Za-z0-9]{10}$/), page.click('button[type="submit"]')]);
      assert.ok((await page.innerText('pre')).includes('line four'));
      const id = new URL(page.url()).pathname.slice('/view/'.length);
      const [row] = await server.sql<{ content: string }>(`SELECT content FROM pastes WHERE id = ${sqlText(id)}`);
      assert.equal(row?.content, text);
    } finally {
      await quiet.close();
    }
    // Plain HTTP on an address other than localhost: no Web Crypto, so no option to encrypt.
    const { page } = await openPage();
    const insecure = new URL(server.url);
    insecure.hostname = 'fastpaste.test';
    await page.goto(`${insecure.origin}/`);
    await page.waitForLoadState('load');
    assert.equal(await page.isVisible('#e2e-option'), false);
  });

  it('a wrong key or no key shows a clear message, not the plaintext; the key form then decrypts', async () => {
    const secretWord = token('wrong-key');
    const { id, key } = await encryptedPaste(`${secretWord} body`);
    const otherKey = randomBytes(32).toString('base64url');
    const cut = 'This key is not whole: a key is 43 characters (a 256-bit key). Check that the link was copied entire.';
    const cases = [
      { fragment: `#${otherKey}`, message: 'This key does not decrypt the paste.' },
      { fragment: `#${key.slice(0, 20)}`, message: cut },
      { fragment: `#${key.slice(0, 42)}`, message: cut },
      { fragment: `#${key.slice(0, 41)}`, message: cut }, // not base64 at all (length 1 mod 4)
      { fragment: '#not*a*key', message: 'This key does not decrypt the paste.' },
      { fragment: '', message: 'This paste is encrypted end to end. Enter its key to read it.' },
    ];
    for (const { fragment, message } of cases) {
      const since = received.length;
      const { page, seen } = await openPage();
      await page.goto(`${server.url}/view/${id}${fragment}`);
      assert.equal(await settledStatus(page), message, `fragment ${JSON.stringify(fragment)}`);
      assert.equal(await page.isVisible('#e2e-key-form'), true, `no key form for ${JSON.stringify(fragment)}`);
      assert.equal(await page.textContent('#plaintext'), '');
      assert.ok(!(await page.innerText('body')).includes(secretWord));
      if (fragment === '') {
        await page.click('#e2e-key-form button'); // nothing typed
        assert.equal(await page.textContent('#e2e-status'), 'Enter the key to decrypt the paste.');
      }

      // The key typed into the form decrypts in the page: no request carries it either.
      await page.fill('#e2e-key', ` ${key} `);
      await page.click('#e2e-key-form button');
      assert.equal(await decrypted(page), `${secretWord} body`);
      assert.equal(await page.textContent('#e2e-status'), 'Decrypted in your browser.');
      assert.equal(await page.isVisible('#e2e-key-form'), false);
      await assertNeverSent(seen, since, key);
      assert.deepEqual([...seen.problems, ...seen.violations], []);
      await page.close();
    }
  });

  it('a paste encrypted with a 128- or 192-bit key is not opened with it (base64url or standard base64): the format is AES-GCM with a 256-bit key', async () => {
    for (const [bytes, encoding] of [
      [16, 'base64url'],
      [24, 'base64url'],
      [16, 'base64'],
      [24, 'base64'],
    ] as const) {
      const secretWord = token(`short-key-${bytes}`);
      // In standard base64, a key with + or / in it: one that base64url's alphabet does not hold.
      let made = await encryptForTest(`${secretWord} body`, bytes);
      const written = () => Buffer.from(made.key, 'base64url').toString(encoding);
      while (encoding === 'base64' && !/[+/]/.test(written())) made = await encryptForTest(`${secretWord} body`, bytes);
      const { wire } = made;
      const key = written();
      const id = await createPaste(server, apiKey, { content: wire, encrypt: true });
      const { page, seen } = await openPage();
      await page.goto(`${server.url}/view/${id}#${encodeURIComponent(key)}`);
      assert.equal(
        await settledStatus(page),
        'This key is not whole: a key is 43 characters (a 256-bit key). Check that the link was copied entire.',
        `${bytes * 8}-bit key in ${encoding}`,
      );
      assert.equal(await page.textContent('#plaintext'), '');
      assert.ok(!(await page.innerText('body')).includes(secretWord));
      assert.deepEqual([...seen.problems, ...seen.violations], []);
      await page.close();
    }
  });

  it('a fragment that is not valid percent-encoding shows the wrong-key message and the key form', async () => {
    const secretWord = token('malformed');
    const { id, key } = await encryptedPaste(`${secretWord} body`);
    for (const fragment of ['#%E0%A4%A', `#%E0${key}`, '#%']) {
      const since = received.length;
      const { page, seen } = await openPage();
      await page.goto(`${server.url}/view/${id}${fragment}`);
      assert.equal(await settledStatus(page, 1_000), 'This key does not decrypt the paste.', fragment);
      assert.equal(await page.isVisible('#e2e-key-form'), true, `no key form for ${fragment}`);
      assert.equal(await page.textContent('#plaintext'), '');
      // The form still works, and the page threw nothing on the way.
      await page.fill('#e2e-key', key);
      await page.click('#e2e-key-form button');
      assert.equal(await decrypted(page), `${secretWord} body`);
      await assertNeverSent(seen, since, key);
      assert.deepEqual([...seen.problems, ...seen.violations], [], fragment);
      await page.close();
    }
  });

  it('a view-once paste: the page asks first, a load burns nothing; the confirmation shows it once', async () => {
    const secretWord = token('view-once');
    const content = `${secretWord}\nread me once\n`;
    const id = await createPaste(server, apiKey, { content, burn: true, language: 'plaintext' });
    const { page, seen } = await openPage();

    // Loaded twice, as a link previewer and then the reader would: nothing is consumed.
    for (let load = 0; load < 2; load++) {
      const gate = await page.goto(`${server.url}/view/${id}`);
      assert.equal(gate?.status(), 200);
      assert.equal(await page.textContent('h1'), 'View once');
      assert.match(await page.innerText('main'), /Showing it deletes it from the server for everyone/);
      assert.ok(!(await page.content()).includes(secretWord), 'the gate page carries the content');
      assert.equal(await rowCount(id), 1, `load ${load + 1} of the gate consumed the paste`);
    }

    const [shown] = await Promise.all([
      page.waitForNavigation(),
      page.getByRole('button', { name: 'Show and delete' }).click(),
    ]);
    assert.equal(shown?.status(), 200);
    assert.equal(shown?.request().method(), 'POST');
    assert.equal(await page.textContent('main pre code'), content);
    assert.match(await page.innerText('main'), /it has now been deleted from the server/);
    assert.equal(await page.locator('nav.links a').count(), 0, 'a burned paste links to /raw or /download');
    assert.equal(await rowCount(id), 0, 'the paste outlived its one view');
    assert.deepEqual([...seen.problems, ...seen.violations], []);

    const again = await page.goto(`${server.url}/view/${id}`);
    assert.equal(again?.status(), 404);
    assert.ok(!(await page.content()).includes(secretWord));
    assert.equal((await request(`${server.url}/raw/${id}`)).status, 404);
  });

  it('a view-once paste: a second click on the confirmation before its answer sends nothing more, and the page shows the paste', async () => {
    const secretWord = token('double-click');
    const content = `${secretWord}\nshown once\n`;
    const id = await createPaste(server, apiKey, { content, burn: true, language: 'plaintext' });
    const { page, seen } = await openPage();
    let posts = 0;
    page.on('request', (req) => {
      if (req.method() === 'POST' && req.url().startsWith(`${server.url}/view/${id}`)) posts++;
    });
    // The answer held back, as on a slow connection, so that the second click comes before it.
    await page.route(`${server.url}/view/${id}`, async (route) => {
      if (route.request().method() !== 'POST') return route.continue();
      const response = await route.fetch();
      await new Promise((resolve) => setTimeout(resolve, 400));
      await route.fulfill({ response }).catch(() => {}); // a navigation the browser dropped
    });
    assert.equal((await page.goto(`${server.url}/view/${id}`))?.status(), 200);
    await page.evaluate(() => {
      const button = document.querySelector('#gate-form button') as HTMLButtonElement;
      button.click();
      setTimeout(() => button.click(), 100);
    });
    await page.waitForSelector('main pre code', { timeout: 5_000 });
    assert.equal(await page.textContent('main pre code'), content);
    assert.equal(posts, 1);
    assert.equal(await rowCount(id), 0);
    assert.deepEqual([...seen.problems, ...seen.violations], []);
  });

  it('an E2E paste keeps a leading BOM when decrypted, as a plain paste keeps it', async () => {
    const plaintext = '\uFEFFstarts with a byte order mark\n';
    const { id, key } = await encryptedPaste(plaintext);
    const { page, seen } = await openPage();
    assert.equal((await page.goto(`${server.url}/view/${id}#${key}`))?.status(), 200);
    assert.equal(await decrypted(page), plaintext);
    assert.deepEqual([...seen.problems, ...seen.violations], []);
  });

  it('the home page form neither encrypts nor sends what D6 refuses: under 3 characters, or only white space', async () => {
    const { page, seen } = await openPage();
    const home = new URL(server.url);
    home.hostname = 'localhost';
    await page.goto(`${home.origin}/`);
    await page.check('#encrypt');
    for (const content of ['   ', 'ab', ' \n\t\u00a0 ']) {
      await page.evaluate(() => {
        (document.getElementById('create-status') as HTMLElement).textContent = '';
      });
      await page.fill('#content', content);
      await page.click('button[type="submit"]');
      await page.waitForFunction(() => document.getElementById('create-status')?.textContent !== '');
      assert.equal(
        await page.textContent('#create-status'),
        'The content must be at least 3 characters and not only white space.',
        JSON.stringify(content),
      );
      assert.equal(new URL(page.url()).pathname, '/');
    }
    const sent = (await Promise.all(seen.requests)).filter((req) => req.body !== null && req.body !== undefined);
    assert.deepEqual(sent, [], 'a request with a body was sent');
    assert.deepEqual([...seen.problems, ...seen.violations], []);
  });

  it('a view-once E2E paste: the confirmation keeps the #fragment, so the page decrypts at once', async () => {
    const secretWord = token('view-once-e2e');
    const { id, key } = await encryptedPaste(`${secretWord} once`, { burn: true });
    const since = received.length;
    const { page, seen } = await openPage();
    await page.goto(`${server.url}/view/${id}#${key}`);
    assert.equal(await page.textContent('h1'), 'View once');
    assert.equal(await rowCount(id), 1, 'the gate consumed the paste');
    const [shown] = await Promise.all([
      page.waitForNavigation(),
      page.getByRole('button', { name: 'Show and delete' }).click(),
    ]);
    assert.equal(shown?.request().method(), 'POST');
    assert.equal(await rowCount(id), 0);
    // The gate's script (/static/gate.js) added the fragment to the form's action: the browser
    // keeps it in the address of the answer and sends only what precedes it.
    assert.equal(new URL(page.url()).hash, `#${key}`, 'the key did not survive the confirmation');
    assert.equal(await decrypted(page), `${secretWord} once`);
    assert.equal(await page.textContent('#e2e-status'), 'Decrypted in your browser.');
    assert.equal(await page.isVisible('#e2e-key-form'), false, 'the page asked for the key');
    assert.equal(await page.inputValue('#e2e-key'), '', 'a key was typed');
    await assertNeverSent(seen, since, key);
    assert.deepEqual([...seen.problems, ...seen.violations], []);
  });

  it('a password-protected E2E paste keeps its #fragment through a wrong password and the right one', async () => {
    const secretWord = token('protected-e2e');
    const { id, key } = await encryptedPaste(`${secretWord} locked`, { password: 'pw-right' });
    const since = received.length;
    const { page, seen } = await openPage();
    await page.goto(`${server.url}/view/${id}#${key}`);
    assert.equal(await page.textContent('h1'), 'Password required');
    for (const [password, status] of [
      ['pw-wrong', 403],
      ['pw-right', 200],
    ] as const) {
      await page.fill('input[name=password]', password);
      const [answer] = await Promise.all([
        page.waitForNavigation(),
        page.getByRole('button', { name: 'Show' }).click(),
      ]);
      assert.equal(answer?.status(), status, password);
      assert.equal(new URL(page.url()).hash, `#${key}`, `the key was lost after ${password}`);
    }
    assert.equal(await decrypted(page), `${secretWord} locked`);
    await assertNeverSent(seen, since, key);
    // The wrong password's 403 (the answer, and the console's note of it) is all that went wrong.
    const others = seen.problems.filter((p) => !/\b403\b/.test(p) || !p.includes(`${server.url}/view/${id}`));
    assert.deepEqual([...others, ...seen.violations], []);
  });

  /** Waits until /static/highlight.js has run and view.js has had its turn to use it. */
  async function highlighterRan(page: Page): Promise<void> {
    await page.waitForFunction(() => typeof (window as any).fastpasteHighlight === 'function', undefined, {
      timeout: 5_000,
    });
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 0)));
  }

  it('an E2E paste with a language is highlighted after decryption, with the spans the server makes', async () => {
    const content =
      'import os\n\nclass Greeter:\n    def greet(self, name: str) -> str:\n        # say hi\n        return f"hi {name}" + str(42) if name else None\n';
    const { id, key } = await encryptedPaste(content, { language: 'python' });
    const plainId = await createPaste(server, apiKey, { content, language: 'python' });
    const since = received.length;
    const { page, seen } = await openPage();
    await page.goto(`${server.url}/view/${id}#${key}`);
    await page.waitForSelector('#plaintext .hljs-keyword', { timeout: 5_000 });
    assert.equal(await page.textContent('#plaintext'), content, 'highlighting changed the text');
    assert.equal(await page.getAttribute('#plaintext', 'class'), 'hljs language-python');
    const keywordColour = await page.$eval('#plaintext .hljs-keyword', (el) => getComputedStyle(el).color);
    assert.equal(keywordColour, 'rgb(207, 34, 46)', "style.css's colour for a keyword");
    const inBrowser = await page.innerHTML('#plaintext');
    await assertNeverSent(seen, since, key);
    assert.deepEqual([...seen.problems, ...seen.violations], []);
    const bodies = await Promise.all(seen.bodies);
    assert.ok(bodies.some((b) => b.url === `${server.url}/static/highlight.js` && b.body.length > 10_000));

    // The server's page of the same content in the same language has the same markup.
    await page.goto(`${server.url}/view/${plainId}`);
    assert.equal(await page.innerHTML('main pre code'), inBrowser);
  });

  it('markup in a decrypted paste stays text, highlighted or not: no element is made, no handler runs', async () => {
    const plaintext = '<img src=x onerror="window.__xss = 1"><script>window.__xss = 2</script>\n"<b>x</b>"\n';
    for (const language of ['html', 'python', undefined]) {
      const { id, key } = await encryptedPaste(plaintext, language ? { language } : {});
      const { page, seen } = await openPage();
      await page.goto(`${server.url}/view/${id}#${key}`);
      assert.equal(await decrypted(page), plaintext, String(language));
      if (language) {
        await highlighterRan(page);
        assert.ok((await page.locator('#plaintext span[class^="hljs-"]').count()) > 0, `${language}: not highlighted`);
      }
      assert.equal(await page.textContent('#plaintext'), plaintext, String(language));
      assert.equal(await page.locator('#plaintext *:not(span)').count(), 0, `${language}: an element was made`);
      assert.equal(await page.locator('img, b').count(), 0);
      await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
      assert.equal(await page.evaluate(() => (window as any).__xss), undefined, `${language}: a handler ran`);
      const requested = (await Promise.all(seen.requests)).map((r) => r.url);
      assert.equal(requested.includes(`${server.url}/static/highlight.js`), language !== undefined, String(language));
      assert.deepEqual([...seen.problems, ...seen.violations], [], String(language));
      await page.close();
    }
  });

  it("highlighting in the browser keeps the server's cap; an unknown language is shown plain", async () => {
    const line = 'def f(x):\n    return x\n';
    const atCap = line.repeat(Math.ceil(MAX_HIGHLIGHT_BYTES / line.length)).slice(0, MAX_HIGHLIGHT_BYTES);
    const cases = [
      { what: 'at the cap', content: atCap, language: 'python', highlighted: true },
      { what: 'one over the cap', content: `${atCap}#`, language: 'python', highlighted: false },
      { what: 'an unknown language', content: line, language: 'no-such-language', highlighted: false },
    ];
    for (const { what, content, language, highlighted } of cases) {
      const { id, key } = await encryptedPaste(content, { language });
      const { page, seen } = await openPage();
      await page.goto(`${server.url}/view/${id}#${key}`);
      await decrypted(page);
      await highlighterRan(page);
      assert.equal((await page.locator('#plaintext .hljs-keyword').count()) > 0, highlighted, what);
      assert.equal(await page.textContent('#plaintext'), content, what);
      assert.deepEqual([...seen.problems, ...seen.violations], [], what);
      await page.close();
    }
  });

  it('the icon a page names is served (an SVG, cached), so no page logs a 404 for /favicon.ico', async () => {
    const id = await createPaste(server, apiKey, { content: 'an icon is asked for' });
    const { page, seen } = await openPage();
    await page.goto(`${server.url}/view/${id}`);
    assert.equal(await page.getAttribute('link[rel=icon]', 'href'), '/favicon.ico');
    // The browser asks for the icon by itself, after the page: wait until the server has answered it.
    const asked = (): boolean => received.some((r) => r.url === '/favicon.ico');
    for (let i = 0; i < 100 && !asked(); i++) await new Promise((r) => setTimeout(r, 20));
    const icon = await page.goto(`${server.url}/favicon.ico`);
    assert.equal(icon?.status(), 200);
    assert.equal((await icon?.allHeaders())?.['content-type'], 'image/svg+xml');
    assert.match((await icon?.allHeaders())?.['cache-control'] ?? '', /max-age=\d{6,}/);
    assert.ok((await page.locator('svg').count()) === 1, 'not an SVG image');
    assert.deepEqual([...seen.problems, ...seen.violations], []);
  });

  it('a highlighted page renders under its CSP with no console error; an inline script is refused', async () => {
    const content = 'function greet(name) {\n  // say hello\n  return "hello, " + name + 42;\n}\n';
    const id = await createPaste(server, apiKey, { content, language: 'javascript', title: 'greet.js' });
    const { page, seen } = await openPage();
    const response = await page.goto(`${server.url}/view/${id}`);
    assert.equal(response?.status(), 200);
    const csp = (await response?.allHeaders())?.['content-security-policy'] ?? '';
    assert.match(csp, /script-src 'self'/);
    assert.doesNotMatch(csp, /unsafe-inline/);

    await page.waitForLoadState('load');
    assert.equal(await page.textContent('h1'), 'greet.js');
    assert.equal(await page.textContent('main pre code'), content, 'highlighting changed the text');
    assert.match((await page.getAttribute('main pre code', 'class')) ?? '', /\bhljs\b.*\blanguage-javascript\b/);
    assert.ok((await page.locator('main pre code .hljs-keyword').count()) > 0, 'no highlighting in the page');
    // The same-origin stylesheet applied (style-src 'self'): keywords take its colour.
    const keywordColour = await page.$eval('main pre code .hljs-keyword', (el) => getComputedStyle(el).color);
    assert.equal(keywordColour, 'rgb(207, 34, 46)');
    assert.deepEqual([...seen.problems, ...seen.violations], [], 'the page logged problems');

    // The policy is in force: an inline script is refused, and the refusal is seen by the listeners
    // above (so they would have seen one of the page's own).
    await page.addScriptTag({ content: 'window.inlineRan = true;' }).catch(() => {});
    assert.equal(await page.evaluate(() => (window as any).inlineRan), undefined, 'an inline script ran');
    for (let i = 0; i < 100 && seen.violations.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(
      seen.violations.some((v) => v.startsWith('script-src')),
      `no CSP violation seen: ${seen.violations}`,
    );
    assert.ok(
      seen.problems.some((p) => /Content Security Policy/.test(p)),
      'the console did not report the refusal',
    );
  });
});
