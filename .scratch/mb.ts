import { PastePresenter } from '../src/pastes/paste-presenter.js';
import { formatTimestamp } from '../src/clock.js';
const pres = new PastePresenter('http://localhost:8080');
const KB = `${'x'.repeat(1023)}\n`;
const mk = (i: number) => ({ id: `abcdefghi${i % 10}`, title: null, description: null, content: (KB + i).slice(0, 1024), contentType: 'text', originalFilename: null, language: 'text', fileSize: 1024, sha256: 'a'.repeat(64), createdAt: 1764150000000 + i, expiresAt: null, viewCount: i, burnAfterRead: false, encrypted: false, downloadable: true, passwordHash: null, ownerKeyId: null, isPublic: false, source: 'api', creatorIp: null } as any);
const pastes = Array.from({ length: 1000 }, (_, i) => mk(i));
function bench(name: string, f: (p: any) => unknown) {
  let s = 0; for (let r = 0; r < 3; r++) { const t = process.hrtime.bigint(); for (let i = 0; i < 200000; i++) { const x = f(pastes[i % 1000]); if (x) s++; } const ns = Number(process.hrtime.bigint() - t) / 200000; if (r === 2) console.log(name, ns.toFixed(0), 'ns'); }
}
bench('spread+detail+stringify', (p) => JSON.stringify({ error: false, data: pres.detail({ ...p, viewCount: p.viewCount + 1 }, false) }));
bench('stringify content only', (p) => JSON.stringify(p.content));
bench('detail obj', (p) => pres.detail(p, false));
bench('formatTimestamp', (p) => formatTimestamp(p.createdAt));
bench('byteLength', (p) => Buffer.byteLength(JSON.stringify({ error: false, data: pres.detail(p, false) })));
const noNl = 'x'.repeat(1024);
bench('stringify 1KB no escapes', () => JSON.stringify(noNl));
bench('stringify 1KB one \\n', () => JSON.stringify(KB));
const re = /["\\\u0000-\u001f\u2028\u2029\ud800-\udfff]/;
bench('regex test 1KB', () => re.test(noNl));
bench('concat', () => '"' + noNl + '"');
