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
        reply.raw.removeListener('close', release);
        socket.removeListener('close', release);
        slots.release();
      };
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
