/**
 * Large bodies a few at a time. Reading an upload, decoding it, hashing it and storing it makes
 * several passing copies of it; twenty 10 MB uploads handled at once would hold twenty sets. A
 * request whose body is larger than LARGE_BODY_BYTES (or of unknown length, chunked) waits for one
 * of a few slots before its body is read, and keeps it until its answer is sent. While it waits
 * its body stays in the socket (TCP holds the sender back), so memory is bounded by the slots,
 * not by the number of clients. Small bodies (nearly all requests) never wait.
 */
import type { FastifyInstance } from 'fastify';
import { bodyCutShort } from './request-bodies.js';

export const LARGE_BODY_BYTES = 1024 * 1024;

/**
 * A slot's body must come at least this fast: SLOT_MIN_BYTES every SLOT_CHECK_MS (6.4 KB/s).
 * An upload that slow could not end within the request time-out anyway (10 MB in 120 s is
 * 85 KB/s).
 */
export const SLOT_CHECK_MS = 5000;
export const SLOT_MIN_BYTES = 32 * 1024;

/** How long a connection cut for a slow body stays open for its client to read the 408. */
const SLOW_LINGER_MS = 2000;

export class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(count: number) {
    this.free = count;
  }

  acquire(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free++;
  }
}

function isLarge(headers: Record<string, string | string[] | undefined>): boolean {
  const length = headers['content-length'];
  if (typeof length === 'string') return Number(length) > LARGE_BODY_BYTES;
  return headers['transfer-encoding'] !== undefined;
}

export function registerUploadSlots(app: FastifyInstance, count = 4): Slots {
  const slots = new Slots(count);
  // A callback hook, not an async one: the bodies under 1 MB (nearly all) pass with no promise.
  app.addHook('preParsing', (request, reply, payload, done) => {
    // A route that takes no large body (a password form's 64 KB, the 1 MB of a route that reads
    // none) needs no slot: its body is refused at its limit. Held there by a chunked body sent a
    // byte at a time, the slots were anyone's to take without a key.
    if (!isLarge(request.headers) || request.routeOptions.bodyLimit <= LARGE_BODY_BYTES) {
      done(null, payload);
      return;
    }
    slots.acquire().then(() => {
      let released = false;
      const socket = request.raw.socket;
      const release = () => {
        if (released) return;
        released = true;
        clearInterval(watch);
        reply.raw.removeListener('close', release);
        socket.removeListener('close', release);
        slots.release();
      };
      // A body that comes slower than SLOT_MIN_BYTES in SLOT_CHECK_MS (a byte now and then, from
      // a client holding slots on purpose, or one whose answers before it are left unread) gives
      // its slot back with a 408, as Node's own request time-out answers (client-errors.ts).
      let seen = socket.bytesRead;
      const watch = setInterval(() => {
        if (request.raw.complete) {
          clearInterval(watch);
          return;
        }
        if (socket.bytesRead - seen >= SLOT_MIN_BYTES) {
          seen = socket.bytesRead;
          return;
        }
        release();
        const slow = Object.assign(new Error('The body came too slowly.'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });
        app.server.emit('clientError', slow, socket);
        // Closed after a moment for its client to read the answer, whatever that client does.
        setTimeout(() => socket.destroy(), SLOW_LINGER_MS).unref();
      }, SLOT_CHECK_MS);
      watch.unref();
      // 'close' comes when the answer is sent and when the client goes away mid-upload. Not to
      // an answer queued behind another on its connection (pipelined): Node closes no answer it
      // has not yet given the socket, and the slot would be held for ever. So the socket's too.
      reply.raw.once('close', release);
      socket.once('close', release);
      if (reply.raw.destroyed || socket.destroyed) {
        // Gone while it waited: its body will never come (request-bodies.ts).
        release();
        done(bodyCutShort());
        return;
      }
      done(null, payload);
    }, done);
  });
  return slots;
}
