/**
 * On PostgreSQL, the point reads of pastes by id asked for in one turn of the event loop go out as
 * one query (`WHERE id = ANY($1)`), not one query each. Every query costs the server a socket
 * write that wakes a PostgreSQL backend, and a round trip the backend answers on its own: a
 * quarter of the server's busy time under by-id reads when each read was its own query
 * (BENCHMARKS.md, the first session of 2026-11-27). SQLite reads synchronously and never comes
 * here.
 *
 * The reads asked for before the turn's check phase (setImmediate) share a query: the requests a
 * turn's poll phase parsed, typically. Each caller gets the row of its id when the row is live at
 * the `now` it asked with (`expires_at` null or after it), as the single read's SQL decides, or
 * undefined; the same id asked for twice is read once. A query that fails rejects each of its
 * callers with its error. At most MAX_IDS ids go in one query; more make more queries.
 */

/** The ids of one query at most. */
export const MAX_IDS = 200;

interface Waiter<R> {
  now: number;
  resolve(row: R | undefined): void;
  reject(err: unknown): void;
}

/** A row as the batch needs it: its id, to hand it to its callers, and its expiry, to judge it. */
export interface IdentifiedRow {
  id: string;
  expires_at: number | null;
}

export class PointReadBatch<R extends IdentifiedRow> {
  /** The callers waiting for the next query, by id. */
  private waiting = new Map<string, Array<Waiter<R>>>();
  private scheduled = false;
  /** Queries sent so far (tests). */
  queries = 0;

  /** run: the rows of the ids given (those that exist, in any order; expired ones too). */
  constructor(private readonly run: (ids: string[]) => Promise<R[]>) {}

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
      this.queries++;
      let sent: Promise<R[]>;
      try {
        sent = this.run(part);
      } catch (err) {
        sent = Promise.reject(err);
      }
      sent.then(
        (rows) => {
          const byId = new Map<string, R>();
          for (const row of rows) byId.set(row.id, row);
          for (const id of part) {
            const row = byId.get(id);
            for (const waiter of waiting.get(id) as Array<Waiter<R>>) {
              waiter.resolve(row && (row.expires_at === null || row.expires_at > waiter.now) ? row : undefined);
            }
          }
        },
        (err: unknown) => {
          for (const id of part) for (const waiter of waiting.get(id) as Array<Waiter<R>>) waiter.reject(err);
        },
      );
    }
  }
}
