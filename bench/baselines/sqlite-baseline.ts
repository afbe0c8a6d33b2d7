/**
 * The baselines of `npm run bench`: plain node:http over better-sqlite3 doing the same storage
 * work as fastpaste with nothing else.
 *   R  GET  /r/<id>: point read of a 1 KB row by a 10-character text primary key, as text
 *   RJ GET  /j/<id>: the same row answered as JSON
 *   W  POST /w     : one 1 KB insert per request under a random 10-character text key
 *                    (WAL, synchronous=NORMAL)
 * Usage: node --import tsx bench/baselines/sqlite-baseline.ts <port> <database file>
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import Database from 'better-sqlite3';

const [port, file] = process.argv.slice(2);
const db = new Database(file as string);
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
db.exec('CREATE TABLE IF NOT EXISTS rows (id TEXT PRIMARY KEY, body TEXT NOT NULL)');
const read = db.prepare('SELECT id, body FROM rows WHERE id = ?');
const insert = db.prepare('INSERT INTO rows (id, body) VALUES (?, ?)');
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const newId = () => Array.from(randomBytes(10), (b) => ALPHABET[b % 62]).join('');

http
  .createServer((req, res) => {
    const url = req.url ?? '';
    if (req.method === 'POST' && url === '/w') {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        insert.run(newId(), Buffer.concat(chunks).toString());
        res.writeHead(201, { 'content-type': 'text/plain' });
        res.end('ok');
      });
      return;
    }
    const row = read.get(url.slice(3)) as { id: string; body: string } | undefined;
    if (!row) {
      res.writeHead(404);
      res.end();
    } else if (url.startsWith('/r/')) {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(row.body);
    } else {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: row.id, body: row.body }));
    }
  })
  .listen(Number(port), '127.0.0.1');

// Exit on SIGTERM as a normal exit, so that a --cpu-prof run writes its profile.
process.on('SIGTERM', () => process.exit(0));
