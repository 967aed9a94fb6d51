import {
  ConfigError,
  type CostFunction,
  costFunctionByName,
  DEFAULT_CACHED_TOKEN_WEIGHT,
  ErrorCode,
  type FairwayConfig,
  type LimitsConfig,
  type RequestDescriptor,
  type SloClass,
  tenantUserId,
} from '@fairway/core';
import { cachedTokenWeightFor } from '@fairway/perf';
import {
  type AdmissionPolicy,
  AppProfileLearner,
  aladdinPlacement,
  edfPolicy,
  fcfsPolicy,
  MINUTE_MS,
  type OrderingPolicy,
  oitAdmission,
  type PlacementPolicy,
  placementByName,
  type QueuePlanner,
  rpmWindow,
  tpmWindow,
  vtcPolicy,
  type WindowLimit,
  wscPolicy,
} from '@fairway/policy';
import type { AdmissionFunction, AdmissionRules } from '@fairway/scheduler';
import { loadPerformanceModels, performanceModelOf, type ReplicaIdentity } from './performance-models.ts';
import { usageAdmission } from './quotas.ts';
import { TenantDirectory } from './tenant-directory.ts';

/** Everything the gateway scheduler needs, derived once from the config file. */
export interface SchedulingSetup {
  readonly ordering: OrderingPolicy;
  readonly placement: PlacementPolicy;
  /** Tenant and app RPM/TPM windows, OIT throttles, per-tenant and per-pool queue bounds. */
  readonly admission: AdmissionFunction;
  /** SLO classes as the gateway queues them (EDF queues every class in one band). */
  readonly sloClasses: readonly SloClass[];
  /**
   * The planner of the SLO-class control plane: `qlm` for `ordering: qlm`, `edf` for `ordering:
   * edf`; undefined for the other orderings, which run without one.
   */
  readonly planner: QueuePlanner | undefined;
  /** The cost function service is measured with (metrics). */
  readonly cost: CostFunction;
  /** The pool a model is served by: configured pools first, else the model name itself. */
  poolOf(model: string): string;
  /** Models named by configured pools. */
  readonly configuredModels: readonly string[];
  /**
   * The app profiles WSC learns from settled calls (`ordering: wsc`): the dispatcher shares the
   * calls it observes with the others over the bus and learns from theirs.
   */
  readonly appProfiles: AppProfileLearner | undefined;
}

/** Calls a dispatcher keeps for sharing between two bus messages; more are learned locally only. */
const SHARED_SAMPLES = 4096;

function unsupported(path: string, message: string): ConfigError {
  return new ConfigError(ErrorCode.CONFIG_INVALID, 'fairway config', [{ path, message }]);
}

/** RPM and TPM windows of an app's or end user's limits (tenant windows come from policy). */
function scopeWindows(
  scope: 'app' | 'user',
  id: string,
  l: LimitsConfig | undefined,
  reservedTokens: number,
): WindowLimit[] {
  const out: WindowLimit[] = [];
  if (l?.rpm !== undefined)
    out.push({
      key: `rpm:${scope}:${id}`,
      limit: l.rpm,
      amount: 1,
      windowMs: MINUTE_MS,
      code: 'rpm_limited',
    });
  if (l?.tpm !== undefined)
    out.push({
      key: `tpm:${scope}:${id}`,
      limit: l.tpm,
      amount: reservedTokens,
      windowMs: MINUTE_MS,
      code: 'tpm_limited',
      trueUp: true,
    });
  return out;
}

function orderingFromConfig(
  config: FairwayConfig,
  cost: CostFunction,
  tenants: TenantDirectory,
  learner: AppProfileLearner,
): OrderingPolicy {
  const weightOf = (tenant: string): number => tenants.weightOf(tenant);
  const cachedTokenWeight = cachedTokenWeightFromConfig(config);
  switch (config.policy.ordering) {
    case 'fcfs':
    case 'rpm':
      // `rpm` is FCFS with per-tenant RPM limits; the limits come from the tenants' config.
      return fcfsPolicy(cost);
    case 'lcf':
      return vtcPolicy({ cost, cachedTokenWeight, lift: 'none', weightOf });
    case 'vtc':
      return vtcPolicy({ cost, cachedTokenWeight, weightOf });
    case 'vtc-predict':
      return vtcPolicy({ cost, cachedTokenWeight, weightOf, prediction: 'history' });
    case 'vtc-oracle':
      throw unsupported(
        'policy.ordering',
        'vtc-oracle needs true output lengths, which only the simulator knows; use vtc or vtc-predict',
      );
    case 'wsc': {
      const apps = new Map(config.apps.map((a) => [a.id, { id: a.id, stages: a.stages }]));
      if (apps.size === 0)
        throw unsupported('apps', 'policy.ordering wsc needs at least one app with its token profile');
      const fallback = config.apps[0];
      // Configured profiles start it; then every dispatcher learns them from every settled call.
      // E per end user: the descriptor's user is `<tenant>/<user>` (tenantUserId).
      const priority = new Map(
        config.tenants.flatMap((t) =>
          Object.entries(t.userPriority ?? {}).map(([user, e]) => [tenantUserId(t.id, user), e] as const),
        ),
      );
      return wscPolicy({
        cachedTokenWeight,
        userPriority: (user) => priority.get(user) ?? 1,
        appProfile: (app) => apps.get(app),
        learner,
        ...(fallback ? { fallbackProfile: { id: fallback.id, stages: fallback.stages } } : {}),
      });
    }
    case 'edf':
      // Earliest deadline first over every class in one band, as the simulator's EDF baseline.
      return edfPolicy(config.sloClasses, cost);
    case 'qlm':
      // QLM: the control plane orders the bands; inside a class's band the live gateway keeps VTC,
      // on purpose: tenants share a class fairly (fairway's first promise), and each tenant's
      // requests still leave in arrival order (a flow is FIFO). The simulator's `--policy qlm`
      // serves a class in plain arrival order, as the paper's request groups do.
      return { ...vtcPolicy({ cost, cachedTokenWeight, weightOf }), name: 'qlm' };
  }
}

/**
 * The weight of a prompt token served from the prefix cache, per request: `policy.cachedTokenWeight`
 * when set, else the relative cost of the request's pool derived from its engines' performance
 * presets (the largest when they differ; `DEFAULT_CACHED_TOKEN_WEIGHT` when none is known).
 */
export function cachedTokenWeightFromConfig(
  config: FairwayConfig,
): number | ((req: RequestDescriptor) => number) {
  const set = config.policy.cachedTokenWeight;
  if (set !== undefined) return set;
  const byModel = new Map<string, number>();
  for (const pool of config.pools) {
    let w: number | undefined;
    for (const e of config.engines) {
      if (e.pool !== pool.id || e.gpu === undefined) continue;
      const own = cachedTokenWeightFor(pool.model, e.gpu, e.tp);
      if (own !== undefined) w = Math.max(w ?? 0, own);
    }
    byModel.set(pool.model, w ?? DEFAULT_CACHED_TOKEN_WEIGHT);
  }
  return (req) => byModel.get(req.model) ?? DEFAULT_CACHED_TOKEN_WEIGHT;
}

function placementFromConfig(
  config: FairwayConfig,
  identityOf: ((replicaId: string) => ReplicaIdentity | undefined) | undefined,
): PlacementPolicy {
  const { placement, performanceModels, slo } = config.policy;
  if (placement !== 'aladdin') {
    if (performanceModels.length > 0)
      throw unsupported('policy.performanceModels', 'performance models are used by placement aladdin only');
    if (slo !== undefined) throw unsupported('policy.slo', 'SLO targets are used by placement aladdin only');
    return placementByName(placement);
  }
  if (performanceModels.length === 0) {
    if (slo !== undefined)
      throw unsupported('policy.slo', 'aladdin needs policy.performanceModels to place for SLO targets');
    // Best fit by capacity norm over the store's reservations, bounded by KV and sequence slots.
    return aladdinPlacement();
  }
  // Each replica with a performance model gets the room its SLO constraints allow (Aladdin
  // section 4.2 via the placement's capacity hook); replicas without one keep KV and sequences.
  const perfOf = performanceModelOf(loadPerformanceModels(performanceModels), config, identityOf);
  return aladdinPlacement({
    perfOf,
    ...(slo === undefined ? {} : { atgtMs: slo.atgtS * 1000 }),
    ...(slo?.ttftS === undefined ? {} : { ttftMs: slo.ttftS * 1000 }),
  });
}

/**
 * Builds the scheduling policies of a dispatcher from the config file. Unsupported choices fail
 * here, at start-up, with a `ConfigError` naming the field. Weights and limits are read from
 * `tenants` on every request, so admin events change them live.
 */
export function schedulingFromConfig(
  config: FairwayConfig,
  dispatcherId: string,
  tenants: TenantDirectory = TenantDirectory.fromConfig(config),
  /** A replica's model, GPU and TP (the registry's registration), for its performance model. */
  replicaIdentity?: (replicaId: string) => ReplicaIdentity | undefined,
): SchedulingSetup {
  const cost = costFunctionByName(config.policy.cost.fn, config.policy.cost.wIn, config.policy.cost.wOut);
  // Configured apps only: an app name a client makes up learns nothing and costs no memory.
  const learner = new AppProfileLearner({
    keep: SHARED_SAMPLES,
    apps: new Set(config.apps.map((a) => a.id)),
  });
  const ordering = orderingFromConfig(config, cost, tenants, learner);
  const placement = placementFromConfig(config, replicaIdentity).forDispatcher(dispatcherId);

  const poolByModel = new Map(config.pools.map((p) => [p.model, p.id]));
  const poolMaxQueued = new Map(config.pools.map((p) => [p.id, p.maxQueued]));

  // OIT's throttles apply only when configured; its interaction tracking also serves an ordering
  // that serves continuations first (WSC): the store takes a call made while its interaction
  // (`x-fairway-interaction`) is open as a continuation, whichever dispatcher admitted the others.
  const interactions: AdmissionPolicy | undefined =
    config.policy.oit || ordering.continuation !== undefined
      ? oitAdmission({
          userLimit: config.policy.oitLimits.userRpm,
          appLimit: config.policy.oitLimits.appRpm,
          appLimitOf: (app) => tenants.appOitRpm(app),
        })
      : undefined;
  const oit = config.policy.oit ? interactions : undefined;

  // Usage is recorded for every request; budgets are the tenant's (or the defaults) and the key's.
  const prices = new Map(Object.entries(config.pricing));
  const quotaSources = {
    priceOf: (model: string) => prices.get(model),
    tenantQuotas: (tenant: string) => tenants.tenantQuotas(tenant),
    keyQuotas: (keyId: string) => tenants.keyQuotas(keyId),
  };
  const admission: AdmissionFunction = (req: RequestDescriptor, ctx): AdmissionRules => {
    const limits: WindowLimit[] = [];
    const t = tenants.tenantLimits(req.tenant);
    if (t.rpm !== undefined) limits.push(rpmWindow(req.tenant, t.rpm));
    if (t.tpm !== undefined) limits.push(tpmWindow(req.tenant, t.tpm, ctx.reservedTokens));
    if (req.app !== undefined)
      limits.push(...scopeWindows('app', req.app, tenants.appLimits(req.app), ctx.reservedTokens));
    if (req.user !== undefined) {
      // Limits an operator set for this tenant's user (`<tenant>/<user>`), else for every
      // tenant's user of that name; either way the window is this tenant's user's own.
      const bare = req.user.slice(req.tenant.length + 1);
      const l = tenants.userLimits(req.user) ?? tenants.userLimits(bare);
      limits.push(...scopeWindows('user', req.user, l, ctx.reservedTokens));
    }
    if (oit) limits.push(...oit.limits(req, ctx));
    const interaction: AdmissionRules['interaction'] = interactions?.interaction(req);
    const { usage, quotas } = usageAdmission(quotaSources, req, ctx.nowMs, ctx.reservedTokens);
    return {
      limits,
      interaction,
      maxQueuedFlow: t.maxQueued,
      maxQueuedPool: poolMaxQueued.get(ctx.pool),
      usage,
      quotas,
    };
  };

  const edf = config.policy.ordering === 'edf';
  const planner: QueuePlanner | undefined = edf
    ? 'edf'
    : config.policy.ordering === 'qlm'
      ? 'qlm'
      : undefined;
  return {
    ordering,
    placement,
    admission,
    sloClasses: edf ? config.sloClasses.map((c) => ({ ...c, band: 0 })) : config.sloClasses,
    planner,
    cost,
    poolOf: (model) => poolByModel.get(model) ?? model,
    configuredModels: config.pools.map((p) => p.model),
    appProfiles: config.policy.ordering === 'wsc' ? learner : undefined,
  };
}
