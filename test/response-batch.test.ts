/**
 * The fast lane's answers ended together once per turn of the event loop (response-batch.ts),
 * over real sockets: each client gets its own answer, whole, and only once the turn is over.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { ResponseBatch } from '../src/http/response-batch.js';

async function withServer(
  handler: http.RequestListener,
  use: (url: string, agent: http.Agent) => Promise<void>,
): Promise<void> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  try {
    await use(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, agent);
  } finally {
    agent.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
}

function get(url: string, agent: http.Agent): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

describe('answers ended once per turn of the event loop', () => {
  it('ends each answer once the turn that built it is over, and every client gets its own, whole', async () => {
    const batch = new ResponseBatch();
    const endedAtOnce: boolean[] = [];
    const endedAfterTurn: boolean[] = [];
    const logged: string[] = [];
    await withServer(
      (req, res) => {
        const url = req.url as string;
        // A body in parts for some (the page's way), one string for the others.
        const body = url.endsWith('0')
          ? [`parts of ${url}: `, Buffer.from('x'.repeat(20_000)), '.']
          : `answer to ${url}`;
        const length =
          typeof body === 'string' ? Buffer.byteLength(body) : 20_000 + Buffer.byteLength(`parts of ${url}: .`);
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': length });
        batch.end(res, body, () => logged.push(url));
        endedAtOnce.push(res.writableEnded);
        setImmediate(() => endedAfterTurn.push(res.writableEnded));
      },
      async (url, agent) => {
        const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => get(`${url}/p${i}`, agent)));
        answers.forEach((answer, i) => {
          assert.equal(answer.status, 200);
          if (i % 10 === 0) assert.equal(answer.body, `parts of /p${i}: ${'x'.repeat(20_000)}.`);
          else assert.equal(answer.body, `answer to /p${i}`);
        });
      },
    );
    assert.equal(endedAtOnce.length, 40);
    assert.ok(
      endedAtOnce.every((ended) => !ended),
      'not ended while its turn goes on',
    );
    assert.ok(
      endedAfterTurn.every((ended) => ended),
      'ended once it is over',
    );
    assert.deepEqual([...logged].sort(), Array.from({ length: 40 }, (_, i) => `/p${i}`).sort(), 'each logged once');
  });

  it('an answer whose client is gone before its turn ends does not keep the others from being ended', async () => {
    const batch = new ResponseBatch();
    let gone = 0;
    await withServer(
      (req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain' });
        batch.end(res, `answer to ${req.url}`);
        if (req.url === '/gone') {
          req.socket.destroy();
          gone++;
        }
      },
      async (url, agent) => {
        const [lost, kept] = await Promise.allSettled([get(`${url}/gone`, agent), get(`${url}/kept`, agent)]);
        assert.equal(lost.status, 'rejected');
        assert.deepEqual(kept.status === 'fulfilled' && kept.value, { status: 200, body: 'answer to /kept' });
        assert.deepEqual(await get(`${url}/after`, agent), { status: 200, body: 'answer to /after' });
      },
    );
    assert.equal(gone, 1);
  });
});
