/**
 * The one place an error becomes an answer (D7): any thrown value is turned into an AppError
 * (framework and parser errors by their codes, anything unexpected into a plain 500 whose detail
 * goes only to the log), then rendered as the JSON envelope, or as a page for a browser on the
 * web pages.
 */
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError, type ErrorCode, type FieldProblem, invalidRequest } from '../errors.js';
import { isBackendUnavailable, isStorageFull, isStorageRefusingWrites } from '../storage/unavailable.js';
import type { ErrorLog } from './error-log.js';
import { SECURITY_HEADERS } from './security-headers.js';
import { errorPage } from './web/pages.js';

interface FrameworkError {
  code?: string;
  statusCode?: number;
  message?: string;
  validation?: Array<{ instancePath?: string; message?: string; params?: Record<string, unknown> }>;
}

/** Framework and parser codes that are the client's fault, and what they mean for fastpaste. */
const FRAMEWORK_CODES: Record<string, [ErrorCode, string]> = {
  FST_ERR_CTP_EMPTY_JSON_BODY: ['invalid_request', 'The body is empty but Content-Type says JSON.'],
  FST_ERR_CTP_INVALID_JSON_BODY: ['invalid_request', 'The body is not valid JSON.'],
  FST_ERR_CTP_INVALID_MEDIA_TYPE: ['invalid_request', 'This Content-Type is not accepted here.'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: ['invalid_request', 'Content-Length does not match the body.'],
  FST_ERR_CTP_BODY_TOO_LARGE: ['content_too_large', 'The body is larger than this endpoint accepts.'],
  FST_PARTS_LIMIT: ['invalid_request', 'The form has too many parts.'],
  FST_FILES_LIMIT: ['invalid_request', 'The form may carry one file only.'],
  FST_FIELDS_LIMIT: ['invalid_request', 'The form has too many fields.'],
  FST_PROTO_VIOLATION: ['invalid_request', 'A form field has a forbidden name.'],
  FST_INVALID_MULTIPART_CONTENT_TYPE: ['invalid_request', 'The body is not multipart/form-data.'],
  FST_MP_PREMATURE_CLOSE: ['invalid_request', 'The request ended before the form was complete.'],
  FST_REQ_FILE_TOO_LARGE: ['file_too_large', 'The file is larger than 10 MB.'],
  // A path the router cannot decode, or a parameter past its length limit, names no paste.
  FST_ERR_BAD_URL: ['not_found', 'There is nothing at this address.'],
  FST_ERR_MAX_PARAM_LENGTH: ['not_found', 'There is nothing at this address.'],
  ERR_HTTP_REQUEST_TIMEOUT: ['invalid_request', 'The request took too long to arrive.'],
};

function fromValidation(validation: NonNullable<FrameworkError['validation']>): AppError {
  const details: FieldProblem[] = validation.map((v) => ({
    field:
      (v.params?.missingProperty as string | undefined) ??
      (v.params?.additionalProperty as string | undefined) ??
      (v.instancePath?.replace(/^\//, '') || '(request)'),
    message: v.message ?? 'is invalid',
  }));
  return invalidRequest(details);
}

/** Any thrown value as an AppError; `unexpected` is true when it is our fault (a 500). */
export function toAppError(thrown: unknown): { error: AppError; unexpected: boolean } {
  if (thrown instanceof AppError) return { error: thrown, unexpected: false };
  const err = (thrown ?? {}) as FrameworkError;
  if (err.validation) return { error: fromValidation(err.validation), unexpected: false };
  const known = err.code ? FRAMEWORK_CODES[err.code] : undefined;
  if (!known && isStorageFull(thrown)) {
    return {
      error: new AppError('service_unavailable', 'The server has no room left to store this; try again later.', {
        headers: { 'retry-after': '60' },
      }),
      unexpected: false,
    };
  }
  if (!known && isStorageRefusingWrites(thrown)) {
    return {
      error: new AppError(
        'service_unavailable',
        "The server's storage takes no writes or is failing right now; try again later.",
        {
          headers: { 'retry-after': '60' },
        },
      ),
      unexpected: false,
    };
  }
  if (!known && isBackendUnavailable(thrown)) {
    return {
      error: new AppError('service_unavailable', 'A backing service does not answer; try again in a moment.', {
        headers: { 'retry-after': '2' },
      }),
      unexpected: false,
    };
  }
  if (known) return { error: new AppError(known[0], known[1]), unexpected: false };
  const status = err.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    // busboy and other parsers say what is wrong with the body in their message; it is the
    // client's own input, never an internal detail.
    return { error: new AppError('invalid_request', 'The request could not be read.'), unexpected: false };
  }
  return {
    error: new AppError('internal_error', 'Something went wrong on our side; the problem has been logged.'),
    unexpected: true,
  };
}

/** Pages a browser reads get an HTML error; every other answer is the JSON envelope. */
function wantsPage(request: FastifyRequest): boolean {
  const url = request.url;
  const isPage = url === '/' || url.startsWith('/view/') || url.startsWith('/archive');
  return isPage && (request.headers.accept ?? '').includes('text/html');
}

/** The JSON envelope of an error answer (D7); our own faults name the request, whose log has the detail. */
export function errorEnvelope(answered: { error: AppError; unexpected: boolean }, requestId: string) {
  const { error, unexpected } = answered;
  return {
    error: true,
    message: unexpected ? `${error.message} (request ${requestId})` : error.message,
    code: error.code,
    details: error.details,
  };
}

export function sendError(
  errorLog: ErrorLog,
  request: FastifyRequest,
  reply: FastifyReply,
  thrown: unknown,
): FastifyReply {
  const answered = toAppError(thrown);
  const { error } = answered;
  errorLog.answered(request.log, thrown, answered);
  // Also here: some errors (an undecodable path) are answered before the onRequest hooks run.
  // No cache keeps a refusal either (app.ts: the API's answers are no-store).
  reply.headers(SECURITY_HEADERS);
  reply.header('cache-control', 'no-store');
  reply.code(error.status);
  for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
  // An answer sent before the body was read to its end closes the connection, so the rest of
  // a refused upload is never read.
  if (!request.raw.complete) {
    reply.header('connection', 'close');
    closeWithoutReset(request.raw.socket);
  }
  const envelope = errorEnvelope(answered, request.id);
  if (wantsPage(request)) {
    return reply.type('text/html; charset=utf-8').send(errorPage(error.status, envelope.message));
  }
  return reply.type('application/json; charset=utf-8').send(envelope);
}

/** How long a connection refused mid-body stays half-open for its client to read the answer. */
const LINGER_MS = 2000;

/**
 * Node closes a `connection: close` answer's socket as soon as the answer is written. With the
 * client's unread body still arriving, that close is a reset, and a client still writing (Node's
 * own, as scripts use it) lost the answer it had been sent: EPIPE instead of the 413. Instead the
 * socket stops reading, sends FIN after the answer, and is destroyed LINGER_MS later: nothing more
 * of the body is read (Node resumes a request whose body nobody read, to discard it: the socket
 * is paused again each time), and the client sees the answer first.
 */
export function closeWithoutReset(socket: Socket): void {
  socket.destroySoon = () => {
    socket.pause();
    socket.on('resume', () => socket.pause());
    socket.end();
    // Not unref'd: a server closing waits for these (at most LINGER_MS) like any connection.
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    socket.once('close', () => clearTimeout(timer));
  };
}
