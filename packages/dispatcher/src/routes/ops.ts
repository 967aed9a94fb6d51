import type { FastifyPluginAsync } from 'fastify';
import { bearerTokenCheck } from '../auth.ts';
import { ApiError } from '../errors.ts';
import type { GatewayMetrics } from '../gateway-metrics.ts';
import type { GatewayRuntime } from '../gateway-runtime.ts';

/** Options of the health routes plugin. */
export interface HealthRoutesOptions {
  readonly runtime: GatewayRuntime;
}

/**
 * Health endpoints, on the API port and the operator port alike: `GET /health` (the process
 * answers) and `GET /ready` (the dispatcher holds a live lease in the store, so it may take
 * traffic). They reveal nothing about tenants.
 */
export const healthRoutes: FastifyPluginAsync<HealthRoutesOptions> = async (app, opts) => {
  app.get('/health', async () => ({ status: 'ok' }));
  app.get('/ready', async () => {
    if (!opts.runtime.ready)
      throw new ApiError('NOT_READY', 'not ready: no live lease in the store', { retryAfterS: 1 });
    return { status: 'ready', dispatcher: opts.runtime.id };
  });
};

/** Options of the metrics route plugin. */
export interface MetricsRouteOptions {
  readonly runtime: GatewayRuntime;
  readonly metrics: GatewayMetrics;
  /** Pools to report a queue depth for (so an idle pool reports 0, not nothing). */
  readonly pools: () => readonly string[];
  /** Bearer token `/metrics` requires (`server.metricsToken`); none when undefined. */
  readonly token: string | undefined;
  /** Sets the gauges read from the fleet (replicas, bands, weights) just before a scrape. */
  readonly observe: () => void;
}

/**
 * `GET /metrics` (Prometheus text), served on the operator port only: its tenant labels, outcomes
 * and token counts are operators' business. With `server.metricsToken` it requires
 * `Authorization: Bearer <token>` (compared in constant time).
 */
/** Sets the gauges `/metrics` reads at scrape time (queue depths, in-flight requests, the fleet's). */
export function observeGauges(
  opts: Pick<MetricsRouteOptions, 'runtime' | 'metrics' | 'pools' | 'observe'>,
): void {
  const { metrics, runtime } = opts;
  const stats = runtime.stats();
  metrics.inflight.set({ state: 'queued' }, stats.queued);
  metrics.inflight.set({ state: 'running' }, stats.running);
  const depth = runtime.queuedByPool();
  for (const p of new Set([...opts.pools(), ...depth.keys()]))
    metrics.queueDepth.set({ pool: p }, depth.get(p) ?? 0);
  opts.observe();
}

export const metricsRoute: FastifyPluginAsync<MetricsRouteOptions> = async (app, opts) => {
  const authorized = opts.token === undefined ? undefined : bearerTokenCheck(opts.token);
  app.get('/metrics', async (request, reply) => {
    if (authorized !== undefined && !authorized(request.headers))
      throw new ApiError(
        'INVALID_API_KEY',
        'metrics need the operator token (Authorization: Bearer <token>)',
      );
    observeGauges(opts);
    const text = await opts.metrics.registry.metrics();
    return reply.header('content-type', opts.metrics.registry.contentType).send(text);
  });
};
