import type { Bus } from '@fairway/bus';
import { type Clock, configIdSchema, quotasSchema } from '@fairway/core';
import type { SchedulingStore, UsageRow } from '@fairway/store';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import type { AdminTrust } from '../admin-events.ts';
import { validationError } from '../error-mapping.ts';
import { ApiError } from '../errors.ts';
import { daysBetween, utcDay } from '../quotas.ts';
import type { TenantDirectory } from '../tenant-directory.ts';
import { type AdminApiSettings, adminAuthHook, adminPublisher } from './admin-api.ts';

/** Options of {@link usageApiRoutes}. */
export interface UsageApiOptions {
  readonly store: SchedulingStore;
  /** The store's clock: the default range ends today (UTC). */
  readonly clock: Clock;
  /** The admin API's token and signer, as `adminApiRoutes` gets them. */
  readonly settings: AdminApiSettings;
  readonly trust: AdminTrust;
  readonly bus: Bus;
  /** Budgets as this dispatcher applies them (`GET /admin/v1/quotas`). */
  readonly tenants: TenantDirectory;
}

const day = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a UTC day, YYYY-MM-DD');
const querySchema = z
  .object({
    tenant: z.string().min(1).max(64).optional(),
    key: z
      .string()
      .regex(/^sha256:[0-9a-f]{64}$/, 'must be a key id, "sha256:" followed by 64 hex digits')
      .optional(),
    model: z.string().min(1).max(256).optional(),
    from: day.optional(),
    to: day.optional(),
  })
  .strict();

const keyIdSchema = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'must be "sha256:" followed by 64 hex digits');

function parsedQuotas(body: unknown) {
  const r = quotasSchema.safeParse(body ?? {});
  if (!r.success) throw validationError(r.error);
  return r.data;
}

/** Most days one usage query may span. */
const MAX_DAYS = 400;

/** Sum of rows' usage. */
function totalsOf(rows: readonly UsageRow[]) {
  let requests = 0;
  let inputTokens = 0;
  let outputTokens = 0;
  let cost = 0;
  for (const r of rows) {
    requests += r.requests;
    inputTokens += r.inputTokens;
    outputTokens += r.outputTokens;
    cost += r.cost;
  }
  return { requests, inputTokens, outputTokens, cost };
}

/**
 * The usage and quota routes of the admin API (operator port, admin token, as `adminApiRoutes`):
 * `GET /admin/v1/quotas` (budgets as this dispatcher applies them), `PUT /admin/v1/quotas/default`,
 * `PUT /admin/v1/quotas/tenant/<id>`, `PUT /admin/v1/quotas/key/<sha256:…>` (a `quotaSet` admin
 * event, 202 once published; `{}` clears), and
 * `GET /admin/v1/usage?tenant=&key=&model=&from=&to=`: recorded usage per UTC day, tenant, key
 * (its `sha256:` id, never a secret) and model — requests, input and output tokens and cost — and
 * their totals. `from` defaults to the first day of the current UTC month, `to` to today; at most
 * 400 days. Operator-only: behind the admin API's authentication, never on the public port.
 */
export const usageApiRoutes: FastifyPluginAsync<UsageApiOptions> = async (app, opts) => {
  app.addHook('onRequest', adminAuthHook(opts.settings.token));
  const publish = adminPublisher(opts);

  app.get('/admin/v1/quotas', async () => {
    const { tenants } = opts;
    return {
      default: tenants.defaultQuotas() ?? {},
      tenants: tenants.ids().flatMap((id) => {
        const q = tenants.ownQuotas(id);
        return q === undefined ? [] : [{ id, quotas: q }];
      }),
      keys: tenants.keysWithQuotas().map(([id, quotas]) => ({ id, quotas })),
    };
  });

  app.put('/admin/v1/quotas/:scope', async (request, reply) => {
    const { scope } = request.params as { scope: string };
    if (scope !== 'default')
      throw new ApiError(
        'INVALID_REQUEST',
        `scope ${scope} needs an id: PUT /admin/v1/quotas/${scope}/<id>`,
        {
          param: 'scope',
        },
      );
    const quotas = parsedQuotas(request.body);
    const seq = await publish({ type: 'quotaSet', at: opts.clock.now(), by: 'admin-api', scope, quotas });
    return reply.code(202).send({ seq, type: 'quotaSet' });
  });

  app.put('/admin/v1/quotas/:scope/:id', async (request, reply) => {
    const params = request.params as { scope: string; id: string };
    const scope = params.scope;
    if (scope !== 'tenant' && scope !== 'key')
      throw new ApiError('INVALID_REQUEST', 'scope must be tenant, key or default', { param: 'scope' });
    const id = scope === 'tenant' ? configIdSchema.safeParse(params.id) : keyIdSchema.safeParse(params.id);
    if (!id.success) throw validationError(id.error);
    if (scope === 'tenant' && !opts.tenants.has(id.data))
      throw new ApiError('RESOURCE_NOT_FOUND', `no tenant "${id.data}"`, { param: 'id' });
    const quotas = parsedQuotas(request.body);
    const seq = await publish({
      type: 'quotaSet',
      at: opts.clock.now(),
      by: 'admin-api',
      scope,
      id: id.data,
      quotas,
    });
    return reply.code(202).send({ seq, type: 'quotaSet' });
  });

  app.get('/admin/v1/usage', async (request) => {
    const parsed = querySchema.safeParse(request.query ?? {});
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const param = String(issue?.path[0] ?? '');
      throw new ApiError('INVALID_REQUEST', `invalid query: ${param ? `${param}: ` : ''}${issue?.message}`, {
        ...(param ? { param } : {}),
      });
    }
    const q = parsed.data;
    const today = utcDay(opts.clock.now());
    const to = q.to ?? today;
    const from = q.from ?? `${to.slice(0, 7)}-01`;
    const days = daysBetween(from, to, MAX_DAYS);
    if (days === undefined)
      throw new ApiError('INVALID_REQUEST', `a usage query spans at most ${MAX_DAYS} days`, {
        param: 'from',
      });
    if (days.length === 0)
      throw new ApiError('INVALID_REQUEST', '"from" must not be after "to"', { param: 'from' });
    if (opts.store.usage === undefined) throw new ApiError('INTERNAL', 'this store does not record usage');
    const data = await opts.store.usage({
      days,
      ...(q.tenant !== undefined ? { tenant: q.tenant } : {}),
      ...(q.key !== undefined ? { key: q.key } : {}),
      ...(q.model !== undefined ? { model: q.model } : {}),
    });
    return { object: 'list', from, to, data, totals: totalsOf(data) };
  });
};
