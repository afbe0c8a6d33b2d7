/**
 * Paste creation with a dead webhook receiver versus no webhook (issue 4): two servers, one whose
 * key announces every paste to a port where nothing listens (every delivery fails and is
 * retried in the background), one whose key has no webhook; POST /api/v1/paste measured
 * alternately in one run.
 * Run: node --import tsx bench/webhook-overhead.ts [seconds]
 */
import { fastpasteCommand, freePort, load, pinSelf, startBenchServer } from './bench-kit.js';

const seconds = Number(process.argv[2] ?? 10);
process.env.WEBHOOK_ALLOW_PRIVATE = 'true';
pinSelf();

async function setUp(webhook: string | null) {
  const server = await startBenchServer({ WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_RETRY_BASE_MS: '1000' });
  const args = ['keys', 'create', '--name', 'bench', '--json', ...(webhook ? ['--webhook', webhook] : [])];
  const key = JSON.parse(fastpasteCommand(server.databaseUrl, args)).key as string;
  return { server, key };
}

const deadPort = await freePort();
const none = await setUp(null);
const dead = await setUp(`http://127.0.0.1:${deadPort}/hook`);
const body = JSON.stringify({ content: 'x'.repeat(1024), language: 'text' });
const runs: Record<string, number[]> = { none: [], dead: [] };
const p99: Record<string, number[]> = { none: [], dead: [] };
try {
  for (let round = 0; round < 2; round++) {
    for (const [name, target] of [
      ['none', none],
      ['dead', dead],
    ] as const) {
      const r = await load({
        url: `${target.server.url}/api/v1/paste`,
        method: 'POST',
        headers: { 'x-api-key': target.key, 'content-type': 'application/json' },
        body,
        seconds,
      });
      if (r.errors > 0 || r.non2xx > 0) throw new Error(`${name}: ${r.errors} errors, ${r.non2xx} non-2xx`);
      runs[name]?.push(r.rps);
      p99[name]?.push(r.p99);
      console.log(`round ${round + 1} webhook ${name}: ${r.rps.toFixed(0)} creates/s p50 ${r.p50} ms p99 ${r.p99} ms`);
    }
  }
} finally {
  await none.server.stop();
  await dead.server.stop();
}
const mean = (xs: number[] = []) => xs.reduce((a, b) => a + b, 0) / xs.length;
console.log(
  `\nPOST /api/v1/paste: no webhook ${mean(runs.none).toFixed(0)}/s (p99 ${mean(p99.none).toFixed(0)} ms), dead receiver ${mean(runs.dead).toFixed(0)}/s (p99 ${mean(p99.dead).toFixed(0)} ms), ratio ${(mean(runs.dead) / mean(runs.none)).toFixed(3)}`,
);
