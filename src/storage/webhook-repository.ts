/**
 * SQL for the webhook outbox. Claiming picks due, unclaimed rows (with FOR UPDATE SKIP LOCKED on
 * PostgreSQL) and updates them: two workers (in one process or many) never hold the same
 * delivery, and a claim whose worker died expires with its lease.
 */
import type BetterSqlite3 from 'better-sqlite3';
import type { ExpressionBuilder, Insertable, Kysely, Selectable } from 'kysely';
import type { Dialect } from './database.js';
import type { Database, DeliveryStatus, WebhookAttemptTable, WebhookDeliveryTable } from './schema.js';

export type DeliveryRow = Selectable<WebhookDeliveryTable>;
export type AttemptRow = Selectable<WebhookAttemptTable>;

export interface KeyWebhook {
  keyId: string;
  name: string;
  url: string | null;
  secret: string | null;
  active: boolean;
}

/** A delivery no worker holds at `now`: pending, and unclaimed or its lease run out. */
function freeAt(now: number) {
  return (eb: ExpressionBuilder<Database, 'webhook_deliveries'>) =>
    eb.and([eb('status', '=', 'pending'), eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)])]);
}

/** The finished deliveries a batch removes, oldest first (SQLite: the same in both statements of its transaction). */
const FINISHED_BATCH_SQLITE =
  'SELECT id FROM webhook_deliveries WHERE finished_at < ? ORDER BY finished_at, id LIMIT ?';

export class WebhookRepository {
  /**
   * On SQLite, a batch of pruneFinished as one synchronous transaction on the handle (wrapped by
   * the write gate): it holds the event loop for its own work only, and no transaction stays
   * open across turns for the hot reads and group commits to meet (as the expiry sweep's batch).
   */
  private readonly pruneBatch: ((cutoff: number, limit: number) => number) | null = null;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly dialect: Dialect,
    private readonly sqlite: BetterSqlite3.Database | null = null,
  ) {
    if (sqlite) {
      const attempts = sqlite.prepare(`DELETE FROM webhook_attempts WHERE delivery_id IN (${FINISHED_BATCH_SQLITE})`);
      const deliveries = sqlite.prepare(`DELETE FROM webhook_deliveries WHERE id IN (${FINISHED_BATCH_SQLITE})`);
      this.pruneBatch = sqlite.transaction((cutoff: number, limit: number) => {
        attempts.run(cutoff, limit);
        return deliveries.run(cutoff, limit).changes;
      });
    }
  }

  /** Queues a delivery; called inside the transaction that inserts the paste. */
  static async enqueue(trx: Kysely<Database>, row: Insertable<WebhookDeliveryTable>): Promise<void> {
    await trx.insertInto('webhook_deliveries').values(row).execute();
  }

  /**
   * Claims up to `limit` due deliveries for `workerId` until `leaseUntil`, oldest first, none of
   * the keys in `exceptKeys`.
   */
  async claimDue(
    now: number,
    limit: number,
    workerId: string,
    leaseUntil: number,
    exceptKeys: readonly string[] = [],
  ): Promise<DeliveryRow[]> {
    const due = this.db
      .selectFrom('webhook_deliveries')
      .select('id')
      .where(freeAt(now))
      .where('next_attempt_at', '<=', now)
      .$if(exceptKeys.length > 0, (q) => q.where('key_id', 'not in', exceptKeys))
      .orderBy('next_attempt_at')
      .limit(limit);
    // On PostgreSQL the rows are picked once, in a MATERIALIZED CTE: as `id IN (SELECT ... LIMIT
    // n FOR UPDATE SKIP LOCKED)` the sub-select may be run again for rows rechecked under
    // concurrency, and claim more than `limit`. On SQLite the ids first, then their rows by the
    // primary key: as one statement SQLite read every pending row to match it against the ids
    // (10 ms at 50,000 retries waiting, on the event loop). Either way the update checks again
    // that each is still free (on SQLite the admin command may have requeued one in between).
    const lease = { locked_until: leaseUntil, locked_by: workerId };
    if (this.dialect === 'postgres') {
      return this.db
        .with(
          (cte) => cte('picked').materialized(),
          () => due.forUpdate().skipLocked(),
        )
        .updateTable('webhook_deliveries')
        .set(lease)
        .where('id', 'in', (eb) => eb.selectFrom('picked').select('picked.id'))
        .where(freeAt(now))
        .returningAll()
        .execute();
    }
    const ids = (await due.execute()).map((row) => row.id);
    if (ids.length === 0) return [];
    return this.db
      .updateTable('webhook_deliveries')
      .set(lease)
      .where('id', 'in', ids)
      .where(freeAt(now))
      .returningAll()
      .execute();
  }

  async keyWebhook(keyId: string): Promise<KeyWebhook | undefined> {
    const row = await this.db
      .selectFrom('api_keys')
      .select(['id', 'name', 'webhook_url', 'webhook_secret', 'webhook_active'])
      .where('id', '=', keyId)
      .executeTakeFirst();
    return row
      ? {
          keyId: row.id,
          name: row.name,
          url: row.webhook_url,
          secret: row.webhook_secret,
          active: row.webhook_active === 1,
        }
      : undefined;
  }

  async recordAttempt(row: AttemptRow): Promise<void> {
    await this.db.insertInto('webhook_attempts').values(row).execute();
  }

  /** Ends a delivery (delivered, failed for good, or gone) and releases the claim. */
  async finish(
    id: string,
    workerId: string,
    status: DeliveryStatus,
    fields: { attempts: number; code: number | null; error: string | null; at: number },
  ): Promise<void> {
    await this.db
      .updateTable('webhook_deliveries')
      .set({
        status,
        attempts: fields.attempts,
        last_status_code: fields.code,
        last_error: fields.error,
        finished_at: fields.at,
        locked_until: null,
        locked_by: null,
      })
      .where('id', '=', id)
      .where('locked_by', '=', workerId)
      .execute();
  }

  /**
   * Removes up to `limit` deliveries finished before `cutoff`, oldest first, with their attempts;
   * returns how many. One not finished (pending, however old) is never removed. On PostgreSQL
   * the rows are locked first (SKIP LOCKED: two instances' prunes share the rows out), so a
   * requeue waits and then finds them gone, rather than keeping a delivery whose attempts went.
   */
  async pruneFinished(cutoff: number, limit: number): Promise<number> {
    if (this.pruneBatch && !this.sqlite?.inTransaction) return this.pruneBatch(cutoff, limit);
    return this.db.transaction().execute(async (trx) => {
      const rows = await trx
        .selectFrom('webhook_deliveries')
        .select('id')
        .where('finished_at', '<', cutoff)
        .orderBy('finished_at')
        .orderBy('id')
        .limit(limit)
        .$if(this.dialect === 'postgres', (q) => q.forUpdate().skipLocked())
        .execute();
      if (rows.length === 0) return 0;
      const ids = rows.map((row) => row.id);
      await trx.deleteFrom('webhook_attempts').where('delivery_id', 'in', ids).execute();
      const removed = await trx
        .deleteFrom('webhook_deliveries')
        .where('id', 'in', ids)
        .where('finished_at', '<', cutoff)
        .executeTakeFirst();
      return Number(removed.numDeletedRows);
    });
  }

  /** Schedules the next attempt and releases the claim. */
  async reschedule(
    id: string,
    workerId: string,
    fields: { attempts: number; nextAttemptAt: number; code: number | null; error: string | null },
  ): Promise<void> {
    await this.db
      .updateTable('webhook_deliveries')
      .set({
        attempts: fields.attempts,
        next_attempt_at: fields.nextAttemptAt,
        last_status_code: fields.code,
        last_error: fields.error,
        locked_until: null,
        locked_by: null,
      })
      .where('id', '=', id)
      .where('locked_by', '=', workerId)
      .execute();
  }

  /** Gives back every claim of a worker that stops, so others may take them at once. */
  async releaseClaims(workerId: string): Promise<void> {
    await this.db
      .updateTable('webhook_deliveries')
      .set({ locked_until: null, locked_by: null })
      .where('locked_by', '=', workerId)
      .execute();
  }

  /**
   * A 410 from the receiver at `url`: the key's webhook stays off until it is set again. Only if
   * the key still sends to that URL: a webhook set anew while the attempt was out is not the one
   * that answered. Returns whether it was turned off.
   */
  async disableKeyWebhook(keyId: string, url: string): Promise<boolean> {
    const result = await this.db
      .updateTable('api_keys')
      .set({ webhook_active: 0 })
      .where('id', '=', keyId)
      .where('webhook_url', '=', url)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  async listForKey(keyId: string, limit: number): Promise<DeliveryRow[]> {
    return this.db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('key_id', '=', keyId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .execute();
  }

  async attemptsOf(deliveryIds: string[]): Promise<AttemptRow[]> {
    if (deliveryIds.length === 0) return [];
    return this.db
      .selectFrom('webhook_attempts')
      .selectAll()
      .where('delivery_id', 'in', deliveryIds)
      .orderBy('attempted_at')
      .execute();
  }

  /**
   * Puts a delivery back in the queue, due now, with a fresh back-off: 'queued'. Not one a worker
   * is sending now (claimed, its lease running): 'sending'. Taken from it, it would be sent a
   * second time at once, and the first send's outcome dropped (its worker no longer holds it).
   * 'unknown' when there is no such delivery.
   */
  async requeue(id: string, now: number): Promise<'queued' | 'sending' | 'webhook off' | 'unknown'> {
    const result = await this.db
      .updateTable('webhook_deliveries')
      .set({
        status: 'pending',
        attempts: 0,
        next_attempt_at: now,
        locked_until: null,
        locked_by: null,
        finished_at: null,
      })
      .where('id', '=', id)
      .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<=', now)]))
      // Not for a key whose webhook is off (a receiver's 410) or gone: the worker would close it
      // again at once, unsent.
      .where('key_id', 'in', (eb) =>
        eb.selectFrom('api_keys').select('id').where('webhook_active', '=', 1).where('webhook_url', 'is not', null),
      )
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) > 0) return 'queued';
    const found = await this.db
      .selectFrom('webhook_deliveries')
      .innerJoin('api_keys', 'api_keys.id', 'webhook_deliveries.key_id')
      .select(['api_keys.webhook_active', 'api_keys.webhook_url'])
      .where('webhook_deliveries.id', '=', id)
      .executeTakeFirst();
    if (!found) return 'unknown';
    return found.webhook_active !== 1 || found.webhook_url === null ? 'webhook off' : 'sending';
  }
}
