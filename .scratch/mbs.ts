import Database from 'better-sqlite3';
const db = new Database(':memory:');
db.exec('CREATE TABLE t (id TEXT PRIMARY KEY, body TEXT)');
const KB = `${'x'.repeat(1023)}\n`;
const ins = db.prepare('INSERT INTO t VALUES (?, ?)');
for (let i = 0; i < 1000; i++) ins.run(`id${i}`, KB);
const a = db.prepare('SELECT body FROM t WHERE id = ?').pluck();
const b = db.prepare('SELECT json_quote(body) FROM t WHERE id = ?').pluck();
for (const [n, s, f] of [['plain', a, (x: string) => JSON.stringify(x)], ['json_quote', b, (x: string) => x]] as const) {
  for (let r = 0; r < 3; r++) { const t = process.hrtime.bigint(); let L = 0; for (let i = 0; i < 200000; i++) L += (f as any)((s as any).get(`id${i % 1000}`)).length; if (r == 2) console.log(n, (Number(process.hrtime.bigint() - t) / 200000).toFixed(0), 'ns'); }
}
