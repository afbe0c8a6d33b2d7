/**
 * WAL checkpoints of the SQLite file, run by a thread of their own instead of inside a commit.
 *
 * SQLite copies the write-ahead log back into the database file (a checkpoint) from within the
 * commit that passes 1,000 pages of log, and that copy ends with an fsync: the event loop waited
 * on the disk while every request queued behind it (measured: a group commit of 40 pastes took
 * 1.8 ms with it, 0.9 ms without). Here a worker thread with its own connection runs a PASSIVE
 * checkpoint every CHECKPOINT_INTERVAL_MS, which copies what no reader still needs without
 * taking any lock a writer waits for.
 *
 * The log must also start again from its beginning now and then, and only a writer can do that:
 * one whose transaction begins when every frame of the log has been copied. Under continuous
 * writes the thread's passes never ended at such a moment (a commit always came in between),
 * so the log never restarted: 1.1 GB after 10 s of creates, and each commit 4 times slower
 * (appending to an ever longer file: 21 µs a paste against 5). So the server's connection keeps
 * a checkpoint of its own, but only past RESTART_PAGES of log (wal_autocheckpoint), and the
 * thread then leaves it the checkpoint lock for REST_TICKS: the connection copies the frames the
 * thread has not (those of the last tick or so, when the thread keeps up), with an fsync of the
 * log and one of the database file, inside that commit, on the event loop; its next commit
 * restarts the log. That stall once per 64 MB of log is what the p99 of creates includes (7–8
 * ms under continuous creates, measured). The log then stays near RESTART_PAGES and is written
 * over in place. Durability is unchanged: a commit is in the log before it is answered, as before; a
 * checkpoint only moves it. If the thread ever stops, the connection checkpoints at SQLite's
 * own 1,000 pages again.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';
import { SCHEDULE_SOURCE } from './thread-priority.js';

const CHECKPOINT_INTERVAL_MS = 100;
/**
 * The thread's niceness (SCHED_IDLE instead while the expiry sweep's thread runs, see
 * atIdlePriority): when the server's core is busy the checkpoints get about a quarter of it
 * (CFS weights 335 against 1024), so a large checkpoint does not stall requests; idle, all of it.
 * A tenth (niceness 10) was too little under continuous creates: with RESTART_PAGES in place the
 * log still grew to 900 MB in 10 s, as the thread was mid-pass whenever the connection tried.
 */
const CHECKPOINT_NICENESS = 5;
/**
 * Pages of log past which the server's connection checkpoints itself, so that the log restarts
 * (64 MB of log; measured under continuous creates, 8,192 pages made the p99 22 ms against 8).
 */
export const RESTART_PAGES = 16_384;
/**
 * Bytes of log kept on disk after a restart: a log grown past it (a long reader held the restart
 * back) is cut back to it, a log of RESTART_PAGES is left as it is, to be written over.
 */
const LOG_BYTES_KEPT = 96 * 1024 * 1024;
/**
 * Ticks the thread skips after a pass that found the log past the restart size, so that the
 * server's connection finds the checkpoint lock free at its next commit (a PASSIVE checkpoint
 * that finds it held gives up at once, and the log would grow on).
 */
const REST_TICKS = 2;
/** Passes the thread makes between two rests at least (see the thread's code). */
const PASSES_BETWEEN_RESTS = 5;
/** SQLite's own default, restored when the thread is gone. */
const AUTOCHECKPOINT_PAGES = 1000;

/** The thread's code (CommonJS, no TypeScript loader needed in the thread). */
const THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
${SCHEDULE_SOURCE}
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
let resting = 0;
let sinceRest = Infinity;
function checkpoint() {
  if (resting > 0) {
    resting--;
    return;
  }
  try {
    const [result] = db.pragma('wal_checkpoint(PASSIVE)');
    frames += result.checkpointed > 0 ? result.checkpointed : 0;
    // Past the restart size the server's connection checkpoints at its next commit, and that
    // restarts the log; it skips its turn if this thread holds the checkpoint lock then, so this
    // thread leaves it the lock for a few ticks. Not after every pass: while a long reader holds
    // the restart back the log stays long, and the copying is this thread's to do.
    sinceRest++;
    if (result.log >= workerData.restartPages && sinceRest > workerData.passesBetweenRests) {
      resting = workerData.restTicks;
      sinceRest = 0;
    }
  } catch {
    // Busy or out of reach this time: the next tick tries again.
  }
}
const timer = setInterval(checkpoint, workerData.intervalMs);
parentPort.on('message', (message) => {
  // While the expiry sweep's thread runs, the log is almost all its own: copied back at idle
  // priority too (see ExpirySweeper), then at this thread's niceness again.
  if (message === 'idle' || message === 'normal') schedule(message === 'idle', workerData.niceness);
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
    /** See RESTART_PAGES; smaller in tests, to see restarts without writing 64 MB. */
    restartPages = RESTART_PAGES,
  ) {
    this.worker = new Worker(THREAD, {
      eval: true,
      execArgv: [],
      workerData: {
        driver: createRequire(import.meta.url).resolve('better-sqlite3'),
        file,
        intervalMs: CHECKPOINT_INTERVAL_MS,
        niceness: CHECKPOINT_NICENESS,
        restartPages,
        restTicks: REST_TICKS,
        passesBetweenRests: PASSES_BETWEEN_RESTS,
      },
    });
    this.worker.unref();
    sqlite.pragma(`wal_autocheckpoint = ${restartPages}`);
    sqlite.pragma(`journal_size_limit = ${LOG_BYTES_KEPT}`);
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

  /**
   * Runs the checkpoints at idle priority (SCHED_IDLE, Linux with chrt) until atNormalPriority():
   * while the expiry sweep's thread writes most of the log (see ExpirySweeper).
   */
  atIdlePriority(): void {
    if (!this.stopped && process.platform === 'linux') this.worker.postMessage('idle');
  }

  atNormalPriority(): void {
    if (!this.stopped && process.platform === 'linux') this.worker.postMessage('normal');
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
