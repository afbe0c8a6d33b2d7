/**
 * Crash safety (issue 7): the real server, killed with SIGKILL five times in the middle of many
 * concurrent creates (JSON with a key, raw quick-creates without one, 3 bytes to 256 KB): after
 * each kill the database passes its integrity check (SQLite: `PRAGMA integrity_check` on the
 * file before the restart; PostgreSQL: every row's content matches its sha256, and amcheck when
 * available), every paste that got a 201 is in it with the sha256 sent, and after the restart
 * each reads back over HTTP (/raw, and the API for keyed ones) with that sha256; the list's total
 * matches the rows. The loop itself is test/crash-loop.ts, which bench/soak.ts runs longer.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runCrashLoop } from './crash-loop.js';
import { onPostgres } from './helpers.js';

describe('crash safety', () => {
  it(`every 201 survives five SIGKILLs under concurrent creates (${onPostgres ? 'PostgreSQL' : 'SQLite'})`, {
    timeout: 120_000,
  }, async (t) => {
    const result = await runCrashLoop({ kills: 5, concurrency: 16, acksBeforeKill: [40, 120] });
    t.diagnostic(
      `${result.acknowledged} of ${result.createsSent} creates acknowledged, ${result.cutByKill} cut by kills, ` +
        `${result.rowsAtEnd} rows, ${result.pasteReads} reads checked, ${(result.durationMs / 1000).toFixed(1)} s`,
    );
    assert.deepEqual(result.errors, []);
    assert.equal(result.killsSurvived, 5, 'every kill survived');
    assert.equal(result.integrityChecks, 5);
    assert.ok(result.acknowledged >= 200, `at least 200 creates acknowledged (${result.acknowledged})`);
    assert.equal(result.pastesChecked, result.acknowledged, 'every acknowledged paste read back');
    assert.ok(result.rowsAtEnd >= result.acknowledged);
    assert.ok(result.cutByKill > 0, 'the kills landed among creates in flight');
  });
});
