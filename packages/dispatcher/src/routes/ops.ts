import type { FastifyPluginAsync } from 'fastify';
import { ApiError } from '../errors.ts';
import type { GatewayMetrics } from '../gateway-metrics.ts';
import type { GatewayRuntime } from '../gateway-runtime.ts';

/** Options of the operations routes plugin. */
export interface OpsRoutesOptions {
  readonly runtime: GatewayRuntime;
  readonly metrics: GatewayMetrics;
  /** Pools to report a queue depth for (so an idle pool reports 0, not nothing). */
  readonly pools: () => readonly string[];
}

/**
 * Operations endpoints: `GET /health` (the process answers), `GET /ready` (the dispatcher holds a
 * live lease in the store, so it may take traffic) and `GET /metrics` (Prometheus text).
 */
export const opsRoutes: FastifyPluginAsync<OpsRoutesOptions> = async (app, opts) => {
  app.get('/health', async () => ({ status: 'ok' }));
  app.get('/ready', async () => {
    if (!opts.runtime.ready)
      throw new ApiError('NOT_READY', 'not ready: no live lease in the store', { retryAfterS: 1 });
    return { status: 'ready', dispatcher: opts.runtime.id };
  });
  app.get('/metrics', async (_request, reply) => {
    const { metrics, runtime } = opts;
    const stats = runtime.stats();
    metrics.inflight.set({ state: 'queued' }, stats.queued);
    metrics.inflight.set({ state: 'running' }, stats.running);
    const depth = runtime.queuedByPool();
    for (const p of new Set([...opts.pools(), ...depth.keys()]))
      metrics.queueDepth.set({ pool: p }, depth.get(p) ?? 0);
    const text = await metrics.registry.metrics();
    return reply.header('content-type', metrics.registry.contentType).send(text);
  });
};
