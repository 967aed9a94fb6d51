import type { FairwayConfig } from '@fairway/core';
import cors from '@fastify/cors';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Principal } from './auth.ts';
import { RATE_LIMIT_HEADERS } from './rate-limit-headers.ts';

/** Response headers a browser page may read: rate limits, retry hints, ids and timings. */
export const CORS_EXPOSED_HEADERS = [
  ...RATE_LIMIT_HEADERS,
  'retry-after',
  'x-request-id',
  'x-fairway-queue-ms',
  'x-fairway-overhead-ms',
  'x-fairway-fallback-model',
] as const;

/**
 * Answers browsers' cross-origin requests on the public API when `server.cors.enabled` (with
 * `@fastify/cors`). A page's origin is allowed when the fleet lists it (`server.cors.origins`, `*`
 * for any) or the tenant of the API key it sends does (`tenants[].corsOrigins`). A preflight
 * carries no key, so it is answered for an origin any tenant lists; the request itself then gets
 * `Access-Control-Allow-Origin` only if its key's tenant (or the fleet) allows the origin, and the
 * browser keeps the answer from a page that is not. A request whose key is refused is answered
 * readably to any listed origin, so the page can show the 401.
 */
export function useCors(
  app: FastifyInstance,
  config: FairwayConfig,
  principal: (headers: FastifyRequest['headers']) => Principal,
): void {
  const c = config.server.cors;
  if (!c.enabled) return;
  const any = c.origins.includes('*');
  const fleet = new Set(c.origins);
  const byTenant = new Map(config.tenants.map((t) => [t.id, new Set(t.corsOrigins ?? [])]));
  const listed = new Set(config.tenants.flatMap((t) => t.corsOrigins ?? []));
  const allowed = (request: FastifyRequest): boolean | string => {
    const origin = request.headers.origin;
    if (origin === undefined) return false;
    if (any) return '*';
    if (fleet.has(origin)) return true;
    if (!listed.has(origin)) return false;
    if (request.method === 'OPTIONS') return true;
    let tenant: string;
    try {
      tenant = principal(request.headers).tenant;
    } catch {
      return true;
    }
    return byTenant.get(tenant)?.has(origin) === true;
  };
  void app.register(cors, {
    delegator: (request, callback) => {
      callback(null, {
        origin: allowed(request),
        methods: ['GET', 'POST'],
        exposedHeaders: [...CORS_EXPOSED_HEADERS],
        maxAge: c.maxAgeS,
        strictPreflight: false,
      });
    },
  });
}
