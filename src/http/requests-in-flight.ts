/**
 * The requests whose work is still running, so that a shutdown closes the services and the storage
 * only after them. A connection closed under a request (the shutdown's deadline, a client gone)
 * does not stop its handler: a create waiting for its commit or a read counting its view goes on.
 * Were the storage closed first, it would fail against a closed database (an "unexpected error"),
 * and the counts it adds after the last flush would be lost without a word.
 *
 * A request of the framework counts from its onRequest hook until its answer is sent (onSend)
 * or its handler has settled, whichever comes first: every path through the hooks ends in one of
 * the two, whether or not the socket is still there (Fastify does not send for a handler whose
 * socket is gone, but its handler settles). A request of the fast lane counts while the lane's
 * promise for it runs, and is then answered or handed to the framework, which counts it anew.
 */
import type { FastifyRequest } from 'fastify';

declare module 'fastify' {
  interface FastifyInstance {
    /** How many requests are still at work: none once a close has waited for them (tests check). */
    requestsAtWork(): number;
  }
}

/**
 * How long a close waits for the requests' work: longer than one storage operation may take
 * (PostgreSQL's query time-out is 5 s, a Redis command's less).
 */
export const SETTLE_MS = 6000;

const POLL_MS = 10;

export class RequestsInFlight {
  private running = 0;
  private readonly counted = new WeakSet<object>();

  /** How many requests are at work now. */
  get count(): number {
    return this.running;
  }

  /** A request of the framework begins (its onRequest hook). */
  begin(request: FastifyRequest): void {
    this.counted.add(request);
    this.running++;
  }

  /** Its answer is sent or its handler has settled: the first of them ends it, once. */
  end(request: FastifyRequest): void {
    if (this.counted.delete(request)) this.running--;
  }

  /** Counts `work` (the fast lane's promise for a request) until it settles. */
  track(work: Promise<unknown>): void {
    this.running++;
    const done = () => {
      this.running--;
    };
    work.then(done, done);
  }

  /**
   * Resolves once no request is at work (true), or after `ms` (false). Polled, not signalled: a
   * request the lane hands to the framework ends and begins again in one tick, and a waiter
   * woken between the two would see none.
   */
  async settled(ms = SETTLE_MS): Promise<boolean> {
    const deadline = performance.now() + ms;
    while (this.running > 0) {
      if (performance.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    return true;
  }
}
