/**
 * The webhook outbox (D21): a paste created with a key that has a webhook gets its announcement
 * queued in the same transaction as the paste itself, so a created paste is never left
 * unannounced whatever crashes when. The delivery worker is woken after the commit.
 */
import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { ApiKey } from '../keys/key-service.js';
import type { Paste } from '../pastes/paste.js';
import type { PastePresenter } from '../pastes/paste-presenter.js';
import type { Database } from '../storage/schema.js';
import { WebhookRepository } from '../storage/webhook-repository.js';

/** A new `webhook-id`: the same on every attempt of one delivery. */
export function newDeliveryId(): string {
  return `msg_${randomBytes(16).toString('base64url')}`;
}

export class WebhookOutbox {
  private readonly listeners: Array<() => void> = [];

  constructor(private readonly presenter: PastePresenter) {}

  /** Whether a paste made with this key is announced. */
  announces(owner: ApiKey | null): owner is ApiKey & { webhookUrl: string } {
    return owner !== null && owner.webhookUrl !== null && owner.webhookActive;
  }

  /** Queues the announcement; runs inside the paste's transaction. */
  async enqueue(trx: Kysely<Database>, paste: Paste, owner: ApiKey & { webhookUrl: string }): Promise<void> {
    await WebhookRepository.enqueue(trx, {
      id: newDeliveryId(),
      key_id: owner.id,
      paste_id: paste.id,
      url: owner.webhookUrl,
      payload: JSON.stringify(this.presenter.webhookEvent(paste, owner.name)),
      status: 'pending',
      attempts: 0,
      next_attempt_at: paste.createdAt,
      locked_until: null,
      locked_by: null,
      last_status_code: null,
      last_error: null,
      created_at: paste.createdAt,
      finished_at: null,
    });
  }

  /** Called after the transaction commits: wakes the worker. */
  committed(): void {
    for (const listener of this.listeners) listener();
  }

  onCommitted(listener: () => void): void {
    this.listeners.push(listener);
  }
}
