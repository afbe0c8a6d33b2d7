/**
 * How request bodies are read, always as streams with hard limits (D6, D17): JSON and urlencoded
 * forms up to a size set per route, raw bodies (quick-create) up to 4 MB counted while they
 * arrive, and multipart forms part by part with the file cut at its limit. A body over its
 * limit is refused as soon as the limit is crossed; the rest is never read.
 */
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError, invalidRequest } from '../errors.js';
import { MAX_TEXT_BYTES, tooLarge } from '../pastes/paste-input.js';

/** Routes that take a raw body (any content type but JSON and the two form types). */
const RAW_BODY_ROUTES = new Set(['/api/v1/cli']);

export async function registerBodyParsers(app: FastifyInstance): Promise<void> {
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'buffer' }, (_request, body, done) => {
    done(null, parseUrlEncoded(body as Buffer));
  });
  await app.register(multipart, { throwFileSizeLimit: false });
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('*', (request, payload, done) => {
    if (!RAW_BODY_ROUTES.has(request.routeOptions.url ?? '')) {
      done(new AppError('invalid_request', 'Send the body as application/json or multipart/form-data.'), undefined);
      return;
    }
    readLimited(payload, MAX_TEXT_BYTES).then(
      (body) => done(null, body),
      (err) => done(err, undefined),
    );
  });
}

/** An urlencoded body: its fields, and the bytes as sent (quick-create may take them as content). */
export class UrlEncodedBody {
  constructor(
    readonly raw: Buffer,
    readonly fields: Record<string, string | string[]>,
  ) {}
}

function parseUrlEncoded(raw: Buffer): UrlEncodedBody {
  const fields: Record<string, string | string[]> = Object.create(null);
  for (const [name, value] of new URLSearchParams(raw.toString('utf8'))) {
    const previous = fields[name];
    if (previous === undefined) fields[name] = value;
    else fields[name] = Array.isArray(previous) ? [...previous, value] : [previous, value];
  }
  return new UrlEncodedBody(raw, fields);
}

/** Reads a stream into a Buffer, failing with 413 the moment it passes `limit` bytes. */
export function readLimited(stream: NodeJS.ReadableStream, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        stream.pause();
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const cleanup = () => {
      stream.removeListener('data', onData);
      stream.removeListener('end', onEnd);
      stream.removeListener('error', onError);
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
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
  /** Checks a file's name and type before its bytes are read; throws to refuse it. */
  checkFile?: (filename: string, mimeType: string) => void;
}

/** Reads a multipart form: its text fields and at most one file, within the limits. */
export async function readMultipartForm(request: FastifyRequest, options: MultipartOptions): Promise<MultipartForm> {
  const fields: Record<string, string> = {};
  let file: UploadedFile | undefined;
  const parts = request.parts({
    limits: {
      fileSize: options.maxFileBytes,
      files: 1,
      fields: 24,
      parts: 25,
      fieldSize: MAX_TEXT_BYTES + 1,
      fieldNameSize: 64,
      headerPairs: 16,
    },
  });
  try {
    for await (const part of parts) {
      if (Object.hasOwn(fields, part.fieldname) || file?.field === part.fieldname) {
        throw invalidRequest([{ field: part.fieldname, message: 'is sent more than once' }]);
      }
      if (part.type === 'file') {
        if (!options.fileFields.has(part.fieldname)) {
          throw invalidRequest([{ field: part.fieldname, message: 'may not carry a file' }]);
        }
        options.checkFile?.(part.filename, part.mimetype);
        const bytes = await readFilePart(part.file, options.maxFileBytes);
        file = { field: part.fieldname, filename: part.filename, mimeType: part.mimetype, bytes };
      } else {
        if (part.valueTruncated) throw tooLarge(MAX_TEXT_BYTES);
        fields[part.fieldname] = String(part.value);
      }
    }
  } catch (err) {
    if (err instanceof AppError) throw err;
    const code = (err as { code?: string }).code;
    if (code?.startsWith('FST_')) throw err;
    // busboy's own complaints (no boundary, malformed part headers) are about the client's body.
    throw new AppError('invalid_request', 'The multipart body could not be read.');
  }
  return { fields, file };
}

/**
 * Reads one file part. busboy stops handing over bytes at the limit but would go on reading the
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
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const broken = () => reject(new AppError('invalid_request', 'The multipart body could not be read.'));
    // busboy may have parsed (and failed) the whole body before this part is read.
    if (file.errored) return broken();
    const chunks: Buffer[] = [];
    let size = 0;
    file.on('data', (chunk: Buffer) => {
      size += chunk.length;
      chunks.push(chunk);
    });
    file.on('limit', () => reject(tooLarge(limit)));
    file.on('end', () => (file.truncated ? reject(tooLarge(limit)) : resolve(Buffer.concat(chunks, size))));
    file.on('error', broken);
    file.on('close', () => {
      if (!file.readableEnded) broken();
    });
    if (file.destroyed && !file.readableEnded) broken();
  });
}

/**
 * A route hook that refuses a body whose declared Content-Length is over the route's limit
 * before anything else runs (authentication included), so the answer goes out before the client
 * has sent much. `limitFor` gives the limit and the error for this request's content type.
 */
export function declaredLengthGuard(limitFor: (multipart: boolean) => { limit: number; error: () => AppError }) {
  return async (request: FastifyRequest): Promise<void> => {
    const header = request.headers['content-length'];
    if (header === undefined) return;
    const multipart = (request.headers['content-type'] ?? '').toLowerCase().startsWith('multipart/');
    const { limit, error } = limitFor(multipart);
    if (Number(header) > limit) throw error();
  };
}
