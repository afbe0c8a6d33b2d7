/**
 * buildApp(deps): the whole HTTP application on the services it is given: body parsers, routes,
 * security headers, one error handler, 404/405. It never listens, so tests build one on a fresh
 * database with one call and use inject or a real socket.
 */
import { randomUUID } from 'node:crypto';
import { compile as compileTrustedProxies } from '@fastify/proxy-addr';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { type Logger, pino } from 'pino';
import type { Config } from './config.js';
import { AppError } from './errors.js';
import { giveBackRefusedCounts } from './http/api/authentication.js';
import { registerCliRoutes } from './http/api/cli-routes.js';
import { createFromJson, registerPasteRoutes } from './http/api/paste-routes.js';
import { answerClientError, answerUnmetExpectations, refuseConnect } from './http/client-errors.js';
import { capConnectionsPerAddress } from './http/connections-per-address.js';
import { ErrorLog, LineThrottle } from './http/error-log.js';
import { closeWithoutReset, sendError } from './http/error-presenter.js';
import { askForBodiesWhenAdmitted } from './http/expect-continue.js';
import { answerLaneReadFailures, FastLane, serverWithFastLane } from './http/fast-lane.js';
import { type NotFoundThrottle, registerNotFoundThrottle } from './http/not-found-throttle.js';
import { type JsonBodyParser, registerBodyParsers } from './http/request-bodies.js';
import { RequestsInFlight } from './http/requests-in-flight.js';
import { SECURITY_HEADERS } from './http/security-headers.js';
import { boundUnsentBytes } from './http/unread-answers.js';
import { registerUploadSlots } from './http/upload-slots.js';
import { readPageParts, registerWebRoutes } from './http/web/web-routes.js';
import type { Services } from './services.js';

export interface AppDeps {
  config: Config;
  services: Services;
  /** The process's logger (see createLogger); none in tests. */
  logger?: Logger;
}

const METHODS: HTTPMethod[] = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'];

/** While the server closes, how often connections fallen idle are closed. */
const CLOSE_IDLE_EVERY_MS = 100;

/** The answer to a request that arrives once the server has begun to close. */
const SHUTTING_DOWN = new AppError('shutting_down', 'The server is shutting down; send the request again.', {
  headers: { 'retry-after': '1' },
});

/** The server's logger: secrets in headers never reach a log line (no body is ever logged). */
export function createLogger(level: string): Logger {
  return pino({
    level,
    redact: {
      paths: [
        'req.headers["x-api-key"]',
        'req.headers["x-paste-password"]',
        'req.headers.authorization',
        'req.headers.cookie',
        // @fastify/multipart logs the request's headers at trace level; Fastify logs the raw bytes
        // of a request Node could not parse (headers included).
        'busboyOptions.headers["x-api-key"]',
        'busboyOptions.headers["x-paste-password"]',
        'busboyOptions.headers.authorization',
        'busboyOptions.headers.cookie',
        'err.rawPacket',
      ],
      censor: '[redacted]',
    },
  });
}

/** Whether a request is for /api/v1, however its path is spelled (%61pi is api to the router). */
function isApiRequest(request: FastifyRequest): boolean {
  const route = request.routeOptions.url;
  if (route && route !== '*') return route.startsWith('/api/');
  const path = request.url.split('?')[0] ?? '';
  let decoded = path;
  try {
    decoded = decodeURIComponent(path);
  } catch {}
  return decoded.startsWith('/api/');
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config, services } = deps;
  let throttle: NotFoundThrottle | null = null;
  // The API's JSON parser, as the lane's creates use it (set once the app exists).
  let parseJson: JsonBodyParser | null = null;
  const apiDeps = {
    pastes: services.pastes,
    keys: services.keys,
    quota: services.quota,
    presenter: services.presenter,
  };
  const proxies = trustedProxies(config.trustProxy);
  // The error answers' log lines, the lane's and the framework's together (error-log.ts).
  const errorLog = new ErrorLog(deps.logger);
  const lane = new FastLane({
    ...apiDeps,
    readPage: (read) => readPageParts(read, services.presenter),
    apiEnabled: config.apiEnabled,
    trustProxy: config.trustProxy !== 0,
    admits: (address, mayBeNotFound) => {
      try {
        if (mayBeNotFound) throttle?.checkAdmissible(address);
        else throttle?.check(address);
        return true;
      } catch {
        return false;
      }
    },
    holdWhileReading: (address) => {
      const budget = throttle;
      if (budget === null || config.notFoundLimitPerMinute <= 0) return null;
      try {
        const bucket = budget.admit(address);
        return () => budget.release(bucket, false);
      } catch {
        return null; // judged admissible in this same tick (admits): not reached
      }
    },
    createFromJson: async (body, key, ip) => createFromJson(apiDeps, (parseJson as JsonBodyParser)(body), key, ip),
    logger: deps.logger,
    errorLog,
  });
  // The requests still at work, which the close waits for (requests-in-flight.ts).
  const inFlight = new RequestsInFlight();
  const app = Fastify({
    // Plain successful reads of /raw and /api/v1/paste/{id} skip the framework (fast-lane.ts).
    serverFactory: serverWithFastLane(lane, inFlight),
    loggerInstance: (deps.logger ?? pino({ enabled: false })) as FastifyBaseLogger,
    // The socket's peer and then as many X-Forwarded-For entries, from the right, as there are
    // proxies (config.ts), or as long as each is a proxy's address: the address the outermost of
    // them saw. Left of it is the client's say.
    trustProxy: proxies.hops,
    genReqId: () => randomUUID(),
    requestTimeout: config.requestTimeoutMs,
    // A slow client (slow headers, a dripped body) is cut off; Node checks every few seconds.
    http: {
      requestTimeout: config.requestTimeoutMs,
      headersTimeout: config.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(5_000, Math.max(250, Math.floor(config.headersTimeoutMs / 4))),
      // A request without Host is answered by the routes (in the envelope), not by Node's bare 400.
      requireHostHeader: false,
    },
    // An answer whose client takes none of its bytes for this long closes its connection
    // (unread-answers.ts); the factory makes it the server's inactivity time-out.
    connectionTimeout: config.sendTimeoutMs,
    keepAliveTimeout: 10_000,
    // Fastify's own 503 while closing is not the envelope: the onRequest hook below answers it.
    return503OnClosing: false,
    routerOptions: { maxParamLength: 200, ignoreTrailingSlash: false },
    // A path the router cannot even decode (bad percent-encoding, a parameter past the length
    // limit) names no paste: 404 in the envelope like any other unknown address.
    frameworkErrors: (error, request, reply) => sendError(errorLog, request, reply, error),
    // What Node's parser refuses before any route runs still gets the envelope (client-errors.ts).
    clientErrorHandler: answerClientError,
  });

  // The routes known for each method, to tell a wrong method (405 with Allow) from a wrong path.
  const known = FindMyWay({ maxParamLength: 200 });
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (!known.hasRoute(method as HTTPMethod, route.url)) known.on(method as HTTPMethod, route.url, () => {});
    }
    // A handler's work ends when it settles, sent or not (its socket may be gone).
    const handler = route.handler;
    route.handler = function (this: FastifyInstance, request, reply) {
      let result: unknown;
      try {
        result = handler.call(this, request, reply);
      } catch (err) {
        inFlight.end(request);
        throw err;
      }
      if (result instanceof Promise) {
        return result.finally(() => inFlight.end(request));
      }
      inFlight.end(request);
      return result;
    };
  });

  app.decorate('requestsAtWork', () => inFlight.count);
  app.decorateRequest('apiKey', null);
  // A callback hook, not an async one: every request passes here, and a promise a request adds up.
  app.addHook('onRequest', (request, reply, done) => {
    inFlight.begin(request);
    reply.headers(SECURITY_HEADERS);
    if (lane.closing) {
      // Pipelined behind a request in flight, or sent on a kept-alive connection after the close
      // began: refused in the envelope, and the connection closed after it (onSend).
      done(SHUTTING_DOWN);
      return;
    }
    if (isApiRequest(request)) {
      // A paste's content (a view-once one's too), a key's list and quota: no shared cache
      // (one that ignores X-API-Key) may keep them, as for the pages and /raw.
      reply.header('cache-control', 'no-store');
      if (!config.apiEnabled) {
        done(new AppError('api_disabled', 'The API is turned off on this server.'));
        return;
      }
    }
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && encoding.toLowerCase() !== 'identity') {
      done(new AppError('invalid_request', 'Compressed request bodies are not accepted; send the body as is.'));
      return;
    }
    done();
  });

  // Before the request counts as ended (below): the give-back waits for the quota's store.
  giveBackRefusedCounts(app, services.quota);
  // While the server closes, every answer closes its connection: a client (or a proxy's pool)
  // sends nothing more on it, and the close does not wait for kept-alive connections to time out.
  app.addHook('onSend', (request, reply, payload, done) => {
    inFlight.end(request);
    if (lane.closing) reply.header('connection', 'close');
    // An answer sent before the request's body ended (a body its route never reads: a DELETE's,
    // a GET's) closes the connection as a refusal's does: Node would go on reading the rest of
    // it, however long, to drop it.
    if (!request.raw.complete) {
      reply.header('connection', 'close');
      closeWithoutReset(request.raw.socket);
    }
    done(null, payload);
  });
  answerUnmetExpectations(app.server);
  refuseConnect(app.server);
  // One address holds at most MAX_CONNECTIONS_PER_ADDRESS connections (connections-per-address.ts);
  // the refusals are logged at most once in REFUSALS_LOGGED_EVERY_MS, with the count left out.
  const refusalLines = new LineThrottle(REFUSALS_LOGGED_EVERY_MS);
  capConnectionsPerAddress(app.server, config.maxConnectionsPerAddress, proxies.peer, (address) => {
    const alsoRefused = refusalLines.admit();
    if (alsoRefused === null) return;
    app.log.warn({ address, alsoRefused }, 'refused a connection: MAX_CONNECTIONS_PER_ADDRESS reached for its address');
  });
  // Answers no one reads hold at most MAX_UNSENT_MB in all (unread-answers.ts).
  boundUnsentBytes(app.server, config.maxUnsentBytes, (closed, bytes) =>
    app.log.warn(
      { closed, unsentMb: Math.round(bytes / 1048576) },
      'closed connections whose clients read none of their answers: MAX_UNSENT_MB reached',
    ),
  );
  app.addHook('preClose', (done) => {
    lane.closing = true;
    // An answer whose head went out before the close (the lane's answers of this turn, whose
    // bodies end in its check phase; a large body to a slow reader) keeps its connection alive,
    // and Node closes idle connections only once, in server.close(): such connections are closed
    // as they fall idle, so the close never waits for a keep-alive timeout.
    const reaper = setInterval(() => app.server.closeIdleConnections(), CLOSE_IDLE_EVERY_MS);
    reaper.unref();
    app.server.once('close', () => clearInterval(reaper));
    done();
  });
  // The services and the storage close after this: the requests still at work (a connection
  // closed under them at the shutdown's deadline) finish first, for a bounded time. Then the
  // counts of error lines left out are written.
  app.addHook('onClose', async () => {
    if (!(await inFlight.settled())) {
      app.log.warn({ requests: inFlight.count }, 'requests still at work when the server closed');
    }
    errorLog.flush();
  });
  throttle = registerNotFoundThrottle(app, { limitPerMinute: config.notFoundLimitPerMinute, clock: services.clock });
  registerUploadSlots(app);
  askForBodiesWhenAdmitted(app);
  answerLaneReadFailures(app);
  parseJson = await registerBodyParsers(app);
  await registerPasteRoutes(app, apiDeps);
  await registerCliRoutes(app, {
    ...apiDeps,
    anonymousAllowed: config.anonymousCli,
    anonHourlyLimit: config.anonHourlyLimit,
    contentChecker: services.contentChecker,
  });
  await registerWebRoutes(app, {
    ...apiDeps,
    anonymousAllowed: config.anonymousCli,
    anonHourlyLimit: config.anonHourlyLimit,
    contentChecker: services.contentChecker,
  });

  app.get('/healthz', async () => ({ error: false, data: { status: 'ok' } }));
  // Ready when every backend answers; a load balancer takes the instance out while one does not.
  app.get('/readyz', async (_request, reply) => {
    const health = await services.health();
    const ready = health.database && health.redis !== false;
    const data = {
      status: ready ? 'ready' : 'unavailable',
      database: health.database ? 'ok' : 'down',
      redis: health.redis === null ? 'not used' : health.redis ? 'ok' : 'down',
    };
    if (ready) return { error: false, data };
    reply.code(503);
    return { error: true, message: 'A backing service does not answer.', code: 'service_unavailable', data };
  });

  app.setErrorHandler((error, request, reply) => sendError(errorLog, request, reply, error));
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = METHODS.filter((method) => known.find(method, path) !== null);
    if (allowed.length > 0) {
      return sendError(
        errorLog,
        request,
        reply,
        new AppError('method_not_allowed', `${request.method} is not allowed here.`, {
          headers: { allow: allowed.join(', ') },
        }),
      );
    }
    return sendError(errorLog, request, reply, new AppError('not_found', 'There is nothing at this address.'));
  });
  return app;
}

/** How often a refused connection's line may be written (capConnectionsPerAddress). */
const REFUSALS_LOGGED_EVERY_MS = 10_000;

/**
 * TRUST_PROXY (config.ts), compiled once: Fastify's trustProxy (a number of hops, or whether a
 * hop's address is one of the proxies'), and whether a socket's peer is a trusted proxy (in the
 * list, or any with a number of them).
 */
function trustedProxies(trust: Config['trustProxy']): {
  hops: false | ((address: string, hop: number) => boolean);
  peer: (address: string) => boolean;
} {
  if (Array.isArray(trust)) {
    const trusted = compileTrustedProxies(trust);
    return { hops: trusted, peer: (address) => trusted(address, 0) };
  }
  if (trust > 0) return { hops: (_address, hop) => hop < trust, peer: () => true };
  return { hops: false, peer: () => false };
}
