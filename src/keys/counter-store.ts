/**
 * Atomic counters for quotas, kept by rate-limiter-flexible in a durable store: the service's own
 * database by default (so limits survive a restart and are shared by instances on one
 * PostgreSQL), or Redis when REDIS_URL is set. Each counter's key names its window, so a counter
 * only ever counts up until it expires after its window.
 */
import {
  type RateLimiterAbstract,
  RateLimiterPostgres,
  RateLimiterRedis,
  RateLimiterRes,
  RateLimiterSQLite,
} from 'rate-limiter-flexible';
import { AppError } from '../errors.js';

export interface CounterStore {
  /** Adds one and returns the new count; the counter lives `ttlSeconds` from its first use. */
  increment(key: string, ttlSeconds: number): Promise<number>;
  /** Takes one back (a request refused by another window is not counted). */
  decrement(key: string, ttlSeconds: number): Promise<void>;
  /** The current count (0 when none). */
  read(key: string): Promise<number>;
}

/** The store did not answer: the request fails fast with 503 instead of hanging or a 500. */
function unavailable(): AppError {
  return new AppError('service_unavailable', 'The rate-limit store does not answer; try again in a moment.', {
    headers: { 'retry-after': '2' },
  });
}

/** Counts far past any limit: the limit is compared by the caller, per key. */
const UNBOUNDED = Number.MAX_SAFE_INTEGER;
const TABLE = 'rate_limit_counters';

export class LimiterCounterStore implements CounterStore {
  constructor(private readonly limiter: RateLimiterAbstract) {}

  async increment(key: string, ttlSeconds: number): Promise<number> {
    try {
      const res = await this.limiter.consume(key, 1, { customDuration: ttlSeconds });
      return res.consumedPoints;
    } catch (err) {
      if (err instanceof RateLimiterRes) return err.consumedPoints;
      throw unavailable();
    }
  }

  async decrement(key: string, ttlSeconds: number): Promise<void> {
    try {
      await this.limiter.reward(key, 1, { customDuration: ttlSeconds });
    } catch {
      throw unavailable();
    }
  }

  async read(key: string): Promise<number> {
    try {
      const res = await this.limiter.get(key);
      return res?.consumedPoints ?? 0;
    } catch {
      throw unavailable();
    }
  }
}

/** Builds a limiter whose constructor reports table creation through a callback. */
function created<T>(make: (done: (err?: unknown) => void) => T): Promise<T> {
  return new Promise((resolve, reject) => {
    // The callback may run inside the constructor, before `limiter` is assigned: defer the read.
    const limiter: T = make((err) => (err ? reject(err) : queueMicrotask(() => resolve(limiter))));
  });
}

/** Counters in the SQLite file of the service, through its better-sqlite3 handle. */
export function sqliteCounters(sqlite: unknown): Promise<CounterStore> {
  return created(
    (done) =>
      new RateLimiterSQLite(
        {
          storeClient: sqlite,
          storeType: 'better-sqlite3',
          tableName: TABLE,
          tableCreated: true,
          points: UNBOUNDED,
          duration: 3600,
          keyPrefix: 'q',
          clearExpiredByTimeout: true,
        },
        done,
      ),
  ).then((limiter) => new LimiterCounterStore(limiter));
}

/** Counters in PostgreSQL, through the service's pg pool. */
export function postgresCounters(pool: unknown): Promise<CounterStore> {
  return created(
    (done) =>
      new RateLimiterPostgres(
        {
          storeClient: pool,
          storeType: 'pool',
          tableName: TABLE,
          tableCreated: true,
          points: UNBOUNDED,
          duration: 3600,
          keyPrefix: 'q',
          clearExpiredByTimeout: true,
        },
        done,
      ),
  ).then((limiter) => new LimiterCounterStore(limiter));
}

/** Counters in Redis (ioredis client); fails at once while Redis is not connected. */
export function redisCounters(redis: unknown): CounterStore {
  return new LimiterCounterStore(
    new RateLimiterRedis({
      storeClient: redis,
      points: UNBOUNDED,
      duration: 3600,
      keyPrefix: 'fastpaste:q',
      rejectIfRedisNotReady: true,
    }),
  );
}
