import {
  type CostFunction,
  DEFAULT_SLO_CLASSES,
  linearCost,
  type RequestDescriptor,
  type SloClass,
} from '@fairway/core';
import { type AdmissionPolicy, composeAdmission } from './admission.ts';
import { edfPolicy } from './edf.ts';
import { PolicyInputError } from './errors.ts';
import { fcfsPolicy } from './fcfs.ts';
import { type OitOptions, oitAdmission } from './oit.ts';
import type { OrderingPolicy } from './ordering.ts';
import { rateLimitAdmission } from './rate-limits.ts';
import { vtcPolicy } from './vtc.ts';
import { type WscOptions, wscPolicy } from './wsc.ts';

/** Policies selectable by name in config and scenario files (DESIGN.md "Fairness semantics"). */
export const ORDERING_POLICY_NAMES = [
  'fcfs',
  'rpm',
  'lcf',
  'vtc',
  'vtc-weighted',
  'vtc-predict',
  'vtc-oracle',
  'vtc-noisy-oracle',
  'wsc',
  'wsc-oit',
  'edf',
  'qlm',
] as const;

/** Name of a policy in {@link ORDERING_POLICY_NAMES}. */
export type OrderingPolicyName = (typeof ORDERING_POLICY_NAMES)[number];

/** Options of {@link orderingPolicyByName}; each policy reads the ones it needs. */
export interface OrderingPolicyOptions {
  /** Cost function of every counter-based policy. @default linearCost() (1, 2) */
  readonly cost?: CostFunction;
  /** Tenant weights for `vtc-weighted` (required there). */
  readonly weightOf?: (tenant: string) => number;
  /** RPM per tenant: required by `rpm`; adds an RPM limit to any other policy. */
  readonly rpm?: number;
  /** TPM per tenant: adds an exact TPM limit (prompt + predicted output reserved) to any policy. */
  readonly tpm?: number;
  /** WSC's app profiles and factors (required by `wsc` and `wsc-oit`). */
  readonly wsc?: WscOptions;
  /** OIT's user and app limits (required by `wsc-oit`). */
  readonly oit?: OitOptions;
  /** SLO classes whose TTFT targets set `edf`'s deadlines. @default QLM's three classes */
  readonly sloClasses?: readonly SloClass[];
  /** Seed of `vtc-noisy-oracle`'s prediction errors. @default 0 */
  readonly seed?: number;
  /**
   * Weight of a prompt token served from the prefix cache under the counter-based policies (VTC's
   * family and WSC), a number in [0, 1] or one per request. @default DEFAULT_CACHED_TOKEN_WEIGHT
   */
  readonly cachedTokenWeight?: number | ((req: RequestDescriptor) => number);
}

function missing(name: string, field: string, what: string): PolicyInputError {
  return new PolicyInputError(`orderingPolicyByName(${name})`, [
    { path: field, message: `required: ${what}` },
  ]);
}

/**
 * Builds a policy by name: `fcfs`; `rpm` (FCFS plus a per-tenant RPM limit, the VTC paper's RPM
 * baseline); `lcf`; `vtc`; `vtc-weighted`; `vtc-predict`; `vtc-oracle`; `vtc-noisy-oracle` (the true output ±50%, VTC Table 5); `wsc`; `wsc-oit` (WSC
 * plus OIT throttling); `edf` (earliest deadline first, QLM's baseline); `qlm` (the order inside
 * each SLO band under QLM: arrival order, i.e. its request groups' FCFS order — QLM's own control,
 * the virtual queues, evictions and swaps, runs beside the gateway and routes it; `fairway sim
 * --policy qlm` runs both). `rpm`/`tpm` options add exact rate limits to any of them.
 */
export function orderingPolicyByName(
  name: OrderingPolicyName,
  options: OrderingPolicyOptions = {},
): OrderingPolicy {
  const cost = options.cost ?? linearCost();
  const cached =
    options.cachedTokenWeight === undefined ? {} : { cachedTokenWeight: options.cachedTokenWeight };
  const admissions: AdmissionPolicy[] = [];
  if (name === 'rpm' && options.rpm === undefined)
    throw missing(name, 'rpm', 'requests per minute per tenant');
  if (options.rpm !== undefined || options.tpm !== undefined) {
    admissions.push(
      rateLimitAdmission({
        ...(options.rpm !== undefined ? { rpm: options.rpm } : {}),
        ...(options.tpm !== undefined ? { tpm: options.tpm } : {}),
      }),
    );
  }
  let ordering: OrderingPolicy;
  switch (name) {
    case 'fcfs':
      ordering = fcfsPolicy(cost);
      break;
    case 'rpm':
      ordering = { ...fcfsPolicy(cost), name: `rpm(${options.rpm})` };
      break;
    case 'lcf':
      ordering = vtcPolicy({ ...cached, cost, lift: 'none' });
      break;
    case 'vtc':
      ordering = vtcPolicy({ ...cached, cost });
      break;
    case 'vtc-weighted':
      if (options.weightOf === undefined) throw missing(name, 'weightOf', 'a weight per tenant');
      ordering = vtcPolicy({ ...cached, cost, weightOf: options.weightOf });
      break;
    case 'vtc-predict':
      ordering = vtcPolicy({ ...cached, cost, prediction: 'history' });
      break;
    case 'vtc-oracle':
      ordering = vtcPolicy({ ...cached, cost, prediction: 'oracle' });
      break;
    case 'vtc-noisy-oracle':
      ordering = vtcPolicy({ ...cached, cost, prediction: 'noisy-oracle', seed: options.seed ?? 0 });
      break;
    case 'wsc':
    case 'wsc-oit':
      if (options.wsc === undefined) throw missing(name, 'wsc', 'app profiles');
      ordering = { ...wscPolicy({ ...cached, ...options.wsc }), name };
      if (name === 'wsc-oit') {
        if (options.oit === undefined) throw missing(name, 'oit', 'user and app limits');
        admissions.unshift(oitAdmission(options.oit));
      }
      break;
    case 'edf':
      ordering = edfPolicy(options.sloClasses ?? DEFAULT_SLO_CLASSES, cost);
      break;
    case 'qlm':
      ordering = { ...fcfsPolicy(cost), name: 'qlm' };
      break;
  }
  if (admissions.length === 0) return ordering;
  return { ...ordering, admission: composeAdmission(...admissions) };
}
