import { type AdminEventInput, adminEventSchema, type Bus, type OperatorSigner } from '@fairway/bus';
import { type Clock, configIdSchema, hashApiKey, limitsSchema } from '@fairway/core';
import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { AdminTrust } from '../admin-events.ts';
import { bearerTokenCheck, type KeyRing, keyExpiry, newApiKey } from '../auth.ts';
import { validationError } from '../error-mapping.ts';
import { ApiError } from '../errors.ts';
import type { TenantDirectory } from '../tenant-directory.ts';

/** How a dispatcher serves the admin HTTP API (`serve --admin-token-file`, `--operator-key`). */
export interface AdminApiSettings {
  /** Bearer token every `/admin/v1` request must carry; the API answers 403 without one. */
  readonly token: string | undefined;
  /** Signs the admin events the API publishes; without it only the in-process bus takes writes. */
  readonly signer: OperatorSigner | undefined;
}

/** Options of {@link adminApiRoutes}. */
export interface AdminApiOptions {
  readonly settings: AdminApiSettings;
  /** Which admin events this dispatcher's fleet applies: decides whether a write can take effect. */
  readonly trust: AdminTrust;
  readonly bus: Bus;
  readonly tenants: TenantDirectory;
  readonly keys: KeyRing;
  readonly clock: Clock;
}

/**
 * Publishes one admin event the way `fairway admin` does — signed when the dispatcher holds the
 * operator key — and returns its sequence number; throws the 403 that explains why this
 * dispatcher cannot make writes take effect.
 */
export type AdminPublisher = (event: AdminEventInput) => Promise<number>;

/** The `onRequest` hook that admits only the operator: 403 when the API is off, 401 on a wrong token. */
export function adminAuthHook(token: string | undefined): (request: FastifyRequest) => Promise<void> {
  const authorized = token === undefined ? undefined : bearerTokenCheck(token);
  return async (request) => {
    if (authorized === undefined)
      throw new ApiError(
        'ADMIN_API_DISABLED',
        'the admin API is disabled: start the dispatcher with --admin-token-file (or FAIRWAY_ADMIN_TOKEN_FILE)',
      );
    if (!authorized(request.headers))
      throw new ApiError(
        'INVALID_API_KEY',
        'the admin API needs the admin token (Authorization: Bearer <token>)',
      );
  };
}

/** The publisher of a dispatcher: refuses writes its fleet would not apply. */
export function adminPublisher(opts: Pick<AdminApiOptions, 'settings' | 'trust' | 'bus'>): AdminPublisher {
  const { signer } = opts.settings;
  return async (event) => {
    const checked = adminEventSchema.safeParse(event);
    if (!checked.success) throw validationError(checked.error);
    if (signer !== undefined) return opts.bus.publishAdminEvent(signer.sign(event, opts.bus.prefix));
    if (opts.trust.kind === 'in-process') return opts.bus.publishAdminEvent(event);
    throw new ApiError(
      'ADMIN_WRITES_DISABLED',
      opts.trust.kind === 'none'
        ? 'admin writes are disabled: the fleet applies no admin event (no operator public key configured)'
        : 'admin writes are disabled: give this dispatcher the operator private key (--operator-key or FAIRWAY_OPERATOR_KEY_FILE) to sign them',
    );
  };
}

/** A key's expiry (see {@link keyExpiry}); throws a 400 naming `expiresAt`. */
function expiryOf(value: number | string, nowMs: number): number {
  const at = keyExpiry(value, nowMs);
  if (at === 'invalid')
    throw new ApiError(
      'INVALID_REQUEST',
      'expiresAt must be ms since the epoch, an ISO-8601 time or a duration like 30d, 12h, 90m',
      { param: 'expiresAt' },
    );
  if (at === 'past')
    throw new ApiError('INVALID_REQUEST', 'expiresAt must be in the future', { param: 'expiresAt' });
  return at;
}

const tenantBody = z
  .object({
    weight: z.number().positive().optional(),
    sloClass: configIdSchema.optional(),
    limits: limitsSchema.optional(),
  })
  .strict();
const keyBody = z
  .object({
    tenant: configIdSchema,
    app: configIdSchema.optional(),
    sloClass: configIdSchema.optional(),
    expiresAt: z.union([z.number().int().positive(), z.string().min(1).max(64)]).optional(),
  })
  .strict();
const keyId = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'must be "sha256:" followed by 64 hex digits');
const limitsScope = z.enum(['tenant', 'app', 'user', 'default']);

function parsed<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (!r.success) throw validationError(r.error);
  return r.data;
}

/**
 * The admin HTTP API on the operator port, under `/admin/v1`: tenants, API keys (never their
 * secrets) and limits, read from this dispatcher's view and changed through the same admin events
 * `fairway admin` publishes, so every dispatcher applies a change alike. Writes answer 202 once
 * published; they apply asynchronously. Every route needs the admin token.
 */
export const adminApiRoutes: FastifyPluginAsync<AdminApiOptions> = async (app: FastifyInstance, opts) => {
  const { tenants, keys, clock } = opts;
  const publish = adminPublisher(opts);
  const accepted = (type: AdminEventInput['type'], seq: number) => ({ seq, type });
  app.addHook('onRequest', adminAuthHook(opts.settings.token));

  app.get('/admin/v1/tenants', async () => ({
    data: tenants.ids().map((id) => {
      const t = tenants.get(id);
      return { id, weight: t?.weight, sloClass: t?.sloClass, limits: t?.limits ?? {} };
    }),
  }));

  app.put('/admin/v1/tenants/:id', async (request, reply) => {
    const id = parsed(configIdSchema, (request.params as { id: string }).id);
    const body = parsed(tenantBody, request.body);
    const current = tenants.get(id);
    const seq = await publish({
      type: 'tenantUpsert',
      at: clock.now(),
      by: 'admin-api',
      tenant: {
        id,
        weight: body.weight ?? current?.weight ?? 1,
        ...((body.sloClass ?? current?.sloClass) !== undefined
          ? { sloClass: body.sloClass ?? current?.sloClass }
          : {}),
        limits: body.limits ?? current?.limits ?? {},
      },
    });
    return reply.code(202).send(accepted('tenantUpsert', seq));
  });

  app.get('/admin/v1/keys', async (request) => {
    const tenant = (request.query as { tenant?: string }).tenant;
    return { data: keys.list(tenant) };
  });

  app.post('/admin/v1/keys', async (request, reply) => {
    const body = parsed(keyBody, request.body);
    if (!tenants.has(body.tenant))
      throw new ApiError('RESOURCE_NOT_FOUND', `no tenant "${body.tenant}"`, { param: 'tenant' });
    const expiresAt = body.expiresAt === undefined ? undefined : expiryOf(body.expiresAt, clock.now());
    const key = newApiKey();
    const id = hashApiKey(key);
    const seq = await publish({
      type: 'keyAdd',
      at: clock.now(),
      by: 'admin-api',
      tenantId: body.tenant,
      keyHash: id,
      ...(body.app !== undefined ? { app: body.app } : {}),
      ...(body.sloClass !== undefined ? { sloClass: body.sloClass } : {}),
      ...(expiresAt !== undefined ? { expiresAt } : {}),
    });
    return reply.code(201).send({ key, id, tenant: body.tenant, expiresAt, seq });
  });

  app.delete('/admin/v1/keys/:id', async (request, reply) => {
    const id = parsed(keyId, (request.params as { id: string }).id);
    if (!keys.holds(id)) throw new ApiError('RESOURCE_NOT_FOUND', `no key ${id}`, { param: 'id' });
    const seq = await publish({ type: 'keyRevoke', at: clock.now(), by: 'admin-api', keyHash: id });
    return reply.code(202).send(accepted('keyRevoke', seq));
  });

  app.put('/admin/v1/limits/:scope', async (request, reply) => {
    const scope = parsed(limitsScope, (request.params as { scope: string }).scope);
    if (scope !== 'default')
      throw new ApiError(
        'INVALID_REQUEST',
        `scope ${scope} needs an id: PUT /admin/v1/limits/${scope}/<id>`,
        {
          param: 'scope',
        },
      );
    const limits = parsed(limitsSchema, request.body);
    const seq = await publish({ type: 'limitsSet', at: clock.now(), by: 'admin-api', scope, limits });
    return reply.code(202).send(accepted('limitsSet', seq));
  });

  app.put('/admin/v1/limits/:scope/:id', async (request, reply) => {
    const params = request.params as { scope: string; id: string };
    const scope = parsed(limitsScope, params.scope);
    if (scope === 'default')
      throw new ApiError('INVALID_REQUEST', 'scope default takes no id: PUT /admin/v1/limits/default', {
        param: 'id',
      });
    const id = parsed(configIdSchema, params.id);
    const limits = parsed(limitsSchema, request.body);
    const seq = await publish({ type: 'limitsSet', at: clock.now(), by: 'admin-api', scope, id, limits });
    return reply.code(202).send(accepted('limitsSet', seq));
  });
};
