/** The domain services over one storage, built once and shared by the server and the CLI. */
import { Redis } from 'ioredis';
import { type Clock, systemClock } from './clock.js';
import { type CounterStore, postgresCounters, redisCounters, sqliteCounters } from './keys/counter-store.js';
import { KeyService } from './keys/key-service.js';
import { QuotaService } from './keys/quota-service.js';
import { ContentChecker } from './pastes/content-check.js';
import { PasteService } from './pastes/paste-service.js';
import type { Storage } from './storage/database.js';
import { KeyRepository } from './storage/key-repository.js';
import { PasteRepository } from './storage/paste-repository.js';

export interface Services {
  storage: Storage;
  clock: Clock;
  pastes: PasteService;
  keys: KeyService;
  quota: QuotaService;
  contentChecker: ContentChecker;
  /** Closes what the services opened besides the storage (the Redis connection). */
  close(): Promise<void>;
}

export interface ServiceOptions {
  clock?: Clock;
  /** Quota counters in Redis instead of the database. */
  redisUrl?: string | null;
  /** The administrator's patterns for the anonymous content check. */
  contentPatternsFile?: string | null;
}

/** A Redis client that fails fast instead of queueing commands while disconnected. */
function connectRedis(url: string): Redis {
  const redis = new Redis(url, {
    connectTimeout: 2000,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
  });
  // Connection errors are reported by the commands that fail; the client keeps reconnecting.
  redis.on('error', () => {});
  return redis;
}

/** Waits (a bounded time) for the first connection; until Redis answers, requests get 503. */
function untilReady(redis: Redis, timeoutMs: number): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, timeoutMs);
    function done() {
      clearTimeout(timer);
      redis.off('ready', done);
      resolve();
    }
    redis.once('ready', done);
  });
}

export async function createServices(storage: Storage, options: ServiceOptions = {}): Promise<Services> {
  const clock = options.clock ?? systemClock;
  let redis: Redis | null = null;
  let counters: CounterStore;
  if (options.redisUrl) {
    redis = connectRedis(options.redisUrl);
    await untilReady(redis, 5000);
    counters = redisCounters(redis);
  } else if (storage.sqlite) {
    counters = await sqliteCounters(storage.sqlite);
  } else {
    counters = await postgresCounters(storage.pgPool);
  }
  return {
    storage,
    clock,
    pastes: new PasteService(new PasteRepository(storage.db), clock),
    keys: new KeyService(new KeyRepository(storage.db), clock),
    quota: new QuotaService(counters, clock),
    contentChecker: ContentChecker.fromFile(options.contentPatternsFile ?? null),
    async close() {
      if (redis) redis.disconnect();
    },
  };
}
