/**
 * One schema for every setting (D2). Read from the environment once at start, checked, and shared
 * by the server and the `fastpaste` command. A bad value stops the process with one line naming
 * the variable.
 */

import { existsSync } from 'node:fs';
import { isIP } from 'node:net';
import { compile as compileTrustedProxies } from '@fastify/proxy-addr';
import { ContentChecker } from './pastes/content-check.js';

export interface Config {
  port: number;
  host: string;
  baseUrl: string;
  databaseUrl: string;
  redisUrl: string | null;
  /**
   * Proxies in front whose X-Forwarded-For entries are believed (0: the header is ignored):
   * either how many, counted from the right (whoever connects is taken for the innermost), or
   * the proxies' own addresses (IP addresses, CIDR ranges, or the names loopback, linklocal and
   * uniquelocal), of which only one that connects is believed. The client address is the entry
   * the outermost trusted proxy appended: entries left of it are whatever the client sent.
   */
  trustProxy: number | string[];
  apiEnabled: boolean;
  anonymousCli: boolean;
  anonHourlyLimit: number;
  webhookAllowPrivate: boolean;
  /** A file of regular expressions, one a line, that anonymous content must not match. */
  contentBlocklistFile: string | null;
  webhookRetryBaseMs: number;
  webhookTimeoutMs: number;
  webhookConcurrency: number;
  /** How long a finished webhook delivery and its attempts are kept (then removed by the sweep). */
  webhookRetentionMs: number;
  /** How often the background sweep removes expired pastes. */
  sweepIntervalMs: number;
  logLevel: string;
  /** 404 answers a client address may get per minute before every request is 429 (0 = off). */
  notFoundLimitPerMinute: number;
  /** Time a client has to send a whole request, headers and body. */
  requestTimeoutMs: number;
  /** Time a client has to send the request headers (slow-header attacks). */
  headersTimeoutMs: number;
  /** Time an answer's bytes may wait for its client to read any of them; then the connection closes. */
  sendTimeoutMs: number;
  /**
   * What all connections may hold in answers their clients have not read, text counted in
   * characters, bytes in bytes (unread-answers.ts).
   */
  maxUnsentBytes: number;
  /** Connections one client address may have open at once (0 = no cap; connections-per-address.ts). */
  maxConnectionsPerAddress: number;
  /** Time the requests in flight at SIGTERM get to finish before their connections are closed. */
  shutdownTimeoutMs: number;
}

export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

/** The words of a yes/no setting (a Map: `constructor` or `__proto__` is no word of it). */
const BOOLEANS = new Map<string, boolean>([
  ['true', true],
  ['false', false],
  ['1', true],
  ['0', false],
  ['yes', true],
  ['no', false],
  ['on', true],
  ['off', false],
]);

function readBoolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = BOOLEANS.get(raw.trim().toLowerCase());
  if (value === undefined) throw new ConfigError(`${name} must be true or false, got "${raw}"`);
  return value;
}

/**
 * TRUST_PROXY: false (0), true (one proxy), how many proxies stand in front (1–10), or the
 * proxies' addresses, comma-separated (checked by the same parser the server trusts them with).
 */
const PROXY_NAMES = new Set(['loopback', 'linklocal', 'uniquelocal']);

function readTrustProxy(env: Env): number | string[] {
  const raw = env.TRUST_PROXY?.trim().toLowerCase() ?? '';
  if (raw === '') return 0;
  const word = BOOLEANS.get(raw);
  if (word !== undefined) return Number(word);
  if (/^\d+$/.test(raw) && Number(raw) <= 10) return Number(raw);
  const addresses = raw.split(',').map((entry) => entry.trim());
  try {
    // Each an address as Node writes one (ipaddr.js would also take 11 for 0.0.0.11 and 010.0.0.1
    // for 8.0.0.1), with a prefix length or not, or one of proxy-addr's names.
    if (!addresses.every((entry) => PROXY_NAMES.has(entry) || isIP(entry.replace(/\/\d{1,3}$/, '')) !== 0)) {
      throw new Error('not a list');
    }
    compileTrustedProxies(addresses);
  } catch {
    throw new ConfigError(
      "TRUST_PROXY must be true, false, a number of proxies (1 to 10) or the proxies' addresses " +
        `(IP addresses, CIDR ranges, loopback, linklocal or uniquelocal, comma-separated), got "${env.TRUST_PROXY}"`,
    );
  }
  return addresses;
}

function readInteger(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw.trim());
  if (value < min || value > max) {
    throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  }
  return value;
}

/**
 * A URL as a message may show it: its user name and password left out (the message goes to
 * stderr, and from there to the supervisor's logs; a webhook URL's to the CLI and last_error).
 */
export function withoutCredentials(raw: string): string {
  // Up to the last @: a password may hold / ? # or @ unencoded (then the URL does not parse,
  // which is exactly when a message shows it); a path's own @ is left out too, which is harmless.
  // The query is left out too when it holds a value: pg and ioredis take ?password= as well. A ?
  // before the last @ leaves it unknown whether that @ is in a password or in the query's (whose
  // rest would show): then nothing after the scheme is shown.
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(raw)?.[0];
  if (scheme !== undefined) {
    const question = raw.indexOf('?');
    if (question >= 0 && question < raw.lastIndexOf('@')) return `${scheme}…`;
    return raw.replace(/^([a-z][a-z0-9+.-]*:\/\/).*@/is, '$1***@').replace(/\?.*=.*$/s, '?…');
  }
  // No scheme:// and credentials in it (a typo, postgres:/u:pw@h or redis//:pw@h, or libpq's
  // keywords, password=pw): where a password would end cannot be told, so nothing after the
  // scheme is shown.
  if (!/[@=]/.test(raw)) return raw;
  return `${/^[a-z][a-z0-9+.-]*:?/i.exec(raw)?.[0] ?? ''}…`;
}

function readUrl(env: Env, name: string, fallback: string | null, protocols: string[]): string | null {
  // Trimmed as the other settings are: a trailing space would be in every address built on it.
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be a URL, got "${withoutCredentials(raw)}"`);
  }
  if (!protocols.includes(url.protocol)) {
    throw new ConfigError(`${name} must start with ${protocols.map((p) => `${p}//`).join(' or ')}`);
  }
  // The parser mends `http:/host` and `redis:host:6379` (a host read as a socket path by
  // ioredis): a value without `//` and a host is a typo, refused rather than used as typed.
  // (ioredis's socket form, redis:///?path=/run/redis.sock, has no host and is a URL still.)
  const socket = url.protocol.startsWith('redis') && url.searchParams.has('path');
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(raw) || (url.hostname === '' && !socket)) {
    throw new ConfigError(
      `${name} must be a URL with a host, as ${protocols[0]}//host:port, got "${withoutCredentials(raw)}"`,
    );
  }
  return raw;
}

/** DATABASE_URL: an SQLite file, or a PostgreSQL URL that parses (pg would throw a stack later). */
function readDatabaseUrl(env: Env): string {
  const databaseUrl = env.DATABASE_URL?.trim() || 'sqlite:./data/fastpaste.db';
  if (databaseUrl.startsWith('sqlite:')) {
    // An empty path would be an in-memory database: every paste and key gone at exit.
    if (databaseUrl === 'sqlite:') throw new ConfigError('DATABASE_URL names no SQLite file: give sqlite:<path>');
    return databaseUrl;
  }
  if (!/^(postgres:\/\/|postgresql:\/\/)/.test(databaseUrl)) {
    throw new ConfigError(
      `DATABASE_URL must start with sqlite: or postgres://, got "${withoutCredentials(databaseUrl)}"`,
    );
  }
  try {
    // libpq's socket form has credentials and no host (postgres://user:pw@/db?host=/run/pg):
    // the URL parser refuses that, pg reads it (as pg-connection-string does, with a host put in).
    new URL(databaseUrl.replace('@/', '@localhost/'));
  } catch {
    throw new ConfigError(
      `DATABASE_URL must be a URL (a / ? # or @ in the password percent-encoded), got "${withoutCredentials(databaseUrl)}"`,
    );
  }
  return databaseUrl;
}

/** BASE_URL: where the service is reached, which every address it gives starts with. */
function readBaseUrl(env: Env, port: number): string {
  const raw = readUrl(env, 'BASE_URL', `http://localhost:${port}`, ['http:', 'https:']) as string;
  const url = new URL(raw);
  if (url.username || url.password || raw.includes('?') || raw.includes('#')) {
    throw new ConfigError(
      'BASE_URL must be a plain address (no user, password, query or fragment), as addresses are built on it',
    );
  }
  // The pages, their scripts and forms link from the root of the host: under a path, the API's
  // addresses would work and the web pages (decryption, view-once, passwords) would not.
  if (url.pathname.replace(/\/+$/, '') !== '') {
    throw new ConfigError(
      `BASE_URL must be the service's origin without a path (got the path "${url.pathname}"): serve fastpaste at the root of a host`,
    );
  }
  return raw.replace(/\/+$/, '');
}

function readFile(env: Env, name: string): string | null {
  const raw = env[name]?.trim();
  if (!raw) return null;
  if (!existsSync(raw)) throw new ConfigError(`${name} names a file that does not exist: "${raw}"`);
  return raw;
}

/** CONTENT_BLOCKLIST_FILE: a file whose every line is a regular expression, compiled here to check it. */
function readBlocklist(env: Env): string | null {
  const file = readFile(env, 'CONTENT_BLOCKLIST_FILE');
  if (file === null) return null;
  try {
    ContentChecker.fromFile(file);
  } catch (err) {
    throw new ConfigError(`CONTENT_BLOCKLIST_FILE: ${(err as Error).message}`);
  }
  return file;
}

/** HOST: an IP address or a host name to listen on (a bad one failed at listen, not naming HOST). */
function readHost(env: Env): string {
  const host = env.HOST?.trim() || '127.0.0.1';
  // Labels of letters, digits, - and _ (an /etc/hosts name may hold one).
  const name = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/i;
  if (isIP(host) === 0 && !name.test(host)) {
    throw new ConfigError(`HOST must be an IP address or a host name to listen on, got "${env.HOST}"`);
  }
  return host;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Reads and checks every setting; throws ConfigError with one readable line on a bad value. */
export function loadConfig(env: Env = process.env): Config {
  const port = readInteger(env, 'PORT', 8080, 0, 65535);
  const host = readHost(env);
  const baseUrl = readBaseUrl(env, port);
  const databaseUrl = readDatabaseUrl(env);
  const requestTimeoutSeconds = readInteger(env, 'REQUEST_TIMEOUT_SECONDS', 120, 1, 3600);
  const headersTimeoutSeconds = readInteger(env, 'HEADERS_TIMEOUT_SECONDS', 30, 1, 3600);
  if (headersTimeoutSeconds > requestTimeoutSeconds) {
    throw new ConfigError(
      `HEADERS_TIMEOUT_SECONDS must not be over REQUEST_TIMEOUT_SECONDS (${requestTimeoutSeconds}), got ${headersTimeoutSeconds}`,
    );
  }
  const logLevel = env.LOG_LEVEL?.trim() || 'info';
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  }
  return {
    port,
    host,
    baseUrl,
    databaseUrl,
    redisUrl: readUrl(env, 'REDIS_URL', null, ['redis:', 'rediss:']),
    trustProxy: readTrustProxy(env),
    apiEnabled: readBoolean(env, 'API_ENABLED', true),
    anonymousCli: readBoolean(env, 'ANONYMOUS_CLI', true),
    anonHourlyLimit: readInteger(env, 'ANON_HOURLY_LIMIT', 30, 0, 1_000_000_000),
    webhookAllowPrivate: readBoolean(env, 'WEBHOOK_ALLOW_PRIVATE', false),
    contentBlocklistFile: readBlocklist(env),
    webhookRetryBaseMs: readInteger(env, 'WEBHOOK_RETRY_BASE_MS', 30_000, 1, 86_400_000),
    webhookTimeoutMs: readInteger(env, 'WEBHOOK_TIMEOUT_MS', 10_000, 100, 120_000),
    webhookConcurrency: readInteger(env, 'WEBHOOK_CONCURRENCY', 8, 1, 256),
    webhookRetentionMs: readInteger(env, 'WEBHOOK_RETENTION_DAYS', 30, 1, 3650) * 86_400_000,
    sweepIntervalMs: readInteger(env, 'SWEEP_INTERVAL_SECONDS', 60, 1, 86_400) * 1000,
    logLevel,
    notFoundLimitPerMinute: readInteger(env, 'NOT_FOUND_LIMIT_PER_MINUTE', 60, 0, 1_000_000_000),
    requestTimeoutMs: requestTimeoutSeconds * 1000,
    headersTimeoutMs: headersTimeoutSeconds * 1000,
    sendTimeoutMs: readInteger(env, 'SEND_TIMEOUT_SECONDS', 60, 1, 3600) * 1000,
    maxUnsentBytes: readInteger(env, 'MAX_UNSENT_MB', 256, 1, 65_536) * 1024 * 1024,
    maxConnectionsPerAddress: readInteger(env, 'MAX_CONNECTIONS_PER_ADDRESS', 256, 0, 1_000_000),
    shutdownTimeoutMs: readInteger(env, 'SHUTDOWN_TIMEOUT_SECONDS', 5, 1, 3600) * 1000,
  };
}
