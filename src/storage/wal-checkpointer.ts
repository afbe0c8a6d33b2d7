/**
 * WAL checkpoints of the SQLite file, run by a thread of their own instead of inside a commit.
 *
 * SQLite copies the write-ahead log back into the database file (a checkpoint) from within the
 * commit that passes 1,000 pages of log, and that copy ends with an fsync: the event loop waited
 * on the disk while every request queued behind it (measured: a group commit of 40 pastes took
 * 1.8 ms with it, 0.9 ms without). Here the server's connection never checkpoints
 * (wal_autocheckpoint = 0); a worker thread with its own connection runs a PASSIVE checkpoint
 * every CHECKPOINT_INTERVAL_MS, which copies what no reader still needs without taking any lock
 * a writer waits for. Durability is unchanged: a commit is in the log before it is answered, as
 * before; a checkpoint only moves it. If the thread ever stops, the connection checkpoints
 * itself again.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';

const CHECKPOINT_INTERVAL_MS = 100;
/**
 * The thread's niceness: when the server's core is busy the checkpoints get about a tenth of it
 * (CFS weights 110 against 1024), so a large checkpoint does not stall requests; idle, all of it.
 */
const CHECKPOINT_NICENESS = 10;
/** SQLite's own default, restored when the thread is gone. */
const AUTOCHECKPOINT_PAGES = 1000;

/** The thread's code (CommonJS, no TypeScript loader needed in the thread). */
const THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file);
// Linux sets niceness per thread: this lowers the checkpoints' share of a busy core, not the
// server's. (Elsewhere it may apply to the process; there it is skipped.)
if (process.platform === 'linux') {
  try {
    require('node:os').setPriority(workerData.niceness);
  } catch {}
}
let frames = 0;
function checkpoint() {
  try {
    const [result] = db.pragma('wal_checkpoint(PASSIVE)');
    frames += result.checkpointed > 0 ? result.checkpointed : 0;
  } catch {
    // Busy or out of reach this time: the next tick tries again.
  }
}
const timer = setInterval(checkpoint, workerData.intervalMs);
parentPort.on('message', (message) => {
  if (message === 'stats') parentPort.postMessage({ frames });
  if (message === 'close') {
    clearInterval(timer);
    db.close();
    parentPort.close();
  }
});
`;

export class WalCheckpointer {
  private readonly worker: Worker;
  private stopped = false;

  constructor(
    private readonly sqlite: BetterSqlite3.Database,
    file: string,
  ) {
    this.worker = new Worker(THREAD, {
      eval: true,
      execArgv: [],
      workerData: {
        driver: createRequire(import.meta.url).resolve('better-sqlite3'),
        file,
        intervalMs: CHECKPOINT_INTERVAL_MS,
        niceness: CHECKPOINT_NICENESS,
      },
    });
    this.worker.unref();
    sqlite.pragma('wal_autocheckpoint = 0');
    this.worker.on('error', () => this.selfCheckpointing());
    this.worker.on('exit', () => this.selfCheckpointing());
  }

  /** Frames the thread has copied into the database file so far. */
  framesCheckpointed(): Promise<number> {
    this.worker.ref(); // an answer is awaited: keep the process up until it comes
    return new Promise<number>((resolve, reject) => {
      this.worker.once('message', (stats: { frames: number }) => resolve(stats.frames));
      this.worker.once('error', reject);
      this.worker.postMessage('stats');
    }).finally(() => this.worker.unref());
  }

  /** Ends the thread (before the connection closes, which then checkpoints the rest itself). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    const exited = new Promise((resolve) => this.worker.once('exit', resolve));
    this.worker.ref();
    this.worker.postMessage('close');
    await exited;
  }

  private selfCheckpointing(): void {
    this.stopped = true;
    if (this.sqlite.open) this.sqlite.pragma(`wal_autocheckpoint = ${AUTOCHECKPOINT_PAGES}`);
  }
}
