/**
 * The expiry sweep's thread on a SQLite file (src/storage/expiry-sweeper.ts) and the turns it
 * takes with the server's connection at writing (src/storage/write-gate.ts): a backlog swept
 * off the event loop, the server's transactions and writes never broken or sent to SQLite's busy
 * handler by the thread's commits, a stop that loses nothing, a failure that is reported.
 * Each test opens a SQLite file of its own, whichever database the rest of the suite runs on.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { PasteService } from '../src/pastes/paste-service.js';
import { openStorage, type Storage } from '../src/storage/database.js';
import { migrateToLatest } from '../src/storage/migrations.js';
import { expirySweepSql, PasteRepository } from '../src/storage/paste-repository.js';
import { plainPaste } from './helpers.js';

const NOW = 1_800_000_000_000;
const dirs: string[] = [];
after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

interface Fixture {
  file: string;
  storage: Storage;
  repository: PasteRepository;
  service: PasteService;
}

/** A served SQLite file (with its threads) holding `expired` expired pastes and `live` live ones. */
async function fixture(expired: number, live = 100, contentBytes = 100, walRestartPages?: number): Promise<Fixture> {
  const dir = mkdtempSync(join(tmpdir(), 'fastpaste-sweeper-'));
  dirs.push(dir);
  const file = join(dir, 'fastpaste.db');
  const seeding = openStorage(`sqlite:${file}`);
  await migrateToLatest(seeding);
  const sqlite = seeding.sqlite as Database.Database;
  const insert = sqlite.prepare(
    `INSERT INTO pastes (id, content, content_type, file_size, sha256, created_at, expires_at, view_count,
       burn_after_read, encrypted, downloadable, is_public, source)
     VALUES (?, ?, 'text', ?, ?, ?, ?, 0, 0, 0, 1, 0, 'api')`,
  );
  const content = 'x'.repeat(contentBytes);
  sqlite.transaction(() => {
    for (let i = 0; i < expired; i++)
      insert.run(`E${i}`, content, contentBytes, 'a'.repeat(64), NOW - 10_000, NOW - 1 - i);
    for (let i = 0; i < live; i++) insert.run(`L${i}`, content, contentBytes, 'a'.repeat(64), NOW - 10_000, null);
  })();
  await seeding.close();
  const storage = openStorage(`sqlite:${file}`, {
    backgroundCheckpoints: true,
    ...(walRestartPages !== undefined ? { walRestartPages } : {}),
  });
  const repository = new PasteRepository(storage.db, true, storage.sqlite, null, storage.expirySweeper ?? null);
  return { file, storage, repository, service: new PasteService(repository, () => NOW) };
}

/** Counts rows from a connection of its own (what is committed, not what a transaction sees). */
function committed(file: string, where: string): number {
  const db = new Database(file, { readonly: true });
  try {
    return (db.prepare(`SELECT COUNT(*) AS n FROM pastes WHERE ${where}`).get() as { n: number }).n;
  } finally {
    db.close();
  }
}

/** Polls every 10 ms until `condition` holds or `ms` have passed. */
async function until(condition: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await sleep(10);
}

/** Threads of this process scheduled SCHED_IDLE (policy 5, the 41st field of their stat). */
function idleThreads(): number {
  let idle = 0;
  for (const task of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${task}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).split(' ')[38] === '5') idle++;
    } catch {} // a thread gone meanwhile
  }
  return idle;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the expiry sweep of a SQLite file', () => {
  it('hands a backlog to its thread: the event loop runs one batch of it', async () => {
    const { file, storage, repository, service } = await fixture(20_000);
    try {
      let onLoop = 0;
      let inThread = 0;
      const deleteExpiredNow = repository.deleteExpiredNow.bind(repository);
      const deleteExpiredInThread = repository.deleteExpiredInThread.bind(repository);
      repository.deleteExpiredNow = (now, batch) => {
        onLoop++;
        return deleteExpiredNow(now, batch);
      };
      repository.deleteExpiredInThread = (now, batch) => {
        inThread++;
        return deleteExpiredInThread(now, batch);
      };
      assert.equal(await service.sweepExpired(), 20_000);
      assert.equal(onLoop, 1, 'batches of the backlog ran on the event loop');
      assert.equal(inThread, 1);
      assert.equal(committed(file, 'expires_at IS NOT NULL'), 0);
      assert.equal(committed(file, 'expires_at IS NULL'), 100, 'a live paste was swept');
      // A sweep that finds less than a batch stays on the event loop: no thread for a few rows.
      assert.equal(await service.sweepExpired(), 0);
      assert.equal(inThread, 1);
    } finally {
      await storage.close();
    }
  });

  it('runs at idle priority, and the checkpoint thread with it until the sweep ends', {
    skip: process.platform !== 'linux' && 'scheduling policies are set on Linux',
  }, async () => {
    const { storage, service } = await fixture(100_000);
    try {
      assert.equal(idleThreads(), 0);
      const sweeping = service.sweepExpired();
      await storage.expirySweeper?.whenReady();
      // The sweep's thread sets its own policy as it starts, the checkpoint thread at its next turn
      // (each runs chrt: at idle priority on a busy machine that waits for a free core, so the
      // deadlines are generous; on an idle one it takes milliseconds).
      await until(() => idleThreads() >= 2, 20_000);
      assert.equal(idleThreads(), 2, 'the sweep and the checkpoints at idle priority');
      assert.equal(await sweeping, 100_000);
      await until(() => idleThreads() === 0, 20_000);
      assert.equal(idleThreads(), 0, 'the checkpoint thread stayed at idle priority');
    } finally {
      await storage.close();
    }
  });

  it('starts the log again itself past four restart sizes when nothing else writes', async () => {
    // Nothing but the sweep writes here. The checkpoint thread copies the log back but cannot
    // start it again (only a writer can, one that finds it all copied), and the server's
    // connection, which does past walRestartPages, makes no commit: without the thread's own
    // restarts the log restarted only when a batch happened to follow a finished pass of the
    // checkpoint thread, and grew to 2,500-3,300 pages in this test (measured, five runs); with
    // them, about 330 (the restart size and a batch).
    // The thread holds the log to four restart sizes: 256 pages here.
    const restartPages = 64;
    const { file, storage, service } = await fixture(10_000, 100, 1024, restartPages);
    try {
      assert.equal(await service.sweepExpired(), 10_000);
      // The log file is written over from its beginning at each restart, never cut (below
      // journal_size_limit): its size is the most pages the log ever held, read before the
      // connections close and the last one removes it.
      const pages = statSync(`${file}-wal`).size / (4096 + 24);
      assert.ok(pages < 1000, `the log grew to ${Math.round(pages)} pages`);
      assert.equal(committed(file, 'expires_at IS NOT NULL'), 0);
    } finally {
      await storage.close();
    }
  });

  it("leaves the server connection's locks on the -shm file in place", {
    skip: process.platform !== 'linux' && 'POSIX locks are read from /proc/locks',
  }, async () => {
    // The thread reads the log's length from the -shm file. Closing any descriptor of a file
    // drops every POSIX lock the process holds on it: had the thread opened and closed one of
    // its own, the server's connection would have lost its lock there, and another process
    // could rebuild the wal-index under it.
    const { file, storage, service } = await fixture(5_000);
    try {
      const inode = statSync(`${file}-shm`).ino;
      const locks = () =>
        readFileSync('/proc/locks', 'utf8')
          .split('\n')
          .filter((line) => line.includes(` ${process.pid} `) && line.includes(`:${inode} `)).length;
      const before = locks();
      assert.ok(before >= 1, 'the connection holds no lock on the -shm file to begin with');
      assert.equal(await service.sweepExpired(), 5_000);
      // The checkpoint thread (the same process) may hold locks of its own there for a moment:
      // up to 2 s for those to end. A dropped lock of the connection's stays dropped.
      let after = locks();
      for (let i = 0; i < 40 && after > before; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        after = locks();
      }
      assert.equal(after, before, after < before ? 'a lock on the -shm file was dropped' : 'locks held for 2 s more');
    } finally {
      await storage.close();
    }
  });

  it("waits for a transaction of the server's that reads and then writes", async () => {
    const { file, storage, service } = await fixture(5_000);
    try {
      let sweeping: Promise<number> | null = null;
      await storage.db.transaction().execute(async (trx) => {
        await sql`SELECT COUNT(*) AS n FROM pastes`.execute(trx);
        // The sweep starts while the transaction has read: its first batch runs on the event loop,
        // which would join this transaction, so the repository goes straight to the thread.
        sweeping = storage.expirySweeper?.sweep(expirySweepSql(storage.db), NOW, 50) ?? null;
        // The thread is up and would be deleting by now, were it not waiting for this transaction.
        await storage.expirySweeper?.whenReady();
        await sleep(200);
        assert.equal(committed(file, 'expires_at IS NOT NULL'), 5_000, 'the thread deleted during the transaction');
        // Had the thread committed since the read above, this would fail with SQLITE_BUSY_SNAPSHOT.
        await trx.updateTable('pastes').set({ title: 'kept' }).where('id', '=', 'L1').execute();
      });
      assert.equal(await sweeping, 5_000);
      assert.equal(committed(file, "title = 'kept'"), 1);
      assert.equal(await service.sweepExpired(), 0);
    } finally {
      await storage.close();
    }
  });

  it("never sends the server's writes to SQLite's busy handler while it sweeps", async () => {
    // Rows of 8 KB: the sweep lasts long enough for many writes to meet its batches.
    const { file, storage, repository, service } = await fixture(20_000, 10, 8192);
    try {
      // With no busy handler, a write that met the thread's transaction would fail at once.
      storage.sqlite?.pragma('busy_timeout = 0');
      let done = false;
      const sweeping = service.sweepExpired().finally(() => {
        done = true;
      });
      let written = 0;
      let duringSweep = 0;
      while (!done) {
        assert.equal(await repository.insertIfFree(plainPaste(`N${written}`, 'new', NOW)), true);
        written++;
        if (!done) duringSweep++;
        await sleep(1);
      }
      assert.equal(await sweeping, 20_000);
      assert.ok(duringSweep >= 20, `only ${duringSweep} writes met the sweep`);
      assert.equal(committed(file, "id LIKE 'N%'"), written);
      assert.equal(committed(file, 'expires_at IS NOT NULL'), 0);
    } finally {
      await storage.close();
    }
  });

  it('stops after its batch under way when the storage closes, losing nothing', async () => {
    const { file, storage, service } = await fixture(100_000, 100, 1024);
    const sweeping = service.sweepExpired();
    // Closed once the thread has committed a batch of its own (its start and its idle priority
    // take a time of their own on a busy machine: a fixed wait closed before it once in CI).
    await until(() => committed(file, 'expires_at IS NOT NULL') <= 100_000 - 100, 20_000);
    await storage.close();
    const removed = await sweeping;
    // The first batch (50) runs on the event loop; the thread removed some more, not all.
    assert.ok(removed > 50 && removed < 100_000, `${removed} removed before the stop`);
    assert.equal(committed(file, 'expires_at IS NOT NULL'), 100_000 - removed);
    assert.equal(committed(file, 'expires_at IS NULL'), 100);
    const db = new Database(file, { readonly: true });
    try {
      assert.equal(db.pragma('integrity_check', { simple: true }), 'ok');
    } finally {
      db.close();
    }
  });

  it('reports a failure of its thread, and lets the server write at once after it', async () => {
    const { storage } = await fixture(1000);
    try {
      // Prepared fine, failing in the batch's transaction (malformed JSON), with the thread's flag up.
      const failing = { forget: "DELETE FROM paste_views WHERE paste_id IN (SELECT json('x' || ?) LIMIT ?)" };
      await assert.rejects(
        storage.expirySweeper?.sweep({ ...failing, remove: failing.forget }, NOW, 50) ?? Promise.resolve(),
        /expiry sweep thread: malformed JSON/,
      );
      // Neither the gate nor SQLite's lock is left held: with no busy handler the write goes
      // through, and without waiting the 5 s after which the server gives up on the gate.
      storage.sqlite?.pragma('busy_timeout = 0');
      const started = performance.now();
      await storage.db.insertInto('pastes').values(rowOf('after')).execute();
      assert.ok(performance.now() - started < 1000, 'the write waited for a flag left up');
    } finally {
      await storage.close();
    }
  });

  it('holds the gate for a transaction of the server, and only as long as it is open', async () => {
    const { storage } = await fixture(0);
    try {
      const gate = storage.writeGate;
      assert.ok(gate);
      await storage.db.insertInto('pastes').values(rowOf('one')).execute();
      assert.equal(gate.holding, false, 'a write outside a transaction kept the gate');
      await storage.db.transaction().execute(async (trx) => {
        await sql`SELECT 1`.execute(trx);
        assert.equal(gate.holding, true, 'an open transaction did not hold the gate');
        await trx.insertInto('pastes').values(rowOf('two')).execute();
      });
      assert.equal(gate.holding, false, 'a committed transaction kept the gate');
      await assert.rejects(
        storage.db.transaction().execute(async (trx) => {
          await trx.insertInto('pastes').values(rowOf('three')).execute();
          throw new Error('rolled back');
        }),
      );
      assert.equal(gate.holding, false, 'a rolled back transaction kept the gate');
      // A read alone takes no part.
      await storage.db.selectFrom('pastes').select('id').execute();
      assert.equal(gate.holding, false);
    } finally {
      await storage.close();
    }
  });
});

function rowOf(id: string) {
  return {
    id,
    content: 'x',
    content_type: 'text' as const,
    file_size: 1,
    sha256: 'a'.repeat(64),
    created_at: NOW,
    expires_at: null,
    view_count: 0,
    burn_after_read: 0,
    encrypted: 0,
    downloadable: 1,
    is_public: 0,
    source: 'api' as const,
  };
}
