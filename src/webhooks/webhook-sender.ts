/**
 * One HTTP POST of a webhook: through an agent that refuses internal addresses at connection
 * time (unless WEBHOOK_ALLOW_PRIVATE), a hard time-out over the whole exchange, redirects never
 * followed (node:http does not follow them; a 3xx is a failed attempt), and at most a few KB of
 * the answer read.
 */
import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { RequestFilteringHttpAgent, RequestFilteringHttpsAgent } from 'request-filtering-agent';
import { checkWebhookUrlSyntax, type Lookup, lookupTurns, refusingLookup } from './address-guard.js';

export interface SendResult {
  statusCode: number | null;
  /** Why the attempt failed, or null for a 2xx. */
  error: string | null;
  /** The receiver's Retry-After, in milliseconds, when it sent one. */
  retryAfterMs: number | null;
  durationMs: number;
}

export interface SendOptions {
  timeoutMs: number;
  allowPrivate: boolean;
  /** How much of the answer is read before the connection is dropped. */
  maxResponseBytes?: number;
}

// The agent refuses internal ranges at connection time; what its rules let through (::/96, the
// IPv4-compatible addresses) the lookup refuses (address-guard.ts).
const guardedHttp = new RequestFilteringHttpAgent({ keepAlive: false });
const guardedHttps = new RequestFilteringHttpsAgent({ keepAlive: false });

/** System lookups of receivers' names at a time, of every attempt: half of libuv's pool (lookupTurns). */
const lookupTurn = lookupTurns(dns.lookup as unknown as Lookup, 2);

function parseRetryAfter(value: string | undefined, now: number): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

export function sendWebhook(
  rawUrl: string,
  headers: Record<string, string>,
  body: string,
  options: SendOptions,
): Promise<SendResult> {
  const started = Date.now();
  const maxBytes = options.maxResponseBytes ?? 4096;
  return new Promise((resolve) => {
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (result: Omit<SendResult, 'durationMs'>) => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      resolve({ ...result, durationMs: Date.now() - started });
    };
    let url: URL;
    try {
      // The literal check again: the URL may have been stored before the rules, or by hand.
      url = checkWebhookUrlSyntax(rawUrl, { allowPrivate: options.allowPrivate });
    } catch (err) {
      finish({ statusCode: null, error: (err as Error).message, retryAfterMs: null });
      return;
    }
    const secure = url.protocol === 'https:';
    const lookup = lookupTurn(options.timeoutMs) as unknown as typeof dns.lookup;
    const agent = options.allowPrivate ? undefined : secure ? guardedHttps : guardedHttp;
    const request = (secure ? https : http).request(url, {
      method: 'POST',
      headers: {
        ...headers,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'user-agent': 'fastpaste-webhooks/1',
      },
      ...(agent ? { agent, lookup: refusingLookup(lookup) as unknown as typeof dns.lookup } : { agent: false, lookup }),
    });
    timer = setTimeout(() => {
      request.destroy(new Error(`timed out after ${options.timeoutMs} ms`));
    }, options.timeoutMs);
    request.on('response', (response) => {
      const status = response.statusCode ?? 0;
      const retryAfterMs = parseRetryAfter(response.headers['retry-after'] as string | undefined, Date.now());
      let read = 0;
      const done = () => {
        response.destroy();
        const error =
          status >= 200 && status < 300
            ? null
            : status >= 300 && status < 400
              ? `redirect (${status}) not followed`
              : `receiver answered ${status}`;
        finish({ statusCode: status, error, retryAfterMs });
      };
      response.on('data', (chunk: Buffer) => {
        read += chunk.length;
        if (read >= maxBytes) done();
      });
      response.on('end', done);
      response.on('error', done);
    });
    request.on('error', (err) => finish({ statusCode: null, error: err.message, retryAfterMs: null }));
    request.end(body);
  });
}
