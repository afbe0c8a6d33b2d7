/**
 * The expiry sweep of a SQLite file, run by a thread of its own when there is a backlog (a
 * million pastes that expired together), so that the event loop never holds a batch.
 *
 * Each deleted paste rewrites about one page of the random-id index, which then goes through the
 * log and a checkpoint: about 20 µs of work a paste. Run on the event loop, in batches a quarter
 * of a millisecond long at a twentieth of the server's time under load, the sweep cost requests
 * 10 to 13% of their rate and their p99 a millisecond in half the runs (BENCHMARKS.md). Here a
 * thread with its own connection deletes in transactions of about BATCH_TARGET_MS, scheduled
 * SCHED_IDLE: it runs when the server's core would otherwise be idle, and a waking server takes
 * the core back at once (at niceness 19 the scheduler let the thread finish its slice first,
 * and /raw's p99 went from 4–5 to 5–7 ms; SCHED_IDLE kept it at 5, measured with 1,000,000
 * expired pastes under full load). The file's writers take turns through the WriteGate
 * (write-gate.ts): the thread starts no batch while the server's connection writes, and the
 * server waits at most for the batch under way. While the sweep runs the checkpoint thread
 * (wal-checkpointer.ts) copies the log back at idle priority too: the log is almost all the
 * sweep's then, and copied back at niceness 5 it took the server's core from requests as the
 * sweep itself no longer did (1,000,000 expired pastes under full /raw load: /raw at 95–96% of
 * its rate and the p99 kept in two runs of three; at idle priority 100% and p99 4 against 5 ms
 * in one run, the sweep 15 minutes, and 91%, 8 against 7 ms in the next, on a slower machine,
 * 194 s). Idle, the million go in 30 s.
 *
 * Past four times the size at which the log is started again the thread writes nothing until it
 * has been (whenLogRestarted): its batches broke the restart, and the log of a million-row
 * sweep under /raw load grew to 1.8 GB.
 *
 * The rows go in order of expiry, as on the event loop; each batch is a transaction of its own,
 * so a crash or a stop loses nothing but the batch under way (rolled back). Rows that expire
 * after the sweep began wait for the next sweep.
 */
import { closeSync, openSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { SCHEDULE_SOURCE } from './thread-priority.js';
import { RESTART_PAGES, type WalCheckpointer } from './wal-checkpointer.js';
import { SERVER_WRITING, STOP_ASKED, THREAD_WRITING, WAIT_LIMIT_MS, type WriteGate } from './write-gate.js';

/** How long a batch may take (the longest a write of the server's waits for it). */
const BATCH_TARGET_MS = 1;
/** Batch sizes, in rows. */
const MIN_BATCH = 10;
const MAX_BATCH = 1000;
/**
 * The longest the log may grow while the thread sweeps, in restart sizes (256 MB): past it the
 * thread writes nothing until the log has started again (see the thread's whenLogRestarted).
 * Not at the restart size itself: under full load a wait there, for a restart that comes only
 * with the server's next commit, made the sweep of a million rows a third slower.
 */
const LOG_CAP_RESTARTS = 4;
/** How long the thread waits for the log to start again before it goes on writing as long. */
const RESTART_WAIT_MS = 5000;
/** How long the log must stay unchanged (nothing else writing) before the thread restarts it itself. */
const QUIET_MS = 20;

/** The thread's code (CommonJS, no TypeScript loader needed in the thread). */
const THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const { gate, now, sql } = workerData;
const flags = new Int32Array(gate);
const { THREAD_WRITING, SERVER_WRITING, STOP_ASKED } = workerData.flagIndexes;
${SCHEDULE_SOURCE}
const fs = require('node:fs');
let removed = 0;
let db = null;
// The -shm file, opened by the main thread (ExpirySweeper.logHeader), read for the log's length.
const shm = workerData.logHeaderFd;
try {
  schedule(true);
  db = new Database(workerData.file);
  db.pragma('busy_timeout = ' + workerData.waitLimitMs);
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('cache_size = -4000');
  // The checkpoints are the checkpoint thread's: one run inside this thread's commit would hold
  // the gate through the copying and its fsyncs.
  db.pragma('wal_autocheckpoint = 0');
  const forget = db.prepare(sql.forget);
  const remove = db.prepare(sql.remove);
  const batchOf = db.transaction((size) => {
    forget.run(now, size);
    return remove.run(now, size).changes;
  }).immediate;
  let size = workerData.firstBatch;
  // The cheapest a row has been (ms): batches are sized by it, so that one slowed down by the
  // server taking the core (this thread is the one that waits) does not shrink the next.
  let perRow = Infinity;
  // The log's length in pages: mxFrame of the wal-index header at the start of the -shm file
  // (native byte order; https://www.sqlite.org/walformat.html), read with one pread.
  const header = Buffer.alloc(20);
  const littleEndian = require('node:os').endianness() === 'LE';
  function logPages() {
    if (shm < 0) return 0;
    try {
      if (fs.readSync(shm, header, 0, 20, 0) < 20) return 0;
      return littleEndian ? header.readUInt32LE(16) : header.readUInt32BE(16);
    } catch {
      return 0;
    }
  }
  const sleep = (ms) => Atomics.wait(flags, STOP_ASKED, 0, ms);
  // Only a writer that finds the log all copied back can start it again from its beginning.
  // Under load the server's connection does that past its restart size (wal-checkpointer.ts):
  // it copies the rest inside one commit and restarts the log at the next, but a batch of this
  // thread's in between is the first write after the copy instead, and with the checkpoint
  // thread at idle priority the log went on growing (to 1.8 GB of a million-row sweep under
  // /raw load, whose view counts are written once a second). So past logCapPages this thread
  // writes nothing until the log has started again. Should nothing else write meanwhile (the
  // server idle), it copies the log back itself, outside the gate (a PASSIVE checkpoint takes
  // no lock a writer waits for; refused at once while the checkpoint thread is mid-pass), and
  // its next batch starts the log again. At most about restartWaitMs (a reader holding pages
  // back, the restart not coming), then it writes as long again before it waits again.
  let writeUntil = 0;
  function whenLogRestarted() {
    if (performance.now() < writeUntil) return;
    let pages = logPages();
    if (pages < workerData.logCapPages) return;
    let quietSince = performance.now();
    const deadline = quietSince + workerData.restartWaitMs;
    while (performance.now() < deadline) {
      if (Atomics.load(flags, STOP_ASKED) === 1) return;
      sleep(2);
      const current = logPages();
      if (current < workerData.logCapPages) return;
      if (current !== pages) quietSince = performance.now();
      pages = current;
      if (performance.now() - quietSince >= workerData.quietMs) {
        try {
          const [result] = db.pragma('wal_checkpoint(PASSIVE)');
          if (result.busy === 0 && result.checkpointed === result.log) return;
        } catch {}
      }
    }
    writeUntil = performance.now() + workerData.restartWaitMs;
  }
  parentPort.postMessage({ ready: true });
  for (;;) {
    whenLogRestarted();
    if (Atomics.load(flags, STOP_ASKED) === 1) break;
    // The server's connection writes or has a transaction open: wait until it is done, however
    // long (a batch beside its transaction could break it), looking at the stop flag each second.
    if (Atomics.load(flags, SERVER_WRITING) === 1) {
      Atomics.wait(flags, SERVER_WRITING, 1, 1000);
      continue;
    }
    Atomics.store(flags, THREAD_WRITING, 1);
    // Both raised their flags at once: the server goes first.
    if (Atomics.load(flags, SERVER_WRITING) === 1) {
      Atomics.store(flags, THREAD_WRITING, 0);
      Atomics.notify(flags, THREAD_WRITING);
      continue;
    }
    let count;
    const started = performance.now();
    try {
      count = batchOf(size);
    } finally {
      Atomics.store(flags, THREAD_WRITING, 0);
      Atomics.notify(flags, THREAD_WRITING);
    }
    const took = performance.now() - started;
    removed += count;
    if (count < size) break;
    perRow = Math.min(perRow * 1.05, took / count);
    size = Math.max(workerData.minBatch, Math.min(workerData.maxBatch, Math.floor(workerData.targetMs / perRow)));
  }
  db.close();
  parentPort.postMessage({ removed });
} catch (err) {
  try {
    if (db && db.open) db.close();
  } catch {}
  parentPort.postMessage({ removed, error: String(err && err.message ? err.message : err) });
}
`;

export interface SweepStatements {
  /** Deletes the view counts of the next batch of expired pastes; parameters (now, batch). */
  forget: string;
  /** Deletes the next batch of expired pastes; parameters (now, batch). */
  remove: string;
}

export class ExpirySweeper {
  private running: Worker | null = null;
  private stopping = false;
  private ready: Promise<void> = Promise.resolve();
  /** See logHeader(). */
  private logHeaderFd = -1;

  constructor(
    private readonly file: string,
    private readonly gate: WriteGate,
    /** The checkpoint thread, at idle priority while a sweep runs (the log is the sweep's then). */
    private readonly checkpointer: Pick<WalCheckpointer, 'atIdlePriority' | 'atNormalPriority'> | null = null,
    /** Pages of log past which it is started again (RESTART_PAGES; tests go lower). */
    private readonly restartPages = RESTART_PAGES,
  ) {}

  /**
   * Deletes, in the thread, every paste expired at `now` (the count removed). One at a time: the
   * caller (PasteService.sweepExpired) starts no second sweep beside the first.
   */
  sweep(sql: SweepStatements, now: number, firstBatch: number): Promise<number> {
    if (this.running) return Promise.reject(new Error('an expiry sweep is already running'));
    if (this.stopping) return Promise.resolve(0);
    const flags = new Int32Array(this.gate.buffer);
    Atomics.store(flags, STOP_ASKED, 0);
    const worker = new Worker(THREAD, {
      eval: true,
      execArgv: [],
      workerData: {
        driver: createRequire(import.meta.url).resolve('better-sqlite3'),
        file: this.file,
        gate: this.gate.buffer,
        now,
        sql,
        firstBatch: Math.max(MIN_BATCH, Math.min(MAX_BATCH, firstBatch)),
        minBatch: MIN_BATCH,
        maxBatch: MAX_BATCH,
        targetMs: BATCH_TARGET_MS,
        flagIndexes: { THREAD_WRITING, SERVER_WRITING, STOP_ASKED },
        waitLimitMs: WAIT_LIMIT_MS,
        logCapPages: this.restartPages * LOG_CAP_RESTARTS,
        logHeaderFd: this.logHeader(),
        restartWaitMs: RESTART_WAIT_MS,
        quietMs: QUIET_MS,
      },
    });
    // Not unref'd: whoever awaits the sweep keeps the process up until it ends (storage.close()
    // stops it sooner).
    this.running = worker;
    this.checkpointer?.atIdlePriority();
    let ready = () => {};
    this.ready = new Promise((resolve) => {
      ready = resolve;
    });
    return new Promise<number>((resolve, reject) => {
      let answer: { removed: number; error?: string } | null = null;
      worker.on('message', (message: { ready?: true; removed: number; error?: string }) => {
        if (message.ready) ready();
        else answer = message;
      });
      worker.on('error', (err) => {
        answer = { removed: answer?.removed ?? 0, error: err.message };
      });
      worker.on('exit', () => {
        ready();
        this.running = null;
        this.checkpointer?.atNormalPriority();
        if (answer && !answer.error) resolve(answer.removed);
        else reject(new Error(`expiry sweep thread: ${answer?.error ?? 'exited without an answer'}`));
      });
    });
  }

  /** Settles once the thread of the sweep under way has prepared its statements (tests). */
  whenReady(): Promise<void> {
    return this.ready;
  }

  /**
   * A descriptor of the -shm file for the threads to read the log's length from, opened once and
   * kept until closeLogHeader(): SQLite locks that file with POSIX locks, and closing any
   * descriptor of a file drops every such lock the process holds on it, the server connection's
   * included (https://www.sqlite.org/howtocorrupt.html, 2.2). -1 when it cannot be opened: the
   * thread then sweeps without the cap on the log.
   */
  private logHeader(): number {
    if (this.logHeaderFd < 0) {
      try {
        this.logHeaderFd = openSync(`${realpathSync(this.file)}-shm`, 'r');
      } catch {
        this.logHeaderFd = -1;
      }
    }
    return this.logHeaderFd;
  }

  /** Closes the -shm descriptor; only once every connection to the file is closed (Storage.close). */
  closeLogHeader(): void {
    if (this.logHeaderFd >= 0) closeSync(this.logHeaderFd);
    this.logHeaderFd = -1;
  }

  /** Asks a sweep under way to stop after its batch (it commits or rolls back) and waits for it. */
  async stop(): Promise<void> {
    this.stopping = true;
    const worker = this.running;
    if (!worker) return;
    const exited = new Promise((resolve) => worker.once('exit', resolve));
    const flags = new Int32Array(this.gate.buffer);
    Atomics.store(flags, STOP_ASKED, 1);
    Atomics.notify(flags, SERVER_WRITING); // the thread may be waiting on the server's flag
    Atomics.notify(flags, STOP_ASKED); // or for the log to start again
    await exited;
  }
}
