/**
 * Answers no one reads (src/http/unread-answers.ts): one 4 MB paste, then `--connections` clients
 * (100) that each send `--pipelined` GETs of it (8) in one write and never read. Prints the
 * server's RSS every 5 s for `--seconds` (30): what the answers made for them hold, and what the
 * send time-out and MAX_UNSENT_MB give back (set either in the environment to try another value).
 * 127.0.0.1 only; bounded (a minute at most). It has no goal of its own to miss: the figures go to
 * BENCHMARKS.md.
 * Usage: npm run bench:unread [-- --connections 100 --pipelined 8 --seconds 30]
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { option, pinSelf, startBenchServer } from './bench-kit.js';

pinSelf();
const CONNECTIONS = Number(option('connections', '100'));
const PIPELINED = Number(option('pipelined', '8'));
const SECONDS = Math.min(Number(option('seconds', '30')), 50);
const PASTE_BYTES = 4 * 1024 * 1024 - 1024;

const server = await startBenchServer();
const sockets: net.Socket[] = [];

function rssMb(): number {
  const status = readFileSync(`/proc/${server.process.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

try {
  const created = await fetch(`${server.url}/api/v1/cli?json=1`, {
    method: 'POST',
    headers: { 'content-type': 'text/plain' },
    body: 'x'.repeat(PASTE_BYTES),
  });
  const id = ((await created.json()) as { data: { paste_id: string } }).data.paste_id;
  const port = Number(new URL(server.url).port);
  const before = rssMb();
  server.resetPeak();
  for (let i = 0; i < CONNECTIONS; i++) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.pause();
    socket.write(`GET /raw/${id} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`.repeat(PIPELINED));
    sockets.push(socket);
  }
  const samples: string[] = [];
  for (let t = 5; t <= SECONDS; t += 5) {
    await new Promise((resolve) => setTimeout(resolve, 5000));
    samples.push(`${t} s: ${rssMb().toFixed(0)} MB`);
  }
  console.log(
    `${CONNECTIONS} connections, ${PIPELINED} unread GETs of a 4 MB paste each ` +
      `(SEND_TIMEOUT_SECONDS ${process.env.SEND_TIMEOUT_SECONDS ?? 'default'}, MAX_UNSENT_MB ${process.env.MAX_UNSENT_MB ?? 'default'}): ` +
      `RSS ${before.toFixed(0)} MB before; ${samples.join(', ')}; peak ${server.peakRssMb().toFixed(0)} MB`,
  );
} finally {
  for (const socket of sockets) socket.destroy();
  await server.stop();
}
