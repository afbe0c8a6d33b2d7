/** The domain services over one storage, built once and shared by the server and the CLI. */
import { createRequire } from 'node:module';
import type { Redis } from 'ioredis';
import { sql } from 'kysely';
import { type Clock, systemClock } from './clock.js';
import { type Config, ConfigError, loadConfig, withoutCredentials } from './config.js';
import {
  BufferedCounterStore,
  type CounterStore,
  postgresCounters,
  redisCounters,
  sqliteCounters,
} from './keys/counter-store.js';
import { KeyService } from './keys/key-service.js';
import { QuotaService } from './keys/quota-service.js';
import { ContentChecker } from './pastes/content-check.js';
import { PastePresenter } from './pastes/paste-presenter.js';
import { PasteService } from './pastes/paste-service.js';
import type { Storage } from './storage/database.js';
import { KeyRepository } from './storage/key-repository.js';
import { PasteRepository } from './storage/paste-repository.js';
import { WebhookRepository } from './storage/webhook-repository.js';
import { DeliveryWorker } from './webhooks/delivery-worker.js';
import { WebhookOutbox } from './webhooks/webhook-outbox.js';

export interface Services {
  storage: Storage;
  clock: Clock;
  pastes: PasteService;
  keys: KeyService;
  quota: QuotaService;
  contentChecker: ContentChecker;
  presenter: PastePresenter;
  webhooks: WebhookRepository;
  /** Delivers queued webhooks; started by `serve` (and by tests that want deliveries). */
  webhookWorker: DeliveryWorker;
  /** Whether each backend answers now, for /readyz. */
  health(): Promise<{ database: boolean; redis: boolean | null }>;
  /**
   * Writes what is held in memory, gives back the webhook claims and closes what the services
   * opened besides the storage (the Redis connection). Every step is tried whatever the others
   * do; what failed is logged, and the promise resolves to false (the storage refused writes or
   * did not answer).
   */
  close(): Promise<boolean>;
}

export interface ServiceOptions {
  clock?: Clock;
  /** The settings; defaults apply to whatever is not given. */
  config?: Partial<Config>;
  /** How often expired quota counters are deleted on SQLite (counter-store.ts; tests shorten it). */
  counterClearEveryMs?: number;
  /** Where background work reports problems. */
  logger?: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
}

const silentLogger = { info() {}, warn() {}, error() {} };

/** How long a Redis command may go unanswered before its request is 503. */
export const REDIS_COMMAND_TIMEOUT_MS = 1000;

/** How often a READONLY reply may make the Redis client reconnect (connectRedis). */
export const READONLY_RECONNECT_EVERY_MS = 5000;

/** A Redis client that fails fast instead of queueing commands while disconnected. */
function connectRedis(url: string): Redis {
  let readOnlyReconnectAt = Number.NEGATIVE_INFINITY;
  // Loaded only when REDIS_URL is set (the client costs 13 MB of memory).
  const { Redis } = createRequire(import.meta.url)('ioredis') as typeof import('ioredis');
  const redis = new Redis(url, {
    connectTimeout: 2000,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    // The commands of one turn of the event loop go out in one write (the quota counts of the
    // requests answered in that turn): by-id on PostgreSQL with Redis counters 0.43 -> 0.52 of
    // RJ when each window was a command of its own, three rounds each.
    enableAutoPipelining: true,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
    // A Redis that stops answering (connected, silent) fails each command in this time (503),
    // as PostgreSQL's queries do, instead of holding every counted request until it answers.
    commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
    // A quota script in flight when the connection drops may have run already: sent again after
    // the reconnect it would count its requests twice (D20: limits hold exactly). It fails (503).
    autoResendUnfulfilledCommands: false,
    // A replica refuses every write with READONLY. After a failover whose address now leads to
    // the new primary, the connection still open to the old one would be refused for as long as
    // it stays open: the refused command fails (503, not sent again) and the client reconnects,
    // as ioredis advises for such failovers. At most once in READONLY_RECONNECT_EVERY_MS: on a
    // Redis that stays a replica each reconnect leaves the client without a connection for a
    // moment (every command fails at once, /readyz's ping too), and one a refused write would
    // keep it so most of the time.
    reconnectOnError: (err) => {
      if (!/^READONLY /.test(err.message)) return false;
      const now = performance.now();
      if (now - readOnlyReconnectAt < READONLY_RECONNECT_EVERY_MS) return false;
      readOnlyReconnectAt = now;
      return true;
    },
  });
  // Connection errors are reported by the commands that fail; the client keeps reconnecting.
  redis.on('error', () => {});
  return redis;
}

/**
 * Waits (a bounded time) for the first connection; until Redis answers, requests get 503.
 * Resolves to null once it answers, else to why it does not (its last error, if it gave one).
 */
function untilReady(redis: Redis, timeoutMs: number): Promise<Error | null> {
  if (redis.status === 'ready') return Promise.resolve(null);
  return new Promise((resolve) => {
    let last: Error = new Error(`no answer within ${timeoutMs} ms`);
    const failed = (err: Error) => {
      last = err;
      if (REDIS_LOGIN_REFUSED.test(err.message)) done(err); // refused now is refused for good
    };
    const timer = setTimeout(() => done(last), timeoutMs);
    function done(why: Error | null) {
      clearTimeout(timer);
      redis.off('ready', ready);
      redis.off('error', failed);
      resolve(why);
    }
    const ready = () => done(null);
    redis.once('ready', ready);
    redis.on('error', failed);
  });
}

/** Redis refusing the login REDIS_URL gives (a wrong password or user, or none where one is asked). */
const REDIS_LOGIN_REFUSED = /^(WRONGPASS|NOAUTH|NOPERM)\b/;

export async function createServices(storage: Storage, options: ServiceOptions = {}): Promise<Services> {
  const clock = options.clock ?? systemClock;
  const config = { ...loadConfig({}), ...options.config };
  let redis: Redis | null = null;
  let counters: CounterStore;
  if (config.redisUrl) {
    redis = connectRedis(config.redisUrl);
    const notReady = await untilReady(redis, 5000);
    if (notReady) {
      const where = `REDIS_URL (${withoutCredentials(config.redisUrl)})`;
      // A login refused stays refused: a bad setting, which stops the start (D2). Anything else
      // (Redis starting, a network down) may pass: the server starts and counts get 503 meanwhile.
      if (REDIS_LOGIN_REFUSED.test(notReady.message)) {
        redis.disconnect();
        throw new ConfigError(`${where}: Redis refused the login: ${notReady.message}`);
      }
      (options.logger ?? silentLogger).warn(
        { err: notReady.message },
        `${where} does not answer yet: requests counted against a quota get 503 until it does`,
      );
    }
    counters = redisCounters(redis);
  } else if (storage.sqlite) {
    // One process owns an SQLite file: counts are held in memory and written behind.
    counters = new BufferedCounterStore(await sqliteCounters(storage.sqlite, options.counterClearEveryMs));
  } else {
    counters = await postgresCounters(storage.pgPool);
  }
  const presenter = new PastePresenter(config.baseUrl);
  const outbox = new WebhookOutbox(presenter);
  const webhooks = new WebhookRepository(storage.db, storage.dialect, storage.sqlite);
  const webhookWorker = new DeliveryWorker(
    webhooks,
    clock,
    {
      concurrency: config.webhookConcurrency,
      pollMs: 1000,
      timeoutMs: config.webhookTimeoutMs,
      retryBaseMs: config.webhookRetryBaseMs,
      allowPrivate: config.webhookAllowPrivate,
      retentionMs: config.webhookRetentionMs,
    },
    options.logger ?? silentLogger,
  );
  outbox.onCommitted(() => webhookWorker.wake());
  const pastes = new PasteService(
    new PasteRepository(
      storage.db,
      storage.dialect === 'sqlite',
      storage.sqlite,
      storage.pgPool,
      storage.expirySweeper ?? null,
    ),
    clock,
    outbox,
  );
  pastes.views.onGiveUp = (views) =>
    (options.logger ?? silentLogger).warn(
      { views },
      'view counts left unsettled past their token dropped: written once or not at all',
    );
  return {
    storage,
    clock,
    pastes,
    keys: new KeyService(new KeyRepository(storage.db), clock, { allowPrivate: config.webhookAllowPrivate }),
    quota: new QuotaService(counters, clock),
    contentChecker: ContentChecker.fromFile(config.contentBlocklistFile),
    presenter,
    webhooks,
    webhookWorker,
    async health() {
      const within = <T>(p: Promise<T>) =>
        Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 2000).unref())]).catch(
          () => false,
        );
      const [database, redisOk] = await Promise.all([
        within(sql`SELECT 1`.execute(storage.db)),
        redis ? within(redis.ping()) : Promise.resolve(null),
      ]);
      return { database, redis: redisOk };
    },
    async close() {
      // The counts held in memory are written while the worker waits for its attempts in flight;
      // that wait is bounded well inside the grace a supervisor gives after SIGTERM (Docker: 10 s),
      // so a receiver that hangs never turns a clean stop into a SIGKILL. An attempt cut short
      // has its claim given back and is sent again later, with the same webhook-id.
      const graceMs = Math.min(config.webhookTimeoutMs + 1000, 3000);
      // One last flush of each, their retries on a timer stopped first: what it leaves held is
      // lost. A second try would double the wait on a PostgreSQL gone silent (its time-out, 5 s).
      const [claims, [viewsHeld, quotaHeld]] = await Promise.all([
        webhookWorker.stop(graceMs).then(
          () => null,
          (err: unknown) => err,
        ),
        pastes.views.close().then(async (views) => [views, await counters.close()] as const),
      ]);
      if (redis) redis.disconnect();
      const log = options.logger ?? silentLogger;
      if (claims !== null) {
        log.warn({ err: claims }, 'webhook claims not given back: other instances take them when their lease ends');
      }
      if (viewsHeld.views > 0 || viewsHeld.possiblyWritten > 0) log.error(viewsHeld, 'view counts not written');
      if (quotaHeld > 0) log.error({ uses: quotaHeld }, 'quota counts not written');
      return claims === null && viewsHeld.views === 0 && viewsHeld.possiblyWritten === 0 && quotaHeld === 0;
    },
  };
}
