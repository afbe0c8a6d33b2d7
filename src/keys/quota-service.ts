/**
 * Request quotas (D20): every authenticated request counts once against its key's hourly, daily
 * and monthly window (fixed UTC calendar windows, 0 = unlimited), before any work is done for it.
 * Anonymous quick-creates count the same way per client address. The counting itself is done by
 * an atomic counter store (counter-store.ts), so limits hold exactly under concurrency and across
 * instances that share it.
 */
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';
import type { CounterStore } from './counter-store.js';
import { WINDOW_KINDS, type WindowKind, windowAt } from './quota-windows.js';

const KEY_SUBJECT = 'key:';

/** The quota subject of an API key's requests. */
export const keySubject = (keyId: string): string => `${KEY_SUBJECT}${keyId}`;

export interface Limits {
  hourly: number;
  daily: number;
  monthly: number;
}

export interface WindowState {
  kind: WindowKind;
  limit: number;
  used: number;
  remaining: number;
  /** Seconds until the window ends. */
  resetSeconds: number;
}

interface Counted extends WindowState {
  key: string;
  ttlSeconds: number;
  /** Length of this window in seconds (a month's varies). */
  lengthSeconds: number;
}

function windowLabel(start: number): string {
  return new Date(start).toISOString().slice(0, 13);
}

interface WindowPlan {
  kind: WindowKind;
  start: number;
  end: number;
  lengthSeconds: number;
  label: string;
}

/** The counter of `subject` in that window (its key names the window, so it only counts up). */
function counterKey(subject: string, window: WindowPlan): string {
  return `${subject}:${window.kind}:${window.label}`;
}

/** What a window shows after `used` requests in it (`lengthSeconds` for the policy header). */
function windowState(window: WindowPlan, limit: number, used: number, now: number) {
  return {
    kind: window.kind,
    limit,
    used,
    remaining: Math.max(0, limit - used),
    resetSeconds: Math.max(1, Math.ceil((window.end - now) / 1000)),
    lengthSeconds: window.lengthSeconds,
  };
}

/** How long a window's counter lives: it outlives its window by a minute, so clocks a little apart still agree. */
function counterTtlSeconds(window: WindowPlan, now: number): number {
  return Math.max(1, Math.ceil((window.end - now) / 1000)) + 60;
}

/** A request's count as admit() made it: its headers, and its windows for giveBack(). */
export interface QuotaReceipt {
  headers: Record<string, string>;
  windows: readonly Counted[];
  /** The policy header, when the key's plan had it made already. */
  policy?: string;
}

interface HourPlan {
  hourStart: number;
  hourEnd: number;
  windows: WindowPlan[];
}

/** The three windows of the current hour, worked out once an hour (they change only then). */
let planned: HourPlan | null = null;

function hourAt(now: number): HourPlan {
  if (planned && now >= planned.hourStart && now < planned.hourEnd) return planned;
  const windows = WINDOW_KINDS.map((kind) => {
    const { start, end } = windowAt(kind, now);
    return { kind, start, end, lengthSeconds: (end - start) / 1000, label: windowLabel(start) };
  });
  const hour = windows.find((w) => w.kind === 'hourly') as WindowPlan;
  planned = { hourStart: hour.start, hourEnd: hour.end, windows };
  return planned;
}

function windowsAt(now: number): WindowPlan[] {
  return hourAt(now).windows;
}

/** RateLimit-Policy of D20: each limited window with its quota and length. */
function policyHeader(windows: Array<{ kind: WindowKind; limit: number; lengthSeconds: number }>): string {
  return windows.map((w) => `"${w.kind}";q=${w.limit};w=${w.lengthSeconds}`).join(', ');
}

/**
 * The headers of D20 for the limited windows; none when nothing is limited. `policy`, when given,
 * is policyHeader(windows) worked out before.
 */
export function quotaHeaders(
  windows: Array<WindowState & { lengthSeconds: number }>,
  policy?: string,
): Record<string, string> {
  if (windows.length === 0) return {};
  // Of windows with as few left, the one that ends last: it holds the key as long as any of them.
  const nearest = windows.reduce((a, b) =>
    b.remaining < a.remaining || (b.remaining === a.remaining && b.resetSeconds > a.resetSeconds) ? b : a,
  );
  return {
    'ratelimit-limit': String(nearest.limit),
    'ratelimit-remaining': String(nearest.remaining),
    'ratelimit-reset': String(nearest.resetSeconds),
    'ratelimit-policy': policy ?? policyHeader(windows),
    ratelimit: windows.map((w) => `"${w.kind}";r=${w.remaining};t=${w.resetSeconds}`).join(', '),
  };
}

/**
 * What counting a subject in the current hour needs that does not change within the hour: its
 * limited windows, their counters' keys and the policy header (consumeNow's per-request work).
 */
interface SubjectPlan {
  hourStart: number;
  hourEnd: number;
  limits: Limits;
  windows: WindowPlan[];
  counters: Array<{ key: string; limit: number }>;
  policy: string;
}

/** Subjects whose plans are kept; past it the plans are dropped and made again as needed. */
const MAX_PLANS = 10_000;

/**
 * `change` of each window's counter, at once. When one fails (the request is answered 503 for
 * it), `undo` of those it was made in (best effort: a store that fails again leaves them) and the
 * failure thrown: the hour and the month do not count a request the day did not, nor the other
 * way round.
 */
async function inEveryWindowOrNone<W, T>(
  windows: readonly W[],
  change: (w: W) => Promise<T>,
  undo: (w: W) => Promise<unknown>,
): Promise<T[]> {
  const results = await Promise.allSettled(windows.map(change));
  const failed = results.find((result) => result.status === 'rejected');
  if (!failed) return results.map((result) => (result as PromiseFulfilledResult<T>).value);
  await Promise.all(windows.map((w, i) => (results[i]?.status === 'fulfilled' ? undo(w).catch(() => {}) : undefined)));
  throw failed.reason;
}

export class QuotaService {
  private readonly plans = new Map<string, SubjectPlan>();
  /** Keys whose last count here was refused, and when the windows that refused them end (ms). */
  private readonly refused = new Map<string, number>();

  constructor(
    private readonly counters: CounterStore,
    private readonly clock: Clock,
  ) {}

  /**
   * Counts one request for `subject` in each limited window. Returns the D20 headers, or throws
   * 429 `rate_limited` (with the headers and Retry-After) when a window is exhausted.
   */
  async consume(subject: string, limits: Limits): Promise<Record<string, string>> {
    return quotaHeaders(await this.count(subject, limits));
  }

  /**
   * consume(), kept as a receipt: its headers, and what giveBack() needs to take the count back
   * once the request is refused after all (D20: a 401 or 403 counts against nothing).
   */
  async admit(subject: string, limits: Limits): Promise<QuotaReceipt> {
    const now = this.countNow(subject, limits);
    if (now) return { headers: quotaHeaders(now.windows, now.policy), windows: now.windows, policy: now.policy };
    const windows = await this.count(subject, limits);
    return { headers: quotaHeaders(windows), windows };
  }

  /**
   * Takes back the count of an admitted request, in the windows it was counted in; returns the
   * headers without it. A store that fails leaves the count made (the request is not answered
   * for it: the caller keeps its headers), in every window: one taken back while another failed
   * is counted again (inEveryWindowOrNone).
   */
  async giveBack(receipt: QuotaReceipt): Promise<Record<string, string>> {
    await inEveryWindowOrNone(
      receipt.windows,
      (w) => this.counters.decrement(w.key, w.ttlSeconds),
      (w) => this.counters.increment(w.key, w.ttlSeconds),
    );
    return quotaHeaders(
      receipt.windows.map((w) =>
        Object.assign({}, w, { used: w.used - 1, remaining: Math.max(0, w.limit - (w.used - 1)) }),
      ),
      receipt.policy,
    );
  }

  /** consume()'s count: each limited window as counted; 429 past a limit, its count kept. */
  private async count(subject: string, limits: Limits): Promise<Counted[]> {
    const now = this.clock();
    const counted = windowsAt(now)
      .filter((w) => limits[w.kind] > 0)
      .map((w) => ({
        window: w,
        key: counterKey(subject, w),
        ttlSeconds: counterTtlSeconds(w, now),
      }));
    // One round trip for every window where the store can (Redis), else one per window.
    const used = this.counters.incrementAll
      ? await this.counters.incrementAll(counted)
      : await inEveryWindowOrNone(
          counted,
          (w) => this.counters.increment(w.key, w.ttlSeconds),
          (w) => this.counters.decrement(w.key, w.ttlSeconds),
        );
    const windows = counted.map(
      ({ window, key, ttlSeconds }, i): Counted =>
        Object.assign(windowState(window, limits[window.kind], used[i] as number, now), { key, ttlSeconds }),
    );
    const exhausted = windows.filter((w) => w.used > w.limit);
    if (exhausted.length > 0) {
      // D20 counts every authenticated request, a 429 too (only a 401 or 403 counts against
      // nothing): the counts stay, so a client that keeps sending through an exhausted hour
      // spends its day's and month's budget as it goes.
      // The next request passes once every window this one filled has ended: one left at exactly
      // its limit by this count refuses the next as much as one past it.
      const headers = quotaHeaders(windows);
      const retryAfter = Math.max(...windows.filter((w) => w.used >= w.limit).map((w) => w.resetSeconds));
      if (subject.startsWith(KEY_SUBJECT)) this.rememberRefused(subject, now + retryAfter * 1000, now);
      const names = exhausted.map((w) => w.kind).join(' and ');
      throw new AppError('rate_limited', `Rate limit exceeded: the ${names} limit is used up.`, {
        headers: Object.assign({}, headers, { 'retry-after': String(retryAfter) }),
      });
    }
    if (this.refused.size > 0) this.refused.delete(subject);
    return windows;
  }

  /** Keeps a key's refusal (see knownRefused); past MAX_PLANS the ended ones go, then all. */
  private rememberRefused(subject: string, until: number, now: number): void {
    if (this.refused.size >= MAX_PLANS) {
      for (const [kept, end] of this.refused) if (end <= now) this.refused.delete(kept);
      if (this.refused.size >= MAX_PLANS) this.refused.clear();
    }
    this.refused.set(subject, until);
  }

  /**
   * Whether the last count of `subject` here was refused and the windows that refused it have
   * not ended since: a hint for a caller that would otherwise do work before counting (the fast
   * lane reads a paste first) to count first. Only a count decides; one that passes here (its
   * limits raised, another instance's counts given back) clears the hint. Kept for keys only,
   * per instance, up to a second past the windows' end (Retry-After is in whole seconds).
   */
  knownRefused(subject: string): boolean {
    if (this.refused.size === 0) return false;
    const until = this.refused.get(subject);
    if (until === undefined) return false;
    if (until > this.clock()) return true;
    this.refused.delete(subject);
    return false;
  }

  /**
   * consume() at once, when the counter store holds every counter in memory and no window is
   * used up: the D20 headers. Otherwise counts nothing and returns undefined: call consume().
   */
  consumeNow(subject: string, limits: Limits): Record<string, string> | undefined {
    const counted = this.incrementNow(subject, limits);
    if (!counted) return undefined;
    const { plan, used, now } = counted;
    const windows = plan.windows;
    const states = [];
    for (let i = 0; i < windows.length; i++) {
      const w = windows[i] as WindowPlan;
      states.push(windowState(w, limits[w.kind], used[i] as number, now));
    }
    return quotaHeaders(states, plan.policy);
  }

  /** consumeNow()'s count, as counted windows and their policy (admit's receipt); undefined as consumeNow. */
  private countNow(subject: string, limits: Limits): { windows: Counted[]; policy: string } | undefined {
    const counted = this.incrementNow(subject, limits);
    if (!counted) return undefined;
    const { plan, used, now } = counted;
    const windows = plan.windows.map((w, i) =>
      Object.assign(windowState(w, limits[w.kind], used[i] as number, now), {
        key: (plan.counters[i] as { key: string }).key,
        ttlSeconds: counterTtlSeconds(w, now),
      }),
    );
    return { windows, policy: plan.policy };
  }

  /** The count of consumeNow(): the plan counted in and the new counts; undefined as consumeNow. */
  private incrementNow(
    subject: string,
    limits: Limits,
  ): { plan: SubjectPlan; used: number[]; now: number } | undefined {
    if (!this.counters.incrementAllNow) return undefined;
    const now = this.clock();
    const plan = this.planOf(subject, limits, now);
    const used = this.counters.incrementAllNow(plan.counters);
    if (!used) return undefined;
    if (this.refused.size > 0) this.refused.delete(subject);
    return { plan, used, now };
  }

  private planOf(subject: string, limits: Limits, now: number): SubjectPlan {
    const kept = this.plans.get(subject);
    if (
      kept &&
      now >= kept.hourStart &&
      now < kept.hourEnd &&
      kept.limits.hourly === limits.hourly &&
      kept.limits.daily === limits.daily &&
      kept.limits.monthly === limits.monthly
    ) {
      return kept;
    }
    const hour = hourAt(now);
    const windows = hour.windows.filter((w) => limits[w.kind] > 0);
    const plan: SubjectPlan = {
      hourStart: hour.hourStart,
      hourEnd: hour.hourEnd,
      limits: { hourly: limits.hourly, daily: limits.daily, monthly: limits.monthly },
      windows,
      counters: windows.map((w) => ({ key: counterKey(subject, w), limit: limits[w.kind] })),
      policy: policyHeader(
        windows.map((w) => ({ kind: w.kind, limit: limits[w.kind], lengthSeconds: w.lengthSeconds })),
      ),
    };
    if (this.plans.size >= MAX_PLANS) this.plans.clear();
    this.plans.set(subject, plan);
    return plan;
  }

  /** Used and left in each window, without counting anything (for `fastpaste keys usage`). */
  async usage(subject: string, limits: Limits): Promise<WindowState[]> {
    const now = this.clock();
    return Promise.all(
      windowsAt(now).map(async (w): Promise<WindowState> => {
        const used = await this.counters.read(counterKey(subject, w));
        const limit = limits[w.kind];
        return {
          kind: w.kind,
          limit,
          used,
          remaining: limit === 0 ? Number.POSITIVE_INFINITY : Math.max(0, limit - used),
          resetSeconds: Math.ceil((w.end - now) / 1000),
        };
      }),
    );
  }
}
