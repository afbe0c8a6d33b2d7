/**
 * Test helpers: a real fastpaste server on 127.0.0.1 (random port) over a fresh SQLite file, a
 * clock the test moves by hand, and API keys made through the real key service.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.js';
import { type Config, loadConfig } from '../src/config.js';
import type { NewKeyOptions } from '../src/keys/key-service.js';
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
  /** The SQLite file's path. */
  databasePath: string;
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

export async function startServer(options: TestServerOptions = {}): Promise<TestServer> {
  const dir = options.databasePath ? null : mkdtempSync(join(tmpdir(), 'fastpaste-test-'));
  const databasePath = options.databasePath ?? join(dir as string, 'fastpaste.db');
  const clock = options.clock === 'system' ? new SystemClock() : (options.clock ?? new ManualClock());
  const storage = openStorage(`sqlite:${databasePath}`);
  await migrateToLatest(storage.db);

  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const config: Config = loadConfig({
    DATABASE_URL: `sqlite:${databasePath}`,
    PORT: String(port),
    BASE_URL: url,
    ...options.env,
  });
  const services = await createServices(storage, { clock: clock.read, config });
  const app = await buildApp({ config, services });
  await app.listen({ port, host: '127.0.0.1' });
  services.webhookWorker.start();
  return {
    app,
    services,
    clock,
    url,
    databasePath,
    async createKey(keyOptions = {}) {
      const created = await services.keys.create({ name: 'test key', ...keyOptions });
      return created.key;
    },
    async close() {
      await app.close();
      await services.close();
      await storage.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
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
export async function encryptForTest(plaintext: string): Promise<{ wire: string; key: string }> {
  const { webcrypto } = await import('node:crypto');
  const rawKey = webcrypto.getRandomValues(new Uint8Array(32));
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
