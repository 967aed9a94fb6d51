import type { RequestDescriptor } from '@fairway/core';
import { type OrderingPolicy, orderingPolicyByName } from '@fairway/policy';
import { fairserveOptionsOf } from '@fairway/sim';

/** What a policy may need from the run: tenant weights, limits given on the command line. */
export interface PolicyContext {
  /** Tenant id → weight (from the scenario). */
  readonly tenantWeights: Readonly<Record<string, number>>;
  /** `--rpm`: requests per minute per tenant. */
  readonly rpm?: number | undefined;
  /** Past traffic like the run's, from which WSC learns app profiles and OIT its limits. */
  readonly history?: readonly RequestDescriptor[] | undefined;
  /** The run's seed (the scenario's, or `--seed`): seeds `vtc-noisy-oracle`'s errors. */
  readonly seed?: number | undefined;
  /** FairServe's user priority factor E by user (the scenario's tenants' `priority`). */
  readonly userPriorities?: Readonly<Record<string, number>> | undefined;
  /** Weight of a prompt token served from the prefix cache (the scenario's engines' derived cost). */
  readonly cachedTokenWeight?: number | undefined;
}

/** The cached-token weight option of a context, when it has one. */
const cached = (c: PolicyContext): { cachedTokenWeight?: number } =>
  c.cachedTokenWeight === undefined ? {} : { cachedTokenWeight: c.cachedTokenWeight };

/** An ordering policy selectable by name on the command line. */
export interface PolicyEntry {
  readonly description: string;
  readonly create: (ctx: PolicyContext) => OrderingPolicy;
}

/**
 * Ordering policies by CLI name: each policy of `@fairway/policy` is one line here, and this
 * table is what `--policy` accepts and `--help` lists. WSC and OIT learn app profiles and limits
 * from `history` (FairServe sections 4.2–4.3).
 */
export const ORDERING_POLICIES: Readonly<Record<string, PolicyEntry>> = {
  fcfs: {
    description: 'first come, first served in one queue over every SLO class (vLLM default)',
    create: () => orderingPolicyByName('fcfs'),
  },
  rpm: {
    description: 'FCFS with a per-tenant requests-per-minute limit (needs --rpm)',
    create: (c) => orderingPolicyByName('rpm', c.rpm === undefined ? {} : { rpm: c.rpm }),
  },
  lcf: {
    description: 'least counter first: VTC without the counter lift',
    create: (c) => orderingPolicyByName('lcf', cached(c)),
  },
  vtc: {
    description: 'Virtual Token Counter (VTC paper, Algorithm 2)',
    create: (c) => orderingPolicyByName('vtc', cached(c)),
  },
  'vtc-weighted': {
    description: 'weighted VTC with the scenario tenant weights',
    create: (c) =>
      orderingPolicyByName('vtc-weighted', { ...cached(c), weightOf: (t) => c.tenantWeights[t] ?? 1 }),
  },
  'vtc-predict': {
    description: 'VTC charging predicted output at dispatch (mean of the last 5; max_tokens before any)',
    create: (c) => orderingPolicyByName('vtc-predict', cached(c)),
  },
  'vtc-oracle': {
    description: 'VTC charging the true output length at dispatch',
    create: (c) => orderingPolicyByName('vtc-oracle', cached(c)),
  },
  'vtc-noisy-oracle': {
    description: 'VTC charging the true output length ±50% at dispatch (VTC Table 5), seeded by the run',
    create: (c) =>
      orderingPolicyByName('vtc-noisy-oracle', {
        ...cached(c),
        ...(c.seed === undefined ? {} : { seed: c.seed }),
      }),
  },
  wsc: {
    description:
      'FairServe weighted service counter: per user, normalised by learned app profiles, E per user',
    create: (c) =>
      orderingPolicyByName('wsc', {
        ...cached(c),
        ...fairserveOptionsOf(c.history ?? [], { userPriorities: c.userPriorities }),
      }),
  },
  'wsc-oit': {
    description: 'FairServe WSC plus overload- and interaction-driven throttling (OIT)',
    create: (c) =>
      orderingPolicyByName('wsc-oit', {
        ...cached(c),
        ...fairserveOptionsOf(c.history ?? [], { userPriorities: c.userPriorities }),
      }),
  },
  edf: {
    description: 'earliest deadline first in one queue: arrival + the SLO class TTFT target (QLM baseline)',
    create: () => orderingPolicyByName('edf'),
  },
  qlm: {
    description:
      'QLM: SLO bands in request-group order plus its control (RWT estimator, HiGHS global scheduler, evictions, swaps)',
    create: (c) => orderingPolicyByName('qlm', cached(c)),
  },
};
