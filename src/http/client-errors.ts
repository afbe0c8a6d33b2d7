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

/** Fastify's clientErrorHandler: the answer written straight to the socket, then closed. */
export function answerClientError(this: FastifyInstance, err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || !socket.writable) {
    socket.destroy();
    return;
  }
  // As Fastify's own handler does; the raw packet (headers included) is redacted (app.ts).
  this.log.trace({ err }, 'client error');
  const error = errorFor(err.code);
  const body = envelope(error);
  const headers = {
    ...SECURITY_HEADERS,
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
    connection: 'close',
  };
  const head = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}`)
    .join('\r\n');
  socket.end(`HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\n${head}\r\n\r\n${body}`);
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
