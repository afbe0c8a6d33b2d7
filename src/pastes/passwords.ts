/**
 * Paste passwords (D13): stored only as an argon2id hash. Hashing is slow on purpose, so the
 * number of hashes computed at once is capped: a burst of guesses queues instead of taking all
 * the memory and both cores.
 */
import { hash, verify } from '@node-rs/argon2';

// OWASP's argon2id settings: 19 MiB, 2 passes, 1 lane.
const OPTIONS = { memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

/** A counting semaphore: at most `limit` tasks run at once, the rest wait in order. */
export class Semaphore {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) {
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running++;
    }
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }
}

const hashing = new Semaphore(2);

export function hashPassword(password: string): Promise<string> {
  return hashing.run(() => hash(password, OPTIONS));
}

export function verifyPassword(passwordHash: string, password: string): Promise<boolean> {
  return hashing.run(async () => {
    try {
      return await verify(passwordHash, password);
    } catch {
      return false;
    }
  });
}
