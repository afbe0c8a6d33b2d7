/**
 * Requests Node's HTTP parser refuses before any route sees them (a broken request line or
 * header, both Content-Length and Transfer-Encoding, headers over 16 KB, a request time-out, an
 * Expect header other than 100-continue) get the D7 envelope and the security headers like every
 * other answer, then the connection is closed.
 */
import type { Server, ServerResponse } from 'node:http';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.js';
import { SECURITY_HEADERS } from './security-headers.js';

function envelope(error: AppError): string {
  return JSON.stringify({ error: true, message: error.message, code: error.code });
}

function errorFor(code: string | undefined): AppError {
  if (code === 'HPE_HEADER_OVERFLOW') return new AppError('headers_too_large', 'The request headers are too large.');
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return new AppError('request_timeout', 'The request was not sent in time.');
  }
  return new AppError('invalid_request', 'The request is not valid HTTP.');
}

/** The answer Node's server is writing on the socket (its own field), while one is unfinished. */
function answerInFlight(socket: Socket): ServerResponse | null {
  const current = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  return current && !current.writableFinished ? current : null;
}

/**
 * Fastify's clientErrorHandler: the answer written straight to the socket, then closed. Whole
 * requests pipelined before the broken one are answered first (Node answers a connection's
 * requests in order, one at a time): the refusal goes out once the last of their answers is
 * finished, where Node's own handler would close the connection under them.
 */
export function answerClientError(this: FastifyInstance, err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || !socket.writable) {
    socket.destroy();
    return;
  }
  // Node's parser reports its error again for every chunk the client sends after it: one refusal.
  if (refusing.has(socket)) return;
  refusing.add(socket);
  // As Fastify's own handler does; the raw packet (headers included) is redacted (app.ts).
  this.log.trace({ err }, 'client error');
  // Nothing more is read: the parser would go on with a body after its request's time-out.
  socket.pause();
  refuseAndClose(socket, errorFor(err.code));
}

/** How long a refused connection stays open for its client to read the answer. */
const LINGER_MS = 2000;

/** How long a refusal may wait for the answers of the requests pipelined before it. */
const WAIT_MS = 60_000;

/**
 * Refuses the connection with `error` once the answers of the requests before it are finished (at
 * most WAIT_MS), then closes it LINGER_MS after, whether or not its client ends its side: Node's
 * time-outs no longer reach a socket handed to a clientError or connect listener, and a client
 * that never sent its FIN kept a half-closed connection for good.
 */
function refuseAndClose(socket: Socket, error: AppError): void {
  const waiting = setTimeout(() => socket.destroy(), WAIT_MS);
  socket.once('close', () => clearTimeout(waiting));
  refuseAfterAnswers(socket, error, () => {
    clearTimeout(waiting);
    const lingering = setTimeout(() => socket.destroy(), LINGER_MS);
    socket.once('close', () => clearTimeout(lingering));
  });
}

/**
 * A connection refused as it opens (connections-per-address.ts): nothing of it is read, the
 * refusal is written at once, and it is closed LINGER_MS after. Node's HTTP parser reads the
 * socket's handle itself (it consumes it), past the stream's pause: the handle stops reading, or a
 * request sent on the refused connection would still be served (a create stored: a test holds it).
 */
export function refuseConnection(socket: Socket, error: AppError): void {
  // The stream's pause() does not reach a consumed handle (a request sent at once was served),
  // and the server's own 'data' listener has a resume queued, whose 'resume' starts the handle
  // reading again: it is stopped once that has run, before the event loop reads anything.
  process.nextTick(() => {
    const handle = (socket as Socket & { _handle?: { reading?: boolean; readStop?: () => number } })._handle;
    if (!handle?.readStop) return;
    handle.reading = false;
    handle.readStop();
  });
  socket.on('error', () => socket.destroy());
  refuseAndClose(socket, error);
}

/** Connections whose refusal is written or waits for the answers before it. */
const refusing = new WeakSet<Socket>();

/**
 * Writes the refusal once the answers of the whole requests before it are finished (at once when
 * there are none), then calls `written`; destroys the socket should one of them close unfinished.
 */
function refuseAfterAnswers(socket: Socket, error: AppError, written?: () => void): void {
  const inFlight = answerInFlight(socket);
  // A request whose own body broke the parser is never complete: refused at once, as before.
  if (inFlight?.req.complete) {
    // Node hands the connection to the next queued answer as this one finishes: look again then.
    inFlight.once('finish', () => setImmediate(() => refuseAfterAnswers(socket, error, written)));
    inFlight.once('close', () => {
      if (!inFlight.writableFinished) socket.destroy();
    });
    return;
  }
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  writeRefusal(socket, error);
  written?.();
}

function writeRefusal(socket: Socket, error: AppError): void {
  const body = envelope(error);
  const headers = {
    ...SECURITY_HEADERS,
    ...error.headers,
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
    connection: 'close',
  };
  const head = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}`)
    .join('\r\n');
  socket.end(`HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\n${head}\r\n\r\n${body}`);
}

/**
 * CONNECT (a proxy's method, which Node hands to a 'connect' listener and, without one, answers
 * by destroying the socket): 405 in the envelope, as another method no route takes.
 */
export function refuseConnect(server: Server): void {
  // Node takes a CONNECT's socket off the connections its closeAllConnections() closes (the
  // shutdown's deadline, main.ts): these are closed with them, or a refusal still waiting for an
  // answer before it would hold the shutdown for CONNECT_WAIT_MS.
  const refused = new Set<Socket>();
  const closeAll = server.closeAllConnections.bind(server);
  server.closeAllConnections = () => {
    closeAll();
    for (const socket of refused) socket.destroy();
  };
  server.on('connect', (_req, socket: Socket) => {
    refused.add(socket);
    socket.once('close', () => refused.delete(socket));
    // Node takes its own listeners off a CONNECT's socket: a reset with none would be an
    // uncaught 'error', and no time-out or close of the server's reaches the socket any more.
    socket.on('error', () => socket.destroy());
    // Whatever the client sends after is read and dropped.
    socket.resume();
    // Requests pipelined before it are answered first, as before a refusal of the parser's.
    const error = new AppError('method_not_allowed', 'fastpaste is not a proxy: CONNECT is not allowed.', {
      headers: { allow: 'GET, HEAD, POST, PUT, DELETE' },
    });
    refuseAndClose(socket, error);
  });
}

/** An Expect header other than 100-continue: 417 in the envelope. */
export function answerUnmetExpectations(server: Server): void {
  server.on('checkExpectation', (_req, res: ServerResponse) => {
    const error = new AppError('expectation_failed', 'Only "Expect: 100-continue" is understood.');
    const body = envelope(error);
    res.writeHead(error.status, {
      ...SECURITY_HEADERS,
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      connection: 'close',
    });
    res.end(body);
  });
}
