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
import { isStorageFull, isStorageRefusingWrites } from '../storage/unavailable.js';

export interface CounterStore {
  /** Adds one and returns the new count; the counter lives `ttlSeconds` from its first use. */
  increment(key: string, ttlSeconds: number): Promise<number>;
  /** Takes one back (a request refused with 401 or 403 after it was counted counts nothing). */
  decrement(key: string, ttlSeconds: number): Promise<void>;
  /** The current count (0 when none). */
  read(key: string): Promise<number>;
  /** Writes what is held in memory (a no-op for stores that write through). */
  flush(): Promise<void>;
  /**
   * Stops writing on a timer and writes what is held (the shutdown's last flush): resolves to
   * the uses the store refused (0 for stores that write through).
   */
  close(): Promise<number>;
  /**
   * Adds one to each counter at once, if every one is held in memory and none would pass its
   * limit: returns the new counts. Otherwise changes nothing and returns undefined (the caller
   * counts through increment). Stores that cannot answer at once leave it out.
   */
  incrementAllNow?(counters: ReadonlyArray<{ key: string; limit: number }>): number[] | undefined;
  /**
   * increment() of each counter, in one round trip to the store (the windows of one request);
   * the new counts in the same order. Stores without it are counted one increment at a time.
   */
  incrementAll?(counters: ReadonlyArray<{ key: string; ttlSeconds: number }>): Promise<number[]>;
}

/**
 * The store failed: the request fails fast with 503 instead of hanging or a 500. A store that
 * answered it is full or takes no writes is told as such (error-presenter.ts); anything else
 * is the store not answering.
 */
function unavailable(err: unknown): unknown {
  if (isStorageFull(err) || isStorageRefusingWrites(err)) return err;
  return new AppError('service_unavailable', 'The rate-limit store does not answer; try again in a moment.', {
    headers: { 'retry-after': '2' },
  });
}

/** Counts far past any limit: the limit is compared by the caller, per key. */
const UNBOUNDED = Number.MAX_SAFE_INTEGER;
const TABLE = 'rate_limit_counters';

export class LimiterCounterStore implements CounterStore {
  constructor(protected readonly limiter: RateLimiterAbstract) {}

  async increment(key: string, ttlSeconds: number): Promise<number> {
    try {
      const res = await this.limiter.consume(key, 1, { customDuration: ttlSeconds });
      return res.consumedPoints;
    } catch (err) {
      if (err instanceof RateLimiterRes) return err.consumedPoints;
      throw unavailable(err);
    }
  }

  async decrement(key: string, ttlSeconds: number): Promise<void> {
    try {
      await this.limiter.reward(key, 1, { customDuration: ttlSeconds });
    } catch (err) {
      throw unavailable(err);
    }
  }

  async read(key: string): Promise<number> {
    try {
      const res = await this.limiter.get(key);
      return res?.consumedPoints ?? 0;
    } catch (err) {
      throw unavailable(err);
    }
  }

  /** Adds (or, negative, takes back) several counts at once. */
  async add(key: string, delta: number, ttlSeconds: number): Promise<void> {
    if (delta > 0) await this.limiter.consume(key, delta, { customDuration: ttlSeconds }).catch(ignoreRejection);
    else if (delta < 0) await this.limiter.reward(key, -delta, { customDuration: ttlSeconds });
  }

  async flush(): Promise<void> {}

  async close(): Promise<number> {
    return 0;
  }
}

function ignoreRejection(err: unknown): void {
  if (!(err instanceof RateLimiterRes)) throw err;
}

/**
 * Counts held in memory and written to the durable store every quarter second: a request costs
 * no database write. Exact because one process owns an SQLite file: the first use of a counter
 * reads it from the store, then this process alone moves it. Shutdown flushes; a crash loses at
 * most the last quarter second of counts (in the client's favour). Not for stores shared by
 * several instances (PostgreSQL, Redis), which count through.
 */
export class BufferedCounterStore implements CounterStore {
  private readonly counts = new Map<
    string,
    { value: number; unwritten: number; ttlSeconds: number; expires: number }
  >();
  private readonly loading = new Map<string, Promise<void>>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  /** Set by close(): no more flushes on a timer. */
  private closed = false;

  constructor(
    private readonly durable: LimiterCounterStore,
    private readonly intervalMs = 250,
  ) {}

  private async entry(key: string, ttlSeconds: number) {
    let entry = this.counts.get(key);
    while (!entry) {
      let pending = this.loading.get(key);
      if (!pending) {
        pending = this.durable.read(key).then((value) => {
          this.counts.set(key, { value, unwritten: 0, ttlSeconds, expires: Date.now() + ttlSeconds * 1000 });
        });
        pending.finally(() => this.loading.delete(key)).catch(() => {});
        this.loading.set(key, pending);
      }
      await pending;
      entry = this.counts.get(key);
    }
    return entry;
  }

  async increment(key: string, ttlSeconds: number): Promise<number> {
    const entry = await this.entry(key, ttlSeconds);
    entry.value++;
    entry.unwritten++;
    this.schedule();
    return entry.value;
  }

  incrementAllNow(counters: ReadonlyArray<{ key: string; limit: number }>): number[] | undefined {
    const entries = [];
    for (const { key, limit } of counters) {
      const entry = this.counts.get(key);
      if (!entry || entry.value + 1 > limit) return undefined;
      entries.push(entry);
    }
    for (const entry of entries) {
      entry.value++;
      entry.unwritten++;
    }
    this.schedule();
    return entries.map((entry) => entry.value);
  }

  async decrement(key: string, ttlSeconds: number): Promise<void> {
    const entry = await this.entry(key, ttlSeconds);
    entry.value--;
    entry.unwritten--;
    this.schedule();
  }

  async read(key: string): Promise<number> {
    return this.counts.get(key)?.value ?? this.durable.read(key);
  }

  private schedule(): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => void this.flush().catch(() => {}), this.intervalMs);
    this.timer.unref();
  }

  async close(): Promise<number> {
    this.closed = true;
    await this.flush();
    await this.durable.close();
    let held = 0;
    for (const entry of this.counts.values()) held += Math.abs(entry.unwritten);
    return held;
  }

  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.flushing) await this.flushing;
    const now = Date.now();
    const writes: Array<Promise<void>> = [];
    for (const [key, entry] of this.counts) {
      if (entry.unwritten !== 0) {
        const delta = entry.unwritten;
        entry.unwritten = 0;
        writes.push(
          this.durable.add(key, delta, entry.ttlSeconds).catch(() => {
            entry.unwritten += delta; // kept for the next flush
            this.schedule();
          }),
        );
      } else if (entry.expires < now) {
        this.counts.delete(key);
      }
    }
    const flushing = Promise.all(writes).then(() => {});
    this.flushing = flushing;
    await flushing;
    if (this.flushing === flushing) this.flushing = null;
  }
}

/** Builds a limiter whose constructor reports table creation through a callback. */
function created<T>(make: (done: (err?: unknown) => void) => T): Promise<T> {
  return new Promise((resolve, reject) => {
    // The callback may run inside the constructor, before `limiter` is assigned: defer the read.
    const limiter: T = make((err) => (err ? reject(err) : queueMicrotask(() => resolve(limiter))));
  });
}

/** How often the counters past their window are deleted from the SQLite table. */
const CLEAR_EXPIRED_EVERY_MS = 5 * 60_000;
/** How long past its window a counter is kept (as rate-limiter-flexible's own clean-up). */
const CLEAR_EXPIRED_AFTER_MS = 60 * 60_000;

/**
 * Counters in the SQLite file. Those an hour past their window are deleted on a timer of this
 * store's, not by rate-limiter-flexible's own (clearExpiredByTimeout), whose failed DELETE is a
 * rejection nothing catches, which ends the process: a file that takes no writes or a full disk
 * would have stopped a server that otherwise goes on serving reads. A failed clean-up is tried
 * again at the next turn.
 */
class SqliteCounterStore extends LimiterCounterStore {
  private timer: NodeJS.Timeout | null = null;

  private readonly clearStatement: { run(before: number): unknown };

  constructor(
    limiter: RateLimiterSQLite,
    sqlite: SqliteHandle,
    private readonly clearEveryMs: number,
  ) {
    super(limiter);
    this.clearStatement = sqlite.prepare(`DELETE FROM ${TABLE} WHERE expire < ?`);
    this.schedule();
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.clearExpired();
      if (this.timer) this.schedule();
    }, this.clearEveryMs);
    this.timer.unref();
  }

  /** Deletes the counters past their window and the hour after it; a refusal is left for the next turn. */
  private clearExpired(): void {
    try {
      this.clearStatement.run(Date.now() - CLEAR_EXPIRED_AFTER_MS);
    } catch {}
  }

  override async close(): Promise<number> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    return 0;
  }
}

/** What the store needs of a better-sqlite3 handle. */
interface SqliteHandle {
  prepare(sql: string): { run(...params: unknown[]): unknown };
}

/** Counters in the SQLite file of the service, through its better-sqlite3 handle. */
export function sqliteCounters(
  sqlite: SqliteHandle,
  clearEveryMs = CLEAR_EXPIRED_EVERY_MS,
): Promise<LimiterCounterStore> {
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
        },
        done,
      ),
  ).then((limiter) => new SqliteCounterStore(limiter, sqlite, clearEveryMs));
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

/**
 * RateLimiterRedis's own script (its incrTtlLuaScript) run for every key given, in one call:
 * each counter made with its time to live if missing, added the number of runs gathered (the
 * last argument), given back its time to live if it had lost it. The keys are the limiter's own
 * (getKey), so either side reads and moves the counters the other made (instances of an older
 * release beside newer ones count together).
 */
const INCREMENT_ALL_LUA = `local counts = {}
local by = tonumber(ARGV[#KEYS + 1])
for i, key in ipairs(KEYS) do
  redis.call('set', key, 0, 'EX', ARGV[i], 'NX')
  counts[i] = redis.call('incrby', key, by)
  if redis.call('pttl', key) == -1 then redis.call('expire', key, ARGV[i]) end
end
return counts`;

/** The runs of incrementAll on the same counters gathered in one turn of the event loop. */
interface Gathered {
  args: Array<string | number>;
  keyCount: number;
  waiting: Array<{ resolve: (counts: number[]) => void; reject: (err: unknown) => void }>;
}

interface RedisWithIncrementAll {
  status: string;
  defineCommand(name: string, definition: { lua: string }): void;
  fastpasteIncrementAll(keyCount: number, ...keysTtlsThenRuns: Array<string | number>): Promise<number[]>;
}

/**
 * Counters in Redis (ioredis client), through RateLimiterRedis; fails at once while Redis is not
 * connected. A request's windows are counted by one script run (incrementAll) instead of one
 * per window: on PostgreSQL with Redis counters the three runs and their promises were a third
 * of what a keyed read allocated. And the requests of one key read in the same turn of the event
 * loop are counted by one run: it adds their number, and each is handed its own count out of the
 * range it added, in the order they came (as that many runs of one would have handed them out).
 * Runs are gathered by their counters and times to live, which move with the clock: runs of one
 * turn on the same counters may then make two groups, each handed its range in its own order
 * (every count still handed out once).
 */
export class RedisCounterStore extends LimiterCounterStore {
  private readonly redis: RedisWithIncrementAll;
  /** Runs waiting for the end of this turn, by their counters and times to live. */
  private gathered = new Map<string, Gathered>();

  constructor(redis: unknown) {
    super(
      new RateLimiterRedis({
        storeClient: redis,
        points: UNBOUNDED,
        duration: 3600,
        keyPrefix: 'fastpaste:q',
        rejectIfRedisNotReady: true,
      }),
    );
    this.redis = redis as RedisWithIncrementAll;
    this.redis.defineCommand('fastpasteIncrementAll', { lua: INCREMENT_ALL_LUA });
  }

  incrementAll(counters: ReadonlyArray<{ key: string; ttlSeconds: number }>): Promise<number[]> {
    if (counters.length === 0) return Promise.resolve([]);
    if (this.redis.status !== 'ready') return Promise.reject(unavailable(null));
    const args: Array<string | number> = counters.map(({ key }) => this.limiter.getKey(key));
    for (const { ttlSeconds } of counters) args.push(ttlSeconds);
    const id = args.join('\n');
    let gathered = this.gathered.get(id);
    if (!gathered) {
      if (this.gathered.size === 0) setImmediate(() => this.runGathered());
      gathered = { args, keyCount: counters.length, waiting: [] };
      this.gathered.set(id, gathered);
    }
    const waiting = gathered.waiting;
    return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
  }

  /** One script run for each set of counters gathered this turn; each run its own counts. */
  private runGathered(): void {
    const all = this.gathered;
    this.gathered = new Map();
    for (const { args, keyCount, waiting } of all.values()) {
      const runs = waiting.length;
      this.redis.fastpasteIncrementAll(keyCount, ...args, runs).then(
        (totals) => {
          // The totals after all of them: the first run gets each total less (runs - 1).
          for (const [i, run] of waiting.entries()) run.resolve(totals.map((total) => total - (runs - 1 - i)));
        },
        (err: unknown) => rejectAll(waiting, err),
      );
    }
  }
}

/** Fails every gathered run as the store failed (no count of theirs is known). */
function rejectAll(waiting: Gathered['waiting'], failure: unknown): void {
  const err = unavailable(failure);
  for (const run of waiting) run.reject(err);
}

/** Counters in Redis (ioredis client); fails at once while Redis is not connected. */
export function redisCounters(redis: unknown): CounterStore {
  return new RedisCounterStore(redis);
}
