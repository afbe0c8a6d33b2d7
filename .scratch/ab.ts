// A/B: two fastpaste trees, same seeded data, alternated under the same by-id load; CPU µs/request from /proc.
import { spawn, execFileSync } from 'node:child_process';
import { readFileSync, mkdtempSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { KB, freePort, load, pick, pinSelf, randomId } from '../bench/bench-kit.js';

const trees = (process.env.TREES ?? '/work/ab-base,/work/main').split(',');
const ROUNDS = Number(process.env.ROUNDS ?? 4);
const SECS = Number(process.env.SECS ?? 5);
const SCEN = process.env.SCEN ?? 'api';
const N = 100_000;
pinSelf();
const dir = mkdtempSync(join(tmpdir(), 'ab-'));
const seedFile = join(dir, 'seed.db');
const run = (tree: string, url: string, args: string[]) =>
  execFileSync(process.execPath, [join(tree, 'bin/fastpaste.js'), ...args], { env: { ...process.env, DATABASE_URL: url }, encoding: 'utf8' });
run(trees[0] as string, `sqlite:${seedFile}`, ['migrate']);
const big = 1_000_000_000;
const key = JSON.parse(run(trees[0] as string, `sqlite:${seedFile}`, ['keys', 'create', '--name', 'b', '--hourly', String(big), '--daily', String(big), '--monthly', String(big), '--json'])).key as string;
const ids = Array.from({ length: N }, randomId);
{
  const db = new Database(seedFile);
  const ins = db.prepare(`INSERT INTO pastes (id, owner_key_id, title, content, content_type, language, file_size, sha256, created_at, expires_at, view_count, burn_after_read, encrypted, downloadable, is_public, source) VALUES (?, NULL, NULL, ?, 'text', 'text', ?, ?, ?, NULL, 0, 0, 0, 1, 0, 'api')`);
  const now = Date.now();
  db.transaction(() => { ids.forEach((id, i) => ins.run(id, KB, 1024, 'a'.repeat(64), now - N + i)); })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
}
interface S { tree: string; url: string; pid: number; child: ReturnType<typeof spawn> }
const servers: S[] = [];
for (const [i, tree] of trees.entries()) {
  const file = join(dir, `s${i}.db`);
  copyFileSync(seedFile, file);
  const port = await freePort();
  const child = spawn('taskset', ['-c', '0', process.execPath, '--max-semi-space-size=8', join(tree, 'bin/fastpaste.js'), 'serve'], {
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'silent', ANON_HOURLY_LIMIT: '0', DATABASE_URL: `sqlite:${file}` },
    stdio: 'inherit',
  });
  const url = `http://127.0.0.1:${port}`;
  for (let t = 0; ; t++) { try { if ((await fetch(`${url}/healthz`)).ok) break; } catch {} await new Promise((r) => setTimeout(r, 100)); if (t > 300) throw new Error('no start'); }
  servers.push({ tree, url, pid: child.pid as number, child });
}
const cpu = (pid: number) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8'); const p = f.slice(f.lastIndexOf(')') + 2).split(' '); return Number(p[11]) + Number(p[12]); };
const path = () => SCEN === 'raw' ? `/raw/${pick(ids)}` : SCEN === 'view' ? `/view/${pick(ids)}` : `/api/v1/paste/${pick(ids)}`;
const headers = SCEN === 'api' ? { 'x-api-key': key } : {};
const res: Record<string, { rps: number[]; us: number[] }> = {};
for (const s of servers) { res[s.tree] = { rps: [], us: [] }; await load({ url: s.url, path, headers, seconds: 2 }); }
for (let r = 0; r < ROUNDS; r++) {
  for (const s of (r % 2 ? [...servers].reverse() : servers)) {
    const c0 = cpu(s.pid); const l0 = process.cpuUsage();
    const out = await load({ url: s.url, path, headers, seconds: SECS });
    const c1 = cpu(s.pid); const l1 = process.cpuUsage(l0);
    console.log(s.tree, 'server core %', ((c1 - c0) / SECS).toFixed(0), 'loader %', ((l1.user + l1.system) / 1e4 / SECS).toFixed(0), 'loader µs/req', ((l1.user + l1.system) / (out.rps * SECS)).toFixed(1));
    const us = ((c1 - c0) * 10_000) / (out.rps * SECS);
    res[s.tree]!.rps.push(Math.round(out.rps)); res[s.tree]!.us.push(Number(us.toFixed(1)));
    if (out.errors || out.non2xx) console.log('errors', s.tree, out.errors, out.non2xx);
  }
}
const med = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
for (const s of servers) console.log(s.tree, 'rps', res[s.tree]!.rps.join(' '), 'med', med(res[s.tree]!.rps), '| µs/req', res[s.tree]!.us.join(' '), 'med', med(res[s.tree]!.us));
for (const s of servers) s.child.kill('SIGTERM');
