/**
 * API keys as the administrator manages them and as requests present them (D19): created with a
 * name and limits, shown once, stored as a digest, deactivated and re-activated.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';
import type { ApiKeyRow, KeyRepository } from '../storage/key-repository.js';
import { checkWebhookUrl, type GuardOptions } from '../webhooks/address-guard.js';
import { apiKeyDigest, generateApiKey, isWellFormedApiKey } from './api-key-format.js';

/** A key as the rest of the code sees it: never the secret, never the digest. */
export interface ApiKey {
  id: string;
  name: string;
  active: boolean;
  limits: { hourly: number; daily: number; monthly: number };
  webhookUrl: string | null;
  /** False after a receiver answered 410, until the URL is set again. */
  webhookActive: boolean;
  createdAt: number;
}

export interface NewKeyOptions {
  name: string;
  hourly?: number;
  daily?: number;
  monthly?: number;
  webhookUrl?: string | null;
}

function toApiKey(row: ApiKeyRow): ApiKey {
  return {
    id: row.id,
    name: row.name,
    active: row.active === 1,
    limits: { hourly: row.hourly_limit, daily: row.daily_limit, monthly: row.monthly_limit },
    webhookUrl: row.webhook_url,
    webhookActive: row.webhook_active === 1,
    createdAt: row.created_at,
  };
}

/** The largest limit a key may have: its column is a 32-bit integer (PostgreSQL refuses more). */
export const MAX_KEY_LIMIT = 2_147_483_647;

function checkLimit(name: string, value: number | undefined): number {
  if (value === undefined) return 0;
  if (!Number.isSafeInteger(value) || value < 0 || value > MAX_KEY_LIMIT) {
    throw new AppError(
      'invalid_request',
      `The ${name} limit must be a whole number from 0 (unlimited) to ${MAX_KEY_LIMIT}.`,
    );
  }
  return value;
}

/** How long a looked-up key is trusted without asking the database again. */
export const KEY_CACHE_MS = 1000;
const KEY_CACHE_MAX = 10_000;

/** A key's id as newKey makes it: shown in full in messages, unlike anything else given for a key. */
const KEY_ID = /^k_[0-9a-f]{12}$/;

export class KeyService {
  /**
   * Keys by digest, for a second: a busy client costs one look-up a second instead of one a
   * request. Changes made through this service drop the entry at once; a change made by another
   * process (the admin command, another instance) is seen within KEY_CACHE_MS.
   */
  private readonly cache = new Map<string, { row: ApiKeyRow | undefined; until: number }>();

  constructor(
    private readonly keys: KeyRepository,
    private readonly clock: Clock,
    private readonly webhookGuard: GuardOptions = { allowPrivate: false },
  ) {}

  /** Creates a key; the returned secret is shown once and never stored. */
  async create(options: NewKeyOptions): Promise<{ key: string; apiKey: ApiKey; webhookSecret: string | null }> {
    const name = options.name.trim();
    if (name.length === 0 || name.length > 200) {
      throw new AppError('invalid_request', 'A key needs a name of 1 to 200 characters.');
    }
    const key = generateApiKey();
    const webhookUrl = options.webhookUrl ?? null;
    if (webhookUrl !== null) await checkWebhookUrl(webhookUrl, this.webhookGuard);
    const webhookSecret = webhookUrl ? newWebhookSecret() : null;
    const row: ApiKeyRow = {
      id: `k_${randomBytes(6).toString('hex')}`, // KEY_ID
      name,
      digest: apiKeyDigest(key),
      active: 1,
      hourly_limit: checkLimit('hourly', options.hourly),
      daily_limit: checkLimit('daily', options.daily),
      monthly_limit: checkLimit('monthly', options.monthly),
      webhook_url: webhookUrl,
      webhook_secret: webhookSecret,
      webhook_active: 1,
      created_at: this.clock(),
    };
    await this.keys.insert(row);
    return { key, apiKey: toApiKey({ ...row, webhook_active: 1 }), webhookSecret };
  }

  async list(): Promise<ApiKey[]> {
    return (await this.keys.list()).map(toApiKey);
  }

  /**
   * Finds a key by its id (`k_...`) or by the secret itself, either without the spaces around it
   * (a key copied from a terminal).
   */
  async find(given: string): Promise<ApiKey | null> {
    const idOrKey = given.trim();
    const row = isWellFormedApiKey(idOrKey)
      ? await this.keys.findByDigest(apiKeyDigest(idOrKey))
      : await this.keys.findById(idOrKey);
    return row ? toApiKey(row) : null;
  }

  /**
   * The key by its id or by the key itself, or not_found. What is not a key id is named by its
   * first characters only, mistyped or not: the error line goes to a terminal, a script's log or
   * a CI job's output, and a key with a character too many or too few is still nearly all secret.
   */
  async get(given: string): Promise<ApiKey> {
    const found = await this.find(given);
    if (found) return found;
    const idOrKey = given.trim();
    const named = KEY_ID.test(idOrKey) || idOrKey.length <= 7 ? idOrKey : `${idOrKey.slice(0, 7)}…`;
    throw new AppError('not_found', `No API key "${named}".`);
  }

  async setActive(idOrKey: string, active: boolean): Promise<ApiKey> {
    const found = await this.get(idOrKey);
    await this.keys.update(found.id, { active: active ? 1 : 0 });
    this.forget();
    return { ...found, active };
  }

  /**
   * Sets (and re-activates) or clears a key's webhook. Setting it creates a new signing secret,
   * returned once; the URL must pass the address guard (D21).
   */
  async setWebhook(idOrKey: string, url: string | null): Promise<{ apiKey: ApiKey; secret: string | null }> {
    const found = await this.get(idOrKey);
    if (url !== null) await checkWebhookUrl(url, this.webhookGuard);
    const secret = url === null ? null : newWebhookSecret();
    await this.keys.update(found.id, { webhook_url: url, webhook_secret: secret, webhook_active: 1 });
    this.forget();
    return { apiKey: { ...found, webhookUrl: url, webhookActive: true }, secret };
  }

  /** Sets a key's three limits (0 = unlimited); the ones not given stay as they are. */
  async setLimits(idOrKey: string, limits: { hourly?: number; daily?: number; monthly?: number }): Promise<ApiKey> {
    const found = await this.get(idOrKey);
    const next = {
      hourly: limits.hourly === undefined ? found.limits.hourly : checkLimit('hourly', limits.hourly),
      daily: limits.daily === undefined ? found.limits.daily : checkLimit('daily', limits.daily),
      monthly: limits.monthly === undefined ? found.limits.monthly : checkLimit('monthly', limits.monthly),
    };
    await this.keys.update(found.id, {
      hourly_limit: next.hourly,
      daily_limit: next.daily,
      monthly_limit: next.monthly,
    });
    this.forget();
    return { ...found, limits: next };
  }

  private async lookUp(digest: string): Promise<ApiKeyRow | undefined> {
    const now = Date.now();
    const cached = this.cache.get(digest);
    if (cached && cached.until > now) return cached.row;
    const row = await this.keys.findByDigest(digest);
    if (this.cache.size >= KEY_CACHE_MAX) this.cache.clear();
    this.cache.set(digest, { row, until: now + KEY_CACHE_MS });
    return row;
  }

  /** Forgets cached keys after a change made here, so it applies to the next request. */
  private forget(): void {
    this.cache.clear();
  }

  /**
   * The active key a request presents if it was looked up within KEY_CACHE_MS, else undefined
   * (for the fast lane, which leaves every other case to authenticate()).
   */
  cachedActiveKey(presented: string): ApiKey | undefined {
    // Only well-formed keys are ever looked up, so a cached active row vouches for the shape.
    const cached = this.cache.get(apiKeyDigest(presented));
    if (!cached || cached.until <= Date.now() || !cached.row || cached.row.active !== 1) return undefined;
    return toApiKey(cached.row);
  }

  /**
   * The key a request presents: 401 when there is none, 403 when it is malformed, unknown or
   * inactive (api-v1.md, Authentication). A malformed key costs no database look-up.
   */
  async authenticate(presented: string | undefined): Promise<ApiKey> {
    if (presented === undefined || presented === '') {
      throw new AppError('api_key_missing', 'This endpoint needs an API key in the X-API-Key header.');
    }
    if (!isWellFormedApiKey(presented)) {
      throw new AppError('api_key_invalid', 'The API key is not valid.');
    }
    const row = await this.lookUp(apiKeyDigest(presented));
    if (!row) throw new AppError('api_key_invalid', 'The API key is not valid.');
    if (row.active !== 1) throw new AppError('api_key_invalid', 'The API key has been deactivated.');
    return toApiKey(row);
  }
}

/** A Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes. */
function newWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}
