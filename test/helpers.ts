/**
 * Test helpers: a real fastpaste server on 127.0.0.1 (random port) over a fresh database (a SQLite
 * file, or a PostgreSQL schema with TEST_DATABASE_URL; quota counters in Redis with
 * TEST_REDIS_URL), a clock the test moves by hand, and API keys made through the real key service.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net, { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { type Config, loadConfig } from '../src/config.js';
import type { NewKeyOptions } from '../src/keys/key-service.js';
import type { Paste } from '../src/pastes/paste.js';
import { createServices, type Services } from '../src/services.js';
import { openStorage } from '../src/storage/database.js';
import { migrateToLatest } from '../src/storage/migrations.js';

/** A clock that stands still until the test moves it. */
export class ManualClock {
  constructor(public now = Date.UTC(2026, 0, 15, 12, 0, 0)) {}
  readonly read = (): number => this.now;
  advance(ms: number): void {
    this.now += ms;
  }
}

/** Real time, for tests of background work (webhook retries) that wait on timers. */
export class SystemClock extends ManualClock {
  override readonly read = (): number => Date.now();
}

export interface TestServer {
  app: FastifyInstance;
  services: Services;
  clock: ManualClock;
  /** `http://127.0.0.1:<port>`, also the server's BASE_URL. */
  url: string;
  /** The SQLite file's path (meaningless on PostgreSQL: check `onPostgres`). */
  databasePath: string;
  /** The DATABASE_URL of this server, to start another on the same data. */
  databaseUrl: string;
  /** Runs SQL on the server's database (the same text must suit SQLite and PostgreSQL). */
  sql<T = Record<string, unknown>>(query: string): Promise<T[]>;
  /** Creates an active key and returns the secret. */
  createKey(options?: Partial<NewKeyOptions>): Promise<string>;
  close(): Promise<void>;
}

export interface TestServerOptions {
  /** Settings as environment variables would give them (PORT and BASE_URL are set for you). */
  env?: Record<string, string>;
  /** A manual clock (the default, at 2026-01-15 12:00 UTC), or 'system' for real time. */
  clock?: ManualClock | 'system';
  /** Reuse this SQLite file (a restart); it is then left in place by close(). */
  databasePath?: string;
  /** Reuse this database (a restart, or a second instance); it is left in place by close(). */
  databaseUrl?: string;
  /** The server's logger (none by default), to check what it writes. */
  logger?: import('pino').Logger;
}

/** A TCP port free on 127.0.0.1 right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/** True when the suite runs on PostgreSQL (TEST_DATABASE_URL set). */
export const onPostgres = Boolean(process.env.TEST_DATABASE_URL);

/**
 * A fresh, empty database for one test server: a new SQLite file, or with TEST_DATABASE_URL (or
 * the PostgreSQL URL given) a new schema in that PostgreSQL database (dropped by `drop`).
 */
export async function freshDatabase(
  base: string | undefined = process.env.TEST_DATABASE_URL,
): Promise<{ url: string; path: string | null; drop(): Promise<void> }> {
  if (!base) {
    const dir = mkdtempSync(join(tmpdir(), 'fastpaste-test-'));
    const path = join(dir, 'fastpaste.db');
    return { url: `sqlite:${path}`, path, drop: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  const schema = `fp_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const url = new URL(base);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return {
    url: url.toString(),
    path: null,
    async drop() {
      const client = new pg.Client({ connectionString: base });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    },
  };
}

/** A string as an SQL literal, for the text given to `server.sql` or `queryDatabase`. */
export const sqlText = (value: string): string => `'${value.replaceAll("'", "''")}'`;

/** Runs SQL on the database at `databaseUrl` over a connection of its own (e.g. one a CLI process uses). */
export async function queryDatabase<T = Record<string, unknown>>(databaseUrl: string, query: string): Promise<T[]> {
  const storage = openStorage(databaseUrl);
  try {
    return (await sql.raw<T>(query).execute(storage.db)).rows;
  } finally {
    await storage.close();
  }
}

/**
 * Whether `needle` is anywhere in the database: on SQLite in the bytes of the file and its
 * write-ahead log; on PostgreSQL (whose files are out of reach) in any column, as text, of any
 * row of any table of the schema.
 */
export async function databaseContains(databaseUrl: string, needle: string): Promise<boolean> {
  if (databaseUrl.startsWith('sqlite:')) {
    const path = databaseUrl.slice('sqlite:'.length);
    const files = [path, `${path}-wal`].filter((f) => existsSync(f));
    return Buffer.concat(files.map((f) => readFileSync(f))).includes(Buffer.from(needle));
  }
  const columns = await queryDatabase<{ table_name: string; column_name: string }>(
    databaseUrl,
    `SELECT table_name, column_name FROM information_schema.columns
     WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
  );
  const tables = new Map<string, string[]>();
  for (const { table_name, column_name } of columns) {
    tables.set(table_name, [...(tables.get(table_name) ?? []), column_name]);
  }
  for (const [table, names] of tables) {
    const test = names.map((c) => `strpos(CAST("${c}" AS text), ${sqlText(needle)}) > 0`).join(' OR ');
    const [row] = await queryDatabase<{ n: number }>(databaseUrl, `SELECT count(*) AS n FROM "${table}" WHERE ${test}`);
    if (Number(row?.n) > 0) return true;
  }
  return false;
}

/**
 * Empties the quota counters a server on the test Redis would share with every earlier one (the
 * keys are not per database, and a ManualClock puts most tests in the same windows).
 */
async function clearRedisCounters(url: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', 'fastpaste:q:*', 'COUNT', 1000);
      if (keys.length > 0) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

export async function startServer(options: TestServerOptions = {}): Promise<TestServer> {
  const owned = options.databaseUrl || options.databasePath ? null : await freshDatabase();
  const databaseUrl =
    options.databaseUrl ?? (options.databasePath ? `sqlite:${options.databasePath}` : (owned?.url as string));
  const databasePath = databaseUrl.startsWith('sqlite:') ? databaseUrl.slice('sqlite:'.length) : null;
  const clock = options.clock === 'system' ? new SystemClock() : (options.clock ?? new ManualClock());
  const redisUrl = options.env?.REDIS_URL ?? process.env.TEST_REDIS_URL;
  // A fresh database comes with fresh counters; a restart or second instance keeps them.
  if (owned && redisUrl && redisUrl === process.env.TEST_REDIS_URL) await clearRedisCounters(redisUrl);
  const storage = openStorage(databaseUrl, { backgroundCheckpoints: true });
  await migrateToLatest(storage);

  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const config: Config = loadConfig({
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    BASE_URL: url,
    // The ManualClock stands still, so every 404 of a test server falls in one minute: suites
    // that ask for many unknown ids get a large budget (security.test.ts tests the real one).
    NOT_FOUND_LIMIT_PER_MINUTE: '10000',
    ...(process.env.TEST_REDIS_URL ? { REDIS_URL: process.env.TEST_REDIS_URL } : {}),
    ...options.env,
  });
  const services = await createServices(storage, {
    clock: clock.read,
    config,
    ...(options.logger ? { logger: options.logger } : {}),
  });
  const app = await buildApp({ config, services, ...(options.logger ? { logger: options.logger } : {}) });
  await app.listen({ port, host: '127.0.0.1' });
  services.webhookWorker.start();
  return {
    app,
    services,
    clock,
    url,
    databasePath: databasePath as string,
    databaseUrl,
    async sql<T = Record<string, unknown>>(query: string): Promise<T[]> {
      const result = await sql.raw<T>(query).execute(services.storage.db);
      return result.rows;
    },
    async createKey(keyOptions = {}) {
      const created = await services.keys.create({ name: 'test key', ...keyOptions });
      return created.key;
    },
    async close() {
      await app.close();
      // A request that never ends (a reader waiting for ever) would hold every close for its
      // whole bound: any test whose requests leave one fails here.
      const left = app.requestsAtWork();
      await services.close();
      await storage.close();
      await owned?.drop();
      if (left > 0) throw new Error(`${left} request(s) still at work after the close: a request that never ended`);
    },
  };
}

/** JSON request helper: returns status, headers and the parsed body (or text when not JSON). */
export async function request(
  url: string,
  init: { method?: string; headers?: Record<string, string>; json?: unknown; body?: BodyInit } = {},
): Promise<{ status: number; headers: Headers; body: any; text: string }> {
  const headers: Record<string, string> = { ...init.headers };
  let body = init.body;
  if (init.json !== undefined) {
    headers['content-type'] ??= 'application/json';
    body = JSON.stringify(init.json);
  }
  const response = await fetch(url, { method: init.method ?? 'GET', headers, body: body ?? null });
  const text = await response.text();
  let parsed: unknown = text;
  if ((response.headers.get('content-type') ?? '').includes('application/json')) parsed = JSON.parse(text);
  return { status: response.status, headers: response.headers, body: parsed, text };
}

/**
 * Sends the requests (raw HTTP/1.1 text, each whole) pipelined on one connection and reads
 * `count` answers off it in order, each by its Content-Length: status, head (lower-cased) and body.
 */
export async function pipelinedAnswers(
  url: string,
  requests: string[],
  count = requests.length,
): Promise<Array<{ status: number; head: string; body: string }>> {
  const socket = net.connect(Number(new URL(url).port), '127.0.0.1');
  socket.write(requests.join(''));
  let buffered = Buffer.alloc(0);
  const answers: Array<{ status: number; head: string; body: string }> = [];
  try {
    for await (const chunk of socket) {
      buffered = Buffer.concat([buffered, chunk as Buffer]);
      for (;;) {
        const end = buffered.indexOf('\r\n\r\n');
        if (end < 0) break;
        const head = buffered.subarray(0, end).toString('latin1').toLowerCase();
        const length = Number(/content-length: (\d+)/.exec(head)?.[1]);
        if (buffered.length < end + 4 + length) break;
        answers.push({
          status: Number(head.split(' ')[1]),
          head,
          body: buffered.subarray(end + 4, end + 4 + length).toString('utf8'),
        });
        buffered = buffered.subarray(end + 4 + length);
      }
      if (answers.length === count) break;
    }
  } finally {
    socket.destroy();
  }
  return answers;
}

/** Creates a paste through `POST /api/v1/paste` with the key; returns its id (throws unless 201). */
export async function createPaste(
  server: { url: string },
  key: string,
  json: Record<string, unknown>,
): Promise<string> {
  const created = await request(`${server.url}/api/v1/paste`, { method: 'POST', headers: { 'x-api-key': key }, json });
  if (created.status !== 201) throw new Error(`POST /api/v1/paste: ${created.status} ${created.text}`);
  return created.body.data.paste_id as string;
}

/** Asserts the D7 error envelope and returns it. */
export function expectError(
  result: { status: number; body: any },
  status: number,
  code: string,
): { error: true; message: string; code: string; details?: Array<{ field: string; message: string }> } {
  if (result.status !== status || typeof result.body !== 'object' || result.body.code !== code) {
    throw new Error(`expected ${status} ${code}, got ${result.status} ${JSON.stringify(result.body)}`);
  }
  if (result.body.error !== true || typeof result.body.message !== 'string' || result.body.message.length === 0) {
    throw new Error(`not a D7 envelope: ${JSON.stringify(result.body)}`);
  }
  return result.body;
}

/** A valid `fpe1:` string, made with a real AES-256-GCM key as a client would. */
export async function encryptForTest(plaintext: string, keyBytes = 32): Promise<{ wire: string; key: string }> {
  const { webcrypto } = await import('node:crypto');
  const rawKey = webcrypto.getRandomValues(new Uint8Array(keyBytes));
  const key = await webcrypto.subtle.importKey('raw', rawKey, 'AES-GCM', false, ['encrypt']);
  const iv = webcrypto.getRandomValues(new Uint8Array(12));
  const ct = new Uint8Array(
    await webcrypto.subtle.encrypt({ name: 'AES-GCM', iv }, key, new TextEncoder().encode(plaintext)),
  );
  return {
    wire: `fpe1:${Buffer.from(iv).toString('base64')}:${Buffer.from(ct).toString('base64')}`,
    key: Buffer.from(rawKey).toString('base64url'),
  };
}

/** A plain paste of the content, for inserting through the repository. */
export function plainPaste(id: string, content: string, createdAt: number, ownerKeyId: string | null = null): Paste {
  return {
    id,
    ownerKeyId,
    title: null,
    description: null,
    content,
    contentType: 'text',
    originalFilename: null,
    language: null,
    fileSize: Buffer.byteLength(content),
    sha256: 'a'.repeat(64),
    createdAt,
    expiresAt: null,
    viewCount: 0,
    burnAfterRead: false,
    encrypted: false,
    downloadable: true,
    public: false,
    passwordHash: null,
    source: 'api',
    creatorIp: null,
  };
}

/**
 * A TCP proxy on 127.0.0.1 in front of `target` (its host and port, `defaultPort` if none):
 * `relay` passes each connection's bytes on between the client and upstream as it sees fit. A
 * connection closed on one side is closed on the other. `url` is `target` with the proxy's host.
 */
export async function tcpProxy(
  target: URL,
  defaultPort: number,
  relay: (client: net.Socket, upstream: net.Socket) => void,
): Promise<{ url: string; dropAll(): void; close(): void }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || defaultPort), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    relay(client, upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const url = new URL(target);
  url.host = `127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const dropAll = () => {
    for (const socket of sockets) socket.destroy();
  };
  return {
    url: url.toString(),
    dropAll,
    close: () => {
      dropAll();
      server.close();
    },
  };
}

/**
 * A TCP proxy in front of the test's PostgreSQL that, once told, cuts the connection that sends
 * the next query containing `text`: 'before' drops it instead of passing it on; 'after' passes
 * it on, waits for PostgreSQL's ReadyForQuery outside a transaction (the statement's own
 * transaction committed), and drops the connection without passing the reply back.
 */
export async function postgresProxy(target: URL): Promise<{
  url: string;
  /** Cuts the next `times` connections (each once) that send a query containing `text`. */
  cutAtNext(text: string, when: 'before' | 'after', times?: number): void;
  cuts(): number;
  close(): void;
}> {
  let armed: { text: string; when: 'before' | 'after'; times: number } | null = null;
  let cuts = 0;
  const proxy = await tcpProxy(target, 5432, (client, upstream) => {
    let withheld: Buffer | null = null; // the reply held back, until its ReadyForQuery
    const cut = () => {
      cuts++;
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (data: Buffer) => {
      if (armed && data.includes(armed.text)) {
        const { when } = armed;
        armed.times--;
        if (armed.times === 0) armed = null;
        if (when === 'before') return cut();
        withheld = Buffer.alloc(0);
      }
      upstream.write(data);
    });
    upstream.on('data', (data: Buffer) => {
      if (!withheld) return void client.write(data);
      withheld = Buffer.concat([withheld, data]);
      // Messages: a type byte and a 4-byte length (which counts itself). ReadyForQuery ('Z')
      // with the status 'I' (idle, no transaction open): the statement's transaction is over.
      for (let at = 0; at + 6 <= withheld.length; at += 1 + withheld.readInt32BE(at + 1)) {
        if (withheld[at] === 0x5a && withheld[at + 5] === 0x49) return cut();
      }
    });
  });
  return {
    url: proxy.url,
    cutAtNext: (text, when, times = 1) => {
      armed = { text, when, times };
    },
    cuts: () => cuts,
    close: proxy.close,
  };
}
