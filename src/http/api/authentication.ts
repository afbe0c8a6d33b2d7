/**
 * The X-API-Key check of api-v1.md's Authentication section and the quota of D20, as route
 * hooks that run before the body is read: a refused request costs no upload, and a request
 * refused with 401 or 403 counts against nothing.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { clientBucket } from '../../client-address.js';
import type { ApiKey, KeyService } from '../../keys/key-service.js';
import { keySubject, type QuotaReceipt, type QuotaService } from '../../keys/quota-service.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The calling key, set by the authentication hook; null on an anonymous quick-create. */
    apiKey: ApiKey | null;
  }
}

export interface AccessDeps {
  keys: KeyService;
  quota: QuotaService;
}

/** Where the fast lane leaves the quota headers of a request it counted and then handed over. */
const COUNTED_BY_LANE = Symbol('quota counted by the fast lane');
/** Where it leaves the quota's refusal or failure of a request it then handed over. */
const REFUSED_IN_LANE = Symbol('quota refused or failed in the fast lane');
type Marked = { [COUNTED_BY_LANE]?: Record<string, string>; [REFUSED_IN_LANE]?: unknown };

/**
 * The fast lane counted this request's quota, then handed it to Fastify (its read or answer
 * failed): admitKey sends these headers instead of counting it a second time.
 */
export function markQuotaCounted(req: IncomingMessage, headers: Record<string, string>): void {
  (req as IncomingMessage & Marked)[COUNTED_BY_LANE] = headers;
}

/**
 * The quota refused this request in the fast lane (429), or its store failed (503): admitKey
 * answers the same instead of counting it again. A count whose store failed may have been made
 * all the same (a reply lost on the wire), and a second try would wait out the store again.
 */
export function markQuotaRefused(req: IncomingMessage, refusal: unknown): void {
  (req as IncomingMessage & Marked)[REFUSED_IN_LANE] = refusal;
}

function presentedKey(request: FastifyRequest): string | undefined {
  const header = request.headers['x-api-key'];
  return Array.isArray(header) ? header[0] : header;
}

/**
 * Whether a key was sent to a route open without one: an empty X-API-Key (a script's unset
 * variable) is none, as authenticate() takes it everywhere (401 api_key_missing where one is needed).
 */
function keySent(request: FastifyRequest): boolean {
  const presented = presentedKey(request);
  return presented !== undefined && presented !== '';
}

/**
 * Authenticates, then counts the request against the key's windows (429 past a limit). A key
 * looked up within the last second and counters held in memory answer at once; anything else
 * (and every refusal) takes the full path.
 */
async function admitKey(deps: AccessDeps, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const presented = presentedKey(request);
  const key =
    (presented !== undefined && deps.keys.cachedActiveKey(presented)) || (await deps.keys.authenticate(presented));
  request.apiKey = key;
  const marked = request.raw as IncomingMessage & Marked;
  if (marked[REFUSED_IN_LANE] !== undefined) throw marked[REFUSED_IN_LANE];
  const countedByLane = marked[COUNTED_BY_LANE];
  if (countedByLane) {
    reply.headers(countedByLane);
    return;
  }
  const receipt = await deps.quota.admit(keySubject(key.id), key.limits);
  (request as FastifyRequest & Counted)[RECEIPT] = receipt;
  reply.headers(receipt.headers);
}

/** Where admitKey leaves the count it made, for giveBackRefusedCounts. */
const RECEIPT = Symbol('quota receipt');
type Counted = { [RECEIPT]?: QuotaReceipt };

/**
 * D20: a request refused with 401 or 403 counts against nothing. The key's check refuses before
 * anything is counted; a 403 decided later (a paste of another key, one behind a password) gives
 * its count back before the answer goes out, and the answer's quota headers are those without
 * it. Should the store fail, the count stays and the answer goes out as it is. (A request the
 * fast lane counted is a list, a create, or a read by id whose paste expired while it was
 * counted: none is refused so.)
 */
export function giveBackRefusedCounts(app: FastifyInstance, quota: QuotaService): void {
  // A callback hook: every answer passes here, and only a refused one waits for the store.
  app.addHook('onSend', (request, reply, payload, done) => {
    const receipt = (request as FastifyRequest & Counted)[RECEIPT];
    if (receipt === undefined || (reply.statusCode !== 401 && reply.statusCode !== 403)) {
      done(null, payload);
      return;
    }
    (request as FastifyRequest & Counted)[RECEIPT] = undefined;
    quota.giveBack(receipt).then(
      (headers) => {
        reply.headers(headers);
        done(null, payload);
      },
      () => done(null, payload),
    );
  });
}

/** Every API route but quick-create: 401 without a key, 403 for a bad or inactive one. */
export function requireApiKey(deps: AccessDeps) {
  return (request: FastifyRequest, reply: FastifyReply): Promise<void> => admitKey(deps, request, reply);
}

/**
 * A page open to everyone (quick-create's usage): no key needed, but one that is sent is held to
 * Authentication 2 (403 when invalid or inactive) and counted (D20), as everywhere else.
 */
export function keyIfSent(deps: AccessDeps) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (keySent(request)) await admitKey(deps, request, reply);
    else request.apiKey = null;
  };
}

/**
 * Quick-create: a key when one is sent (and then it must be valid), otherwise anonymous and
 * counted per client address (an IPv6 client per /64); with anonymous use turned off, a keyless
 * request is a 401 as anywhere else.
 */
export function optionalApiKey(deps: AccessDeps & { anonymousAllowed: boolean; anonHourlyLimit: number }) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (keySent(request) || !deps.anonymousAllowed) {
      await admitKey(deps, request, reply);
      return;
    }
    request.apiKey = null;
    const limits = { hourly: deps.anonHourlyLimit, daily: 0, monthly: 0 };
    reply.headers(await deps.quota.consume(`anon:${clientBucket(request.ip)}`, limits));
  };
}

/** The key a route behind requireApiKey runs for. */
export function callerKey(request: FastifyRequest): ApiKey {
  if (!request.apiKey) throw new Error('route is not behind requireApiKey');
  return request.apiKey;
}
