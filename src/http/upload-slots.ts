/**
 * Large bodies a few at a time. Reading an upload, decoding it, hashing it and storing it makes
 * several passing copies of it; twenty 10 MB uploads handled at once would hold twenty sets. A
 * request whose body is larger than LARGE_BODY_BYTES (or of unknown length, chunked) waits for one
 * of a few slots before its body is read, and keeps it until its answer is sent. While it waits
 * its body stays in the socket (TCP holds the sender back), so memory is bounded by the slots,
 * not by the number of clients. Small bodies (nearly all requests) never wait.
 */
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { bodyCutShort } from './request-bodies.js';

export const LARGE_BODY_BYTES = 1024 * 1024;

/**
 * A slot's body must come at least this fast on average once SLOT_GRACE_MS have passed (checked
 * every SLOT_CHECK_MS): a client that holds slots with a byte now and then keeps one for 15 s,
 * not for the request time-out. An upload that slow could not end within the request time-out
 * anyway (10 MB in 120 s is 85 KB/s), and a stall early on is forgiven by the grace.
 */
export const SLOT_CHECK_MS = 5000;
export const SLOT_GRACE_MS = 10_000;
export const SLOT_MIN_BYTES_PER_SECOND = 8 * 1024;

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
  // The requests holding a slot, and how each gives it back (onSend).
  const holders = new WeakMap<FastifyRequest, () => void>();
  app.addHook('onSend', (request, _reply, payload, done) => {
    const release = holders.get(request);
    if (release) {
      // Its parsed body is let go with the slot: the reply keeps its request alive until its
      // answer is wholly in the kernel, as long as a slow reader likes (SEND_TIMEOUT_SECONDS).
      (request as { body: unknown }).body = undefined;
      release();
    }
    done(null, payload);
  });
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
        holders.delete(request);
        slots.release();
      };
      // A body that comes slower than SLOT_MIN_BYTES_PER_SECOND (a byte now and then, from a
      // client holding slots on purpose) gives its slot back with a 408, as Node's own request
      // time-out answers (client-errors.ts).
      const startedAt = performance.now();
      const startBytes = socket.bytesRead;
      const watch = setInterval(() => {
        if (request.raw.complete || reply.raw.headersSent) {
          clearInterval(watch);
          return;
        }
        const due = (SLOT_MIN_BYTES_PER_SECOND * (performance.now() - startedAt - SLOT_GRACE_MS)) / 1000;
        if (socket.bytesRead - startBytes >= due) return;
        release();
        cutSlowBody(app, socket);
      }, SLOT_CHECK_MS);
      watch.unref();
      // Given back once the answer is on its way, its parsed body let go (onSend).
      holders.set(request, release);
      // 'close' comes when the answer is sent and when the client goes away mid-upload. The
      // socket's too: Node closes no answer it has not given the socket, and a slot held by one
      // would be held for ever. (A request is served only once its answer has the socket,
      // unread-answers.ts, so none should be; this is the safety net.)
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

/**
 * A slot's body that came too slowly: nothing more of it is read (it is not stored after its
 * 408), the 408 goes out in the envelope as for Node's own request time-out, and the connection
 * is closed SLOW_LINGER_MS later whatever its client does.
 */
function cutSlowBody(app: FastifyInstance, socket: Socket): void {
  socket.pause();
  socket.on('resume', () => socket.pause());
  const slow = Object.assign(new Error('The body came too slowly.'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });
  app.server.emit('clientError', slow, socket);
  // Not unref'd: a paused socket keeps nothing alive, and a server closing waits for it.
  const timer = setTimeout(() => socket.destroy(), SLOW_LINGER_MS);
  socket.once('close', () => clearTimeout(timer));
}
