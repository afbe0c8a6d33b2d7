/**
 * Quick-create for scripts (api-v1.md POST/GET /api/v1/cli, D18): the content as a raw body or
 * as a form field `content`, `paste` or `f:1`; parameters from the query or the form; the view
 * URL as plain text, or the create envelope on `Accept: application/json` or `json=1`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, type FieldProblem, invalidRequest } from '../../errors.js';
import type { ContentChecker } from '../../pastes/content-check.js';
import { EXPIRY_VALUES } from '../../pastes/expiry.js';
import {
  checkContent,
  MAX_TEXT_BYTES,
  parseCreateInput,
  parseFormBoolean,
  tooLarge,
} from '../../pastes/paste-input.js';
import { decodeTextFile } from '../../pastes/uploads.js';
import { declaredLengthGuard, multipartBodyLimit, readMultipartForm, UrlEncodedBody } from '../request-bodies.js';
import { type AccessDeps, keyIfSent, optionalApiKey } from './authentication.js';
import { type ApiDeps, createdMessage } from './paste-routes.js';

const CONTENT_FIELDS = new Set(['content', 'paste', 'f:1']);
const PARAMETERS = new Set(['expiry', 'title', 'lang', 'burn', 'json']);
/** An urlencoded 4 MB paste may triple in size on the wire (each byte as %XX). */
const FORM_BODY_LIMIT = 3 * MAX_TEXT_BYTES + 64 * 1024;
/**
 * The home page's form: a browser sends each line break of a textarea as CRLF, %0D%0A, six bytes
 * for the one stored (the form's text is kept with LF line breaks), so a 4 MB paste of short lines
 * may be six times its size on the wire. Its 4 MB is then held by the create's own check.
 */
export const WEB_FORM_BODY_LIMIT = 6 * MAX_TEXT_BYTES + 64 * 1024;

function wantsJson(request: FastifyRequest, params: Record<string, string>): boolean {
  if (params.json !== undefined) {
    const value = parseFormBoolean(params.json);
    if (value === undefined) throw invalidRequest([{ field: 'json', message: 'must be true or false' }]);
    if (value) return true;
  }
  return (request.headers.accept ?? '').includes('application/json');
}

/**
 * A raw body's bytes as the content's text. Bytes that are not UTF-8 text are refused after D6's
 * size and length, which come first whatever the bytes hold (D7: 413 over 4 MB, content_too_short
 * under 3 characters), as for text.
 */
function asText(bytes: Buffer, anonymous: boolean): string {
  const text = decodeTextFile(bytes);
  if (text === null) {
    if (bytes.length > MAX_TEXT_BYTES) throw tooLarge(MAX_TEXT_BYTES);
    checkContent(bytes.toString('utf8'), Number.POSITIVE_INFINITY);
  }
  if (text === null && anonymous) {
    throw new AppError('content_rejected', 'The content was refused: it looks like binary data, not text.');
  }
  if (text === null) {
    throw new AppError('invalid_request', 'The content is not UTF-8 text.', {
      details: [{ field: 'content', message: 'is not UTF-8 text without NUL bytes' }],
    });
  }
  return text;
}

/** The content and the parameters, from whichever encoding the client used. */
async function readQuickCreate(
  request: FastifyRequest,
  anonymous: boolean,
): Promise<{ content: string | undefined; params: Record<string, string> }> {
  const params: Record<string, string> = {};
  const problems: FieldProblem[] = [];
  const take = (name: string, value: unknown) => {
    if (!PARAMETERS.has(name)) problems.push({ field: name, message: 'is not a known parameter' });
    else if (typeof value !== 'string') problems.push({ field: name, message: 'must be given once' });
    else if (Object.hasOwn(params, name)) problems.push({ field: name, message: 'is given more than once' });
    else params[name] = value;
  };
  for (const [name, value] of Object.entries(request.query as Record<string, unknown>)) take(name, value);

  let content: string | undefined;
  const setContent = (value: string) => {
    if (content !== undefined) problems.push({ field: 'content', message: 'is given more than once' });
    content = value;
  };
  if (request.isMultipart()) {
    // A declared length past the form's limit was refused before (anonymousCreateOptions).
    const form = await readMultipartForm(request, {
      fileFields: CONTENT_FIELDS,
      contentFields: CONTENT_FIELDS,
      maxFileBytes: MAX_TEXT_BYTES,
    });
    if (form.file) setContent(asText(form.file.bytes, anonymous));
    for (const [name, value] of Object.entries(form.fields)) {
      if (CONTENT_FIELDS.has(name)) setContent(value);
      else take(name, value);
    }
  } else if (Buffer.isBuffer(request.body)) {
    setContent(asText(request.body, anonymous));
  } else if (request.body instanceof UrlEncodedBody) {
    const body = request.body;
    if (!Object.keys(body.firstFields).some((name) => CONTENT_FIELDS.has(name))) {
      // `curl --data-binary @file` sends the file as an urlencoded form without saying so: a
      // form with no content field (among its first MAX_FORM_FIELDS pairs: a text may hold
      // any number of `&`) is taken as the raw content, exactly as sent.
      setContent(asText(body.raw, anonymous));
    } else {
      for (const name of body.notUtf8) problems.push({ field: name, message: 'is not UTF-8 text' });
      for (const [name, value] of Object.entries(body.fields)) {
        if (!CONTENT_FIELDS.has(name)) take(name, value);
        else if (typeof value === 'string') setContent(value);
        else problems.push({ field: name, message: 'is given more than once' });
      }
    }
  }
  if (problems.length > 0) throw invalidRequest(problems);
  return { content, params };
}

function usage(baseUrl: string): string {
  return [
    'fastpaste quick-create',
    '',
    'Paste a file:',
    `  curl --data-binary @file.txt -H 'Content-Type: text/plain' ${baseUrl}/api/v1/cli`,
    'Paste from standard input:',
    `  echo 'hello world' | curl --data-binary @- ${baseUrl}/api/v1/cli`,
    'As a form field (content, paste or f:1):',
    `  curl -F 'f:1=<-' ${baseUrl}/api/v1/cli < file.txt`,
    'With options (expiry, title, lang, burn):',
    `  curl --data-binary @script.py '${baseUrl}/api/v1/cli?expiry=1h&lang=python&burn=1'`,
    'JSON answer instead of the plain URL:',
    `  curl --data-binary @file.txt -H 'Accept: application/json' ${baseUrl}/api/v1/cli`,
    'With an API key (counted against the key):',
    `  curl --data-binary @file.txt -H 'X-API-Key: fp_...' ${baseUrl}/api/v1/cli`,
    '',
    `Expiry values: ${EXPIRY_VALUES.join(' ')} (default 1d).`,
    '',
  ].join('\n');
}

/**
 * What a create open to anonymous use runs before its body (quick-create, and the home page's
 * form): a declared length past the form's limit refused before it is read, then the key if one
 * is sent, else the client address's anonymous budget.
 */
export function anonymousCreateOptions(
  deps: AccessDeps & { anonymousAllowed: boolean; anonHourlyLimit: number },
  bodyLimit = FORM_BODY_LIMIT,
) {
  return {
    onRequest: [
      // A raw body is read up to 4 MB and a multipart form up to its content's 4 MB: only an
      // urlencoded one may be larger on the wire than what it carries.
      declaredLengthGuard((kind) => ({
        limit:
          kind === 'urlencoded'
            ? bodyLimit
            : kind === 'multipart'
              ? multipartBodyLimit(MAX_TEXT_BYTES)
              : MAX_TEXT_BYTES,
        error: () => tooLarge(MAX_TEXT_BYTES),
      })),
      optionalApiKey(deps),
    ],
    bodyLimit,
  };
}

/**
 * Runs the create's checks, a refusal naming the language as quick-create's clients send it
 * (`lang`, D7: details name the bad field).
 */
function asSent<T>(check: () => T): T {
  try {
    return check();
  } catch (err) {
    if (!(err instanceof AppError) || !err.details?.some((d) => d.field === 'language')) throw err;
    throw invalidRequest(err.details.map((d) => (d.field === 'language' ? { ...d, field: 'lang' } : d)));
  }
}

export async function registerCliRoutes(
  app: FastifyInstance,
  deps: ApiDeps & { anonymousAllowed: boolean; anonHourlyLimit: number; contentChecker: ContentChecker },
): Promise<void> {
  const { pastes, presenter } = deps;

  app.post('/api/v1/cli', anonymousCreateOptions(deps), async (request, reply) => {
    const anonymous = request.apiKey === null;
    const { content, params } = await readQuickCreate(request, anonymous);
    // Anonymous content: D6's length and size first (too short or too large whatever it holds),
    // then the content check (binary, NUL included, is content_rejected), then the fields' rules.
    if (anonymous && content !== undefined) {
      checkContent(content);
      deps.contentChecker.check(content);
    }
    const json = wantsJson(request, params);
    const fields: Record<string, unknown> = { content };
    if (params.expiry !== undefined) fields.expiry = params.expiry;
    if (params.title !== undefined) fields.title = params.title;
    if (params.lang !== undefined) fields.language = params.lang;
    if (params.burn !== undefined) fields.burn = params.burn;
    const input = asSent(() => parseCreateInput(fields, 'form'));
    // After the title's own rules: a title they refuse is invalid_request, not content_rejected.
    if (anonymous) deps.contentChecker.checkTitle(input.title);
    const created = await pastes.create(input, {
      owner: request.apiKey,
      source: 'cli',
      ip: request.ip,
    });
    reply.code(201);
    if (json) {
      return reply.send({
        error: false,
        message: createdMessage(created.paste.id, undefined, false),
        data: presenter.created(created.paste, input),
      });
    }
    return reply.type('text/plain; charset=utf-8').send(`${presenter.viewUrl(created.paste.id)}\n`);
  });

  app.get('/api/v1/cli', { onRequest: keyIfSent(deps) }, async (request, reply: FastifyReply) => {
    // A parameter given twice arrives as an array.
    const switchValue = (request.query as Record<string, unknown>).json;
    if (switchValue !== undefined && typeof switchValue !== 'string') {
      throw invalidRequest([{ field: 'json', message: 'must be given once' }]);
    }
    // The same switch as the create's (D18): json=1 or Accept, a json that is not a boolean 400.
    const json = wantsJson(request, switchValue === undefined ? {} : { json: switchValue });
    const text = usage(presenter.baseUrl);
    if (json)
      return {
        error: false,
        data: { usage: text, endpoint: `${presenter.baseUrl}/api/v1/cli`, expiry_values: EXPIRY_VALUES },
      };
    return reply.type('text/plain; charset=utf-8').send(text);
  });
}
