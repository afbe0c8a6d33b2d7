/**
 * The rules of pastes, once, for the API, the quick-create endpoint and the web pages: creation
 * (ids, slugs, expiry, language, password hashing), reading (expiry, passwords, burn, download
 * rules), ownership of updates and deletes, listing, and the expiry sweep.
 */
import { hash } from 'node:crypto';
import { performance as perfHooks } from 'node:perf_hooks';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { clientBucket } from '../client-address.js';
import type { Clock } from '../clock.js';
import { AppError, notFound } from '../errors.js';
import type { ApiKey } from '../keys/key-service.js';
import type {
  LiveContent,
  OwnedListItem,
  PasteChanges,
  PasteRepository,
  PasteSummary,
} from '../storage/paste-repository.js';
import type { WebhookOutbox } from '../webhooks/webhook-outbox.js';
import { expiresAt, isExpired } from './expiry.js';
import { detectLanguage } from './language.js';
import { OwnerListing } from './owner-listing.js';
import { hashPassword, verifyPassword } from './passwords.js';
import { isDownloadable, isListedPublicly, type Paste } from './paste.js';
import { generatePasteId, suffixedSlug } from './paste-ids.js';
import { type CreateInput, checkContentKeepsEncryption, type UpdateInput } from './paste-input.js';
import { ViewCounter } from './view-counter.js';

export interface CreateContext {
  /** The key that creates the paste (its owner), or null for an anonymous quick-create. */
  owner: ApiKey | null;
  source: Paste['source'];
  ip: string | null;
  /** Present for an uploaded file: its safe name. */
  filename?: string;
}

export interface Created {
  paste: Paste;
  /** True when the requested slug was taken and a suffixed one was given instead (D9). */
  slugTaken: boolean;
}

/** How a paste is being read, which decides the password and download rules. */
export type ReadMode = 'api' | 'raw' | 'download' | 'view';

export interface ReadOptions {
  /** The password the reader gave (X-Paste-Password or the view form). */
  password?: string | undefined;
  /** False for HEAD and previews: every check runs, nothing is consumed or counted (D11). */
  consume: boolean;
  /** Who is guessing, for the throttle on wrong passwords (D13); asked only when one is checked. */
  clientAddress(): string;
  /**
   * False once the client that asked can no longer be answered (its connection closed while the
   * read waited: behind password hashes, say): a view-once paste is then left for the next
   * reader instead of burned for no one (D11: exactly one reader gets it).
   */
  stillWanted?(): boolean;
}

export interface Read {
  paste: Paste;
  /** True for the one retrieval that consumed a view-once paste (D11). */
  burned: boolean;
}

const ID_ATTEMPTS = 8;

/** A listing publicSnapshot made, and until when it holds. */
interface Snapshot {
  at: number;
  until: number;
  limit: number;
  render: (items: PasteSummary[]) => unknown;
  changes: number;
  value: Promise<unknown>;
}

/** How long the sitemap's listing is kept unless this instance changes a listed paste (publicSnapshot). */
export const SITEMAP_KEEP_MS = 60_000;
/** How many times a view-once read checks the paste again when a PUT changed it under the read. */
const BURN_ATTEMPTS = 3;
/**
 * How long one batch of the expiry sweep may hold the event loop (SQLite) while the server has
 * nothing else to do...
 */
const SWEEP_SLICE_IDLE_MS = 2;
/**
 * ...and while requests keep it busy: each request that arrives during a batch waits for its
 * end. Measured with 1,000,000 expired pastes under full /raw load (BENCHMARKS.md): 2 ms batches
 * at a tenth of the time took the p99 from 7 to 9 ms, 0.5 ms ones from 7 to 8 (4 to 5, 5 to 6 on
 * a faster machine); 0.25 ms ones at a twentieth kept it in two runs of four (4 and 4, 7 and
 * 7; 4 against 3, 5 against 4).
 */
const SWEEP_SLICE_BUSY_MS = 0.25;
/** How long one batch of the expiry sweep may take where it waits for the database (PostgreSQL). */
const SWEEP_SLICE_ASYNC_MS = 50;
/** The expiry sweep's share of the server's time while it has nothing else to do... */
const SWEEP_SHARE_IDLE = 0.5;
/**
 * ...and while requests keep it busy (sweepExpired). Under a closed load the requests' rate, and
 * so their latency, moves with it: at a tenth /raw ran at 84–85% of its rate after the sweep
 * (the checkpoint thread's copying counts too), at a twentieth at 87–90%.
 */
const SWEEP_SHARE_BUSY = 0.05;

/** A list offset past which the page is read only if the owner has that many pastes (list). */
const FAR_OFFSET = 2 ** 31 - 1;

const sha256Hex = (text: string): string => hash('sha256', text, 'hex');

export class PasteService {
  /** Wrong password guesses: 10 per paste and client address per 15 minutes. */
  private readonly guesses = new RateLimiterMemory({ points: 10, duration: 15 * 60 });

  constructor(
    private readonly pastes: PasteRepository,
    private readonly clock: Clock,
    private readonly outbox: WebhookOutbox | null = null,
  ) {
    this.views = new ViewCounter(pastes);
    this.listing = new OwnerListing(pastes, () => this.views.writtenEpoch());
  }

  /** Owners' live paste counts and list anchors for the list's pagination (owner-listing.ts). */
  private readonly listing: OwnerListing;

  /** Views are counted in memory and written every second (view-counter.ts). */
  readonly views: ViewCounter;

  async create(input: CreateInput, context: CreateContext): Promise<Created> {
    // The password is hashed first: the hash may wait behind others (two at a time), and the
    // paste's time (created_at, expires_at) is the time it is made, not before that wait.
    const passwordHash = input.password
      ? await hashPassword(input.password, context.owner?.id ?? clientBucket(context.ip ?? ''))
      : null;
    const now = this.clock();
    const filename = context.filename ?? null;
    const language =
      input.language !== undefined
        ? input.language
        : input.encrypt
          ? (filename && detectLanguage('', filename)) || null
          : detectLanguage(input.content, filename);
    const paste: Paste = {
      id: '',
      ownerKeyId: context.owner?.id ?? null,
      title: input.title ?? filename,
      description: input.description,
      content: input.content,
      contentType: filename === null ? 'text' : 'file',
      originalFilename: filename,
      language,
      fileSize: Buffer.byteLength(input.content, 'utf8'),
      sha256: sha256Hex(input.content),
      createdAt: now,
      expiresAt: expiresAt(input.expiry, now),
      viewCount: 0,
      burnAfterRead: input.burn,
      encrypted: input.encrypt,
      downloadable: input.encrypt ? input.downloadable : true,
      // Ignored when a password, burn or encryption is used (api-v1.md): not kept for later, so
      // lifting the password or the burn by PUT never lists a paste its creator kept unlisted.
      public: input.public && !input.password && !input.burn && !input.encrypt,
      passwordHash,
      source: context.source,
      creatorIp: context.ip,
    };

    // The webhook announcement is queued in the same transaction as the paste (D21).
    const owner = context.owner;
    const outbox = this.outbox;
    const announce =
      outbox?.announces(owner) && owner
        ? (trx: Parameters<WebhookOutbox['enqueue']>[0], stored: Paste) =>
            outbox.enqueue(trx, stored, owner as ApiKey & { webhookUrl: string })
        : undefined;
    const tryInsert = async (id: string): Promise<Paste | null> => {
      const stored = { ...paste, id };
      return (await this.pastes.insertIfFree(stored, announce && ((trx) => announce(trx, stored)))) ? stored : null;
    };

    let created: Created | null = null;
    if (input.slug !== undefined) {
      await this.pastes.deleteIfExpired(input.slug, now);
      const stored = await tryInsert(input.slug);
      if (stored) created = { paste: stored, slugTaken: false };
    }
    for (let attempt = 0; created === null && attempt < ID_ATTEMPTS; attempt++) {
      const stored = await tryInsert(input.slug !== undefined ? suffixedSlug(input.slug) : generatePasteId());
      if (stored) created = { paste: stored, slugTaken: input.slug !== undefined };
    }
    if (created === null) throw new Error(`no free paste id after ${ID_ATTEMPTS} attempts`);
    if (paste.ownerKeyId) this.listing.forget(paste.ownerKeyId);
    if (isListedPublicly(created.paste)) this.listedChanges++;
    if (announce) outbox?.committed();
    return created;
  }

  /** The live paste with no checks and no side effects, for deciding which page to show. */
  async peek(id: string): Promise<Paste> {
    const mark = this.views.mark();
    const paste = await this.pastes.findLive(id, this.clock());
    if (!paste) throw notFound();
    return this.withUnwritten(paste, mark);
  }

  /**
   * The paste just read from the database (an object of its own), with the views not yet written
   * there added (see ViewCounter).
   */
  private withUnwritten(paste: Paste, mark: number): Paste {
    paste.viewCount += this.views.unwrittenSince(paste.id, paste.createdAt, mark);
    return paste;
  }

  /**
   * Delivers a paste's content: 404 when gone, the download and password rules, then the burn
   * (one atomic delete) or a view counted. A refused read consumes nothing. `peeked`: the paste
   * as peek() just returned it, to save a second look-up.
   */
  async read(id: string, mode: ReadMode, options: ReadOptions, peeked?: Paste, attempt = 1): Promise<Read> {
    let paste = peeked?.id === id ? peeked : await this.peek(id);
    // The password first: without it, nothing of the paste is told (that it is encrypted, say).
    if (paste.passwordHash !== null) {
      await this.checkPassword(paste, mode, options);
      // The check waits (a slow hash, queued behind others: seconds under a burst of guesses), so
      // the paste is looked at again as it is now: one that expired (D12) or was deleted
      // meanwhile is 404, and one whose password a PUT changed is checked again.
      const current = await this.peek(id);
      if (current.passwordHash !== paste.passwordHash) {
        if (attempt >= BURN_ATTEMPTS) throw notFound();
        return this.read(id, mode, options, current, attempt + 1);
      }
      paste = current;
    }
    if (mode === 'download' && !isDownloadable(paste)) {
      throw new AppError('not_downloadable', 'This encrypted paste was not made downloadable.');
    }
    if (!options.consume) return { paste, burned: false };
    if (paste.burnAfterRead) {
      if (options.stillWanted?.() === false) {
        throw new AppError('invalid_request', 'The connection closed before the paste was read: it is left as it was.');
      }
      const consumed = await this.pastes.consumeBurn(id, this.clock(), paste);
      if (!consumed) {
        // Gone (another reader burned it), or changed by a PUT since it was checked (a password
        // set, say): checked again as it now is, a few times at most under a stream of PUTs.
        if (attempt >= BURN_ATTEMPTS) throw notFound();
        return this.read(id, mode, options, undefined, attempt + 1);
      }
      if (consumed.ownerKeyId) this.listing.forget(consumed.ownerKeyId);
      // The deleted row holds none of its counted views (written beside it, or still held here):
      // the paste as peeked does (PUT may make a paste read before view-once). The views held
      // for it go with it, so a paste made again under its slug starts at 0.
      this.views.forget(id, consumed.createdAt);
      return { paste: { ...consumed, viewCount: paste.viewCount + 1 }, burned: true };
    }
    this.countView(paste);
    // peek() already counted the views not yet written; this one is added here.
    return { paste: { ...paste, viewCount: paste.viewCount + 1 }, burned: false };
  }

  /**
   * For the fast lane (http/fast-lane.ts): the live paste (with its views not yet written) when
   * reading it needs nothing but a view counted (no password, not view-once); null when read()
   * must decide. No side effects.
   */
  async plainPaste(id: string): Promise<Paste | null> {
    const mark = this.views.mark();
    const paste = plainOrNull(await this.pastes.findLive(id, this.clock()));
    return paste && this.withUnwritten(paste, mark);
  }

  /**
   * plainPaste without waiting when the storage can answer at once (SQLite): the paste, null,
   * or a promise of plainPaste's answer otherwise.
   */
  plainPasteNow(id: string): Paste | null | Promise<Paste | null> {
    const mark = this.views.mark();
    const found = this.pastes.findLiveNow(id, this.clock());
    if (found === undefined) return this.plainPaste(id);
    const paste = plainOrNull(found);
    return paste && this.withUnwritten(paste, mark);
  }

  /**
   * The content of a plain paste (live, no password, not view-once) with its view counted, as
   * `/raw` serves it; null when the paste is not plain (the full read answers it). Synchronous
   * when the storage can answer at once (SQLite), else a promise.
   */
  plainContent(id: string): string | Buffer | null | Promise<string | Buffer | null> {
    const now = this.clock();
    const found = this.pastes.findLiveContentNow(id, now);
    if (found !== undefined) return this.countPlain(id, found);
    return this.pastes.findLiveContent(id, now).then((live) => this.countPlain(id, live));
  }

  private countPlain(id: string, live: LiveContent | null | undefined): string | Buffer | null {
    if (!live || live.passwordProtected || live.burnAfterRead) return null;
    this.views.add(id, live.createdAt);
    return live.content;
  }

  /**
   * The read of a paste plainPaste() returned, as it is once its view is counted (as read()
   * counts it), counting nothing: the caller, who may still fail building its answer and hand
   * the request on, counts with countView once it answers.
   */
  readOf(paste: Paste): Read {
    return { paste: { ...paste, viewCount: paste.viewCount + 1 }, burned: false };
  }

  /**
   * Whether a paste read a moment ago is still live now (D12): for a caller that waited between
   * the read and its answer (the fast lane, for a quota store across the network).
   */
  stillLive(paste: Paste): boolean {
    return !isExpired(paste.expiresAt, this.clock());
  }

  /** Counts the view that readOf showed. */
  countView(paste: Paste): void {
    this.views.add(paste.id, paste.createdAt);
  }

  private async checkPassword(paste: Paste, mode: ReadMode, options: ReadOptions): Promise<void> {
    if (mode === 'api') {
      throw new AppError(
        'password_protected',
        'This paste is protected by a password and cannot be read through the API.',
      );
    }
    if (options.password === undefined || options.password === '') {
      throw new AppError(
        'password_protected',
        mode === 'view'
          ? 'This paste is protected by a password.'
          : 'This paste is protected by a password: send it in the X-Paste-Password header.',
      );
    }
    // The guess is counted before it is hashed, so a burst of parallel guesses cannot all pass
    // the check before the first is counted; a right password gives its count back.
    const guessKey = `${options.clientAddress()}|${paste.id}`;
    try {
      await this.guesses.consume(guessKey);
    } catch (rejection) {
      if (rejection instanceof RateLimiterRes) throw tooManyGuesses(rejection);
      throw rejection;
    }
    if (await verifyPassword(paste.passwordHash as string, options.password, options.clientAddress())) {
      await this.guesses.reward(guessKey, 1);
      return;
    }
    throw new AppError('wrong_password', 'The password is wrong.');
  }

  /** PUT: only the owner's live paste; a new expiry restarts from now (D12). */
  async update(id: string, ownerKeyId: string, input: UpdateInput): Promise<Paste> {
    const current = await this.peek(id);
    if (current.ownerKeyId !== ownerKeyId) {
      throw new AppError('forbidden', 'This paste was not created with your API key.');
    }
    // New content without `encrypt`: the paste stays as it is (checkContentKeepsEncryption).
    // Another PUT may change it after this one read it: either order leaves content and flag that agree.
    if (input.content !== undefined && input.encrypt === undefined && current.encrypted) {
      checkContentKeepsEncryption(input.content);
    }
    // Hashed before the time is taken (see create): a paste that expired while the hash waited
    // is not updated (nor brought back by a new expiry), and a new expiry counts from now.
    const passwordHash =
      input.password === undefined || input.password === null
        ? input.password
        : await hashPassword(input.password, ownerKeyId);
    const now = this.clock();
    const changes: PasteChanges = {};
    if (input.content !== undefined) {
      changes.content = input.content;
      changes.fileSize = Buffer.byteLength(input.content, 'utf8');
      changes.sha256 = sha256Hex(input.content);
      changes.encrypted = input.encrypt ?? current.encrypted;
      if (!changes.encrypted) changes.downloadable = true;
      else if (input.downloadable !== undefined) changes.downloadable = input.downloadable;
      // A paste made E2E by its new content is as one created so: not downloadable unless asked;
      // one already E2E keeps its own. Which it is, the row says when it is updated: another PUT
      // may make it plain after this one read it (see DownloadableByRow).
      else changes.downloadableByRow = { ifEncrypted: null, ifPlain: false };
    } else if (input.downloadable !== undefined && current.encrypted) {
      // Only an E2E paste's is changed: a plain paste is always downloadable.
      changes.downloadableByRow = { ifEncrypted: input.downloadable, ifPlain: null };
    }
    if (input.title !== undefined) changes.title = input.title;
    if (input.description !== undefined) changes.description = input.description;
    if (input.language !== undefined) changes.language = input.language;
    if (input.expiry !== undefined) changes.expiresAt = expiresAt(input.expiry, now);
    if (input.burn !== undefined) changes.burnAfterRead = input.burn;
    if (passwordHash !== undefined) changes.passwordHash = passwordHash;
    // A PUT that changes nothing stored (a `key` alone, `downloadable` on a plain paste) answers
    // with the paste as it is.
    if (Object.keys(changes).length === 0) return current;
    const updated = await this.pastes.updateOwned(id, ownerKeyId, now, changes);
    this.listing.forget(ownerKeyId);
    // Whatever it was (another PUT may have changed it since `current` was read): the sitemap is
    // made again rather than judged from a row that may be old.
    this.listedChanges++;
    if (!updated) throw notFound();
    return updated;
  }

  /** DELETE: only the owner's live paste. */
  async remove(id: string, ownerKeyId: string): Promise<void> {
    const current = await this.peek(id);
    if (current.ownerKeyId !== ownerKeyId) {
      throw new AppError('forbidden', 'This paste was not created with your API key.');
    }
    const createdAt = await this.pastes.deleteOwned(id, ownerKeyId, this.clock());
    this.listedChanges++;
    if (createdAt === null) throw notFound();
    this.views.forget(id, createdAt);
    this.listing.forget(ownerKeyId);
  }

  /** The caller's live pastes, newest first (D15). */
  async list(ownerKeyId: string, page: number, limit: number): Promise<{ items: OwnedListItem[]; total: number }> {
    const now = this.clock();
    const mark = this.views.mark();
    const offset = (page - 1) * limit;
    if (offset > FAR_OFFSET) {
      // A page far past any list's end (page goes up to 2^53): counted only, never sent to the
      // database as an OFFSET it may not take.
      const total = await this.listing.total(ownerKeyId, now);
      if (offset >= total) return { items: [], total };
    }
    const [items, total] = await Promise.all([
      this.listing.page(ownerKeyId, now, limit, offset),
      this.listing.total(ownerKeyId, now),
    ]);
    for (const item of items) item.viewCount += this.views.unwrittenSince(item.id, item.createdAt, mark);
    return { items, total };
  }

  /** The public archive (D22), newest first. */
  async listPublic(offset: number, limit: number): Promise<PasteSummary[]> {
    return this.pastes.listPublic(this.clock(), limit, offset);
  }

  /**
   * The first `limit` publicly listed pastes as `render` makes them (the sitemap), made again
   * at most every SITEMAP_KEEP_MS: read and rendered on every request, tens of thousands of rows
   * were an amplifier anyone could call. Made again at once after this instance creates a listed
   * paste or changes or deletes any (listedChanges), and when the first of its pastes to expire
   * does; one made unlisted on another instance leaves it within SITEMAP_KEEP_MS. Concurrent
   * callers share one making of it.
   */
  publicSnapshot<T>(limit: number, render: (items: PasteSummary[]) => T): Promise<T> {
    const now = this.clock();
    const kept = this.snapshot;
    if (
      kept !== null &&
      kept.render === render &&
      kept.limit === limit &&
      kept.changes === this.listedChanges &&
      now >= kept.at &&
      now < kept.until
    ) {
      return kept.value as Promise<T>;
    }
    // No longer than its first paste to expire is live: an expired paste is gone at once (D12).
    const value = this.pastes.listPublic(now, limit, 0).then((items) => {
      for (const item of items) {
        if (item.expiresAt !== null && item.expiresAt < made.until) made.until = item.expiresAt;
      }
      return render(items);
    });
    const made: Snapshot = { at: now, until: now + SITEMAP_KEEP_MS, limit, render, changes: this.listedChanges, value };
    this.snapshot = made;
    // A failed making is not kept: the next caller tries again.
    value.catch(() => {
      if (this.snapshot === made) this.snapshot = null;
    });
    return value;
  }

  private snapshot: Snapshot | null = null;

  /** Moves whenever this instance writes a paste listed publicly before or after (D22). */
  private listedChanges = 0;

  /** The sweep under way, if one is: a second caller joins it (see sweepExpired). */
  private sweeping: Promise<number> | null = null;

  /**
   * Removes every expired paste, in batches; a call made while a sweep is under way gets that
   * sweep's promise instead of starting another beside it (two would add up their shares and run
   * batches back to back).
   *
   * On a SQLite file served with its threads, a backlog goes to the expiry sweep's thread
   * (expiry-sweeper.ts): the first batch runs here, and if it came back full, the thread deletes
   * the rest of what had expired by then, in batches that never hold the event loop, when the
   * server's core would otherwise be idle, taking turns with the server's writes
   * (write-gate.ts). A million expired 1 KB rows take 30 s idle and 3 to 15 minutes under full
   * /raw load on this kind of machine (BENCHMARKS.md), which D12 allows ("within minutes").
   *
   * Elsewhere (SQLite in memory, `inThread: false`) a batch is synchronous and holds the event
   * loop: it is sized to take about 2 ms while the server is idle, down to 0.25 ms while requests
   * keep it busy (the size follows how long the last one took, between 10 and 1,000 rows), and
   * the pause after it sets the sweep's share of the server's time: half of it idle, down to a
   * twentieth busy (how busy: the event loop's utilization during the previous pause, when only
   * requests ran). On PostgreSQL a batch waits for the database and holds the event loop only to
   * send it: it is sized to take about SWEEP_SLICE_ASYNC_MS there, and the pause is as long as
   * the batch took (half the database time), whatever the load.
   */
  sweepExpired(options: SweepOptions = {}): Promise<number> {
    if (this.sweeping) return this.sweeping;
    const sweep = this.sweepAll({
      firstBatch: options.firstBatch ?? 50,
      minPauseMs: options.minPauseMs ?? 2,
      busyness: options.busyness ?? eventLoopBusyness,
      inThread: options.inThread ?? true,
    }).finally(() => {
      this.sweeping = null;
    });
    this.sweeping = sweep;
    return sweep;
  }

  private async sweepAll(options: Required<SweepOptions>): Promise<number> {
    const { firstBatch, minPauseMs, busyness } = options;
    let removed = 0;
    let batch = firstBatch;
    let busy = 0;
    let threadTried = false;
    for (;;) {
      const started = performance.now();
      const now = this.clock();
      const held = this.pastes.deleteExpiredNow(now, batch);
      const count = held ?? (await this.pastes.deleteExpired(now, batch));
      const took = performance.now() - started;
      removed += count;
      if (count < batch) return removed;
      // The first batch run on the handle (not through a transaction of Kysely's) decides.
      if (!threadTried && held !== null && options.inThread) {
        threadTried = true;
        const rest = this.pastes.deleteExpiredInThread(now, batch);
        if (rest) return removed + (await rest);
      }
      // From the idle value to the busy one as the loop was busy (SQLite's batches only).
      const load = held === null ? 0 : Math.min(1, Math.max(0, busy));
      const byLoad = (idle: number, busier: number) => idle - (idle - busier) * load;
      const slice = held === null ? SWEEP_SLICE_ASYNC_MS : byLoad(SWEEP_SLICE_IDLE_MS, SWEEP_SLICE_BUSY_MS);
      if (took > slice) batch = Math.max(10, Math.floor(batch / 2));
      else if (took < slice / 2) batch = Math.min(1000, batch * 2);
      const share = byLoad(SWEEP_SHARE_IDLE, SWEEP_SHARE_BUSY);
      const measure = busyness();
      await pauseFor(Math.max(minPauseMs, (took * (1 - share)) / share));
      busy = measure();
    }
  }
}

export interface SweepOptions {
  /** Rows in the first batch. */
  firstBatch?: number;
  /** The shortest pause between two batches run here (ms). */
  minPauseMs?: number;
  /** For tests: the share of a pause spent on requests, measured (see eventLoopBusyness). */
  busyness?: () => () => number;
  /** False: a backlog on a SQLite file is swept here too, not by the sweep's thread. */
  inThread?: boolean;
}

/**
 * Starts measuring how busy the event loop is; the function returned gives the share of the
 * time since then that it spent running callbacks (requests), from 0 to 1.
 */
function eventLoopBusyness(): () => number {
  const start = perfHooks.eventLoopUtilization();
  return () => perfHooks.eventLoopUtilization(start).utilization;
}

/** The paste if it may be served as is (no password, not view-once), else null. */
function plainOrNull(paste: Paste | null | undefined): Paste | null {
  return paste && paste.passwordHash === null && !paste.burnAfterRead ? paste : null;
}

/**
 * Waits `ms` of real time. A timer counts from the event loop's cached clock, which a long
 * synchronous batch leaves behind: one timer alone may fire as soon as the batch ends.
 */
async function pauseFor(ms: number): Promise<void> {
  const until = performance.now() + ms;
  for (let left = ms; left > 0; left = until - performance.now()) {
    await new Promise((resolve) => setTimeout(resolve, left));
  }
}

function tooManyGuesses(state: RateLimiterRes): AppError {
  const seconds = Math.max(1, Math.ceil(state.msBeforeNext / 1000));
  return new AppError('too_many_attempts', 'Too many wrong passwords for this paste; try again later.', {
    headers: { 'Retry-After': String(seconds) },
  });
}
