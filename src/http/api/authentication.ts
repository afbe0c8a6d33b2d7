/** The X-API-Key check of api-v1.md's Authentication section, as route hooks. */
import type { FastifyRequest } from 'fastify';
import type { ApiKey, KeyService } from '../../keys/key-service.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The calling key, set by the authentication hook; null on an anonymous quick-create. */
    apiKey: ApiKey | null;
  }
}

function presentedKey(request: FastifyRequest): string | undefined {
  const header = request.headers['x-api-key'];
  return Array.isArray(header) ? header[0] : header;
}

/** Every API route but quick-create: 401 without a key, 403 for a bad or inactive one. */
export function requireApiKey(keys: KeyService) {
  return async (request: FastifyRequest): Promise<void> => {
    request.apiKey = await keys.authenticate(presentedKey(request));
  };
}

/**
 * Quick-create: a key when one is sent (and then it must be valid), otherwise anonymous; with
 * anonymous use turned off, a keyless request is a 401 as anywhere else.
 */
export function optionalApiKey(keys: KeyService, anonymousAllowed: boolean) {
  return async (request: FastifyRequest): Promise<void> => {
    const presented = presentedKey(request);
    if (presented === undefined && anonymousAllowed) {
      request.apiKey = null;
      return;
    }
    request.apiKey = await keys.authenticate(presented);
  };
}

/** The key a route behind requireApiKey runs for. */
export function callerKey(request: FastifyRequest): ApiKey {
  if (!request.apiKey) throw new Error('route is not behind requireApiKey');
  return request.apiKey;
}
