/**
 * Each speed-up keeps what it must (issue 6): grouped commits still mean a 201 survives a
 * SIGKILL; the key cache still refuses a deactivated key within a second; view counts and
 * quota counts held in memory are written on shutdown.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { freshDatabase, request, startServer } from './helpers.js';
import { fastpaste, startServerProcess } from './server-process.js';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

describe('group commit', () => {
  it('every paste that got a 201 is readable with its sha256 after the server is killed with SIGKILL', async () => {
    const db = await freshDatabase();
    const env = { DATABASE_URL: db.url, ANON_HOURLY_LIMIT: '0' };
    try {
      let server = await startServerProcess(env);
      const created: Array<{ id: string; sha: string }> = [];
      let stop = false;
      // Four writers keep creates in flight; the kill lands among them.
      const writers = Array.from({ length: 4 }, async (_, w) => {
        for (let i = 0; !stop; i++) {
          const content = `writer ${w} paste ${i} ${'x'.repeat(200)}`;
          try {
            const res = await fetch(`${server.url}/api/v1/cli?json=1`, {
              method: 'POST',
              headers: { 'content-type': 'text/plain' },
              body: content,
            });
            if (res.status !== 201) continue;
            const body = (await res.json()) as { data: { paste_id: string; sha256: string } };
            assert.equal(body.data.sha256, sha256(content));
            created.push({ id: body.data.paste_id, sha: body.data.sha256 });
          } catch {
            return; // the server is gone
          }
        }
      });
      while (created.length < 300) await new Promise((r) => setTimeout(r, 20));
      await server.stop('SIGKILL');
      stop = true;
      await Promise.all(writers);

      server = await startServerProcess(env);
      try {
        for (const { id, sha } of created) {
          const res = await fetch(`${server.url}/raw/${id}`);
          assert.equal(res.status, 200, `paste ${id} lost`);
          assert.equal(sha256(await res.text()), sha);
        }
      } finally {
        await server.stop();
      }
    } finally {
      await db.drop();
    }
  });
});

describe('key cache', () => {
  it('a key deactivated by the admin command (another process) is refused within a second', async () => {
    const db = await freshDatabase();
    const env = { DATABASE_URL: db.url, REDIS_URL: '' };
    try {
      const made = await fastpaste(['keys', 'create', '--name', 'cached', '--json'], env);
      const key = JSON.parse(made.stdout).key as string;
      const server = await startServerProcess(env);
      try {
        const get = () => fetch(`${server.url}/api/v1/pastes`, { headers: { 'x-api-key': key } });
        assert.equal((await get()).status, 200); // now cached
        const off = await fastpaste(['keys', 'deactivate', key], env);
        assert.equal(off.code, 0, off.stderr);
        await new Promise((r) => setTimeout(r, 1050));
        assert.equal((await get()).status, 403);
      } finally {
        await server.stop();
      }
    } finally {
      await db.drop();
    }
  });

  it('a key deactivated through the service is refused at once', async () => {
    const server = await startServer();
    try {
      const created = await server.services.keys.create({ name: 'k' });
      const get = () => request(`${server.url}/api/v1/pastes`, { headers: { 'x-api-key': created.key } });
      assert.equal((await get()).status, 200);
      await server.services.keys.setActive(created.apiKey.id, false);
      assert.equal((await get()).status, 403);
    } finally {
      await server.close();
    }
  });
});

describe('counts held in memory', () => {
  it('view counts read before a shutdown are in the database after it', async () => {
    const db = await freshDatabase();
    const first = await startServer({ databaseUrl: db.url });
    const key = await first.createKey();
    const made = await request(`${first.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': key },
      json: { content: 'count my views' },
    });
    const id = made.body.data.paste_id as string;
    for (let i = 0; i < 3; i++) assert.equal((await request(`${first.url}/raw/${id}`)).status, 200);
    await first.close();
    const second = await startServer({ databaseUrl: db.url, clock: first.clock });
    try {
      const rows = await second.sql<{ view_count: number }>(`SELECT view_count FROM pastes WHERE id = '${id}'`);
      assert.equal(Number(rows[0]?.view_count), 3);
    } finally {
      await second.close();
      await db.drop();
    }
  });
});
