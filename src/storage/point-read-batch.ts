/**
 * On PostgreSQL, the point reads of pastes by id asked for in one turn of the event loop go out as
 * one query (`WHERE id = ANY($1)`), not one query each. Every query costs the server a socket
 * write that wakes a PostgreSQL backend, and a round trip the backend answers on its own: a
 * quarter of the server's busy time under by-id reads when each read was its own query
 * (BENCHMARKS.md, the first session of 2026-11-27). SQLite reads synchronously and never comes
 * here.
 *
 * The reads asked for before the turn's check phase (setImmediate) share a query: the requests a
 * turn's poll phase parsed, typically. The query takes the rows live at the earliest `now` asked
 * with, and each caller gets its row when the row is live at its own `now` (`expires_at` null or
 * after it), as the single read's SQL decides, or undefined; the same id asked for twice is read
 * once. So that a small read never waits for its neighbours' large ones, the query carries a
 * paste's content only up to BATCH_CONTENT_BYTES: a larger one comes back `oversize`, and is read
 * alone (the single read, once for all its callers, at the earliest of their nows; each judged at
 * its own), as is each id of a query PostgreSQL refused for a value (class 22: one bad id fails
 * only its own read). A query that fails otherwise (the server overloaded, a connection lost, a
 * time-out) rejects each of its callers with its error. At most MAX_IDS ids go in one
 * query; more make more queries.
 */
import { answeredByServer } from './pg-sessions.js';

/** The largest content (bytes) a batched query carries; larger pastes are read alone. */
export const BATCH_CONTENT_BYTES = 64 * 1024;

/** The ids of one query at most. */
export const MAX_IDS = 100;

interface Waiter<R> {
  now: number;
  resolve(row: R | undefined): void;
  reject(err: unknown): void;
}

/**
 * A row as the batch needs it: its id, to hand it to its callers, its expiry, to judge it, and
 * whether its content was left out (larger than BATCH_CONTENT_BYTES).
 */
export interface IdentifiedRow {
  id: string;
  expires_at: number | null;
  oversize?: boolean | null;
}

export class PointReadBatch<R extends IdentifiedRow> {
  /** The callers waiting for the next query, by id. */
  private waiting = new Map<string, Array<Waiter<R>>>();
  private scheduled = false;
  /** Queries sent so far, and reads of one id alone (tests). */
  queries = 0;
  aloneReads = 0;

  /**
   * run: the rows of the ids given live at `now` (those that exist, in any order, oversize ones
   * without their content); alone: the single read of one id at a caller's now.
   */
  constructor(
    private readonly run: (ids: string[], now: number) => Promise<R[]>,
    private readonly alone: (id: string, now: number) => Promise<R | undefined>,
  ) {}

  /** The row of `id` if it is live at `now`, read in the next query of the batch. */
  read(id: string, now: number): Promise<R | undefined> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter<R> = { now, resolve, reject };
      const waiters = this.waiting.get(id);
      if (waiters) waiters.push(waiter);
      else this.waiting.set(id, [waiter]);
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    const waiting = this.waiting;
    this.waiting = new Map();
    const ids = [...waiting.keys()];
    for (let start = 0; start < ids.length; start += MAX_IDS) {
      const part = ids.slice(start, start + MAX_IDS);
      let earliest = Number.POSITIVE_INFINITY;
      for (const id of part)
        for (const waiter of waiting.get(id) as Array<Waiter<R>>) earliest = Math.min(earliest, waiter.now);
      this.queries++;
      let sent: Promise<R[]>;
      try {
        sent = this.run(part, earliest);
      } catch (err) {
        sent = Promise.reject(err);
      }
      sent.then(
        (rows) => {
          const byId = new Map<string, R>();
          for (const row of rows) byId.set(row.id, row);
          for (const id of part) {
            const row = byId.get(id);
            const waiters = waiting.get(id) as Array<Waiter<R>>;
            if (row?.oversize) this.readAlone(id, waiters);
            else settle(waiters, row);
          }
        },
        (err: unknown) => {
          // A value PostgreSQL refused (a bad id: class 22, data exception) fails only its own
          // read; anything else (the server overloaded, a connection lost) fails them all.
          const refusedValue = answeredByServer(err) && String((err as { code: string }).code).startsWith('22');
          for (const id of part) {
            const waiters = waiting.get(id) as Array<Waiter<R>>;
            if (refusedValue) this.readAlone(id, waiters);
            else for (const waiter of waiters) waiter.reject(err);
          }
        },
      );
    }
  }

  /** Reads `id` alone, once for all its callers, at the earliest of their nows. */
  private readAlone(id: string, waiters: Array<Waiter<R>>): void {
    this.aloneReads++;
    let earliest = Number.POSITIVE_INFINITY;
    for (const waiter of waiters) earliest = Math.min(earliest, waiter.now);
    this.alone(id, earliest).then(
      (row) => settle(waiters, row),
      (err: unknown) => {
        for (const waiter of waiters) waiter.reject(err);
      },
    );
  }
}

/** Each caller gets the row if it is live at the caller's own now, or undefined. */
function settle<R extends IdentifiedRow>(waiters: Array<Waiter<R>>, row: R | undefined): void {
  for (const waiter of waiters) {
    waiter.resolve(row && (row.expires_at === null || row.expires_at > waiter.now) ? row : undefined);
  }
}
