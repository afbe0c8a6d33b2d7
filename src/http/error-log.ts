/**
 * The log lines of error answers (error-presenter.ts says what each answer is). Our own faults
 * (500s) are logged one line each: the answer names its request, whose line has the detail. What
 * the environment does (storage full or refusing writes, a backend that does not answer) is the
 * same failure for every request while it lasts: the first of a kind is logged whole, the rest of
 * its window are counted, and one line at the window's end says how many there were. A backend
 * down under thousands of requests a second writes a line every WINDOW_MS, not thousands.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { AppError } from '../errors.js';
import { isStorageFull, isStorageRefusingWrites } from '../storage/unavailable.js';

type Log = Pick<FastifyBaseLogger, 'error' | 'warn'>;

/** How long the lines of one kind of environmental failure are counted rather than written. */
export const WINDOW_MS = 10_000;

interface Window {
  level: 'error' | 'warn';
  msg: string;
  code: string | undefined;
  left: number;
  timer: NodeJS.Timeout;
}

export class ErrorLog {
  private readonly windows = new Map<string, Window>();

  /** `log` writes the windows' counts; each answer's own line goes to the log it is given. */
  constructor(
    private readonly log: Log | undefined,
    private readonly windowMs = WINDOW_MS,
  ) {}

  /** Logs what an error answer does not say, or counts it while its kind's window is open. */
  answered(
    log: Log,
    thrown: unknown,
    answered: { error: AppError; unexpected: boolean },
    context: Record<string, unknown> = {},
  ): void {
    if (answered.unexpected) {
      log.error({ ...context, err: thrown }, 'unexpected error');
      return;
    }
    let level: Window['level'];
    let msg: string;
    if (isStorageFull(thrown)) [level, msg] = ['error', 'storage full'];
    else if (isStorageRefusingWrites(thrown)) [level, msg] = ['error', 'storage refuses writes'];
    else if (answered.error.code === 'service_unavailable') [level, msg] = ['warn', 'backend unavailable'];
    else return;
    const code = (thrown as { code?: unknown } | null)?.code;
    const codeText = typeof code === 'string' ? code : undefined;
    const kind = `${msg}\u0000${codeText ?? ''}`;
    const open = this.windows.get(kind);
    if (open) {
      open.left++;
      return;
    }
    log[level]({ ...context, err: thrown }, msg);
    const timer = setTimeout(() => this.close(kind), this.windowMs);
    timer.unref();
    this.windows.set(kind, { level, msg, code: codeText, left: 0, timer });
  }

  /** Writes the counts of the windows still open (the server is closing). */
  flush(): void {
    for (const kind of [...this.windows.keys()]) this.close(kind);
  }

  private close(kind: string): void {
    const window = this.windows.get(kind);
    if (!window) return;
    this.windows.delete(kind);
    clearTimeout(window.timer);
    if (window.left === 0 || !this.log) return;
    this.log[window.level](
      { alsoFailed: window.left, ...(window.code ? { code: window.code } : {}), windowMs: this.windowMs },
      `${window.msg}: ${window.left} more like it not logged`,
    );
  }
}

/**
 * At most one line of a kind every `intervalMs`, the next one written telling how many were left
 * out before it: for a line every request or connection would write while a condition lasts
 * (the fast lane's failures, connections refused past the cap).
 */
export class LineThrottle {
  private loggedAt = Number.NEGATIVE_INFINITY;
  private leftOut = 0;

  constructor(private readonly intervalMs: number) {}

  /** The lines left out since the last one written when this one is to be written; else null (counted). */
  admit(): number | null {
    const now = performance.now();
    if (now - this.loggedAt < this.intervalMs) {
      this.leftOut++;
      return null;
    }
    const leftOut = this.leftOut;
    this.loggedAt = now;
    this.leftOut = 0;
    return leftOut;
  }
}
