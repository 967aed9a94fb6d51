import type { RequestDescriptor } from '@fairway/core';
import type { AdmissionPolicy, WindowLimit } from '@fairway/policy';
import type { QuotaCheck, UsageAccount } from '@fairway/store';

/** What an admission function sees about a request, beside the descriptor itself. */
export interface AdmissionContext {
  readonly nowMs: number;
  readonly pool: string;
  readonly band: number;
  /** The request's fairness flow under the ordering policy. */
  readonly flow: string;
  /** Tokens the request will reserve on a replica (input + predicted or maximum output). */
  readonly reservedTokens: number;
  /** Gateway that holds the client connection. */
  readonly gateway: string;
}

/**
 * Per-request admission rules: sliding-window limits (RPM/TPM, FairServe OIT throttles), the
 * interaction the request continues, and queue bounds. Admission policies produce these; the store
 * checks and applies them atomically with the enqueue.
 */
export interface AdmissionRules {
  readonly limits: readonly WindowLimit[];
  /** Interaction the request opens or continues; while open, throttle windows do not apply. */
  readonly interaction?: { readonly key: string; readonly ttlMs: number } | undefined;
  /** Serve before the queue's other requests (FairServe: an interaction already under way). */
  readonly continuation?: boolean | undefined;
  /** Most requests the flow may have queued in this queue. */
  readonly maxQueuedFlow?: number | undefined;
  /** Most requests the pool may have queued (all bands). */
  readonly maxQueuedPool?: number | undefined;
  /** Where the request's usage is recorded at settle (usage accounting). */
  readonly usage?: UsageAccount | undefined;
  /** Token or spend budgets checked and reserved with the limits (they need `usage`). */
  readonly quotas?: readonly QuotaCheck[] | undefined;
}

/**
 * A pluggable admission policy: the rules one request is admitted under. It may return just the
 * window limits. The default admits everything (no limits).
 */
export type AdmissionFunction = (
  req: RequestDescriptor,
  ctx: AdmissionContext,
) => AdmissionRules | readonly WindowLimit[];

/** Admits everything: no limits, no queue bounds. */
export const admitAll: AdmissionFunction = () => [];

/** Normalises an admission function's result to {@link AdmissionRules}. */
export function toRules(r: AdmissionRules | readonly WindowLimit[]): AdmissionRules {
  return Array.isArray(r) ? { limits: r as readonly WindowLimit[] } : (r as AdmissionRules);
}

/** Adapts an {@link AdmissionPolicy} (RPM/TPM, OIT) to an admission function. */
export function fromAdmissionPolicy(policy: AdmissionPolicy): AdmissionFunction {
  return (req, ctx) => ({ limits: policy.limits(req, ctx), interaction: policy.interaction(req) });
}

/**
 * Combines admission sources, checked in order: limits and quotas are concatenated, the first
 * interaction, queue bounds and usage account given win, and a request is a continuation if any source says so.
 */
export function composeRules(parts: readonly AdmissionRules[]): AdmissionRules {
  if (parts.length === 1) return parts[0]!;
  const limits: WindowLimit[] = [];
  let interaction: AdmissionRules['interaction'];
  let continuation = false;
  let maxQueuedFlow: number | undefined;
  let maxQueuedPool: number | undefined;
  let usage: UsageAccount | undefined;
  const quotas: QuotaCheck[] = [];
  for (const p of parts) {
    limits.push(...p.limits);
    interaction ??= p.interaction;
    continuation ||= p.continuation === true;
    maxQueuedFlow ??= p.maxQueuedFlow;
    maxQueuedPool ??= p.maxQueuedPool;
    usage ??= p.usage;
    if (p.quotas !== undefined) quotas.push(...p.quotas);
  }
  return { limits, interaction, continuation, maxQueuedFlow, maxQueuedPool, usage, quotas };
}
