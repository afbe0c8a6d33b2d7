/**
 * The 404 budget: a client address (an IPv6 client per /64, as the anonymous limit counts) may
 * get NOT_FOUND_LIMIT_PER_MINUTE answers 404 in a clock minute; past it, every request from that
 * address is 429 `rate_limited` (D7, with Retry-After) until the minute ends. Paste ids are too
 * many to guess, but slugs are words: this keeps anyone from trying them at speed.
 *
 * A request that may answer 404 (an address with a parameter, or no route at all) holds one unit
 * of the budget while it runs, so a burst sent in parallel cannot get past the budget before the
 * first of its 404s is counted: an address has at most as many such requests in flight as it has
 * budget left.
 *
 * Cheap on purpose: a request costs a few Map operations (about a microsecond). The counts hold
 * only the addresses that had a 404 in the current minute, are emptied when the minute changes,
 * and never hold more than `maxTracked` addresses (the oldest is dropped first). Counts are per instance
 * unless a shared CounterStore (the quotas' store: Redis or PostgreSQL) is given; then 404s are
 * counted there too, and an address refused by the shared count is refused by each instance
 * from its next 404 on. The decision to refuse is always taken from memory.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { clientBucket } from '../client-address.js';
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';
import type { CounterStore } from '../keys/counter-store.js';

const WINDOW_MS = 60_000;

/**
 * clientBucket parses the address (12 µs for IPv4, 40 µs for IPv6): too much for every request,
 * so the buckets of recent addresses are kept. A flood of new addresses only empties the cache.
 */
const buckets = new Map<string, string>();
function bucketOf(address: string): string {
  let bucket = buckets.get(address);
  if (bucket === undefined) {
    if (buckets.size >= 10_000) buckets.clear();
    bucket = clientBucket(address);
    buckets.set(address, bucket);
  }
  return bucket;
}

/** Health checks (from the load balancer) are never refused: no client can take an instance out. */
const EXEMPT_ROUTES = new Set(['/healthz', '/readyz']);

export interface NotFoundThrottleOptions {
  /** 404 answers per address per minute; past it, 429 until the minute ends. 0 turns it off. */
  limitPerMinute: number;
  clock: Clock;
  /** A store shared by instances; without it, each instance counts alone. */
  counters?: CounterStore;
  /** Most addresses tracked at once. */
  maxTracked?: number;
}

export class NotFoundThrottle {
  private window = Number.NaN;
  /** 404s answered in the current minute, per address. */
  private readonly counts = new Map<string, number>();
  /** Requests that may answer 404 still running, per address. */
  private readonly running = new Map<string, number>();
  private readonly maxTracked: number;

  constructor(private readonly options: NotFoundThrottleOptions) {
    this.maxTracked = options.maxTracked ?? 100_000;
  }

  /** The number of addresses with 404s counted in this minute (for tests). */
  get tracked(): number {
    return this.counts.size;
  }

  /** Empties the counts when a new minute starts; returns the current time. */
  private now(): number {
    const now = this.options.clock();
    const window = Math.floor(now / WINDOW_MS);
    if (window !== this.window) {
      this.window = window;
      this.counts.clear();
    }
    return now;
  }

  private refuse(now: number, usedUp: boolean): AppError {
    const retryAfter = usedUp ? Math.max(1, Math.ceil(((this.window + 1) * WINDOW_MS - now) / 1000)) : 1;
    return new AppError('rate_limited', 'Too many requests for addresses that do not exist; try again later.', {
      headers: { 'retry-after': String(retryAfter) },
    });
  }

  /** Throws 429 when the address has used its 404 budget in this minute. */
  check(address: string): void {
    if (this.options.limitPerMinute <= 0) return;
    const now = this.now();
    if (this.counts.size === 0) return;
    const used = this.counts.get(bucketOf(address));
    if (used !== undefined && used >= this.options.limitPerMinute) throw this.refuse(now, true);
  }

  /**
   * Before a request that may answer 404: throws 429 when the budget is used up, or when the
   * address already has as many such requests running as it has budget left; otherwise holds
   * one unit until `release`. Returns what `release` takes.
   */
  admit(address: string): string {
    const bucket = bucketOf(address);
    const running = this.roomFor(bucket);
    this.running.set(bucket, running + 1);
    return bucket;
  }

  /**
   * Throws as `admit` would, without holding a unit: for a request with a parameter answered only
   * when what it names is found (the fast lane's reads, which hand a miss to Fastify, where
   * `admit` holds it).
   */
  checkAdmissible(address: string): void {
    if (this.options.limitPerMinute <= 0) return;
    this.now();
    if (this.counts.size === 0 && this.running.size === 0) return;
    this.roomFor(bucketOf(address));
  }

  /** Throws 429 as `admit` does; returns the bucket's requests running. */
  private roomFor(bucket: string): number {
    const limit = this.options.limitPerMinute;
    const now = this.now();
    const used = this.counts.get(bucket) ?? 0;
    const running = this.running.get(bucket) ?? 0;
    if (used >= limit) throw this.refuse(now, true);
    if (used + running >= limit) throw this.refuse(now, false);
    return running;
  }

  /** After a request admitted by `admit`: gives the unit back, and counts the answer if it was a 404. */
  release(bucket: string, notFound: boolean): void {
    const running = (this.running.get(bucket) ?? 1) - 1;
    if (running > 0) this.running.set(bucket, running);
    else this.running.delete(bucket);
    if (notFound) void this.count(bucket);
  }

  /** Counts one 404 answered to the address. */
  record(address: string): Promise<void> {
    if (this.options.limitPerMinute <= 0) return Promise.resolve();
    return this.count(bucketOf(address));
  }

  private async count(bucket: string): Promise<void> {
    this.now();
    const window = this.window;
    const local = this.set(bucket, (this.counts.get(bucket) ?? 0) + 1);
    const shared = this.options.counters;
    if (!shared) return;
    let total: number;
    try {
      total = await shared.increment(`nf:${bucket}:${window}`, (2 * WINDOW_MS) / 1000);
    } catch {
      return; // the store is out of reach: this instance's own count still holds
    }
    // The minute may have ended while the store answered.
    if (this.window === window && total > local) this.set(bucket, Math.max(total, this.counts.get(bucket) ?? 0));
  }

  private set(bucket: string, count: number): number {
    if (!this.counts.has(bucket) && this.counts.size >= this.maxTracked) {
      const oldest = this.counts.keys().next().value;
      if (oldest !== undefined) this.counts.delete(oldest);
    }
    this.counts.set(bucket, count);
    return count;
  }
}

/** Whether a request can be answered 404: its route has a parameter, or there is no route. */
function mayBeNotFound(route: string | undefined): boolean {
  return route === undefined || route === '*' || route.includes(':');
}

/**
 * Adds the check before anything else runs for a request, and the count of its answer: requests
 * that may answer 404 are admitted (and released when their answer is done or the connection
 * closes); the others are only checked, and counted should they answer 404 all the same.
 */
export function registerNotFoundThrottle(app: FastifyInstance, options: NotFoundThrottleOptions): NotFoundThrottle {
  const throttle = new NotFoundThrottle(options);
  if (options.limitPerMinute <= 0) return throttle;
  const admitted = new WeakSet<FastifyRequest>();
  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => {
    const route = request.routeOptions.url;
    if (route !== undefined && EXEMPT_ROUTES.has(route)) return done();
    try {
      if (mayBeNotFound(route)) {
        const bucket = throttle.admit(request.ip);
        admitted.add(request);
        reply.raw.once('close', () => throttle.release(bucket, reply.raw.statusCode === 404));
      } else {
        throttle.check(request.ip);
      }
    } catch (err) {
      return done(err as Error);
    }
    done();
  });
  app.addHook('onResponse', (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => {
    if (reply.statusCode === 404 && !admitted.has(request)) void throttle.record(request.ip);
    done();
  });
  return throttle;
}
