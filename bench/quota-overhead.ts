/**
 * What checking the quota costs (issue 3): GET /api/v1/paste/{id} with a key whose limits are
 * on (every request counted in three windows) and with a key without limits, on two servers
 * measured alternately in one run so that machine noise falls on both alike.
 * Run: node --import tsx bench/quota-overhead.ts [seconds]
 */
import { createKey, load, pinSelf, startBenchServer } from './bench-kit.js';

const seconds = Number(process.argv[2] ?? 10);
pinSelf();

async function setUp(limited: boolean) {
  const server = await startBenchServer();
  const big = 1_000_000_000;
  const key = createKey(
    server.databaseUrl,
    limited ? { hourly: big, daily: big, monthly: big } : { hourly: 0, daily: 0, monthly: 0 },
  );
  const res = await fetch(`${server.url}/api/v1/paste`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ content: 'x'.repeat(1024), language: 'text', expiry: 'never' }),
  });
  const id = ((await res.json()) as { data: { paste_id: string } }).data.paste_id;
  return { server, key, id };
}

const on = await setUp(true);
const off = await setUp(false);
const runs: Record<string, number[]> = { on: [], off: [] };
try {
  for (const target of [off, on]) {
    await load({
      url: `${target.server.url}/api/v1/paste/${target.id}`,
      headers: { 'x-api-key': target.key },
      seconds: 2,
    });
  }
  for (let round = 0; round < 2; round++) {
    for (const [name, target] of [
      ['off', off],
      ['on', on],
    ] as const) {
      const r = await load({
        url: `${target.server.url}/api/v1/paste/${target.id}`,
        headers: { 'x-api-key': target.key },
        seconds,
      });
      if (r.errors > 0 || r.non2xx > 0) throw new Error(`${name}: ${r.errors} errors, ${r.non2xx} non-2xx`);
      runs[name]?.push(r.rps);
      console.log(`round ${round + 1} limits ${name}: ${r.rps.toFixed(0)} req/s p50 ${r.p50} ms p99 ${r.p99} ms`);
    }
  }
} finally {
  await on.server.stop();
  await off.server.stop();
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const a = mean(runs.off ?? []);
const b = mean(runs.on ?? []);
console.log(
  `\nGET /api/v1/paste/{id}: limits off ${a.toFixed(0)} req/s, limits on ${b.toFixed(0)} req/s, ratio ${(b / a).toFixed(3)}`,
);
