/**
 * Memory under large uploads (issue 6): 20 clients upload a 10 MB file at once (multipart, with a
 * key); every upload must get its 201 and the server's peak RSS stay under 400 MB. Then a body
 * far past the limit (50 MB) is sent: the server must answer 413 and stop reading at the limit,
 * so the client manages to send only a little more than the limit before the connection closes.
 * 127.0.0.1 only; bounded (a minute at most). Exits 1 when a goal is missed.
 * Usage: npm run bench:uploads
 */
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { createKey, pinSelf, startBenchServer } from './bench-kit.js';

pinSelf();
const CLIENTS = 20;
const MB = 1024 * 1024;
const FILE_BYTES = 10 * MB - 4096;
const RSS_GOAL_MB = 400;

const server = await startBenchServer();
const key = createKey(server.databaseUrl, { hourly: 0, daily: 0, monthly: 0 });
let failed = false;

/** A 10 MB text file of random printable lines, different for every client. */
function textFile(seed: number): Buffer {
  const line = (i: number) => `${seed}:${i} ${randomBytes(36).toString('base64')}\n`;
  const parts: string[] = [];
  let size = 0;
  for (let i = 0; size < FILE_BYTES; i++) {
    const next = line(i);
    parts.push(next);
    size += next.length;
  }
  return Buffer.from(parts.join('').slice(0, FILE_BYTES));
}

try {
  const files = Array.from({ length: CLIENTS }, (_, i) => textFile(i));
  server.resetPeak();
  const started = Date.now();
  const results = await Promise.all(
    files.map(async (file, i) => {
      const form = new FormData();
      form.append('file', new Blob([new Uint8Array(file)], { type: 'text/plain' }), `upload-${i}.txt`);
      const res = await fetch(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        body: form,
      });
      const body = (await res.json()) as { data?: { paste_id: string; sha256: string } };
      const sha = createHash('sha256').update(file).digest('hex');
      return { status: res.status, ok: res.status === 201 && body.data?.sha256 === sha, id: body.data?.paste_id };
    }),
  );
  const seconds = (Date.now() - started) / 1000;
  const created = results.filter((r) => r.ok).length;
  const peak = server.peakRssMb();
  console.log(
    `${CLIENTS} concurrent 10 MB uploads: ${created}/${CLIENTS} created with the right sha256 in ${seconds.toFixed(1)} s; peak RSS ${peak.toFixed(0)} MB (goal < ${RSS_GOAL_MB})`,
  );
  if (created !== CLIENTS || peak >= RSS_GOAL_MB) failed = true;
  // Spot-check that what was stored is what was sent.
  const sample = results[0];
  if (sample?.id) {
    const stored = Buffer.from(await (await fetch(`${server.url}/raw/${sample.id}`)).arrayBuffer());
    if (!stored.equals(files[0] as Buffer)) {
      console.log('stored upload differs from the one sent');
      failed = true;
    }
  }

  // A 50 MB body to quick-create (limit 4 MB), written as fast as the socket takes it.
  const oversize = await new Promise<{ status: number; sent: number }>((resolve) => {
    const total = 50 * MB;
    const chunk = Buffer.alloc(64 * 1024, 'a');
    let sent = 0;
    let status = 0;
    const req = http.request(`${server.url}/api/v1/cli`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'transfer-encoding': 'chunked' },
    });
    req.on('response', (res) => {
      status = res.statusCode ?? 0;
      res.resume();
      res.on('end', () => resolve({ status, sent }));
    });
    req.on('error', () => resolve({ status, sent }));
    const pump = () => {
      while (sent < total) {
        sent += chunk.length;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      req.end();
    };
    pump();
    setTimeout(() => {
      req.destroy();
      resolve({ status, sent });
    }, 30_000).unref();
  });
  console.log(
    `50 MB body to /api/v1/cli (limit 4 MB): answered ${oversize.status}; the client got ${(oversize.sent / MB).toFixed(1)} MB into the socket before it closed`,
  );
  if (oversize.status !== 413 || oversize.sent > 12 * MB) failed = true;
} finally {
  await server.stop();
}
process.exit(failed ? 1 : 0);
