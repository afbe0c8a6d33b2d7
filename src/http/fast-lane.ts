/**
 * The fast lane: the reads repeated most, `GET /raw/<id>`, `GET /api/v1/paste/<id>`,
 * `GET /view/<id>` and a key's list `GET /api/v1/pastes`, and a key's JSON create
 * `POST /api/v1/paste`, answered straight from node:http when they are plain successes, without
 * the framework's routing, hooks and reply machinery (on a 1 KB read those cost about as much as
 * the read itself). The lane decides no rule of its own: the paste rules are PasteService's
 * (plainContent, plainPasteNow, readOf, countView, list), a create the route's own createFromJson
 * on the body the API's JSON parser gives, the key and quota rules KeyService's and
 * QuotaService's, the list query's readPagination, the page the web routes' (readPage), the
 * headers the ones every answer carries. Everything else (a query string but a list's plain page
 * and limit, HEAD, a password, a view-once paste, a paste that is not there, a key not looked up
 * in the last second, a read by id of a key this instance saw refused by its quota and whose
 * windows have not ended since, a create's body not plain JSON of a stated length under
 * LANE_BODY_LIMIT, any refusal, a server shutting down) goes to Fastify, which answers it as it always does. A
 * request the lane hands over has had nothing consumed: it counts quota only when it is about to
 * answer, but for a list and a create, whose quota is counted first as the routes count it (a
 * key over its quota costs no read, and no upload); a list handed over after that is marked as
 * counted for Fastify. A create's body, once read, cannot be handed over: a create that fails
 * after it (a body the rules refuse, the storage failing) is answered here, with the error
 * presenter's envelope and logging, as the route's would have been.
 */
import { randomUUID } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyServerFactory, FastifyServerFactoryHandler, FastifyServerOptions } from 'fastify';
import type { Logger } from 'pino';
import type { ApiKey, KeyService } from '../keys/key-service.js';
import { keySubject, type QuotaService } from '../keys/quota-service.js';
import type { Paste } from '../pastes/paste.js';
import type { PastePresenter } from '../pastes/paste-presenter.js';
import type { PasteService, Read } from '../pastes/paste-service.js';
import { isEnvironmentFailure } from '../storage/unavailable.js';
import { markQuotaCounted, markQuotaRefused } from './api/authentication.js';
import { readPagination } from './api/pagination.js';
import { type ErrorLog, LineThrottle } from './error-log.js';
import { errorEnvelope, toAppError } from './error-presenter.js';
import { readLimited } from './request-bodies.js';
import type { RequestsInFlight } from './requests-in-flight.js';
import { ResponseBatch } from './response-batch.js';
import { SECURITY_HEADERS, TEXT_CONTENT_SECURITY_POLICY } from './security-headers.js';
import { applySendTimeout, whenAnswerable } from './unread-answers.js';
import { LARGE_BODY_BYTES } from './upload-slots.js';

export interface FastLaneDeps {
  pastes: PasteService;
  keys: KeyService;
  quota: QuotaService;
  presenter: PastePresenter;
  /** A paste's page as /view writes it, in parts (the template as text, the code as bytes). */
  readPage(read: Read): Array<string | Buffer>;
  apiEnabled: boolean;
  trustProxy: boolean;
  /**
   * False when the client address may not be served now (the 404 throttle refuses it), judged as
   * Fastify judges the same request: for an address with a parameter (`mayBeNotFound`) its
   * requests still running count against the budget left.
   */
  admits(address: string, mayBeNotFound: boolean): boolean;
  /**
   * Holds a unit of the address's 404 budget while a read of the lane waits for the storage, as
   * Fastify's hook holds one for a request that may answer 404; returns what gives it back, or
   * null when there is no budget to hold.
   */
  holdWhileReading(address: string): (() => void) | null;
  /** A create from a JSON body's bytes by a key, from a client address: the 201's body, or a throw. */
  createFromJson(body: Buffer, key: ApiKey, ip: string): Promise<unknown>;
  logger?: Logger | undefined;
  /** Logs the lane's error answers as the framework's are logged (error-log.ts). */
  errorLog: ErrorLog;
}

type Lane = 'raw' | 'api' | 'view' | 'list' | 'create';

const PLAIN_ID = /^[A-Za-z0-9_-]{3,69}$/;
const RAW_PREFIX = '/raw/';
const API_PREFIX = '/api/v1/paste/';
const VIEW_PREFIX = '/view/';
const LIST_PATH = '/api/v1/pastes';
/**
 * The list queries the lane takes: none, or page and limit (each at most once) as digits. The
 * values' rules are readPagination's; any other query is Fastify's to parse and answer.
 */
const LIST_QUERY = /^(?:\?(page|limit)=(\d{1,16})(?:&(?!\1)(page|limit)=(\d{1,16}))?)?$/;
const CREATE_PATH = '/api/v1/paste';
/** The content types of a create the lane takes; any other, Fastify parses or refuses. */
const CREATE_TYPES = new Set(['application/json', 'application/json; charset=utf-8']);
/**
 * The largest create body the lane reads (its Content-Length; Node's parser gives no more). Past
 * it a body waits for an upload slot (upload-slots.ts): Fastify's.
 */
export const LANE_BODY_LIMIT = LARGE_BODY_BYTES;
const STATED_LENGTH = /^[1-9]\d{0,6}$/;

/**
 * At most one failure of the lane logged in this time: while the storage fails, every request
 * would log one beside Fastify's own line for it. The next line logged counts those left out.
 */
const FAILURE_LOG_INTERVAL_MS = 1000;

const TEXT_HEADERS = {
  ...SECURITY_HEADERS,
  'content-security-policy': TEXT_CONTENT_SECURITY_POLICY,
  'content-type': 'text/plain; charset=utf-8',
  'cache-control': 'no-store',
};
/** The API's answers (app.ts): no shared cache keeps them. */
const JSON_HEADERS = {
  ...SECURITY_HEADERS,
  'content-type': 'application/json; charset=utf-8',
  'cache-control': 'no-store',
};
/** Added to an answer finished once the server has begun to close (app.ts answers the rest). */
const CLOSE = { connection: 'close' };
const HTML_HEADERS = { ...SECURITY_HEADERS, 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' };

export class FastLane {
  /** Set when the server starts closing: from then on Fastify answers (503) every request. */
  closing = false;

  /** The lane's answers are ended together once per turn of the event loop (response-batch.ts). */
  private readonly batch = new ResponseBatch();

  /** At most one failure of the lane logged in FAILURE_LOG_INTERVAL_MS. */
  private readonly failureLines = new LineThrottle(FAILURE_LOG_INTERVAL_MS);

  constructor(private readonly deps: FastLaneDeps) {}

  /** Which lane a request may take, from its method, path and headers alone; null: Fastify's. */
  lane(req: IncomingMessage): Lane | null {
    if (this.closing) return null;
    const method = req.method;
    if (method !== 'GET' && method !== 'POST') return null;
    const url = req.url ?? '';
    const headers = req.headers;
    if (headers['content-encoding'] !== undefined || headers['x-paste-password'] !== undefined) return null;
    if (this.deps.trustProxy && headers['x-forwarded-for'] !== undefined) return null;
    if (method === 'POST') return url === CREATE_PATH && this.isPlainCreate(headers) ? 'create' : null;
    // A read that carries a body: Fastify's, whose onSend closes the connection of an answer sent
    // before its body ended (app.ts), so that Node does not go on reading a body nothing reads.
    if (headers['transfer-encoding'] !== undefined || (headers['content-length'] ?? '0') !== '0') return null;
    if (url.startsWith(RAW_PREFIX)) return PLAIN_ID.test(url.slice(RAW_PREFIX.length)) ? 'raw' : null;
    if (url.startsWith(VIEW_PREFIX)) return PLAIN_ID.test(url.slice(VIEW_PREFIX.length)) ? 'view' : null;
    if (this.deps.apiEnabled && url.startsWith(API_PREFIX) && typeof headers['x-api-key'] === 'string') {
      return PLAIN_ID.test(url.slice(API_PREFIX.length)) ? 'api' : null;
    }
    if (this.deps.apiEnabled && url.startsWith(LIST_PATH) && typeof headers['x-api-key'] === 'string') {
      return LIST_QUERY.test(url.slice(LIST_PATH.length)) ? 'list' : null;
    }
    return null;
  }

  /**
   * A read of an id that waits for the storage (PostgreSQL, or SQLite behind a transaction) may
   * find nothing and be handed to Fastify to answer 404: meanwhile it holds a unit of the 404
   * budget, as Fastify's hook would, so that requests from the same address arriving meanwhile
   * are judged as Fastify judges them. The unit is given back before the answer or the handing
   * over (where Fastify's hook takes one of its own).
   */
  private held<T>(req: IncomingMessage, read: Promise<T>): Promise<T> {
    const release = this.deps.holdWhileReading(req.socket.remoteAddress ?? '');
    if (release === null) return read;
    return read.then(
      (value) => {
        release();
        return value;
      },
      (err: unknown) => {
        release();
        throw err;
      },
    );
  }

  /** A key's create with a JSON body of a stated length the lane reads at once. */
  private isPlainCreate(headers: IncomingMessage['headers']): boolean {
    if (!this.deps.apiEnabled || typeof headers['x-api-key'] !== 'string') return false;
    if (headers['transfer-encoding'] !== undefined || headers.expect !== undefined) return false;
    const type = headers['content-type'];
    const length = headers['content-length'];
    return (
      type !== undefined &&
      CREATE_TYPES.has(type.toLowerCase()) &&
      length !== undefined &&
      STATED_LENGTH.test(length) &&
      Number(length) <= LANE_BODY_LIMIT
    );
  }

  /**
   * Answers the request and returns true, or returns false having done nothing; a promise of
   * either when the answer has to wait (storage or quota store not answering at once).
   */
  serve(lane: Lane, req: IncomingMessage, res: ServerResponse): boolean | Promise<boolean> {
    const started = process.hrtime.bigint();
    const named = lane === 'raw' || lane === 'view' || lane === 'api';
    if (!this.deps.admits(req.socket.remoteAddress ?? '', named)) return false;
    const url = req.url as string;
    if (lane === 'raw') {
      const content = this.deps.pastes.plainContent(url.slice(RAW_PREFIX.length));
      if (content === null) return false;
      if (!(content instanceof Promise)) return this.sendRaw(req, res, content, started);
      return this.held(req, content).then((later) => later !== null && this.sendRaw(req, res, later, started));
    }
    if (lane === 'view') {
      const paste = this.deps.pastes.plainPasteNow(url.slice(VIEW_PREFIX.length));
      if (paste === null) return false;
      if (!(paste instanceof Promise)) return this.sendPage(req, res, paste, started);
      return this.held(req, paste).then((later) => later !== null && this.sendPage(req, res, later, started));
    }
    const key = this.deps.keys.cachedActiveKey(req.headers['x-api-key'] as string);
    if (!key) return false;
    if (lane === 'list') return this.serveList(req, res, key, url, started);
    if (lane === 'create') return this.serveCreate(req, res, key, started);
    return this.serveApi(req, res, key, url, started);
  }

  /**
   * A key's JSON create: its quota counted before the body is read, as the route counts it (a
   * key over its quota costs no upload), then the body read (its length stated and at most
   * LANE_BODY_LIMIT) and the route's createFromJson. Once the body is read the request cannot be
   * handed over as it came: a failure is answered here (answerFailure), and the promise never
   * rejects (a rejection would hand the request to Fastify, which would wait for its body).
   */
  private serveCreate(
    req: IncomingMessage,
    res: ServerResponse,
    key: ApiKey,
    started: bigint,
  ): boolean | Promise<boolean> {
    return this.whenCounted(req, key, (quotaHeaders) =>
      readLimited(req, LANE_BODY_LIMIT)
        .then((body) => this.deps.createFromJson(body, key, req.socket.remoteAddress ?? ''))
        .then(
          (answer) => this.send(req, res, JSON_HEADERS, JSON.stringify(answer), started, quotaHeaders, 201),
          (err: unknown) => {
            // The client left in the middle of its body (or was cut off): no one to answer.
            if (!req.complete) res.destroy();
            else this.answerFailure(req, res, err, started, quotaHeaders);
          },
        )
        .then(
          () => true,
          (err: unknown) => {
            // Building or writing the answer failed. Before its head, the failure is the answer;
            // after it (or should that fail too), nothing more can be said.
            if (!res.headersSent) {
              try {
                this.answerFailure(req, res, err, started, quotaHeaders);
                return true;
              } catch {}
            }
            this.deps.logger?.error({ err, req: loggedRequest(req), lane: 'fast' }, 'unexpected error');
            res.destroy();
            return true;
          },
        ),
    );
  }

  /**
   * A refusal or failure of a request the lane cannot hand over, answered as the error presenter
   * answers it (error-presenter.ts): the same envelope, status and headers, and the same log line,
   * under a request id of its own.
   */
  private answerFailure(
    req: IncomingMessage,
    res: ServerResponse,
    thrown: unknown,
    started: bigint,
    quotaHeaders: Record<string, string>,
  ): void {
    const answered = toAppError(thrown);
    const requestId = randomUUID();
    const logger = this.deps.logger;
    if (logger) this.deps.errorLog.answered(logger, thrown, answered, { reqId: requestId, req: loggedRequest(req) });
    const body = JSON.stringify(errorEnvelope(answered, requestId));
    const headers = Object.assign({}, quotaHeaders, answered.error.headers);
    this.send(req, res, JSON_HEADERS, body, started, headers, answered.error.status);
  }

  /** A page of the key's pastes, its quota counted before the read as the route counts it. */
  private serveList(
    req: IncomingMessage,
    res: ServerResponse,
    key: ApiKey,
    url: string,
    started: bigint,
  ): boolean | Promise<boolean> {
    const match = LIST_QUERY.exec(url.slice(LIST_PATH.length)) as RegExpExecArray;
    const query: Record<string, string> = {};
    if (match[1] !== undefined) query[match[1]] = match[2] as string;
    if (match[3] !== undefined) query[match[3]] = match[4] as string;
    let pagination: { page: number; limit: number };
    try {
      pagination = readPagination(query);
    } catch {
      return false; // out of range: Fastify answers the 400
    }
    const { page, limit } = pagination;
    return this.whenCounted(req, key, (quotaHeaders) => {
      // Counted before the read, as the route counts it: a key over its quota costs no read.
      // Should the read or the answer fail, Fastify answers without counting it again.
      markQuotaCounted(req, quotaHeaders);
      return this.deps.pastes.list(key.id, page, limit).then(({ items, total }) => {
        const body = JSON.stringify({ error: false, ...this.deps.presenter.listPage(items, page, limit, total) });
        this.send(req, res, JSON_HEADERS, body, started, quotaHeaders);
        return true;
      });
    });
  }

  /**
   * Counts a use of the key's quota and answers with its headers; false, with nothing answered,
   * when the quota refuses (its count given back) or its store fails: Fastify answers it.
   */
  private whenCounted(
    req: IncomingMessage,
    key: ApiKey,
    answer: (quotaHeaders: Record<string, string>) => boolean | Promise<boolean>,
  ): boolean | Promise<boolean> {
    const subject = keySubject(key.id);
    const quotaHeaders = this.deps.quota.consumeNow(subject, key.limits);
    if (quotaHeaders) return answer(quotaHeaders);
    return this.deps.quota.consume(subject, key.limits).then(answer, (refusal: unknown) => {
      // Fastify answers it as the quota did here, without counting it again.
      markQuotaRefused(req, refusal);
      return false;
    });
  }

  private sendPage(req: IncomingMessage, res: ServerResponse, paste: Paste, started: bigint): true {
    // The view is counted once the page is built: a build that throws hands the request to
    // Fastify, which counts it itself.
    const parts = this.deps.readPage(this.deps.pastes.readOf(paste));
    this.deps.pastes.countView(paste);
    let length = 0;
    for (const part of parts) length += typeof part === 'string' ? Buffer.byteLength(part) : part.length;
    res.writeHead(200, Object.assign({}, HTML_HEADERS, { 'content-length': length }, this.closing ? CLOSE : null));
    this.batch.end(res, parts, this.completion(req, started));
    return true;
  }

  private sendRaw(req: IncomingMessage, res: ServerResponse, content: string | Buffer, started: bigint): true {
    this.send(req, res, TEXT_HEADERS, content, started);
    return true;
  }

  /** Synchronous while the paste and the quota counters answer at once (the key is cached). */
  private serveApi(
    req: IncomingMessage,
    res: ServerResponse,
    key: ApiKey,
    url: string,
    started: bigint,
  ): boolean | Promise<boolean> {
    // A key refused here and not yet past its windows goes to Fastify, which counts it before
    // any read: a key over its quota costs no read, as on the routes.
    if (this.deps.quota.knownRefused(keySubject(key.id))) return false;
    const paste = this.deps.pastes.plainPasteNow(url.slice(API_PREFIX.length));
    if (paste === null) return false;
    if (paste instanceof Promise) {
      return this.held(req, paste).then((later) => later !== null && this.answerApi(req, res, key, later, started));
    }
    return this.answerApi(req, res, key, paste, started);
  }

  private answerApi(
    req: IncomingMessage,
    res: ServerResponse,
    key: ApiKey,
    paste: Paste,
    started: bigint,
  ): boolean | Promise<boolean> {
    // The answer is built before anything is counted: a build that throws hands the request to
    // Fastify with neither its quota nor its view counted here.
    const body = this.detailBody(paste);
    return this.whenCounted(req, key, (quotaHeaders) => {
      // The count may have waited (a quota store across the network): a paste that expired
      // meanwhile is Fastify's to answer (404), its count made, its view not counted.
      if (!this.deps.pastes.stillLive(paste)) {
        markQuotaCounted(req, quotaHeaders);
        return false;
      }
      this.sendDetail(req, res, paste, body, started, quotaHeaders);
      return true;
    });
  }

  /** The JSON answer of a read of the paste, its view counted (see readOf). */
  private detailBody(paste: Paste): string {
    const read = this.deps.pastes.readOf(paste);
    return JSON.stringify({ error: false, data: this.deps.presenter.detail(read.paste, read.burned) });
  }

  private sendDetail(
    req: IncomingMessage,
    res: ServerResponse,
    paste: Paste,
    body: string,
    started: bigint,
    quotaHeaders: Record<string, string>,
  ): void {
    this.send(req, res, JSON_HEADERS, body, started, quotaHeaders);
    this.deps.pastes.countView(paste);
  }

  private send(
    req: IncomingMessage,
    res: ServerResponse,
    headers: Record<string, string>,
    body: string | Buffer,
    started: bigint,
    extraHeaders?: Record<string, string>,
    status = 200,
  ): void {
    // One copy of the headers per answer (an object spread here kept them past the young generation).
    res.writeHead(
      status,
      Object.assign(
        {},
        headers,
        extraHeaders,
        { 'content-length': Buffer.byteLength(body) },
        this.closing ? CLOSE : null,
      ),
    );
    this.batch.end(res, body, this.completion(req, started, status));
  }

  /**
   * Logs a read or answer of the lane that threw or was rejected: Fastify answers the request in
   * its place, and its answer alone would hide the failure. At most one line in
   * FAILURE_LOG_INTERVAL_MS, with `alsoFailed`: the failures left out before it. Not called for a
   * read rejected by the environment (a backend out of reach, storage full or refusing writes):
   * Fastify answers it with that failure, not read again, and its answer's line tells it
   * (error-log.ts). A read that throws at once is read again by the route, which may succeed:
   * logged here.
   */
  failed(req: IncomingMessage, err: unknown): void {
    const logger = this.deps.logger;
    if (!logger) return;
    const alsoFailed = this.failureLines.admit();
    if (alsoFailed === null) return;
    logger.warn(
      { err, req: loggedRequest(req), lane: 'fast', ...(alsoFailed > 0 ? { alsoFailed } : {}) },
      'fast lane failed, handed over',
    );
  }

  /** What logs the answer once it is ended (as Fastify logs its own), or null when nothing would. */
  private completion(req: IncomingMessage, started: bigint, statusCode = 200): (() => void) | null {
    const logger = this.deps.logger;
    if (!logger?.isLevelEnabled('info')) return null;
    // Read now: once the answer is ended the socket may be gone, and its peer with it.
    const logged = loggedRequest(req);
    return () => {
      const responseTime = Number(process.hrtime.bigint() - started) / 1e6;
      logger.info(
        { reqId: randomUUID(), req: logged, res: { statusCode }, responseTime, lane: 'fast' },
        'request completed',
      );
    };
  }
}

/**
 * A request as Fastify's log lines give it (its serializer's fields): the lane's lines name the
 * client as the framework's do. The lane takes no request a trusted proxy forwarded, so the
 * socket's peer is the client.
 */
function loggedRequest(req: IncomingMessage): Record<string, unknown> {
  const socket = req.socket;
  return {
    method: req.method,
    url: req.url,
    host: req.headers.host,
    remoteAddress: socket.remoteAddress,
    remotePort: socket.remotePort,
  };
}

/** Where a read of the lane that failed for a backend out of reach leaves its failure. */
const READ_FAILED = Symbol('read failed in the fast lane');
type ReadFailed = { [READ_FAILED]?: Error };

function markReadFailed(req: IncomingMessage, err: unknown): void {
  (req as IncomingMessage & ReadFailed)[READ_FAILED] = err as Error;
}

/**
 * A read of the lane that failed because a backend is out of reach (PostgreSQL's statement
 * time-out, a lost connection) is handed to Fastify marked with its failure: the route's hooks
 * run as always (the key, its quota, the 404 budget), and then, rather than reading again and
 * waiting out the same time-out a second time on a struggling database, the request is answered
 * with that failure, as the route's read would have failed: the error page for a browser on
 * /view, the quota's headers on the API.
 */
export function answerLaneReadFailures(app: FastifyInstance): void {
  app.addHook('preHandler', (request, _reply, done) => {
    const failed = (request.raw as IncomingMessage & ReadFailed)[READ_FAILED];
    if (failed === undefined) done();
    else done(failed);
  });
}

/**
 * Fastify's server factory with the lane in front: the HTTP server Fastify would make (the same
 * time-outs), whose requests try the lane first; `inFlight` counts the lane's requests at work.
 */
export function serverWithFastLane(lane: FastLane, inFlight?: RequestsInFlight): FastifyServerFactory {
  return (handler: FastifyServerFactoryHandler, options: FastifyServerOptions) => {
    const serve = (req: IncomingMessage, res: ServerResponse): void => {
      const which = lane.lane(req);
      if (which === null) {
        handler(req, res);
        return;
      }
      let answer: boolean | Promise<boolean>;
      try {
        answer = lane.serve(which, req, res);
      } catch (err) {
        lane.failed(req, err);
        answer = false;
      }
      if (answer === true) return;
      if (answer === false) {
        if (!res.headersSent) handler(req, res);
        return;
      }
      // Counted while it runs: the close waits for it (requests-in-flight.ts). It ends before
      // the handlers below run, and a request handed over begins again in the framework.
      inFlight?.track(answer);
      answer.then(
        (served) => {
          if (!served) handler(req, res);
        },
        (err: unknown) => {
          if (res.headersSent) {
            lane.failed(req, err);
            return;
          }
          // A storage out of reach, full or failing is answered with that failure, not read
          // again, and the answer's line tells it (error-log.ts): the lane's would say it twice.
          if (req.method === 'GET' && isEnvironmentFailure(err)) markReadFailed(req, err);
          else lane.failed(req, err);
          handler(req, res);
        },
      );
    };
    // One answer made at a time on a connection, and one its client stops reading closes it
    // after the send time-out (unread-answers.ts).
    const server = http.createServer((options as { http?: http.ServerOptions }).http ?? {}, (req, res) =>
      whenAnswerable(req, res, serve),
    );
    if (options.keepAliveTimeout !== undefined) server.keepAliveTimeout = options.keepAliveTimeout;
    if (options.requestTimeout !== undefined) server.requestTimeout = options.requestTimeout;
    applySendTimeout(server, options.connectionTimeout ?? 0);
    return server;
  };
}
