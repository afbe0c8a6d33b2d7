/**
 * How request bodies are read, always as streams with hard limits (D6, D17): JSON and urlencoded
 * forms up to a size set per route, raw bodies (quick-create) up to 4 MB counted while they
 * arrive, and multipart forms part by part with the file cut at its limit. A body over its
 * limit is refused as soon as the limit is crossed; the rest is never read. JSON must be UTF-8
 * (RFC 8259): other bytes are malformed JSON, never replaced by U+FFFD and stored.
 */
import { isUtf8 } from 'node:buffer';
import type { Readable } from 'node:stream';
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError, invalidRequest } from '../errors.js';
import { MAX_TEXT_BYTES, tooLarge } from '../pastes/paste-input.js';

/** Routes that take a raw body: any content type but the two form types (D18), JSON included. */
const RAW_BODY_ROUTES = new Set(['/api/v1/cli']);

const isRawBodyRoute = (request: FastifyRequest): boolean => RAW_BODY_ROUTES.has(request.routeOptions.url ?? '');

/**
 * What a route that takes no raw body answers one, where it is not the API's: the home page's form
 * is urlencoded, and a script sending text there means quick-create.
 */
const UNPARSED_BODY_MESSAGES = new Map([
  ['/', "Send the home page's form as application/x-www-form-urlencoded; from a script, POST the text to /api/v1/cli."],
]);

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * A request no route takes (404, or 405 for a known path) is answered without reading its body:
 * a body that cannot be parsed must not turn that answer into a 400, and the answer closes the
 * connection (error-presenter.ts), so the rest is never read.
 */
const noRoute = (request: FastifyRequest): boolean => request.is404;

/**
 * A request with nothing to parse: no route, or a DELETE (the only route method here that takes
 * no body) that sends none. Fastify runs the parser of a DELETE's Content-Type even then, and a
 * client that sends `Content-Type: application/json` on every request got 400 for an empty JSON
 * body, its paste left in place.
 */
function nothingToParse(request: FastifyRequest): boolean {
  if (noRoute(request)) return true;
  if (request.method !== 'DELETE') return false;
  const { headers } = request;
  return headers['transfer-encoding'] === undefined && (headers['content-length'] ?? '0') === '0';
}

/** A JSON or form body past the route's limit (the content itself is checked once parsed). */
const bodyTooLarge = (): AppError =>
  new AppError('content_too_large', 'The body is larger than this endpoint accepts.');

/** A JSON body's text: UTF-8 (RFC 8259), or the 400 that says it is not. */
export function decodeJsonText(body: Buffer): string {
  try {
    return strictUtf8.decode(body);
  } catch {
    throw new AppError('invalid_request', 'The body is not valid JSON: it is not UTF-8.');
  }
}

/** A JSON body's bytes to their value, or a throw of the error the API's JSON parser gives. */
export type JsonBodyParser = (body: Buffer) => unknown;

/**
 * The parser of the API's JSON bodies (the routes' and the fast lane's): strict UTF-8, then
 * Fastify's own JSON parser, which refuses __proto__ and constructor keys.
 */
function jsonBodyParser(app: FastifyInstance): JsonBodyParser {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  return (body) => {
    let failure: Error | null = null;
    let value: unknown;
    // Fastify's parser calls back before it returns.
    parseJson({} as FastifyRequest, decodeJsonText(body), (err, parsed) => {
      failure = err;
      value = parsed;
    });
    if (failure) throw failure;
    return value;
  };
}

/** Registers the body parsers; returns the JSON one, for the fast lane's creates. */
export async function registerBodyParsers(app: FastifyInstance): Promise<JsonBodyParser> {
  app.addContentTypeParser('application/x-www-form-urlencoded', (request, payload, done) => {
    if (nothingToParse(request)) return done(null, undefined);
    readLimited(payload, request.routeOptions.bodyLimit, bodyTooLarge).then(
      (body) => done(null, parseUrlEncoded(body)),
      (err) => done(err, undefined),
    );
  });
  // JSON: read within the route's limit, decoded strictly, then Fastify's own parser (which
  // refuses __proto__ and constructor keys). On quick-create a JSON body is the raw content.
  const parseJson = jsonBodyParser(app);
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', (request, payload, done) => {
    if (nothingToParse(request)) return done(null, undefined);
    const raw = isRawBodyRoute(request);
    const limit = raw ? MAX_TEXT_BYTES : request.routeOptions.bodyLimit;
    readLimited(payload, limit, raw ? () => tooLarge(MAX_TEXT_BYTES) : bodyTooLarge).then(
      (body) => {
        if (raw) return done(null, body);
        let value: unknown;
        try {
          value = parseJson(body);
        } catch (err) {
          return done(err as Error, undefined);
        }
        done(null, value);
      },
      (err) => done(err, undefined),
    );
  });
  await app.register(multipart, { throwFileSizeLimit: false });
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('*', (request, payload, done) => {
    if (nothingToParse(request)) return done(null, undefined);
    if (!isRawBodyRoute(request)) {
      const message =
        UNPARSED_BODY_MESSAGES.get(request.routeOptions.url ?? '') ??
        'Send the body as application/json or multipart/form-data.';
      done(new AppError('invalid_request', message), undefined);
      return;
    }
    readLimited(payload, MAX_TEXT_BYTES).then(
      (body) => done(null, body),
      (err) => done(err, undefined),
    );
  });
  return parseJson;
}

/**
 * An urlencoded body: its fields, and the bytes as sent (quick-create may take them as content).
 * `notUtf8` names the fields whose name or value, once its escapes are decoded, is not UTF-8:
 * their text holds U+FFFD where those bytes were, and a route that takes them refuses them
 * instead (a body that is not a form after all is taken as sent, and judged as such).
 */
export class UrlEncodedBody {
  /**
   * `firstFields`: the fields of the first MAX_FORM_FIELDS pairs; `overfull`: the body holds more
   * pairs than that, which were not parsed.
   */
  constructor(
    readonly raw: Buffer,
    readonly firstFields: Record<string, string | string[]>,
    readonly notUtf8: ReadonlySet<string> = new Set(),
    readonly overfull = false,
  ) {}

  /** The form's fields; 400 invalid_request for a body of more than MAX_FORM_FIELDS pairs. */
  get fields(): Record<string, string | string[]> {
    if (this.overfull) {
      throw invalidRequest([{ field: 'body', message: `a form may hold at most ${MAX_FORM_FIELDS} fields` }]);
    }
    return this.firstFields;
  }
}

/** One name or value of a form, as bytes: `+` a space, `%XX` a byte (a `%` without two hex digits kept). */
function formComponent(bytes: Buffer): { text: string; utf8: boolean } {
  const decoded = Buffer.allocUnsafe(bytes.length);
  let length = 0;
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i] as number;
    const high = byte === 0x25 ? hexValue(bytes[i + 1]) : -1;
    const low = high >= 0 ? hexValue(bytes[i + 2]) : -1;
    if (low >= 0) {
      decoded[length++] = high * 16 + low;
      i += 2;
    } else {
      decoded[length++] = byte === 0x2b ? 0x20 : byte;
    }
  }
  const used = decoded.subarray(0, length);
  return { text: used.toString('utf8'), utf8: isUtf8(used) };
}

/** The value of an ASCII hex digit's byte, or -1. */
function hexValue(byte: number | undefined): number {
  if (byte === undefined) return -1;
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

const AMPERSAND = 0x26;
const EQUALS = 0x3d;
const NO_BYTES = Buffer.alloc(0);

/**
 * The most pairs a form may hold. Every form of the service has under ten fields; a body of
 * millions (`a&a&…`, six million in the home page's 25 MB) costs seconds of the event loop to
 * parse however it is parsed (about 1.3 µs a pair). Express's body-parser has the same limit.
 */
export const MAX_FORM_FIELDS = 1000;

/**
 * As URLSearchParams parses a form (WHATWG), on its bytes, keeping which names or values are not
 * UTF-8. Parses the first MAX_FORM_FIELDS pairs only (empty ones, `&&`, counted too); a body with
 * more is `overfull`, and its `fields` refuse it. Quick-create may still take such a body whole as
 * the paste (`curl --data-binary @file` of a text with a thousand `&`).
 */
export function parseUrlEncoded(raw: Buffer): UrlEncodedBody {
  const fields: Record<string, string | string[]> = Object.create(null);
  const notUtf8 = new Set<string>();
  let pairs = 0;
  for (let start = 0; start < raw.length; ) {
    if (pairs++ === MAX_FORM_FIELDS) return new UrlEncodedBody(raw, fields, notUtf8, true);
    const found = raw.indexOf(AMPERSAND, start);
    const end = found < 0 ? raw.length : found;
    if (end > start) {
      const pair = raw.subarray(start, end);
      const equals = pair.indexOf(EQUALS);
      const name = formComponent(equals < 0 ? pair : pair.subarray(0, equals));
      const value = formComponent(equals < 0 ? NO_BYTES : pair.subarray(equals + 1));
      if (!name.utf8 || !value.utf8) notUtf8.add(name.text);
      const previous = fields[name.text];
      if (previous === undefined) fields[name.text] = value.text;
      // Appended in place: a copy for each repeat made a body of n repeats cost n²/2 (`a&a&…`,
      // 6 million pairs in a form's 12 MB, blocked the event loop for hours).
      else if (Array.isArray(previous)) previous.push(value.text);
      else fields[name.text] = [previous, value.text];
    }
    start = end + 1;
  }
  return new UrlEncodedBody(raw, fields, notUtf8);
}

/** A body that stopped before its end: the client went away, broke the framing, or was cut off. */
export function bodyCutShort(): AppError {
  return new AppError('invalid_request', 'The body could not be read to its end.');
}

/**
 * Reads a stream into a Buffer, failing with 413 (`tooLargeError`, by default the one for
 * `limit`) the moment it passes `limit` bytes.
 */
export function readLimited(
  stream: NodeJS.ReadableStream,
  limit: number,
  tooLargeError: () => AppError = () => tooLarge(limit),
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    // A request destroyed before its reader came (its connection closed while it waited for an
    // upload slot or its key's quota) emits nothing more, neither 'end' nor 'error': without
    // this its handler would wait for ever (and a close for it, requests-in-flight.ts).
    if ((stream as Readable).destroyed) {
      reject(bodyCutShort());
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        stream.pause();
        reject(tooLargeError());
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, size));
    };
    // The client went away or broke the framing mid-body: its fault, never a 500 in the log.
    const onError = () => {
      cleanup();
      reject(bodyCutShort());
    };
    const cleanup = () => {
      stream.removeListener('data', onData);
      stream.removeListener('end', onEnd);
      stream.removeListener('error', onError);
      stream.removeListener('close', onError);
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
    // Closed without an end and without an error (destroyed with none): cut short all the same.
    stream.on('close', onError);
  });
}

export interface UploadedFile {
  field: string;
  filename: string;
  mimeType: string;
  bytes: Buffer;
}

export interface MultipartForm {
  fields: Record<string, string>;
  file: UploadedFile | undefined;
}

export interface MultipartOptions {
  /** Field names that may carry a file. */
  fileFields: ReadonlySet<string>;
  /** Largest file accepted. */
  maxFileBytes: number;
  /** Text fields that carry a paste's content, read up to MAX_TEXT_BYTES; any other is a small field. */
  contentFields?: ReadonlySet<string>;
  /** Checks a file's name and type before its bytes are read; throws to refuse it. */
  checkFile?: (filename: string, mimeType: string) => void;
}

/** How often, and how many times in a row, the request must be found held back to count as stuck. */
const STALL_CHECK_MS = 250;
const STALL_CHECKS = 8;

/**
 * Fails when the form parser has stopped reading the request for good. @fastify/busboy 3.2.6
 * (Dicer) skips a part without Content-Disposition (or not `form-data`, or whose name holds a bare
 * line break) by resuming it a tick later; when such a part buffers past its high-water mark and
 * ends in the same write, Dicer stays paused, busboy never drains, and the request stays paused
 * with no error and no end: the client would wait for the request timeout. Reading a form never
 * holds the request back otherwise (each file is read at once), so a request paused for
 * STALL_CHECKS checks in a row (counted in checks, so a busy event loop does not trip it) is a
 * broken form.
 */
function parserStall(
  request: FastifyRequest,
  maxBytes: number,
  tooBig: () => AppError,
): { stalled: Promise<never>; stop: () => void } {
  let fail: (err: AppError) => void = () => {};
  const stalled = new Promise<never>((_resolve, reject) => {
    fail = reject;
  });
  stalled.catch(() => {});
  // The whole form is cut at its limit too: busboy caps each field and the file, but would read
  // any number of bytes of part headers and skipped parts.
  let seen = 0;
  const count = (chunk: Buffer) => {
    seen += chunk.length;
    if (seen > maxBytes) fail(tooBig());
  };
  request.raw.on('data', count);
  let held = 0;
  const timer = setInterval(() => {
    const raw = request.raw;
    held = raw.isPaused() && !raw.readableEnded && !raw.destroyed ? held + 1 : 0;
    if (held >= STALL_CHECKS) {
      clearInterval(timer);
      fail(new AppError('invalid_request', 'The multipart body could not be read.'));
    }
  }, STALL_CHECK_MS);
  timer.unref();
  return {
    stalled,
    stop: () => {
      clearInterval(timer);
      request.raw.off('data', count);
    },
  };
}

/** Reads a multipart form: its text fields and at most one file, within the limits. */
export async function readMultipartForm(request: FastifyRequest, options: MultipartOptions): Promise<MultipartForm> {
  // Destroyed before the form's reader came (as readLimited): the parser would wait for ever.
  if (request.raw.destroyed) throw bodyCutShort();
  const fields: Record<string, string> = {};
  let file: UploadedFile | undefined;
  const parts = request.parts({
    // Every part comes as bytes, text fields too: busboy would decode a field's bytes leniently
    // (U+FFFD for what is not UTF-8) and @fastify/multipart would parse one typed
    // application/json (an object, stored as "[object Object]"). A text field is its bytes as
    // sent, and must be UTF-8 (textOfField). Which parts are files is decided below, as busboy
    // decides it by default, and the file and field counts too (busboy counts every part a file).
    isPartAFile: () => true,
    limits: {
      fileSize: Math.max(options.maxFileBytes, MAX_TEXT_BYTES),
      files: 25,
      parts: 25,
      fieldNameSize: 64,
      headerPairs: 16,
    },
  });
  const maxFormBytes = multipartBodyLimit(options.maxFileBytes);
  const { stalled, stop } = parserStall(request, maxFormBytes, () => tooLarge(options.maxFileBytes));
  const iterator = parts[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await Promise.race([iterator.next(), stalled]);
      if (next.done) break;
      const part = next.value;
      if (part.type !== 'file') throw new Error('a multipart part read as a field'); // isPartAFile
      const isFile = isFilePart(part.filename, part.mimetype);
      if (isFile && file) throw new request.server.multipartErrors.FilesLimitError();
      if (Object.hasOwn(fields, part.fieldname) || file?.field === part.fieldname) {
        throw invalidRequest([{ field: part.fieldname, message: 'is sent more than once' }]);
      }
      if (isFile) {
        if (!options.fileFields.has(part.fieldname)) {
          throw invalidRequest([{ field: part.fieldname, message: 'may not carry a file' }]);
        }
        // A part typed as bytes may come without a name (undefined, whatever the types say).
        const filename = part.filename ?? '';
        options.checkFile?.(filename, part.mimetype);
        const bytes = await Promise.race([readFilePart(part.file, options.maxFileBytes), stalled]);
        file = { field: part.fieldname, filename, mimeType: part.mimetype, bytes };
      } else {
        if (Object.keys(fields).length === MAX_TEXT_FIELDS) throw new request.server.multipartErrors.FieldsLimitError();
        const name = part.fieldname;
        const bytes = options.contentFields?.has(name)
          ? await Promise.race([readFilePart(part.file, MAX_TEXT_BYTES), stalled])
          : await Promise.race([readFilePart(part.file, MAX_FIELD_BYTES, () => fieldTooLong(name)), stalled]);
        fields[name] = textOfField(name, bytes);
      }
    }
  } catch (err) {
    if (err instanceof AppError) throw err;
    const code = (err as { code?: string }).code;
    if (code?.startsWith('FST_')) throw err;
    // busboy's own complaints (no boundary, malformed part headers) are about the client's body.
    throw new AppError('invalid_request', 'The multipart body could not be read.');
  } finally {
    stop();
  }
  return { fields, file };
}

/**
 * The most a multipart form may hold: its file (or a text field as large as the largest text)
 * and small fields, with their framing.
 */
export function multipartBodyLimit(maxFileBytes: number): number {
  return Math.max(maxFileBytes, MAX_TEXT_BYTES) + 64 * 1024;
}

/** Text fields a form may hold besides its file. */
const MAX_TEXT_FIELDS = 24;

/**
 * The most a text field other than content may hold: the longest of them (a password of 1,024
 * characters) is at most 4 KB of UTF-8. A longer one is refused as that field's problem (400),
 * not as content over 4 MB (413).
 */
const MAX_FIELD_BYTES = 64 * 1024;

function fieldTooLong(name: string): AppError {
  return invalidRequest([{ field: name, message: `is longer than ${MAX_FIELD_BYTES / 1024} KB` }]);
}

/**
 * Whether a part is a file: it names one, or is typed as bytes (busboy's own default, which
 * isPartAFile replaces). Any other part is a text field.
 */
function isFilePart(filename: string | undefined, mimeType: string): boolean {
  return filename !== undefined || mimeType === 'application/octet-stream';
}

/** A text field's value: its bytes as UTF-8, refused when they are not. */
function textOfField(name: string, bytes: Buffer): string {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    throw invalidRequest([{ field: name, message: 'is not UTF-8 text' }]);
  }
}

/**
 * Reads one part's bytes (a file, or a text field's value) up to `limit`. busboy stops handing over bytes at the limit but would go on reading the
 * request to its end; failing at its 'limit' event answers at once, and the answer closes the
 * connection so the rest is never read.
 */
function readFilePart(
  file: NodeJS.ReadableStream & {
    truncated?: boolean;
    errored?: unknown;
    destroyed?: boolean;
    readableEnded?: boolean;
  },
  limit: number,
  overLimit: () => AppError = () => tooLarge(limit),
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const broken = () => reject(new AppError('invalid_request', 'The multipart body could not be read.'));
    // busboy may have parsed (and failed) the whole body before this part is read.
    if (file.errored) return broken();
    const chunks: Buffer[] = [];
    let size = 0;
    file.on('data', (chunk: Buffer) => {
      size += chunk.length;
      // busboy's own cut is at the largest part of any kind (a file or a text field).
      if (size > limit) reject(overLimit());
      else chunks.push(chunk);
    });
    file.on('limit', () => reject(overLimit()));
    file.on('end', () => (file.truncated ? reject(overLimit()) : resolve(Buffer.concat(chunks, size))));
    file.on('error', broken);
    file.on('close', () => {
      if (!file.readableEnded) broken();
    });
    if (file.destroyed && !file.readableEnded) broken();
  });
}

/** A body's kind, as the limits on its declared length tell them apart. */
export type BodyKind = 'multipart' | 'urlencoded' | 'other';

function bodyKind(request: FastifyRequest): BodyKind {
  const type = (request.headers['content-type'] ?? '').toLowerCase();
  if (type.startsWith('multipart/')) return 'multipart';
  return type.startsWith('application/x-www-form-urlencoded') ? 'urlencoded' : 'other';
}

/**
 * A route hook that refuses a body whose declared Content-Length is over the route's limit
 * before anything else runs (authentication included), so the answer goes out before the client
 * has sent much. `limitFor` gives the limit and the error for this request's kind of body.
 */
export function declaredLengthGuard(limitFor: (kind: BodyKind) => { limit: number; error: () => AppError }) {
  return async (request: FastifyRequest): Promise<void> => {
    const header = request.headers['content-length'];
    if (header === undefined) return;
    const { limit, error } = limitFor(bodyKind(request));
    if (Number(header) > limit) throw error();
  };
}
