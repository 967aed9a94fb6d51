import type { Clock } from '@fairway/core';
import type { SchedulingStore, UsageRow } from '@fairway/store';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { ApiError } from '../errors.ts';
import { daysBetween, utcDay } from '../quotas.ts';
import { adminAuthHook } from './admin-api.ts';

/** Options of {@link usageApiRoutes}. */
export interface UsageApiOptions {
  readonly store: SchedulingStore;
  /** The store's clock: the default range ends today (UTC). */
  readonly clock: Clock;
  /** The admin API's bearer token (`AdminApiSettings.token`); every route answers 403 without one. */
  readonly token: string | undefined;
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
 * `GET /admin/v1/usage?tenant=&key=&model=&from=&to=`: recorded usage per UTC day, tenant, key
 * (its `sha256:` id, never a secret) and model — requests, input and output tokens and cost — and
 * their totals. `from` defaults to the first day of the current UTC month, `to` to today; at most
 * 400 days. Operator-only: behind the admin API's authentication, never on the public port.
 */
export const usageApiRoutes: FastifyPluginAsync<UsageApiOptions> = async (app, opts) => {
  app.addHook('onRequest', adminAuthHook(opts.token));
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
