/**
 * `Expect: 100-continue` (curl sends it before a large upload): the client holds its body back
 * until the server answers 100 Continue. Node answers it as soon as the head is parsed, so a key
 * refused (401, 403), a key or address over its quota (429) or an address that is not there
 * (404, 405) was first asked for the whole body, which it then sent for nothing. Here the 100 is
 * sent only when the body is about to be read: after the route's admission hooks and the upload
 * slot (upload-slots.ts), as the body's parsing begins. A request answered before that gets its
 * final answer without a 100, and Node closes its connection (the body was never asked for).
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

/** Registered after every preParsing hook that may make a body wait (the upload slots). */
export function askForBodiesWhenAdmitted(app: FastifyInstance): void {
  // The requests Node left the 100 to us for (its own reading of the Expect header).
  const waiting = new WeakSet<IncomingMessage>();
  // With a listener, Node leaves the 100 to it: the request is served as any other.
  app.server.on('checkContinue', (req, res) => {
    waiting.add(req);
    app.server.emit('request', req, res);
  });
  // A callback hook: every request with a body passes here.
  app.addHook('preParsing', (request, reply, payload, done) => {
    if (waiting.has(request.raw) && !request.is404 && !reply.raw.headersSent) reply.raw.writeContinue();
    done(null, payload);
  });
}
