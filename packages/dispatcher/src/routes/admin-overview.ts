import type { FastifyPluginAsync } from 'fastify';
import type { ActivityLog } from '../activity-log.ts';
import type { BandDepth, ReplicaSnapshot } from '../fleet-view.ts';
import type { TenantDirectory } from '../tenant-directory.ts';
import { adminAuthHook } from './admin-api.ts';

/** Options of {@link adminOverviewRoute}. */
export interface AdminOverviewOptions {
  /** The admin token (`--admin-token-file`); the route answers 403 without one, as the admin API does. */
  readonly token: string | undefined;
  readonly dispatcherId: string;
  readonly tenants: TenantDirectory;
  readonly activity: ActivityLog;
  readonly replicas: () => ReplicaSnapshot[];
  readonly queues: () => BandDepth[];
  /** Store clock, ms. */
  readonly now: () => number;
}

/**
 * `GET /admin/v1/overview`: what the live console shows in one read — tenants with their weight
 * and the service this dispatcher delivered to each so far (cost units, cumulative), its queues
 * per pool and band, the replicas as it sees them, and recent throttles and evictions. Same
 * admin-token auth as the admin API.
 */
export const adminOverviewRoute: FastifyPluginAsync<AdminOverviewOptions> = async (app, opts) => {
  app.addHook('onRequest', adminAuthHook(opts.token));
  app.get('/admin/v1/overview', async () => {
    const service = opts.activity.service();
    return {
      dispatcher: opts.dispatcherId,
      at: opts.now(),
      tenants: opts.tenants.ids().map((id) => {
        const t = opts.tenants.get(id);
        return {
          id,
          weight: t?.weight ?? 1,
          sloClass: t?.sloClass,
          limits: t?.limits ?? {},
          service: service[id] ?? 0,
        };
      }),
      queues: opts.queues(),
      replicas: opts.replicas(),
      events: opts.activity.recent(),
    };
  });
};
