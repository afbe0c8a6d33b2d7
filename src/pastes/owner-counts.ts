/**
 * How many live pastes each owner has, for the list's `pagination.total`: counting 100,000 index
 * entries on every list request costs more than the page itself. A count is kept for at most a
 * second and never past the moment the owner's next paste expires; this process's own creates,
 * deletes, updates and burns drop it at once. Another instance's changes show within a second.
 */
import type { PasteRepository } from '../storage/paste-repository.js';

const KEEP_MS = 1000;
const MAX_OWNERS = 10_000;

export class OwnerCounts {
  private readonly cache = new Map<string, { total: number; until: number }>();

  constructor(private readonly pastes: PasteRepository) {}

  async total(ownerKeyId: string, now: number): Promise<number> {
    const cached = this.cache.get(ownerKeyId);
    if (cached && now < cached.until) return cached.total;
    const { total, nextExpiry } = await this.pastes.countOwned(ownerKeyId, now);
    if (this.cache.size >= MAX_OWNERS) this.cache.clear();
    this.cache.set(ownerKeyId, { total, until: Math.min(now + KEEP_MS, nextExpiry ?? Number.POSITIVE_INFINITY) });
    return total;
  }

  forget(ownerKeyId: string): void {
    this.cache.delete(ownerKeyId);
  }
}
