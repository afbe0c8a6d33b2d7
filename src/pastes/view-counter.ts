/**
 * View counts, added up in memory and written in one statement batch every second, so that a
 * read costs no database write. What a reader is shown counts the views not yet written (those
 * pending and those of the batch being written). On SQLite that is exact: a chunk's commit and
 * its leaving the batch are one synchronous step, and reads there run synchronously too. On
 * PostgreSQL a read's query may have taken its snapshot before a chunk was committed and come
 * back after the chunk left the batch: a reader takes mark() before its query and
 * unwrittenSince() after it, and the counts of every chunk committed since the mark are added
 * (kept for RECENT_MS after their commit). It may then count views twice (those of every chunk
 * of a flush that committed a chunk after the mark, up to that second's views), never miss one: a
 * read during a flush shows at least every view counted before it began. A crash loses the
 * counts not yet written: the last second's, or, while the database is out of reach, every one
 * held since. A burn (which must be exact) never goes through here.
 *
 * A chunk whose write fails other than by the database's refusal is unsettled: on PostgreSQL the
 * write may have committed with its reply lost. It is written again under the token of its first
 * write (addViews), before anything else, until that succeeds, so it is added once either way.
 * Until then reads show its counts too (twice, if the first write committed, never none) and
 * writtenEpoch() is null. A token is kept for VIEW_TOKEN_LIFE_MS (any instance drops older ones):
 * a chunk still unsettled near the end of that life is dropped instead, as its first write may
 * have committed and its token be gone (given up: told to onGiveUp, which the services log).
 */
import { randomUUID } from 'node:crypto';
import { type PasteRepository, VIEW_TOKEN_LIFE_MS, type ViewChunk } from '../storage/paste-repository.js';
import { refusedByDatabase } from '../storage/unavailable.js';
import { ViewTable } from './view-table.js';

/** Pastes whose views are written in one statement or transaction (under 1 ms). */
const CHUNK = 250;

/**
 * How long the counts of a chunk written on PostgreSQL stay known to reads that began before its
 * commit: longer than any read can take (the pool waits 3 s for a connection, a query 5 s).
 */
const RECENT_MS = 10_000;

/** How often an instance drops the chunks' tokens past their life (PostgreSQL). */
const FORGET_TOKENS_EVERY_MS = 10 * 60 * 1000;

/** The counts of `table` at `slots` that are not 0 (forgotten), as a chunk to write. */
function chunkOf(table: ViewTable, slots: ArrayLike<number>): ViewChunk {
  const chunk: ViewChunk = [];
  for (let j = 0; j < slots.length; j++) {
    const slot = slots[j] as number;
    const count = table.countAt(slot);
    if (count > 0) chunk.push([table.idAt(slot), count, table.createdAtOf(slot)]);
  }
  return chunk;
}

/** A chunk whose write failed, the token it is written again under, and when it failed. */
interface Unsettled {
  token: string;
  counts: ViewTable;
  /** performance.now() when its write failed: after the token's first write began. */
  failedAt: number;
}

/**
 * How long an unsettled chunk is written again under its token: short of the token's life by far
 * more than its first write can have taken (the pool's wait and the statement's time-out).
 */
export const SETTLE_WITHIN_MS = VIEW_TOKEN_LIFE_MS - 60_000;

/** The counts one flush wrote on PostgreSQL, and when it last committed a chunk. */
interface Written {
  table: ViewTable;
  lastCommit: number;
}

export class ViewCounter {
  /** Views counted since the last flush began (kept off the heap: see view-table.ts). */
  private pending = new ViewTable();
  /** The batch being written: a chunk's counts go to 0 as it is committed. */
  private writing = new ViewTable();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  /** Moves whenever written counts may change (a flush starts or ends): see writtenEpoch. */
  private epoch = 0;
  /** On PostgreSQL, the counts of the flushes of the last RECENT_MS, oldest first. */
  private readonly recent: Written[] = [];
  /** The chunk whose write failed, written again before any other (see the top). */
  private unsettled: Unsettled | null = null;
  /** Set by close(): no more flushes on a timer. */
  private closed = false;
  /** When this instance last dropped old chunk tokens (performance.now()). */
  private tokensForgottenAt = performance.now();
  /** Told the views of an unsettled chunk dropped at the end of its token's life (see the top). */
  onGiveUp: (views: number) => void = () => {};

  constructor(
    private readonly pastes: PasteRepository,
    private readonly intervalMs = 1000,
  ) {}

  /**
   * Counts one view of the paste `id` made at `createdAt` (which the flush writes with the count,
   * so that it need not read the paste's row again); returns how many of this id's views are not
   * yet written.
   */
  add(id: string, createdAt: number): number {
    const count = this.pending.add(id, 1, createdAt);
    this.schedule();
    return count;
  }

  /**
   * Drops the views of `id` not yet written (its paste, made at `createdAt`, was deleted here),
   * so that they are neither written nor shown on a paste made again under the id. Those of a
   * paste made again under the id while the delete was under way are kept (ViewTable.forget),
   * and do not include the deleted paste's (ViewTable.add).
   */
  forget(id: string, createdAt: number): void {
    this.pending.forget(id, createdAt);
    this.writing.forget(id, createdAt);
    this.unsettled?.counts.forget(id, createdAt);
  }

  /** Views counted but not yet written (or not known to be: an unsettled chunk's). */
  unwritten(id: string): number {
    return this.pending.get(id) + this.writing.get(id) + (this.unsettled?.counts.get(id) ?? 0);
  }

  /** The moment a read of written counts begins, for unwrittenSince. */
  mark(): number {
    return performance.now();
  }

  /**
   * The views to add to a count read from the database, for the paste `id` made at `createdAt`,
   * by a read that began at `mark`: those not yet written, and (PostgreSQL) those written since
   * the mark, which the read may have missed. Counts of another paste once under the id are not
   * its own.
   */
  unwrittenSince(id: string, createdAt: number, mark: number): number {
    let n = this.pending.get(id, createdAt) + this.writing.get(id, createdAt);
    if (this.unsettled) n += this.unsettled.counts.get(id, createdAt);
    for (const written of this.recent) if (written.lastCommit >= mark) n += written.table.get(id, createdAt);
    return n;
  }

  /**
   * A number that stays the same for as long as the counts in the database stay the same, or null
   * while a flush is writing them. Views read from the database with epoch E, added to unwritten()
   * at any later moment the epoch is still E, are exact. Null too while a chunk is unsettled:
   * its counts may be in the database as well as in unwritten().
   */
  writtenEpoch(): number | null {
    return this.flushing || this.unsettled ? null : this.epoch;
  }

  /**
   * Stops the flushes on a timer and writes what is held (the shutdown's last flush): resolves
   * to what the storage refused, `views` of `pastes` not written, and `possiblyWritten` views
   * of a chunk whose commit was not confirmed (none when all went well).
   */
  async close(): Promise<{ pastes: number; views: number; possiblyWritten: number }> {
    this.closed = true;
    await this.flush();
    const pending = this.pending.held();
    const writing = this.writing.held();
    return {
      pastes: pending.ids + writing.ids,
      views: pending.views + writing.views,
      possiblyWritten: this.unsettled?.counts.held().views ?? 0,
    };
  }

  /**
   * Writes every pending count (called on a timer, and on shutdown). Flushes run one at a time:
   * a call made while one runs waits for it (and for any that started meanwhile), then writes
   * what is pending, so when it returns every view counted before the call is written.
   */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.flushing) await this.flushing.catch(() => {});
    if (this.pending.size === 0 && !this.unsettled) return;
    const batch = this.pending;
    this.pending = this.writing; // empty: cleared when its flush ended
    this.writing = batch;
    this.epoch++;
    const flushing = this.write(batch);
    this.flushing = flushing;
    try {
      await flushing;
    } finally {
      this.flushing = null;
      this.epoch++;
    }
    if (!this.unsettled && performance.now() - this.tokensForgottenAt >= FORGET_TOKENS_EVERY_MS) {
      this.tokensForgottenAt = performance.now();
      await this.pastes.forgetOldViewTokens().catch(() => {}); // tried again in ten minutes
    }
  }

  private schedule(): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => void this.flush().catch(() => {}), this.intervalMs);
    this.timer.unref();
  }

  /**
   * Writes the batch in chunks of ids in key order (a chunk then meets a few neighbouring pages
   * of the b-trees instead of one page per paste), with a turn of the event loop between chunks.
   * On SQLite a chunk's statement and its counts leaving the batch are one synchronous step, so
   * reads stay exact. An unsettled chunk is written first. If the database cannot be reached, the
   * chunk whose write failed is the unsettled one, and what was not written goes back to pending
   * for the next flush.
   */
  private async write(batch: ViewTable): Promise<void> {
    const slots = batch.sortedSlots();
    let written: Written | null = null;
    try {
      if (this.unsettled) await this.settle();
      for (let i = 0; i < slots.length; i += CHUNK) {
        if (i > 0) await new Promise((resolve) => setImmediate(resolve));
        const end = Math.min(i + CHUNK, slots.length);
        const chunk = chunkOf(batch, slots.subarray(i, end));
        if (chunk.length > 0 && !this.pastes.addViewsNow(chunk)) {
          const token = this.pastes.soleWriter ? '' : randomUUID();
          try {
            await this.pastes.addViews(chunk, token);
          } catch (error) {
            // Refused by the database: written as part of the next flush's counts, like those after it.
            if (!refusedByDatabase(error)) this.unsettle(token, batch, slots.subarray(i, end));
            throw error;
          }
          // Committed: kept for reads begun before, in the same step as the counts leave the
          // batch (see the top). Not on SQLite, whose reads never straddle a commit.
          written = this.keepWritten(chunk, written);
        }
        for (let j = i; j < end; j++) batch.setCount(slots[j] as number, 0);
      }
    } catch {
      for (const slot of slots) {
        const n = batch.countAt(slot);
        if (n > 0) this.pending.add(batch.idAt(slot), n, batch.createdAtOf(slot));
      }
      this.schedule();
    }
    batch.clear();
  }

  /**
   * Makes the chunk whose write failed (the batch's `slots`) the unsettled one, with the token it
   * was written under, and takes its counts out of the batch: those of ids forgotten during the
   * write (0 now) are left out.
   */
  private unsettle(token: string, batch: ViewTable, slots: Int32Array): void {
    const counts = new ViewTable(slots.length * 2);
    for (const [id, n, createdAt] of chunkOf(batch, slots)) counts.add(id, n, createdAt);
    for (const slot of slots) batch.setCount(slot, 0);
    this.unsettled = { token, counts, failedAt: performance.now() };
  }

  /**
   * Writes the unsettled chunk again under its token (without the ids forgotten since), so that it
   * is added once whether or not its failed write committed; throws, leaving it unsettled, if the
   * write fails again. Dropped instead once its token may be gone (SETTLE_WITHIN_MS).
   */
  private async settle(): Promise<void> {
    const { token, counts, failedAt } = this.unsettled as Unsettled;
    if (performance.now() - failedAt >= SETTLE_WITHIN_MS) {
      this.unsettled = null;
      this.onGiveUp(counts.held().views);
      return;
    }
    const chunk = chunkOf(counts, counts.sortedSlots());
    if (chunk.length > 0 && !this.pastes.addViewsNow(chunk)) {
      await this.pastes.addViews(chunk, token);
      this.keepWritten(chunk, null);
    }
    this.unsettled = null;
  }

  /**
   * On PostgreSQL, keeps the counts of a chunk just committed for reads begun before its commit
   * (in `written`, this flush's table, made if null); returns the table.
   */
  private keepWritten(chunk: ViewChunk, written: Written | null): Written | null {
    if (this.pastes.soleWriter) return written;
    const table = written ?? this.writtenTable();
    for (const [id, n, createdAt] of chunk) table.table.add(id, n, createdAt);
    table.lastCommit = performance.now();
    return table;
  }

  /** A table for the counts this flush writes on PostgreSQL: the oldest one when it is old enough. */
  private writtenTable(): Written {
    const oldest = this.recent[0];
    const now = performance.now();
    const written = oldest && oldest.lastCommit < now - RECENT_MS ? (this.recent.shift() as Written) : null;
    if (written) written.table.clear();
    // Any others as old are dropped, so a burst's tables do not stay for good.
    while ((this.recent[0]?.lastCommit ?? now) < now - RECENT_MS) this.recent.shift();
    const fresh = written ?? { table: new ViewTable(), lastCommit: now };
    fresh.lastCommit = now;
    this.recent.push(fresh);
    return fresh;
  }
}
