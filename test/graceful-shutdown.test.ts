/**
 * Graceful shutdown (issue 7): the real server (`node bin/fastpaste.js serve`) gets SIGTERM while
 * a large upload is still arriving, slowly, several creates are in flight on connections it has
 * accepted, and a webhook delivery is claimed by its worker (the receiver never answers). It must
 * stop taking new connections (refused, or 503) at once, finish every request in flight with its
 * 201, give back the delivery's claim, write the view counts it holds, and exit with code 0; after
 * a restart, every paste that got a 201 reads back with its sha256.
 *
 * Everything listens on 127.0.0.1; the receiver is started here.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { loadConfig } from '../src/config.js';
import { RequestsInFlight } from '../src/http/requests-in-flight.js';
import {
  createPaste,
  expectError,
  freshDatabase,
  queryDatabase,
  sqlText,
  startServer,
  type TestServer,
} from './helpers.js';
import { fastpaste, startServerProcess } from './server-process.js';

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitUntil(
  cond: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string | (() => string),
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    }
    await sleep(25);
  }
}

/** A webhook receiver that reads each request and never answers. */
async function silentReceiver(): Promise<{ url: string; received: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const state = { url: '', received: 0, close: async () => {} };
  const server = http.createServer((req) => {
    req.resume();
    req.on('end', () => state.received++);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  state.close = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return state;
}

interface Answer {
  status: number;
  body: string;
}

/**
 * A POST whose body the test sends piece by piece, on a connection the server has already
 * accepted (a GET /healthz first on the same keep-alive socket), so that it is surely in flight.
 */
async function slowPost(
  base: string,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
): Promise<{
  send(bytes: number): Promise<void>;
  finish(): void;
  answer: Promise<Answer>;
  /** Settles once the server has admitted the request and asks for its body (its 100 Continue). */
  headersRead: Promise<void>;
  agent: http.Agent;
}> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  await new Promise<void>((resolve, reject) => {
    http
      .get(`${base}/healthz`, { agent }, (res) => {
        res.resume();
        res.on('end', resolve);
      })
      .on('error', reject);
  });
  const req = http.request(`${base}${path}`, {
    method: 'POST',
    agent,
    // The server answers 100 Continue once it has admitted the request and is about to read its
    // body (expect-continue.ts): the test knows it is in flight.
    headers: { ...headers, 'content-length': String(body.length), expect: '100-continue' },
  });
  const headersRead = new Promise<void>((resolve) => req.once('continue', () => resolve()));
  const answer = new Promise<Answer>((resolve, reject) => {
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  answer.catch(() => {}); // looked at by the test
  req.flushHeaders();
  let sent = 0;
  return {
    agent,
    answer,
    headersRead,
    async send(bytes) {
      const end = Math.min(body.length, sent + bytes);
      const piece = body.subarray(sent, end);
      sent = end;
      if (!req.write(piece)) await new Promise((resolve) => req.once('drain', resolve));
    },
    finish() {
      req.end(body.subarray(sent));
      sent = body.length;
    },
  };
}

/** A request on a new connection: its status, or the connection error's code. */
function freshConnection(base: string): Promise<number | string> {
  return new Promise((resolve) => {
    const req = http.get(`${base}/healthz`, { agent: false, timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

describe('graceful shutdown', () => {
  it('on SIGTERM: refuses new connections, finishes the requests in flight, releases the webhook claim, exits 0', {
    timeout: 90_000,
  }, async (t) => {
    const db = await freshDatabase();
    const receiver = await silentReceiver();
    const env = {
      DATABASE_URL: db.url,
      ANON_HOURLY_LIMIT: '0',
      WEBHOOK_ALLOW_PRIVATE: 'true',
      REDIS_URL: process.env.TEST_REDIS_URL ?? '',
    };
    let server: Awaited<ReturnType<typeof startServerProcess>> | null = null;
    try {
      const made = await fastpaste(['keys', 'create', '--name', 'shutdown', '--webhook', receiver.url, '--json'], env);
      assert.equal(made.code, 0, made.stderr);
      const key = JSON.parse(made.stdout).key as string;
      server = await startServerProcess(env);
      const { url } = server;

      // A paste read three times: the counts are held in memory until the shutdown writes them.
      const viewed = await fetch(`${url}/api/v1/cli?json=1`, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: 'read three times before the shutdown',
      });
      assert.equal(viewed.status, 201);
      const viewedId = ((await viewed.json()) as { data: { paste_id: string } }).data.paste_id;
      for (let i = 0; i < 3; i++) assert.equal((await fetch(`${url}/raw/${viewedId}`)).status, 200);

      // A paste with the key: its delivery is claimed and sent to a receiver that never answers.
      const hooked = await fetch(`${url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ content: 'announced to a receiver that never answers' }),
      });
      assert.equal(hooked.status, 201);
      await waitUntil(() => receiver.received >= 1, 10_000, 'the delivery to reach the receiver');
      const claimed = await queryDatabase<{ locked_by: string | null }>(
        db.url,
        'SELECT locked_by FROM webhook_deliveries',
      );
      assert.equal(claimed.length, 1);
      assert.ok(claimed[0]?.locked_by, 'the delivery is claimed while its attempt is in flight');
      const attemptStarted = Date.now();

      // In flight when SIGTERM comes: a 3 MB quick-create arriving in pieces, and six JSON creates
      // whose bodies are not complete yet.
      const big = Buffer.from(randomBytes(3 * 1024 * 1024 * 0.75).toString('base64'));
      const upload = await slowPost(url, '/api/v1/cli?json=1', { 'content-type': 'text/plain' }, big);
      await upload.send(256 * 1024);
      const creates = await Promise.all(
        Array.from({ length: 6 }, async (_, i) => {
          const content = `created during the shutdown ${i} ${randomBytes(2000).toString('hex')}`;
          const body = Buffer.from(JSON.stringify({ content }));
          const post = await slowPost(
            url,
            '/api/v1/paste',
            { 'x-api-key': key, 'content-type': 'application/json' },
            body,
          );
          await post.send(body.length - 10);
          return { post, content };
        }),
      );
      // The server has read the headers of each (and then the bytes sent after them).
      await Promise.all([upload, ...creates.map(({ post }) => post)].map(({ headersRead }) => headersRead));
      await sleep(100);

      const signalled = Date.now();
      const exit = server.stop('SIGTERM');
      // New connections are refused (or answered 503) while the requests in flight go on. Until
      // the signal is handled a probe may still get 200, and one accepted at the very moment
      // of closing is reset as an idle connection (Node's server.close); then only refusals.
      const probes: Array<number | string> = [];
      await waitUntil(
        async () => {
          probes.push(await freshConnection(url));
          return probes.at(-1) === 'ECONNREFUSED' || probes.at(-1) === 503;
        },
        5000,
        () => `a new connection to be refused (got ${probes.join(', ')})`,
      );
      t.diagnostic(`new connections after SIGTERM: ${probes.join(', ')}`);
      for (let i = 0; i < 3; i++) {
        const again = await freshConnection(url);
        assert.ok(again === 'ECONNREFUSED' || again === 503, `a new connection got ${again} after a refusal`);
      }
      assert.ok(
        probes.every((p) => p === 200 || p === 'ECONNRESET' || p === 'ECONNREFUSED' || p === 503),
        `probes while closing: ${probes.join(', ')}`,
      );

      // The requests in flight finish and get their 201.
      for (let sent = 256 * 1024; sent < big.length; sent += 256 * 1024) {
        await upload.send(256 * 1024);
        await sleep(20);
      }
      upload.finish();
      for (const { post } of creates) post.finish();
      const uploaded = await upload.answer;
      assert.equal(uploaded.status, 201, uploaded.body);
      const uploadData = JSON.parse(uploaded.body).data as { paste_id: string; sha256: string };
      assert.equal(uploadData.sha256, sha256(big));
      const createdIds: Array<{ id: string; sha: string }> = [{ id: uploadData.paste_id, sha: sha256(big) }];
      for (const { post, content } of creates) {
        const answer = await post.answer;
        assert.equal(answer.status, 201, answer.body);
        const data = JSON.parse(answer.body).data as { paste_id: string; sha256: string };
        assert.equal(data.sha256, sha256(content));
        createdIds.push({ id: data.paste_id, sha: data.sha256 });
      }
      upload.agent.destroy();
      for (const { post } of creates) post.agent.destroy();

      // It exits 0 within Docker's 10 s grace although the attempt in flight would run 10 s more
      // (WEBHOOK_TIMEOUT_MS is at its default): the worker waits for it a bounded time.
      const code = await exit;
      const shutdownMs = Date.now() - signalled;
      server = null;
      assert.equal(code, 0, 'exit code after SIGTERM');
      t.diagnostic(`shut down ${shutdownMs} ms after SIGTERM`);
      assert.ok(shutdownMs < 9000, `shut down in ${shutdownMs} ms`);

      assert.ok(Date.now() - attemptStarted < 10_000, 'the attempt was still in flight at the exit');

      // The claim was given back: another instance may take the delivery at once.
      const rows = await queryDatabase<{ status: string; locked_by: string | null; locked_until: number | null }>(
        db.url,
        'SELECT status, locked_by, locked_until FROM webhook_deliveries',
      );
      assert.equal(rows.length, 7, 'one delivery for each paste made with the key');
      for (const row of rows) {
        assert.equal(row.locked_by, null, 'no delivery left claimed');
        assert.equal(row.locked_until, null, 'no delivery left leased');
        assert.equal(row.status, 'pending', 'nothing was delivered (the receiver never answers)');
      }
      // The view counts held in memory were written.
      const [views] = await queryDatabase<{ view_count: number }>(
        db.url,
        `SELECT view_count + COALESCE((SELECT views FROM paste_views WHERE paste_id = pastes.id), 0) AS view_count FROM pastes WHERE id = '${viewedId}'`,
      );
      assert.equal(Number(views?.view_count), 3);

      // After a restart, every paste that got a 201 is there with its sha256.
      const restarted = await startServerProcess(env);
      server = restarted;
      for (const { id, sha } of createdIds) {
        const res = await fetch(`${restarted.url}/raw/${id}`);
        assert.equal(res.status, 200, `paste ${id}`);
        assert.equal(sha256(Buffer.from(await res.arrayBuffer())), sha);
      }
    } finally {
      await server?.stop('SIGKILL');
      await receiver.close();
      await db.drop();
    }
  });

  it('SHUTDOWN_TIMEOUT_SECONDS is 5 s unless set, a whole number of seconds from 1', () => {
    assert.equal(loadConfig({}).shutdownTimeoutMs, 5000);
    assert.equal(loadConfig({ SHUTDOWN_TIMEOUT_SECONDS: '25' }).shutdownTimeoutMs, 25_000);
    for (const bad of ['0', 'soon', '-5', '1.5']) {
      assert.throws(() => loadConfig({ SHUTDOWN_TIMEOUT_SECONDS: bad }), /SHUTDOWN_TIMEOUT_SECONDS/);
    }
  });

  it('a request still in flight after SHUTDOWN_TIMEOUT_SECONDS is cut: the process exits inside it, stores nothing of it, and writes the counts it holds', {
    timeout: 60_000,
  }, async () => {
    const db = await freshDatabase();
    // A slow upload could run for the whole request time-out (60 s here) and hold the stop.
    const env = {
      DATABASE_URL: db.url,
      SHUTDOWN_TIMEOUT_SECONDS: '2',
      REQUEST_TIMEOUT_SECONDS: '60',
      LOG_LEVEL: 'warn',
    };
    let server: Awaited<ReturnType<typeof startServerProcess>> | null = await startServerProcess(env);
    try {
      const { url } = server;
      const viewed = await fetch(`${url}/api/v1/cli?json=1`, {
        method: 'POST',
        body: 'read twice before the shutdown',
      });
      assert.equal(viewed.status, 201);
      const viewedId = ((await viewed.json()) as { data: { paste_id: string } }).data.paste_id;
      for (let i = 0; i < 2; i++) assert.equal((await fetch(`${url}/raw/${viewedId}`)).status, 200);

      const body = Buffer.from('x'.repeat(100_000));
      const upload = await slowPost(url, '/api/v1/cli?json=1', { 'content-type': 'text/plain' }, body);
      await upload.send(1000);
      await upload.headersRead;
      const signalled = Date.now();
      const exit = server.stop('SIGTERM');
      // The client goes on dripping its body, a piece every 200 ms, until the server cuts it.
      let cut = false;
      const answer = upload.answer.then(
        (got) => `answered ${got.status}`,
        (err: NodeJS.ErrnoException) => `cut (${err.code ?? err.message})`,
      );
      void answer.then(() => {
        cut = true;
      });
      const drip = (async () => {
        for (let i = 0; i < 100 && !cut; i++) {
          await sleep(200);
          // Not waited for: a socket the server has cut never drains.
          void upload.send(100).catch(() => {});
        }
      })();
      const code = await Promise.race([exit, sleep(15_000).then(() => 'still running 15 s after SIGTERM')]);
      const took = Date.now() - signalled;
      assert.equal(code, 0, server.output());
      assert.ok(took >= 1900 && took < 6000, `stopped ${took} ms after SIGTERM (deadline 2 s)`);
      assert.match(await answer, /^cut/);
      await drip;
      upload.agent.destroy();
      const lines = server
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { msg: string; connections?: number });
      const told = lines.find((line) => line.msg.startsWith('requests still in flight at the shutdown deadline'));
      assert.ok(told, server.output());
      assert.ok((told.connections ?? 0) >= 1, JSON.stringify(told));
      server = null;

      // Nothing of the cut upload was stored; the views held in memory were written.
      const pastes = await queryDatabase<{ n: number }>(db.url, 'SELECT count(*) AS n FROM pastes');
      assert.equal(Number(pastes[0]?.n), 1, 'only the paste read before the shutdown');
      const [views] = await queryDatabase<{ view_count: number }>(
        db.url,
        `SELECT view_count + COALESCE((SELECT views FROM paste_views WHERE paste_id = pastes.id), 0) AS view_count FROM pastes WHERE id = '${viewedId}'`,
      );
      assert.equal(Number(views?.view_count), 2);
    } finally {
      await server?.stop('SIGKILL');
      await db.drop();
    }
  });
});

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The complete HTTP/1.1 answers in `text` (each with a content-length), in order. */
function rawAnswers(text: string): RawAnswer[] {
  const answers: RawAnswer[] = [];
  let rest = text;
  for (;;) {
    const headEnd = rest.indexOf('\r\n\r\n');
    if (headEnd < 0) return answers;
    const [statusLine, ...lines] = rest.slice(0, headEnd).split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    const status = Number((statusLine as string).split(' ')[1]);
    const length = Number(headers['content-length'] ?? 0);
    if (rest.length < headEnd + 4 + length) return answers;
    const body = rest.slice(headEnd + 4, headEnd + 4 + length);
    rest = rest.slice(headEnd + 4 + length);
    // An interim 100 Continue is not an answer.
    if (status !== 100) answers.push({ status, headers, body });
  }
}

/** A raw connection to the server and what it has received so far. */
function rawConnection(port: number): {
  socket: Socket;
  received(): string;
  connected: Promise<void>;
  closed: Promise<void>;
} {
  const socket = net.connect(port, '127.0.0.1');
  const connected = new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  let text = '';
  socket.setEncoding('latin1');
  socket.on('data', (d: string) => {
    text += d;
  });
  socket.on('error', () => {}); // a reset shows as the connection closing
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, received: () => text, connected, closed };
}

describe('closing with kept-alive connections open (in process)', () => {
  it('requests whose connections are closed under them (the shutdown deadline) finish their work before the storage closes: stored, no error', {
    timeout: 30_000,
  }, async () => {
    const db = await freshDatabase();
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    let server: TestServer | null = await startServer({ databaseUrl: db.url, logger });
    try {
      const key = await server.createKey();
      // Every create waits at a gate, as one waiting for a slow commit does.
      const pastes = server.services.pastes;
      const create = pastes.create.bind(pastes);
      let open!: () => void;
      const gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      let held = 0;
      pastes.create = async (...args: Parameters<typeof create>) => {
        held++;
        await gate;
        return create(...args);
      };
      // One in the fast lane (a key's JSON create) and one through the framework (a quick-create).
      const answers = [
        fetch(`${server.url}/api/v1/paste`, {
          method: 'POST',
          headers: { 'x-api-key': key, 'content-type': 'application/json' },
          body: JSON.stringify({ content: 'held in the lane' }),
        }),
        fetch(`${server.url}/api/v1/cli`, { method: 'POST', body: 'held in the framework' }),
      ].map((answer) => answer.then((res) => res.status).catch(() => 'cut'));
      await waitUntil(() => held === 2, 5000, 'both creates to reach the gate');

      // The deadline: every connection closed, then the close, the creates still held.
      server.app.server.closeAllConnections();
      assert.deepEqual(await Promise.all(answers), ['cut', 'cut']);
      const started = Date.now();
      const closing = server.close();
      server = null;
      await sleep(300);
      open();
      await closing;
      assert.ok(Date.now() - started >= 300, 'the close waited for the work');

      const stored = await queryDatabase<{ content: string }>(db.url, 'SELECT content FROM pastes ORDER BY content');
      assert.deepEqual(
        stored.map((row) => row.content),
        ['held in the framework', 'held in the lane'],
      );
      const logged = lines.map((line) => JSON.parse(line) as { msg: string });
      assert.deepEqual(logged, [], 'nothing failed');
    } finally {
      await server?.close();
      await db.drop();
    }
  });

  it('the requests at work are waited for a bounded time, those of the lane until their promise settles', async () => {
    const inFlight = new RequestsInFlight();
    let finish!: () => void;
    inFlight.track(
      new Promise<void>((resolve) => {
        finish = resolve;
      }),
    );
    assert.equal(inFlight.count, 1);
    const started = Date.now();
    assert.equal(await inFlight.settled(100), false);
    assert.ok(Date.now() - started >= 100);
    assert.equal(inFlight.count, 1);
    const settling = inFlight.settled(5000);
    finish();
    assert.equal(await settling, true);
    assert.equal(inFlight.count, 0);
    // A rejected one ends too.
    inFlight.track(Promise.reject(new Error('failed')));
    assert.equal(await inFlight.settled(1000), true);
  });

  it('closes a connection whose answer began before the close and ended after it, as soon as it falls idle', {
    timeout: 30_000,
  }, async () => {
    const server = await startServer({ clock: 'system' });
    try {
      const key = await server.createKey();
      const id = await createPaste(server, key, { content: 'read as the close begins' });
      // The close begins as the request is taken: on SQLite the fast lane has written the head
      // (keep-alive) and ends the body after this turn, once the close is under way.
      let closing: Promise<void> | null = null;
      let closeStarted = 0;
      server.app.server.on('request', (req: http.IncomingMessage) => {
        if (req.url !== `/raw/${id}` || closing) return;
        closeStarted = Date.now();
        closing = server.app.close();
      });
      const reader = rawConnection(Number(new URL(server.url).port));
      reader.socket.write(`GET /raw/${id} HTTP/1.1\r\nHost: x\r\n\r\n`);
      await waitUntil(
        () => rawAnswers(reader.received()).length === 1,
        5000,
        () => reader.received(),
      );
      const [answer] = rawAnswers(reader.received()) as [RawAnswer];
      assert.equal(answer.status, 200);
      assert.equal(answer.body, 'read as the close begins');
      // Closed by the server well before the keep-alive timeout (10 s), and the close done.
      await reader.closed;
      await closing;
      assert.ok(Date.now() - closeStarted < 5000, `the close took ${Date.now() - closeStarted} ms`);
    } finally {
      await server.close();
    }
  });

  it('closes each connection with its answer, refuses a request begun before the close in the D7 envelope, and does not wait for keep-alive timeouts', {
    timeout: 30_000,
  }, async () => {
    const server = await startServer({ clock: 'system' });
    try {
      const port = Number(new URL(server.url).port);
      // A connection answered before the close and kept alive, idle.
      const idle = rawConnection(port);
      idle.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      await waitUntil(() => rawAnswers(idle.received()).length === 1, 5000, 'the idle connection first answer');
      // A request whose head is half sent: the server counts the connection as busy.
      const late = rawConnection(port);
      late.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
      // A create in flight: admitted, its body asked for (100 Continue) and not yet sent.
      const body = 'in flight while closing';
      const busy = rawConnection(port);
      busy.socket.write(
        `POST /api/v1/cli HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`,
      );
      await waitUntil(() => busy.received().includes(' 100 '), 5000, '100 Continue');
      // A key's JSON create, which the fast lane answers, its head sent and its body not.
      const key = await server.createKey();
      // Used once, so that the lane knows the key (it hands an uncached key to Fastify).
      await createPaste(server, key, { content: 'the key used once' });
      let laneHeadsRead = 0;
      server.app.server.on('request', (req: http.IncomingMessage) => {
        if (req.method === 'POST' && req.url === '/api/v1/paste') laneHeadsRead++;
      });
      const json = JSON.stringify({ content: 'a create of the fast lane while closing' });
      const laneCreate = rawConnection(port);
      laneCreate.socket.write(
        `POST /api/v1/paste HTTP/1.1\r\nHost: x\r\nX-API-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: ${json.length}\r\n\r\n`,
      );
      // The server has read the lane create's head (its request event), and the half head of
      // `late`, written first: once its connection is up, the server's poll phases read it
      // within a few turns of the event loop, and ten pass here after that.
      await waitUntil(() => laneHeadsRead === 1, 5000, "the lane create's head read");
      await late.connected;
      for (let turn = 0; turn < 10; turn++) await new Promise((resolve) => setImmediate(resolve));

      const closeStarted = Date.now();
      const closing = server.app.close();
      await waitUntil(() => !server.app.server.listening, 5000, 'the server to stop listening');
      await idle.closed; // closed at once: it was idle

      busy.socket.write(body);
      laneCreate.socket.write(json);
      late.socket.write('\r\n');
      await waitUntil(
        () => rawAnswers(busy.received()).length === 1,
        5000,
        () => `the create's answer: ${busy.received()}`,
      );
      await waitUntil(
        () => rawAnswers(late.received()).length === 1,
        5000,
        () => `the late answer: ${late.received()}`,
      );
      const [created] = rawAnswers(busy.received()) as [RawAnswer];
      assert.equal(created.status, 201, created.body);
      assert.equal(created.headers.connection, 'close', 'the answer in flight did not close its connection');
      await waitUntil(
        () => rawAnswers(laneCreate.received()).length === 1,
        5000,
        () => laneCreate.received(),
      );
      const [laneCreated] = rawAnswers(laneCreate.received()) as [RawAnswer];
      assert.equal(laneCreated.status, 201, laneCreated.body);
      assert.equal(laneCreated.headers.connection, 'close', 'the lane answer in flight did not close its connection');
      const [refused] = rawAnswers(late.received()) as [RawAnswer];
      assert.match(refused.headers['content-type'] ?? '', /^application\/json/);
      expectError({ status: refused.status, body: JSON.parse(refused.body) }, 503, 'shutting_down');
      assert.equal(refused.headers.connection, 'close');
      assert.equal(refused.headers['retry-after'], '1');
      // Both connections closed by the server, and the close done without waiting for the
      // keep-alive timeout (10 s).
      await Promise.all([busy.closed, late.closed, laneCreate.closed]);
      await closing;
      assert.ok(Date.now() - closeStarted < 5000, `the close took ${Date.now() - closeStarted} ms`);
      // The create that was in flight is stored.
      const id = created.body.trim().split('/').pop() as string; // the quick-create answer is its address
      const rows = await server.sql<{ content: string }>(`SELECT content FROM pastes WHERE id = ${sqlText(id)}`);
      assert.equal(rows[0]?.content, body);
      const laneId = (JSON.parse(laneCreated.body) as { data: { paste_id: string } }).data.paste_id;
      const laneRows = await server.sql<{ id: string }>(`SELECT id FROM pastes WHERE id = ${sqlText(laneId)}`);
      assert.equal(laneRows.length, 1);
    } finally {
      await server.close();
    }
  });
});
