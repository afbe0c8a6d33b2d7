/**
 * Answers a client does not read. An answer the kernel cannot take waits in the process until its
 * client reads, and a client that never reads would hold it for as long as it keeps the
 * connection: 100 connections, each with eight pipelined GETs of a 4 MB paste and reading
 * nothing, held 3.7 GB for good. Three bounds:
 *
 * - One answer made at a time on a connection. A request pipelined behind an answer still being
 *   written is handled only once that answer is wholly in the kernel (Node then hands the
 *   connection to the next answer, `'socket'`), so a connection holds at most one answer's bytes
 *   however many requests its client sent in one write. Node parses every request of a chunk in
 *   one turn; each would otherwise be answered at once and its bytes kept until the ones before
 *   it were read.
 * - At most MAX_WAITING_REQUESTS requests waiting so: past it the connection is closed.
 * - What all connections hold in answers the kernel has not taken is bounded (MAX_UNSENT_MB):
 *   past the bound, the connections whose bytes have not moved for STALLED_MS are closed,
 *   largest first, until it holds. Many clients (or one with many addresses) that each stop
 *   reading one large answer would otherwise hold about its size apiece until their time-outs,
 *   however many they are. Clients that read on, however slowly, are bounded by neither.
 * - An answer whose bytes have not moved for the send time-out (SEND_TIMEOUT_SECONDS) closes its
 *   connection, as a web server's send time-out does: Node re-arms a socket's inactivity timer for
 *   as long as its writes progress, so a slow reader that keeps reading is not cut. A connection
 *   with a request at work and nothing to write is left to the other time-outs (a body still
 *   coming to REQUEST_TIMEOUT_SECONDS); one between requests is closed, as Node closes it at the
 *   end of the keep-alive time-out when no one listens to the timer.
 *
 * A waiting request relies on the answer's `'socket'` event, which Node emits when it hands a
 * connection to an answer (assignSocket; documented for a client's request only). A test counts
 * the answers made for a connection that reads none, and fails should it stop coming.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Requests a connection may have waiting behind the answer being written; past it, it is closed. */
export const MAX_WAITING_REQUESTS = 32;

/** Each connection's requests waiting behind the answer being written. */
const queuedOn = new WeakMap<Socket, number>();

/**
 * Calls `serve` once the request's answer has the connection: at once when no answer is being
 * written on it, else when the one before it is wholly in the kernel. A request past
 * MAX_WAITING_REQUESTS closes the connection instead; one whose connection closes while it waits is
 * never served (its client is gone).
 */
export function whenAnswerable(
  req: IncomingMessage,
  res: ServerResponse,
  serve: (req: IncomingMessage, res: ServerResponse) => void,
): void {
  if (res.socket !== null) {
    serve(req, res);
    return;
  }
  const socket = req.socket;
  const queued = (queuedOn.get(socket) ?? 0) + 1;
  if (queued > MAX_WAITING_REQUESTS) {
    socket.destroy();
    return;
  }
  queuedOn.set(socket, queued);
  res.once('socket', () => {
    queuedOn.set(socket, (queuedOn.get(socket) ?? 1) - 1);
    serve(req, res);
  });
}

/**
 * Closes a connection whose answer's bytes have not moved for `sendTimeoutMs`. Node's inactivity
 * timer restarts on every read and write, and on its expiry is suppressed once if the socket's
 * queue of unwritten bytes has changed since its last write, so a connection closes between one
 * and two time-outs after its client stopped reading. The same timer ends a keep-alive
 * connection's wait for its next request (Node sets it to the keep-alive time-out then), and a
 * listener here takes over Node's own close: a connection with no answer in progress is closed
 * too. One with an answer at work and nothing to write (a handler still running, a body still
 * coming) is not.
 */
export function applySendTimeout(server: Server, sendTimeoutMs: number): void {
  server.setTimeout(sendTimeoutMs);
  server.on('timeout', (socket: Socket & { _httpMessage?: unknown }) => {
    if (socket.writableLength > 0 || !socket._httpMessage) socket.destroy();
  });
}

/** How often boundUnsentBytes adds up what the connections hold. */
const UNSENT_CHECK_MS = 1000;

/**
 * How long a connection's bytes must have stood still for boundUnsentBytes to close it. The
 * kernel wakes a writer only once a good part of its send buffer (up to 4 MB) has drained, so a
 * reader that keeps reading shows no progress for seconds at a time: a second's standstill
 * would take a reader of a few hundred KB/s for one that stopped.
 */
export const STALLED_MS = 10_000;

/**
 * Bytes of the connection the kernel has taken: what Node handed libuv less what libuv still
 * holds (both read by Node itself for its time-outs). It grows only when the client reads.
 */
function bytesTaken(socket: Socket): number {
  const internal = socket as Socket & { _bytesDispatched?: number; _handle?: { writeQueueSize?: number } };
  return (internal._bytesDispatched ?? 0) - (internal._handle?.writeQueueSize ?? 0);
}

/**
 * Every UNSENT_CHECK_MS, adds up what each connection holds unsent (its writable length: an
 * answer's buffer is held whole until the kernel has taken all of it; a string counts its
 * characters, up to three bytes each in UTF-8, a buffer its bytes: /raw's large answers). Past `limitBytes`, closes the connections whose
 * taken bytes have not grown for STALLED_MS, largest first, until the rest fit, and tells
 * `onShed` how many and how much.
 */
export function boundUnsentBytes(
  server: Server,
  limitBytes: number,
  onShed: (closed: number, bytes: number) => void,
): void {
  const sockets = new Set<Socket>();
  /** Each connection with bytes unsent: what the kernel had taken, and since when. */
  const progress = new WeakMap<Socket, { taken: number; since: number }>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  const check = () => {
    const now = performance.now();
    let total = 0;
    const stalled: Socket[] = [];
    for (const socket of sockets) {
      const unsent = socket.writableLength;
      if (unsent === 0) {
        progress.delete(socket);
        continue;
      }
      total += unsent;
      const taken = bytesTaken(socket);
      const last = progress.get(socket);
      if (last === undefined || last.taken !== taken) progress.set(socket, { taken, since: now });
      else if (now - last.since >= STALLED_MS) stalled.push(socket);
    }
    if (total <= limitBytes || stalled.length === 0) return;
    stalled.sort((a, b) => b.writableLength - a.writableLength);
    let closed = 0;
    let freed = 0;
    for (const socket of stalled) {
      if (total <= limitBytes) break;
      const unsent = socket.writableLength;
      total -= unsent;
      freed += unsent;
      closed++;
      socket.destroy();
    }
    onShed(closed, freed);
  };
  const timer = setInterval(check, UNSENT_CHECK_MS);
  timer.unref();
  server.once('close', () => clearInterval(timer));
}
