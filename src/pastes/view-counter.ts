/**
 * View counts, added up in memory and written in one statement batch every second, so that a
 * read costs no database write. What a reader is shown counts the views not yet written (those
 * pending and those of the batch being written). On SQLite that is exact: a chunk's commit and
 * its leaving the batch are one synchronous step. On PostgreSQL a read that meets a flush may be
 * off by that second's views of the paste until the flush ends. A crash loses at most the last
 * second of counts; a burn (which must be exact) never goes through here.
 */
import type { PasteRepository } from '../storage/paste-repository.js';

export class ViewCounter {
  private pending = new Map<string, number>();
  /** The batch being written: its entries leave it as they are committed. */
  private writing = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  /** Moves whenever written counts may change (a flush starts or ends): see writtenEpoch. */
  private epoch = 0;

  constructor(
    private readonly pastes: PasteRepository,
    private readonly intervalMs = 1000,
  ) {}

  /** Counts one view and returns how many of this paste's views are not yet written. */
  add(id: string): number {
    const count = (this.pending.get(id) ?? 0) + 1;
    this.pending.set(id, count);
    if (!this.timer) {
      this.timer = setTimeout(() => void this.flush(), this.intervalMs);
      this.timer.unref();
    }
    return count;
  }

  /** Views counted but not yet written. */
  unwritten(id: string): number {
    return (this.pending.get(id) ?? 0) + (this.writing.get(id) ?? 0);
  }

  /**
   * A number that stays the same for as long as the counts in the database stay the same, or null
   * while a flush is writing them. Views read from the database with epoch E, added to unwritten()
   * at any later moment the epoch is still E, are exact.
   */
  writtenEpoch(): number | null {
    return this.flushing ? null : this.epoch;
  }

  /** Writes every pending count (called on a timer, and on shutdown). */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.flushing) await this.flushing;
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    this.writing = batch;
    this.epoch++;
    this.flushing = this.pastes.addViews(batch).catch(() => {
      // The database is out of reach: keep the counts not written (left in batch) for the next flush.
      for (const [id, n] of batch) this.pending.set(id, (this.pending.get(id) ?? 0) + n);
      batch.clear();
      if (!this.timer) {
        this.timer = setTimeout(() => void this.flush(), this.intervalMs);
        this.timer.unref();
      }
    });
    await this.flushing;
    this.flushing = null;
    this.epoch++;
    this.writing = new Map();
  }
}
