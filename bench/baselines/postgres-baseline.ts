/**
 * The PostgreSQL baselines of `npm run bench -- --db postgres`: plain node:http over a `pg` pool
 * (10 connections, as fastpaste's) doing the same storage work as fastpaste with nothing else.
 *   R  GET  /r/<id>: point read of a 1 KB row by a 10-character text primary key, as text
 *   RJ GET  /j/<id>: the same row answered as JSON
 *   W  POST /w     : one 1 KB insert per request under a random 10-character text key
 * Usage: node --import tsx bench/baselines/postgres-baseline.ts <port> <database url with its schema>
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import pg from 'pg';

const [port, url] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: url as string, max: 10 });
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const newId = () => Array.from(randomBytes(10), (b) => ALPHABET[b % 62]).join('');
const read = { name: 'baseline-read', text: 'SELECT id, body FROM rows WHERE id = $1' };
const insert = { name: 'baseline-insert', text: 'INSERT INTO rows (id, body) VALUES ($1, $2)' };

const fail = (res: http.ServerResponse) => () => {
  res.writeHead(500);
  res.end();
};

http
  .createServer((req, res) => {
    const path = req.url ?? '';
    if (req.method === 'POST' && path === '/w') {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        pool.query({ ...insert, values: [newId(), Buffer.concat(chunks).toString()] }).then(() => {
          res.writeHead(201, { 'content-type': 'text/plain' });
          res.end('ok');
        }, fail(res));
      });
      return;
    }
    pool.query({ ...read, values: [path.slice(3)] }).then((result) => {
      const row = result.rows[0] as { id: string; body: string } | undefined;
      if (!row) {
        res.writeHead(404);
        res.end();
      } else if (path.startsWith('/r/')) {
        res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
        res.end(row.body);
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: row.id, body: row.body }));
      }
    }, fail(res));
  })
  .listen(Number(port), '127.0.0.1');
