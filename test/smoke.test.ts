import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request, startServer, type TestServer } from './helpers.js';

describe('smoke', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  it('creates and reads back a paste', async () => {
    const key = await server.createKey();
    const created = await request(`${server.url}/api/v1/paste`, {
      method: 'POST',
      headers: { 'x-api-key': key },
      json: { content: 'hello world' },
    });
    assert.equal(created.status, 201);
    const read = await request(`${server.url}/api/v1/paste/${created.body.data.paste_id}`, {
      headers: { 'x-api-key': key },
    });
    assert.equal(read.status, 200);
    assert.equal(read.body.data.content, 'hello world');
  });
});
