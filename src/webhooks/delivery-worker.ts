/**
 * The webhook delivery worker, run inside the server process: it claims due deliveries from the
 * outbox (a lease, so several instances can run one each), sends them with bounded concurrency,
 * records every attempt, and schedules retries with back-off. Paste creation never waits for it.
 */
import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import type { Clock } from '../clock.js';
import type { DeliveryRow, KeyWebhook, WebhookRepository } from '../storage/webhook-repository.js';
import { MAX_ATTEMPTS, retryDelayMs } from './retry-schedule.js';
import { type SendResult, sendWebhook } from './webhook-sender.js';

/** How long claimFairly skips its first step once that found no other key's delivery due. */
const NO_OTHER_KEY_MS = 1000;

/** The shortest gap between two polls brought on by wakes. */
const WAKE_GAP_MS = 50;

/**
 * Finished deliveries removed a transaction at a time (pruneFinished), with their attempts (up
 * to 16 each): a batch is a few milliseconds' work.
 */
export const PRUNE_BATCH = 100;

/** Between two batches the worker rests this many times as long as the batch took: a fifth of the time at most. */
const PRUNE_REST_FACTOR = 4;

export interface WorkerOptions {
  /** Deliveries in flight at once. */
  concurrency: number;
  /** How often the outbox is polled when nothing wakes the worker. */
  pollMs: number;
  /** Time-out of one attempt. */
  timeoutMs: number;
  /** First retry delay; doubles per attempt (WEBHOOK_RETRY_BASE_MS). */
  retryBaseMs: number;
  allowPrivate: boolean;
  /** How long a finished delivery and its attempts are kept (WEBHOOK_RETENTION_DAYS). */
  retentionMs: number;
}

interface Logger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export class DeliveryWorker {
  readonly id = `w_${randomBytes(8).toString('hex')}`;
  private readonly inFlight = new Set<Promise<void>>();
  /** The attempts in flight by key (claimFairly). */
  private readonly keysInFlight = new Map<string, number>();
  /**
   * Until when (performance.now()) claimFairly goes straight to its second step: its first found
   * no due delivery of a key not in flight, after a walk past the due ones of those in flight.
   */
  private noOtherKeyUntil = 0;
  /** Deliveries claimed whose claim was not settled by their attempt (running, or failed). */
  private claimsHeld = 0;
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private wakePending = false;
  private lastPoll = 0;
  private polling = false;
  private pollAgain = false;
  /** The poll under way, if one is: stop() waits for it before it looks at what is held. */
  private pollRun: Promise<void> | null = null;
  /** The prune under way, if one is (pruneFinished); stop() waits for its batch. */
  private pruning: Promise<number> | null = null;
  /** Set by stop(): a prune ends after its batch. */
  private stopped = false;

  constructor(
    private readonly repository: WebhookRepository,
    private readonly clock: Clock,
    private readonly options: WorkerOptions,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.running = true;
    this.schedule(0);
  }

  /**
   * Something was queued, or a slot came free: look soon instead of at the next poll. Wakes are
   * gathered into one poll every WAKE_GAP_MS, so a burst of creates costs one outbox query, not
   * one each, and delivery work never crowds out the requests that create pastes.
   */
  wake(): void {
    if (!this.running || this.wakePending) return;
    this.wakePending = true;
    const wait = Math.max(0, this.lastPoll + WAKE_GAP_MS - Date.now());
    this.schedule(wait);
  }

  /**
   * Stops claiming, waits for a poll under way (its claims come back after this was called, and
   * are not attempted), waits (a bounded time) for the attempts in flight, then gives back every
   * claim this worker still holds so another instance can take them at once. Before, a claim
   * that came back from a poll in flight was held by a stopped worker until its lease ran out.
   */
  async stop(graceMs = this.options.timeoutMs + 1000): Promise<void> {
    this.running = false;
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const grace = new Promise((r) => setTimeout(r, graceMs).unref());
    if (this.pollRun) await Promise.race([this.pollRun, grace]);
    // A prune ends after its batch under way; its failure is its caller's to log.
    if (this.pruning) await Promise.race([this.pruning.catch(() => {}), grace]);
    await Promise.race([Promise.allSettled([...this.inFlight]), grace]);
    // Nothing to give back when every claim was settled (a storage that takes no writes would
    // refuse even an update of no rows).
    if (this.claimsHeld === 0) return;
    await this.repository.releaseClaims(this.id);
    this.claimsHeld = 0;
  }

  /**
   * Removes the deliveries finished more than the retention ago, with their attempts, oldest
   * first, PRUNE_BATCH a transaction, resting between two batches (PRUNE_REST_FACTOR) so that a
   * backlog (the first sweep after an upgrade) takes at most a fifth of the event loop; returns
   * how many went. Those not finished stay, however old: a delivery is at least once (D21). One
   * prune at a time: a call while one runs joins it. It stops after its batch once the worker
   * is stopped.
   */
  pruneFinished(): Promise<number> {
    this.pruning ??= this.pruneAll().finally(() => {
      this.pruning = null;
    });
    return this.pruning;
  }

  private async pruneAll(): Promise<number> {
    const cutoff = this.clock() - this.options.retentionMs;
    let removed = 0;
    while (!this.stopped) {
      const startedAt = performance.now();
      const batch = await this.repository.pruneFinished(cutoff, PRUNE_BATCH);
      removed += batch;
      if (batch < PRUNE_BATCH) break;
      const rest = (performance.now() - startedAt) * PRUNE_REST_FACTOR;
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, rest)));
    }
    return removed;
  }

  private schedule(delayMs: number): void {
    if (!this.running) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.poll(), delayMs);
    this.timer.unref();
  }

  private poll(): void {
    if (this.polling) {
      this.pollAgain = true;
      return;
    }
    this.pollRun = this.pollOnce().finally(() => {
      this.pollRun = null;
    });
  }

  private async pollOnce(): Promise<void> {
    this.polling = true;
    this.wakePending = false;
    this.lastPoll = Date.now();
    try {
      do {
        this.pollAgain = false;
        const room = this.options.concurrency - this.inFlight.size;
        if (room <= 0 || !this.running) break;
        const claimed = await this.claimFairly(room);
        this.claimsHeld += claimed.length;
        // Claimed as the worker was being stopped: given back by stop(), not attempted now.
        if (!this.running) break;
        for (const delivery of claimed) this.track(this.attempt(delivery), delivery.key_id);
        if (claimed.length === room) this.pollAgain = true;
      } while (this.pollAgain && this.running);
    } catch (err) {
      this.log.error({ err }, 'webhook outbox poll failed');
    } finally {
      this.polling = false;
      // A wake during this poll is kept, not pushed back to the next regular poll.
      this.schedule(this.wakePending ? WAKE_GAP_MS : this.options.pollMs);
    }
  }

  /**
   * Up to `room` due deliveries: first one at a time from keys with none in flight here (nor
   * claimed by this poll: a key whose attempts all ended at once is not taken again for every
   * slot), then, with room left, any, oldest first. So one key's slow receiver or long backlog
   * does not keep every other key's deliveries behind all of its own: another key's waits at
   * most until one of its attempts ends (WEBHOOK_TIMEOUT_MS), and a key alone still takes every
   * slot. An idle poll is one query. The first step's query walks past the due deliveries of the
   * keys in flight (a slow receiver's backlog: 10 ms for 50,000 on SQLite, on the event loop), so
   * once it finds none of another key it is skipped for NO_OTHER_KEY_MS: another key's delivery
   * then waits that much longer at most. A claim that fails after others ends the claiming.
   */
  private async claimFairly(room: number): Promise<DeliveryRow[]> {
    const now = this.clock();
    const leaseUntil = now + this.options.timeoutMs + 15_000;
    const busy = new Set(this.keysInFlight.keys());
    const claimed: DeliveryRow[] = [];
    const firstSkipped = performance.now() < this.noOtherKeyUntil;
    try {
      while (!firstSkipped && claimed.length < room && this.running) {
        const next = await this.repository.claimDue(now, 1, this.id, leaseUntil, [...busy]);
        if (next.length === 0) {
          if (busy.size > 0) this.noOtherKeyUntil = performance.now() + NO_OTHER_KEY_MS;
          break;
        }
        // Every row it returned is attempted (a claim of one returns one: webhook-repository.ts).
        for (const delivery of next) {
          claimed.push(delivery);
          busy.add(delivery.key_id);
        }
      }
      // Not when the first step ran unfiltered and found all there was.
      if (claimed.length < room && (firstSkipped || busy.size > 0) && this.running) {
        claimed.push(...(await this.repository.claimDue(now, room - claimed.length, this.id, leaseUntil)));
      }
    } catch (err) {
      if (claimed.length === 0) throw err;
      this.log.error({ err }, 'webhook outbox poll failed');
    }
    return claimed;
  }

  private track(task: Promise<void>, keyId: string): void {
    this.inFlight.add(task);
    this.keysInFlight.set(keyId, (this.keysInFlight.get(keyId) ?? 0) + 1);
    void task.finally(() => {
      this.inFlight.delete(task);
      const left = (this.keysInFlight.get(keyId) ?? 1) - 1;
      if (left > 0) this.keysInFlight.set(keyId, left);
      else this.keysInFlight.delete(keyId);
      // A slot is free: there may be more due.
      this.wake();
    });
  }

  /** Delivers one claimed delivery; its claim is settled unless this throws. */
  private async attempt(delivery: DeliveryRow): Promise<void> {
    try {
      await this.deliver(delivery);
      this.claimsHeld--;
    } catch (err) {
      this.log.error({ err, delivery: delivery.id }, 'webhook delivery failed unexpectedly');
    }
  }

  private async deliver(delivery: DeliveryRow): Promise<void> {
    const webhook = await this.repository.keyWebhook(delivery.key_id);
    const stopped = whyStopped(webhook);
    const attempts = delivery.attempts + 1;
    const at = this.clock();
    if (stopped) {
      await this.repository.finish(delivery.id, this.id, 'gone', {
        attempts: delivery.attempts,
        code: null,
        error: stopped,
        at,
      });
      return;
    }
    const timestamp = new Date(at);
    const signature = new Webhook(webhook?.secret as string).sign(delivery.id, timestamp, delivery.payload);
    const headers = {
      'webhook-id': delivery.id,
      'webhook-timestamp': String(Math.floor(at / 1000)),
      'webhook-signature': signature,
    };
    // The key's current URL and secret: a rotated webhook gets its pending announcements too.
    const url = webhook?.url as string;
    const result = await sendWebhook(url, headers, delivery.payload, {
      timeoutMs: this.options.timeoutMs,
      allowPrivate: this.options.allowPrivate,
    });
    await this.record(delivery, attempts, at, result, url);
  }

  private async record(
    delivery: DeliveryRow,
    attempts: number,
    at: number,
    result: SendResult,
    url: string,
  ): Promise<void> {
    const { statusCode: code, error } = result;
    await this.repository.recordAttempt({
      id: `att_${randomBytes(10).toString('base64url')}`,
      delivery_id: delivery.id,
      attempted_at: at,
      status_code: code,
      error,
      duration_ms: result.durationMs,
    });
    const now = this.clock();
    if (error === null) {
      await this.repository.finish(delivery.id, this.id, 'delivered', { attempts, code, error, at: now });
    } else if (code === 410 && (await this.repository.disableKeyWebhook(delivery.key_id, url))) {
      // The receiver says the endpoint is gone for good: the key's webhook is turned off. (A 410
      // from a URL the key no longer sends to is a failed attempt like any other: the delivery
      // goes to the new URL next.)
      await this.repository.finish(delivery.id, this.id, 'gone', { attempts, code, error, at: now });
      this.log.warn({ key: delivery.key_id }, 'webhook receiver answered 410; webhook turned off');
    } else if (attempts >= MAX_ATTEMPTS) {
      await this.repository.finish(delivery.id, this.id, 'failed', { attempts, code, error, at: now });
    } else {
      const nextAttemptAt = now + retryDelayMs(attempts, this.options.retryBaseMs, result.retryAfterMs);
      await this.repository.reschedule(delivery.id, this.id, { attempts, nextAttemptAt, code, error });
    }
  }
}

function whyStopped(webhook: KeyWebhook | undefined): string | null {
  if (!webhook) return 'the key no longer exists';
  if (!webhook.url || !webhook.secret) return 'the key has no webhook any more';
  if (!webhook.active) return 'the webhook was turned off after the receiver answered 410';
  return null;
}
