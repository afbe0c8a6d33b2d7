/**
 * Paste passwords (D13): stored only as an argon2id hash. Hashing is slow on purpose, so the
 * number of hashes computed at once is capped: a burst of guesses queues instead of taking all
 * the memory and both cores, and the queue is served by client in turn, so that one client's
 * burst (of right passwords, which no guess limit stops) does not hold everyone else's behind it.
 */
import { hash, verify } from '@node-rs/argon2';

// OWASP's argon2id settings: 19 MiB, 2 passes, 1 lane.
const OPTIONS = { memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

/**
 * A counting semaphore: at most `limit` tasks run at once, the rest wait. The waiting are served
 * by who asked, one of each in turn, in the order each first came: a client with a hundred
 * checks waiting takes every other slot at most while another's single check waits, instead of
 * holding it behind all of its own.
 */
export class Semaphore {
  private running = 0;
  /** Each asker's waiting tasks; a Map keeps its keys in the order they were set (the turn). */
  private readonly waiting = new Map<string, Array<() => void>>();

  constructor(private readonly limit: number) {}

  async run<T>(who: string, task: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) {
      await new Promise<void>((resolve) => {
        const mine = this.waiting.get(who);
        if (mine) mine.push(resolve);
        else this.waiting.set(who, [resolve]);
      });
    } else {
      this.running++;
    }
    try {
      return await task();
    } finally {
      this.next();
    }
  }

  /** Hands the slot to the first asker in turn, who goes to the back of the turn if more wait. */
  private next(): void {
    const first = this.waiting.entries().next();
    if (first.done) {
      this.running--;
      return;
    }
    const [who, theirs] = first.value;
    this.waiting.delete(who);
    const start = theirs.shift() as () => void;
    if (theirs.length > 0) this.waiting.set(who, theirs);
    start();
  }
}

const hashing = new Semaphore(2);

/** `who`: the client it is done for (its address, or its key), whose hashes take turns with others'. */
export function hashPassword(password: string, who: string): Promise<string> {
  return hashing.run(who, () => hash(password, OPTIONS));
}

export function verifyPassword(passwordHash: string, password: string, who: string): Promise<boolean> {
  return hashing.run(who, async () => {
    try {
      return await verify(passwordHash, password);
    } catch {
      return false;
    }
  });
}
