/**
 * Connections open at once from one client address (an IPv4 address or an IPv6 /64, as the
 * anonymous limits count: client-address.ts) are capped (MAX_CONNECTIONS_PER_ADDRESS). Past the
 * cap a new connection is answered 429 `rate_limited` in the envelope, nothing of it read, and
 * closed. The time-outs end every connection in bounded time (headers, request, keep-alive,
 * send); this bounds how many one address holds meanwhile (a descriptor and its buffers each):
 * without it one client could open connections until the process ran out of descriptors. Idle
 * keep-alive connections count too, and clients behind one NAT share the cap.
 *
 * The address is the socket's peer. A trusted proxy's (TRUST_PROXY's list) is not capped, its
 * clients being many; with TRUST_PROXY a number every peer is taken for a proxy, and nothing is.
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { clientBucket } from '../client-address.js';
import { AppError } from '../errors.js';
import { refuseConnection } from './client-errors.js';

/**
 * Refusals of one address still lingering (their 429 written, closed 2 s later) past which a new
 * connection of it is closed at once, unanswered: a refused connection keeps its descriptor for
 * the linger, and an address connecting without pause would hold two seconds' worth of them.
 */
export const MAX_LINGERING_REFUSALS = 16;

export function capConnectionsPerAddress(
  server: Server,
  max: number,
  trusted: (address: string) => boolean,
  onRefused: (address: string) => void,
): void {
  if (max <= 0) return;
  const open = new Map<string, number>();
  const lingering = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const peer = socket.remoteAddress ?? '';
    if (trusted(peer)) return;
    const bucket = clientBucket(peer);
    if ((open.get(bucket) ?? 0) < max) {
      countWhileOpen(open, bucket, socket);
      return;
    }
    onRefused(peer);
    if ((lingering.get(bucket) ?? 0) >= MAX_LINGERING_REFUSALS) {
      socket.destroy();
      return;
    }
    countWhileOpen(lingering, bucket, socket);
    refuseConnection(
      socket,
      new AppError('rate_limited', `Too many connections from this address at once (at most ${max}).`, {
        headers: { 'retry-after': '1' },
      }),
    );
  });
}

/** Counts the socket under `bucket` in `counts` until it closes. */
function countWhileOpen(counts: Map<string, number>, bucket: string, socket: Socket): void {
  counts.set(bucket, (counts.get(bucket) ?? 0) + 1);
  socket.once('close', () => {
    const left = (counts.get(bucket) ?? 1) - 1;
    if (left > 0) counts.set(bucket, left);
    else counts.delete(bucket);
  });
}
