/**
 * The public addresses: /view (with the burn confirmation of D11 and the password form of D13),
 * /raw and /download (D16, password in X-Paste-Password), /archive and /sitemap.xml (D22), and
 * the static files of the pages.
 */
import { isUtf8 } from 'node:buffer';
import { readFileSync } from 'node:fs';
import { create as contentDisposition } from 'content-disposition';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, type FieldProblem, invalidRequest } from '../../errors.js';
import type { ContentChecker } from '../../pastes/content-check.js';
import { EXPIRY_VALUES } from '../../pastes/expiry.js';
import type { Paste } from '../../pastes/paste.js';
import { checkContent, parseCreateInput, parseFormBoolean } from '../../pastes/paste-input.js';
import type { PastePresenter } from '../../pastes/paste-presenter.js';
import type { PasteService, Read } from '../../pastes/paste-service.js';
import type { PasteSummary } from '../../storage/paste-repository.js';
import type { AccessDeps } from '../api/authentication.js';
import { anonymousCreateOptions, WEB_FORM_BODY_LIMIT } from '../api/cli-routes.js';
import { createdMessage, pasteIdParam, readOptions, sendText } from '../api/paste-routes.js';
import { UrlEncodedBody } from '../request-bodies.js';
import { BROWSER_HIGHLIGHTER, browserHighlighter } from './browser-highlighter.js';
import { highlight } from './highlight.js';
import { archivePage, gatePage, homePage, pastePageParts, sitemapXml } from './pages.js';

export interface WebDeps extends AccessDeps {
  pastes: PasteService;
  presenter: PastePresenter;
  /** Anonymous creation (ANONYMOUS_CLI), as quick-create's: per client address, its text checked. */
  anonymousAllowed: boolean;
  anonHourlyLimit: number;
  contentChecker: ContentChecker;
}

/** The home page form's fields (pages.ts homePage); any other is refused, as D8 says. */
const CREATE_FORM_FIELDS = new Set(['content', 'title', 'language', 'expiry', 'burn', 'password', 'public', 'encrypt']);

/**
 * The create fields of the home page's form: each known field once, UTF-8. The rules of a create
 * (blanks left out among them) are parseCreateInput's, as for every other entry point. A
 * browser sends a textarea's line breaks as CRLF whatever was typed or pasted (HTML's form
 * submission converts them), so the content's CRLFs are turned back into the LFs of the page.
 */
function createFormFields(body: unknown): Record<string, string> {
  if (!(body instanceof UrlEncodedBody)) {
    throw invalidRequest([{ field: 'content', message: 'is required (a form, application/x-www-form-urlencoded)' }]);
  }
  const problems: FieldProblem[] = [...body.notUtf8].map((field) => ({ field, message: 'is not UTF-8 text' }));
  const fields: Record<string, string> = {};
  for (const [name, value] of Object.entries(body.fields)) {
    if (!CREATE_FORM_FIELDS.has(name)) problems.push({ field: name, message: 'is not a known field' });
    else if (typeof value !== 'string') problems.push({ field: name, message: 'is given more than once' });
    else if (name === 'content') fields[name] = value.replace(/\r\n/g, '\n');
    else fields[name] = value;
  }
  if (problems.length > 0) throw invalidRequest(problems);
  return fields;
}

const ARCHIVE_PAGE_SIZE = 50;
/** A sitemap holds at most 50,000 addresses (sitemaps.org): the home page, the archive and the pastes. */
const SITEMAP_MAX = 50_000 - 2;

const JAVASCRIPT = 'text/javascript; charset=utf-8';

const staticFile = (name: string, type: string) =>
  [name, { type, body: readFileSync(new URL(`./static/${name}`, import.meta.url)) }] as const;

/** A Map, not an object: a name every object has (constructor, __proto__) is no file. */
const STATIC_FILES = new Map([
  staticFile('view.js', JAVASCRIPT),
  staticFile('gate.js', JAVASCRIPT),
  staticFile('create.js', JAVASCRIPT),
  staticFile('style.css', 'text/css; charset=utf-8'),
]);

/**
 * The icon, at the address browsers and crawlers ask for on their own (an SVG: every current
 * browser takes one, whatever the address). Cached for a week, so a browser asks once; and a
 * route, so the asking never counts against the 404 budget (not-found-throttle.ts).
 */
const FAVICON = readFileSync(new URL('./static/favicon.svg', import.meta.url));

/** The page of a paste just read, in the parts it is written in (pages.ts pastePageParts). */
export function readPageParts(read: Read, presenter: PastePresenter): Array<string | Buffer> {
  const paste = read.paste;
  return pastePageParts(
    paste,
    { rawUrl: presenter.rawUrl(paste.id), downloadUrl: presenter.downloadUrl(paste) },
    {
      burned: read.burned,
      highlighted: paste.encrypted ? null : highlight(paste.content, paste.language, paste.sha256),
    },
  );
}

/** A paste as a file to save: its own name, or its id with .txt (.fpe1 for ciphertext). */
function sendDownload(reply: FastifyReply, paste: Paste): FastifyReply {
  const filename = paste.originalFilename || `${paste.id}.${paste.encrypted ? 'fpe1' : 'txt'}`;
  reply.header('content-disposition', contentDisposition(filename, { type: 'attachment' }));
  return sendText(reply, paste.content);
}

function sendPage(reply: FastifyReply, html: string | Buffer, status = 200): FastifyReply {
  return reply.code(status).type('text/html; charset=utf-8').header('cache-control', 'no-store').send(html);
}

function pastePassword(request: FastifyRequest): string | undefined {
  const header = request.headers['x-paste-password'];
  const value = Array.isArray(header) ? header[0] : header;
  return value === undefined ? undefined : utf8HeaderText(value);
}

/**
 * A header's text as its client wrote it. Node reads header bytes as latin1, one character a
 * byte, and clients send UTF-8 (curl sends what the terminal gives; fetch refuses any other
 * text): a password "пароль" would arrive as "Ð¿Ð°Ñ..." and never match. Bytes that are UTF-8
 * are read as UTF-8; any others are left as latin1 read them.
 */
function utf8HeaderText(value: string): string {
  if (!NOT_ASCII.test(value)) return value;
  const bytes = Buffer.from(value, 'latin1');
  return isUtf8(bytes) ? bytes.toString('utf8') : value;
}

const NOT_ASCII = /[^\x00-\x7f]/;

function formField(request: FastifyRequest, name: string): string | undefined {
  if (!(request.body instanceof UrlEncodedBody)) return undefined;
  const value = request.body.fields[name];
  return typeof value === 'string' ? value : undefined;
}

export async function registerWebRoutes(app: FastifyInstance, deps: WebDeps): Promise<void> {
  const { pastes, presenter } = deps;

  const renderRead = (reply: FastifyReply, read: Read) =>
    sendPage(
      reply,
      Buffer.concat(
        readPageParts(read, presenter).map((part) => (typeof part === 'string' ? Buffer.from(part) : part)),
      ),
    );

  const home = homePage(presenter.baseUrl, { canCreate: deps.anonymousAllowed, expiries: EXPIRY_VALUES });
  app.get('/', async (_request, reply) => sendPage(reply, home));

  // A paste from the home page's form (D10: content_type text, source web). A browser's post is
  // answered with 303 to the paste's page; create.js, which sends an E2E paste's ciphertext,
  // asks for the create's JSON (Accept: application/json) and adds the key to the address.
  app.post('/', anonymousCreateOptions(deps, WEB_FORM_BODY_LIMIT), async (request, reply) => {
    const fields = createFormFields(request.body);
    // Anonymous text, as quick-create's: D6's length and size first, then the content check
    // (binary, NUL included, is content_rejected), then the fields' rules. An E2E paste's text
    // cannot be checked: the server has only its ciphertext. Its title can.
    const checked = request.apiKey === null && parseFormBoolean(fields.encrypt ?? '') !== true;
    if (checked && fields.content !== undefined) {
      checkContent(fields.content);
      deps.contentChecker.check(fields.content);
    }
    const input = parseCreateInput(fields, 'form');
    if (request.apiKey === null) deps.contentChecker.checkTitle(input.title);
    const created = await pastes.create(input, { owner: request.apiKey, source: 'web', ip: request.ip });
    if ((request.headers.accept ?? '').includes('application/json')) {
      return reply.code(201).send({
        error: false,
        message: createdMessage(created.paste.id, undefined, false),
        data: presenter.created(created.paste, input),
      });
    }
    return reply
      .code(303)
      .header('location', `/view/${encodeURIComponent(created.paste.id)}`)
      .send();
  });

  app.route({
    method: ['GET', 'HEAD'],
    url: '/view/:id',
    handler: async (request, reply) => {
      const id = pasteIdParam(request);
      const paste = await pastes.peek(id);
      // View-once and protected pastes are shown only after a POST: a link preview or a
      // crawler following the link consumes nothing.
      if (paste.burnAfterRead || paste.passwordHash !== null) return sendPage(reply, gatePage(paste, {}));
      return renderRead(reply, await pastes.read(id, 'view', readOptions(request), paste));
    },
  });

  app.post('/view/:id', { bodyLimit: 64 * 1024 }, async (request, reply) => {
    const id = pasteIdParam(request);
    if (formField(request, 'confirm') === undefined) {
      throw invalidRequest([{ field: 'confirm', message: 'is required' }]);
    }
    // The page of a protected paste too long to show whole downloads it through this form.
    const download = formField(request, 'download') !== undefined;
    try {
      const read = await pastes.read(
        id,
        download ? 'download' : 'view',
        readOptions(request, formField(request, 'password')),
      );
      return download ? sendDownload(reply, read.paste) : renderRead(reply, read);
    } catch (err) {
      if (
        err instanceof AppError &&
        (err.code === 'wrong_password' || err.code === 'password_protected' || err.code === 'too_many_attempts')
      ) {
        for (const [name, value] of Object.entries(err.headers)) reply.header(name, value);
        return sendPage(reply, gatePage(await pastes.peek(id), { error: err.message }), err.status);
      }
      throw err;
    }
  });

  app.route({
    method: ['GET', 'HEAD'],
    url: '/raw/:id',
    handler: async (request, reply) => {
      const read = await pastes.read(pasteIdParam(request), 'raw', readOptions(request, pastePassword(request)));
      return sendText(reply, read.paste.content);
    },
  });

  app.route({
    method: ['GET', 'HEAD'],
    url: '/download/:id',
    handler: async (request, reply) => {
      const read = await pastes.read(pasteIdParam(request), 'download', readOptions(request, pastePassword(request)));
      return sendDownload(reply, read.paste);
    },
  });

  app.get('/archive', async (request, reply) => {
    const raw = (request.query as Record<string, unknown>).page;
    const page = raw === undefined ? 1 : Number(raw);
    if (typeof raw !== 'undefined' && (typeof raw !== 'string' || !/^\d{1,6}$/.test(raw) || page < 1)) {
      throw invalidRequest([{ field: 'page', message: 'must be a whole number from 1' }]);
    }
    const items = await pastes.listPublic((page - 1) * ARCHIVE_PAGE_SIZE, ARCHIVE_PAGE_SIZE + 1);
    return sendPage(reply, archivePage(items.slice(0, ARCHIVE_PAGE_SIZE), page, items.length > ARCHIVE_PAGE_SIZE));
  });

  const renderSitemap = (items: PasteSummary[]) => Buffer.from(sitemapXml(presenter.baseUrl, items));
  app.get('/sitemap.xml', async (_request, reply) =>
    reply.type('application/xml; charset=utf-8').send(await pastes.publicSnapshot(SITEMAP_MAX, renderSitemap)),
  );

  app.get('/favicon.ico', async (_request, reply) =>
    reply.type('image/svg+xml').header('cache-control', 'public, max-age=604800').send(FAVICON),
  );

  app.get('/static/:file', async (request, reply) => {
    const name = (request.params as { file: string }).file;
    // highlight.js for view.js (browser-highlighter.ts): built with the sources, or on first use.
    const file =
      name === BROWSER_HIGHLIGHTER ? { type: JAVASCRIPT, body: await browserHighlighter() } : STATIC_FILES.get(name);
    if (!file) throw new AppError('not_found', 'No such file.');
    return reply.type(file.type).header('cache-control', 'public, max-age=3600').send(file.body);
  });
}
