/** The JSON API of pastes: create, read, raw, update, delete, list (api-v1.md, Endpoints). */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { clientBucket } from '../../client-address.js';
import { AppError, invalidRequest, notFound } from '../../errors.js';
import type { ApiKey, KeyService } from '../../keys/key-service.js';
import type { QuotaService } from '../../keys/quota-service.js';
import { isPlausiblePasteId } from '../../pastes/paste-ids.js';
import {
  type CreateInput,
  MAX_TEXT_BYTES,
  MAX_UPLOAD_BYTES,
  parseCreateInput,
  parseUpdateInput,
  tooLarge,
} from '../../pastes/paste-input.js';
import type { PastePresenter } from '../../pastes/paste-presenter.js';
import type { Created, PasteService } from '../../pastes/paste-service.js';
import { decodeTextFile, isAllowedExtension, isTextualMimeType, safeFilename } from '../../pastes/uploads.js';
import { declaredLengthGuard, multipartBodyLimit, readMultipartForm, UrlEncodedBody } from '../request-bodies.js';
import { TEXT_CONTENT_SECURITY_POLICY } from '../security-headers.js';
import { callerKey, requireApiKey } from './authentication.js';
import { readPagination } from './pagination.js';

export interface ApiDeps {
  pastes: PasteService;
  keys: KeyService;
  quota: QuotaService;
  presenter: PastePresenter;
}

/** JSON with every character escaped twice as long still fits; the content is checked after. */
// 6 bytes of JSON per byte of content at worst (\u00e9, as json.dumps writes é by default): a
// body within D6 however it is escaped. Bodies past 1 MB are read a few at a time (upload-slots.ts).
export const JSON_BODY_LIMIT = 6 * MAX_TEXT_BYTES + 64 * 1024;
const MULTIPART_BODY_LIMIT = multipartBodyLimit(MAX_UPLOAD_BYTES);

const FILE_FIELDS = new Set(['file']);

export function pasteIdParam(request: FastifyRequest): string {
  const { id } = request.params as { id: string };
  if (!isPlausiblePasteId(id)) throw notFound();
  return id;
}

export function jsonObjectBody(request: FastifyRequest): Record<string, unknown> {
  const body = request.body;
  if (body instanceof UrlEncodedBody) {
    throw new AppError('invalid_request', 'Send the body as application/json or multipart/form-data.');
  }
  return jsonObject(body);
}

/** A parsed JSON body that must be an object. */
function jsonObject(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body) || Buffer.isBuffer(body)) {
    throw new AppError('invalid_request', 'The body must be a JSON object.');
  }
  return body as Record<string, unknown>;
}

/** The 201's body of a create. */
function createdAnswer(presenter: PastePresenter, created: Created, input: CreateInput) {
  return {
    error: false,
    message: createdMessage(created.paste.id, input.slug, created.slugTaken),
    data: presenter.created(created.paste, input),
  };
}

/**
 * A create from a parsed JSON body by a key: the 201's body. The route's, and the fast lane's
 * for a plain JSON create (fast-lane.ts).
 */
export async function createFromJson(
  deps: Pick<ApiDeps, 'pastes' | 'presenter'>,
  body: unknown,
  key: ApiKey,
  ip: string,
): Promise<ReturnType<typeof createdAnswer>> {
  const input = parseCreateInput(jsonObject(body), 'json');
  const created = await deps.pastes.create(input, { owner: key, source: 'api', ip });
  return createdAnswer(deps.presenter, created, input);
}

/** The content length the client announced, if any. */
export function announcedLength(request: FastifyRequest): number | undefined {
  const header = request.headers['content-length'];
  return header === undefined ? undefined : Number(header);
}

function checkUploadType(sentName: string, mimeType: string): void {
  // A file part without a name (a browser's file input left empty sends filename=""; a client
  // may send bytes with none at all): no extension to judge it by. A name sent that holds none
  // once made safe (only control characters) is a name of a type not accepted. ("..", "dir/"
  // reach here empty: the parser keeps only the last path part, and drops . and ..)
  if (sentName === '') throw invalidRequest([{ field: 'file', message: 'is required, with its file name' }]);
  const filename = safeFilename(sentName);
  if (!isAllowedExtension(filename)) {
    throw new AppError('file_type_not_allowed', 'This file extension is not accepted; only text and code files are.', {
      details: [{ field: 'file', message: 'extension not allowed' }],
    });
  }
  if (!isTextualMimeType(mimeType, filename)) {
    throw new AppError(
      'file_type_not_allowed',
      `The file type ${mimeType} is not accepted; only text and code files are.`,
      {
        details: [{ field: 'file', message: 'MIME type not allowed' }],
      },
    );
  }
}

/** A create request from an upload: the form's fields plus the file's text as content (D17). */
async function readUpload(request: FastifyRequest): Promise<{ input: CreateInput; filename: string }> {
  const length = announcedLength(request);
  if (length !== undefined && length > MULTIPART_BODY_LIMIT) throw tooLarge(MAX_UPLOAD_BYTES);
  const form = await readMultipartForm(request, {
    fileFields: FILE_FIELDS,
    maxFileBytes: MAX_UPLOAD_BYTES,
    checkFile: checkUploadType,
  });
  if (!form.file) throw invalidRequest([{ field: 'file', message: 'is required' }]);
  if ('content' in form.fields)
    throw invalidRequest([{ field: 'content', message: 'is not a field of an upload; send the file' }]);
  const filename = safeFilename(form.file.filename);
  const text = decodeTextFile(form.file.bytes);
  if (text === null) {
    throw new AppError('file_type_not_allowed', 'The file is not UTF-8 text.', {
      details: [{ field: 'file', message: 'is not UTF-8 text without NUL bytes' }],
    });
  }
  return { input: parseCreateInput({ ...form.fields, content: text }, 'form', { filename }), filename };
}

export async function registerPasteRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { pastes, presenter } = deps;
  const onRequest = requireApiKey(deps);
  const guardCreate = declaredLengthGuard((kind) =>
    kind === 'multipart'
      ? { limit: MULTIPART_BODY_LIMIT, error: () => tooLarge(MAX_UPLOAD_BYTES) }
      : { limit: JSON_BODY_LIMIT, error: () => tooLarge(MAX_TEXT_BYTES) },
  );
  const guardUpdate = declaredLengthGuard(() => ({ limit: JSON_BODY_LIMIT, error: () => tooLarge(MAX_TEXT_BYTES) }));

  app.post(
    '/api/v1/paste',
    { onRequest: [guardCreate, onRequest], bodyLimit: JSON_BODY_LIMIT },
    async (request, reply) => {
      const key = callerKey(request);
      if (!request.isMultipart()) {
        const length = announcedLength(request);
        if (length !== undefined && length > JSON_BODY_LIMIT) throw tooLarge(MAX_TEXT_BYTES);
        return reply.code(201).send(await createFromJson(deps, jsonObjectBody(request), key, request.ip));
      }
      const { input, filename } = await readUpload(request);
      const created = await pastes.create(input, {
        owner: key,
        source: 'api',
        ip: request.ip,
        filename,
      });
      return reply.code(201).send(createdAnswer(presenter, created, input));
    },
  );

  app.route({
    method: ['GET', 'HEAD'],
    url: '/api/v1/paste/:id',
    onRequest,
    handler: async (request) => {
      const read = await pastes.read(pasteIdParam(request), 'api', readOptions(request));
      return { error: false, data: presenter.detail(read.paste, read.burned) };
    },
  });

  app.route({
    method: ['GET', 'HEAD'],
    url: '/api/v1/paste/:id/raw',
    onRequest,
    handler: async (request, reply) => {
      const read = await pastes.read(pasteIdParam(request), 'api', readOptions(request));
      return sendText(reply, read.paste.content);
    },
  });

  app.put('/api/v1/paste/:id', { onRequest: [guardUpdate, onRequest], bodyLimit: JSON_BODY_LIMIT }, async (request) => {
    const id = pasteIdParam(request);
    const input = parseUpdateInput(jsonObjectBody(request));
    const updated = await pastes.update(id, callerKey(request).id, input);
    return { error: false, message: 'Paste updated.', data: presenter.updated(updated, input.key) };
  });

  app.delete('/api/v1/paste/:id', { onRequest }, async (request) => {
    await pastes.remove(pasteIdParam(request), callerKey(request).id);
    return { error: false, message: 'Paste deleted.' };
  });

  app.get('/api/v1/pastes', { onRequest }, async (request) => {
    const { page, limit } = readPagination(request.query as Record<string, unknown>);
    const { items, total } = await pastes.list(callerKey(request).id, page, limit);
    return {
      error: false,
      ...presenter.listPage(items, page, limit, total),
    };
  });
}

export function createdMessage(id: string, slug: string | undefined, slugTaken: boolean): string {
  return slugTaken
    ? `Paste created. The slug "${slug}" was taken, so the paste is at "${id}" instead.`
    : 'Paste created.';
}

/** What every read passes to the domain: HEAD consumes nothing (D11). */
export function readOptions(request: FastifyRequest, password?: string) {
  return {
    consume: request.method !== 'HEAD',
    // Wrong passwords are counted per client as every per-address limit is (an IPv6 client per
    // /64); worked out only when a password is checked.
    // A method, not a getter: V8 makes an object literal with an accessor slowly, and under load
    // each one outlived the young generation (measured: 130 MB promoted in 5 s of /view).
    clientAddress: () => clientBucket(request.ip),
    stillWanted: () => !request.raw.socket.destroyed,
    password,
  };
}

/** Plain text as raw answers it (D16), sandboxed should a browser render it (security-headers.ts). */
export function sendText(reply: FastifyReply, content: string): FastifyReply {
  return reply
    .type('text/plain; charset=utf-8')
    .header('content-security-policy', TEXT_CONTENT_SECURITY_POLICY)
    .header('x-content-type-options', 'nosniff')
    .header('cache-control', 'no-store')
    .send(content);
}
