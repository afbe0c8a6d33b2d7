/**
 * What the list endpoint needs to know of an owner beyond one page, kept so that it is not
 * recomputed on every request: how many live pastes the owner has (`pagination.total`), and every
 * ANCHOR_SPACING-th position of the list, so that a page far down the list (page 1000 of 100,000
 * pastes) starts from the nearest anchor instead of skipping 20,000 entries. Both are computed
 * from the owner's index entries and kept never past the moment the owner's next paste expires;
 * this process's own creates, deletes, updates and burns drop them at once. On SQLite (this
 * process is the only writer) that is all; on PostgreSQL they are kept for at most a second, so
 * another instance's changes show within a second (as with any offset paging, a page read while
 * pastes are being added may then be off by the ones added). There they are computed again
 * ahead, from REFRESH_AFTER_MS on, while the old ones still answer: counting 100,000 entries
 * and their anchors took about 250 ms, and every request of the owner used to wait for it once
 * a second (list page 1000 on PostgreSQL: p99 248 ms). An owner listed without pause is so
 * counted about every REFRESH_AFTER_MS instead of every KEEP_MS; a request after KEEP_MS waits
 * for the count under way rather than start another. The anchors are computed again only when
 * the count finds other pastes than before (PasteRepository.countOwned's fingerprint): a list
 * that is read but not changed keeps them.
 * Concurrent requests share one computation.
 *
 * Pages themselves are kept too on SQLite (not on PostgreSQL: a database gone away must show at
 * once), under the same rules, and only for as long as the view counts written to the database
 * do not change (ViewCounter.writtenEpoch): the service adds the views not yet written when it
 * answers, so a kept page's counts are as exact as a fresh one's.
 * At most MAX_PAGES pages are kept in all.
 */
import type { ListPosition, OwnedListItem, PasteRepository } from '../storage/paste-repository.js';

const KEEP_MS = 1000;
/** When a kept entry (PostgreSQL) starts being computed again, in the background. */
const REFRESH_AFTER_MS = 750;
const MAX_OWNERS = 10_000;
const MAX_PAGES = 1_000;
/**
 * Positions between anchors: a page skips at most this many entries before its first. The
 * default page size, so that a page of 20 (or 100) far down the list skips none, as page 1
 * does (at every 100th position page 1000 read five times the entries of page 1: on PostgreSQL,
 * after a burst of creates, five times the table pages). 5,000 positions for 100,000 pastes.
 */
export const ANCHOR_SPACING = 20;
/** Pages starting before this offset skip entries from the start instead (no anchors needed). */
const PLAIN_OFFSET_MAX = 100;

interface Entry {
  /** The time the entry was computed for. */
  at: number;
  until: number;
  total: Promise<number>;
  /** Which live pastes were counted (PasteRepository.countOwned), once counted; null until then. */
  fingerprint: string | null;
  anchors: Promise<ListPosition[]> | null;
  /** Pages by `offset:limit`, each with the view epoch its rows were read in. */
  pages: Map<string, { epoch: number; items: OwnedListItem[] }>;
  /** Its successor, once being computed (see refreshAhead). */
  successor: Entry | null;
  /** Its count or anchors failed: never put in the cache again. */
  failed: boolean;
}

export class OwnerListing {
  private readonly cache = new Map<string, Entry>();
  private keptPages = 0;

  /** `viewEpoch`: ViewCounter.writtenEpoch, null while counts are being written. */
  constructor(
    private readonly pastes: PasteRepository,
    private readonly viewEpoch: () => number | null = () => null,
  ) {}

  async total(ownerKeyId: string, now: number): Promise<number> {
    return this.entry(ownerKeyId, now).total;
  }

  /**
   * Live pastes `offset` to `offset + limit` of the owner, newest first, with the view counts
   * written so far. The items are the caller's to change.
   */
  async page(ownerKeyId: string, now: number, limit: number, offset: number): Promise<OwnedListItem[]> {
    const entry = this.entry(ownerKeyId, now);
    // Only the sole writer keeps pages: on PostgreSQL every page is read, so a database that
    // goes away is a 503 at once, not after the pages kept from the last second.
    if (!this.pastes.soleWriter) return this.read(entry, ownerKeyId, now, limit, offset);
    const key = `${offset}:${limit}`;
    const epoch = this.viewEpoch();
    const kept = entry.pages.get(key);
    if (kept && kept.epoch === epoch) return kept.items.map((item) => Object.assign({}, item));
    const items = await this.read(entry, ownerKeyId, now, limit, offset);
    // Kept only when no count was written meanwhile and the entry still stands.
    if (epoch !== null && this.viewEpoch() === epoch && this.cache.get(ownerKeyId) === entry) {
      if (!kept) {
        if (this.keptPages >= MAX_PAGES) {
          this.dropPages();
          return items;
        }
        this.keptPages++;
      }
      entry.pages.set(key, { epoch, items: items.map((item) => Object.assign({}, item)) });
    }
    return items;
  }

  private async read(
    entry: Entry,
    ownerKeyId: string,
    now: number,
    limit: number,
    offset: number,
  ): Promise<OwnedListItem[]> {
    if (offset < PLAIN_OFFSET_MAX) return this.pastes.pageOwned(ownerKeyId, now, limit, offset);
    const anchors = await this.anchorsOf(ownerKeyId, entry);
    const skipped = Math.min(Math.floor(offset / ANCHOR_SPACING), anchors.length);
    // anchors[k - 1] is the entry at 1-based position k x ANCHOR_SPACING: the ones after it
    // start at offset k x ANCHOR_SPACING.
    const after = skipped > 0 ? (anchors[skipped - 1] as ListPosition) : null;
    return this.pastes.pageOwned(ownerKeyId, now, limit, offset - skipped * ANCHOR_SPACING, after);
  }

  forget(ownerKeyId: string): void {
    const entry = this.cache.get(ownerKeyId);
    if (!entry) return;
    this.keptPages -= entry.pages.size;
    this.cache.delete(ownerKeyId);
  }

  private clear(): void {
    this.cache.clear();
    this.keptPages = 0;
  }

  /** Drops every kept page, keeping the owners' counts and anchors. */
  private dropPages(): void {
    for (const entry of this.cache.values()) entry.pages.clear();
    this.keptPages = 0;
  }

  private entry(ownerKeyId: string, now: number): Entry {
    const cached = this.cache.get(ownerKeyId);
    if (cached && now >= cached.at && now < cached.until) {
      if (cached.successor === null && !this.pastes.soleWriter && now >= cached.at + REFRESH_AFTER_MS) {
        void this.refreshAhead(ownerKeyId, cached, now);
      }
      return cached;
    }
    const successor = cached?.successor;
    if (cached) this.forget(ownerKeyId);
    // Run out while its successor is still being computed: that one is awaited, not a third.
    if (successor && !successor.failed && now >= successor.at && now < successor.until) {
      this.cache.set(ownerKeyId, successor);
      return successor;
    }
    if (this.cache.size >= MAX_OWNERS) this.clear();
    const entry = this.computed(ownerKeyId, now);
    this.cache.set(ownerKeyId, entry);
    return entry;
  }

  /** A new entry, its total (and with it its life) being counted; a failed count drops it. */
  private computed(ownerKeyId: string, now: number): Entry {
    // When this process is the only writer (SQLite), nothing but its own changes (which drop the
    // entry) and expiry can move the list: the entry is kept until one of those.
    const keep = this.pastes.soleWriter ? Number.POSITIVE_INFINITY : KEEP_MS;
    const entry: Entry = {
      at: now,
      until: now + keep,
      total: Promise.resolve(0),
      fingerprint: null,
      anchors: null,
      pages: new Map(),
      successor: null,
      failed: false,
    };
    entry.total = this.pastes.countOwned(ownerKeyId, now).then(({ total, nextExpiry, fingerprint }) => {
      if (nextExpiry !== null) entry.until = Math.min(entry.until, nextExpiry);
      entry.fingerprint = fingerprint;
      return total;
    });
    entry.total.catch(() => this.drop(ownerKeyId, entry));
    return entry;
  }

  /**
   * Computes the successor of a kept entry (with anchors if it has them by the time the count is
   * done) and puts it in its place once ready, unless the entry was dropped meanwhile (a change of
   * this process, computed before it, must not come back). A failure leaves the entry to run out
   * as it would have. When the count finds the same live pastes as the entry's (the same
   * fingerprint), the entry's anchors stand for its successor: they are computed again only once
   * the list has changed (on PostgreSQL the anchors of 100,000 pastes took about 250 ms of the
   * database every 750 ms while the list was read).
   */
  private async refreshAhead(ownerKeyId: string, current: Entry, now: number): Promise<void> {
    const next = this.computed(ownerKeyId, now);
    // An entry cut short by an expiry: its successor, computed before that expiry, counts the
    // paste too (its own count would cut it there as well, once done).
    if (current.until < current.at + KEEP_MS) next.until = Math.min(next.until, current.until);
    current.successor = next;
    try {
      await next.total;
      if (this.cache.get(ownerKeyId) !== current) return;
      if (current.anchors !== null) {
        if (next.fingerprint !== null && next.fingerprint === current.fingerprint) next.anchors = current.anchors;
        await this.anchorsOf(ownerKeyId, next);
      }
    } catch {
      return;
    }
    if (this.cache.get(ownerKeyId) !== current) return;
    this.forget(ownerKeyId);
    this.cache.set(ownerKeyId, next);
  }

  /** The entry's anchors (as of its time), computed on first asking; a failure drops it. */
  private anchorsOf(ownerKeyId: string, entry: Entry): Promise<ListPosition[]> {
    if (entry.anchors === null) {
      entry.anchors = this.pastes.ownerAnchors(ownerKeyId, entry.at, ANCHOR_SPACING);
      entry.anchors.catch(() => this.drop(ownerKeyId, entry));
    }
    return entry.anchors;
  }

  /** A failed computation is not kept: the next request tries again. */
  private drop(ownerKeyId: string, entry: Entry): void {
    entry.failed = true;
    if (this.cache.get(ownerKeyId) === entry) this.forget(ownerKeyId);
  }
}
