/**
 * Shared parts of the benchmarks: a fastpaste server in its own process (pinned to core 0 with
 * taskset where it exists) on a fresh database, its peak RSS, and autocannon runs from this
 * process (pinned to the other core). Everything talks to 127.0.0.1 only and is bounded in time.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';

const ROOT = new URL('..', import.meta.url).pathname;

/**
 * The node flags `npm start` runs the server with (package.json's start script), so that the
 * benchmarks measure the server as it is started.
 */
export const SERVER_NODE_FLAGS: string[] = (() => {
  const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts
    .start;
  const words = start.split(/\s+/);
  return words.slice(words.indexOf('node') + 1, words.indexOf('bin/fastpaste.js'));
})();

/** `--name value` from the command line, or the fallback. */
export function option(name: string, fallback: string): string {
  const args = process.argv.slice(2);
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? (args[i + 1] ?? fallback) : fallback;
}

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
/** A random 10-character id, as paste ids are. */
export const randomId = (): string => Array.from(randomBytes(10), (b) => ALPHABET[b % 62]).join('');
/** 1 KB of text, the size of the benchmark's pastes. */
export const KB = `${'x'.repeat(1023)}\n`;
/** One of the ids, at random. */
export const pick = (ids: string[]): string => ids[Math.floor(Math.random() * ids.length)] as string;

export function hasTaskset(): boolean {
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Moves this process (the load generator) to core 1, away from the server on core 0. */
export function pinSelf(): void {
  if (hasTaskset()) execFileSync('taskset', ['-pc', '1', String(process.pid)], { stdio: 'ignore' });
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

export interface BenchServer {
  url: string;
  dir: string;
  databaseUrl: string;
  process: ChildProcess;
  /** Highest resident set size seen so far, in MB (from /proc, sampled every 100 ms). */
  peakRssMb(): number;
  resetPeak(): void;
  stop(): Promise<void>;
}

/** Runs `node bin/fastpaste.js <args>` against a database and returns its standard output. */
export function fastpasteCommand(databaseUrl: string, args: string[]): string {
  return execFileSync(process.execPath, [join(ROOT, 'bin/fastpaste.js'), ...args], {
    env: { ...process.env, DATABASE_URL: databaseUrl },
    encoding: 'utf8',
  });
}

export function createKey(databaseUrl: string, limits: { hourly: number; daily: number; monthly: number }): string {
  const out = fastpasteCommand(databaseUrl, [
    'keys',
    'create',
    '--name',
    'bench',
    '--hourly',
    String(limits.hourly),
    '--daily',
    String(limits.daily),
    '--monthly',
    String(limits.monthly),
    '--json',
  ]);
  return JSON.parse(out).key;
}

/** Starts a server on a fresh SQLite database (or the given DATABASE_URL) and waits until it answers. */
export async function startBenchServer(env: Record<string, string> = {}): Promise<BenchServer> {
  const dir = mkdtempSync(join(tmpdir(), 'fastpaste-bench-'));
  const port = await freePort();
  const databaseUrl = env.DATABASE_URL ?? `sqlite:${join(dir, 'bench.db')}`;
  const fullEnv = {
    ...process.env,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    ANON_HOURLY_LIMIT: '0',
    ...env,
    DATABASE_URL: databaseUrl,
  };
  // Migrate first so that keys can be made before the server starts.
  fastpasteCommand(databaseUrl, ['migrate']);
  // BENCH_NODE_ARGS: flags for the server's node (say --cpu-prof --cpu-prof-dir=/tmp/prof).
  const nodeArgs = [...SERVER_NODE_FLAGS, ...(process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean)];
  const args = [...nodeArgs, join(ROOT, 'bin/fastpaste.js'), 'serve'];
  const child = hasTaskset()
    ? spawn('taskset', ['-c', '0', process.execPath, ...args], { env: fullEnv, stdio: 'inherit' })
    : spawn(process.execPath, args, { env: fullEnv, stdio: 'inherit' });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const res = await fetch(`${url}/healthz`);
      if (res.ok) break;
    } catch {}
    if (Date.now() > deadline) throw new Error('server did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  const rss = watchRss(serverPid(child));
  return {
    url,
    dir,
    databaseUrl,
    process: child,
    peakRssMb: rss.peakMb,
    resetPeak: rss.reset,
    async stop() {
      rss.stop();
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RssWatch {
  /** Highest resident set size seen so far, in MB. */
  peakMb(): number;
  reset(): void;
  stop(): void;
}

/** Samples a process's resident set size from /proc every 100 ms and keeps the highest. */
export function watchRss(pid: number): RssWatch {
  let peak = 0;
  const sample = () => {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      peak = Math.max(peak, kb / 1024);
    } catch {}
  };
  const sampler = setInterval(sample, 100);
  sampler.unref();
  return {
    peakMb: () => {
      sample();
      return peak;
    },
    reset: () => {
      peak = 0;
    },
    stop: () => clearInterval(sampler),
  };
}

/** The node process itself (taskset execs it, so the pid is the same). */
function serverPid(child: ChildProcess): number {
  return child.pid ?? 0;
}

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
  /**
   * With LoadOptions.pid: the CPU time that process spent per answer (µs), and how busy its
   * core and the load generator's were (% of the measurement's wall time). A side whose core is
   * under 100% busy while the loader's is at 100% runs at the loader's pace, not its own.
   */
  cpu?: { usPerAnswer: number; busy: number; loaderBusy: number; micros: number; answers: number };
}

export interface LoadOptions {
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Builds each request's path (for random ids). */
  path?: () => string;
  connections?: number;
  seconds?: number;
  /** The process that answers (the server or a baseline), whose CPU time is then measured. */
  pid?: number;
}

/** CPU time (user + system) a process has used so far, in µs, from /proc; null without /proc. */
export function cpuMicros(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After the command name, which is in parentheses and may itself hold ") ".
    const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
    // utime and stime, the 14th and 15th fields, in clock ticks (100 a second on Linux).
    const micros = (Number(fields[11]) + Number(fields[12])) * 10_000;
    return Number.isFinite(micros) ? micros : null;
  } catch {
    return null;
  }
}

export async function load(options: LoadOptions): Promise<LoadResult> {
  const settings: autocannon.Options = {
    url: options.url,
    method: options.method ?? 'GET',
    headers: options.headers ?? {},
    ...(options.body !== undefined ? { body: options.body } : {}),
    connections: options.connections ?? 50,
    duration: options.seconds ?? 10,
  };
  if (options.path) {
    const nextPath = options.path;
    settings.requests = [{ setupRequest: (req) => ({ ...req, path: nextPath() }) }];
  }
  const serverBefore = options.pid === undefined ? null : cpuMicros(options.pid);
  const loaderBefore = process.cpuUsage();
  const started = performance.now();
  const result = await autocannon(settings);
  const wallUs = (performance.now() - started) * 1000;
  const serverAfter = options.pid === undefined ? null : cpuMicros(options.pid);
  const loader = process.cpuUsage(loaderBefore);
  const measured: LoadResult = {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
  };
  if (serverBefore !== null && serverAfter !== null && result.requests.total > 0) {
    const serverUs = serverAfter - serverBefore;
    measured.cpu = {
      usPerAnswer: serverUs / result.requests.total,
      busy: (100 * serverUs) / wallUs,
      loaderBusy: (100 * (loader.user + loader.system)) / wallUs,
      micros: serverUs,
      answers: result.requests.total,
    };
  }
  return measured;
}
