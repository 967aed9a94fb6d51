import type { RequestDescriptor } from '@fairway/core';
import { z } from 'zod';
import type { AdmissionPolicy, InteractionRef, WindowLimit } from './admission.ts';
import { parseInput } from './errors.ts';
import { MINUTE_MS } from './rate-limits.ts';

/** Options of {@link oitAdmission}. */
export interface OitOptions {
  /** Requests per window a user may send while the pool is overloaded. */
  readonly userLimit: number;
  /** Requests per window an app (all its users) may send while the pool is overloaded. */
  readonly appLimit: number;
  /** Per-app override of `appLimit` (apps differ by orders of magnitude, FairServe section 3.1). */
  readonly appLimitOf?: (app: string) => number | undefined;
  /** Window of both limits, ms. @default 60000 */
  readonly windowMs?: number;
  /** How long an interaction stays open after its last call was admitted or completed, ms. @default 60000 */
  readonly interactionTtlMs?: number;
  /**
   * Whether an app's window is one per tenant (`tenant`: a tenant cannot exhaust another's) or one
   * across tenants (`shared`, FairServe's app limit when each user is a tenant, as in the
   * simulator's FairServe scenarios). @default 'tenant'
   */
  readonly appWindow?: 'tenant' | 'shared';
}

const oitSchema = z.object({
  userLimit: z.number().int().min(0),
  appLimit: z.number().int().min(0),
  windowMs: z.number().positive().optional(),
  interactionTtlMs: z.number().positive().optional(),
});

/** The user a request counts against under FairServe: its user, or its tenant when it names none. */
export function userOf(req: RequestDescriptor): string {
  return req.user ?? req.tenant;
}

/** The app a request counts against under FairServe; requests without an app share `default`. */
export function appOf(req: RequestDescriptor): string {
  return req.app ?? 'default';
}

/**
 * FairServe's Overload- and Interaction-driven Throttling (FairServe section 4.2, Algorithm 1 lines
 * 19–24): a user window, then an app window, both checked only while the pool is overloaded and
 * never for a request that continues an open interaction. Every arrival is counted — admitted,
 * exempt or throttled (Algorithm 1 line 19 increments the counters before the checks) — so the
 * windows reflect real rates when overload begins and a user who keeps sending while throttled
 * stays throttled. The caller passes `overloaded` (see
 * {@link kvOverloaded}) to the store with these limits.
 */
export function oitAdmission(options: OitOptions): AdmissionPolicy {
  parseInput('oitAdmission', oitSchema, {
    userLimit: options.userLimit,
    appLimit: options.appLimit,
    windowMs: options.windowMs,
    interactionTtlMs: options.interactionTtlMs,
  });
  const windowMs = options.windowMs ?? MINUTE_MS;
  const ttlMs = options.interactionTtlMs ?? MINUTE_MS;
  return {
    name: 'oit',
    limits: (req: RequestDescriptor): WindowLimit[] => {
      const app = appOf(req);
      return [
        {
          key: `oit:user:${userOf(req)}`,
          limit: options.userLimit,
          amount: 1,
          windowMs,
          code: 'throttled',
          onlyWhenOverloaded: true,
        },
        {
          key: `oit:app:${app}`,
          limit: options.appLimitOf?.(app) ?? options.appLimit,
          amount: 1,
          windowMs,
          code: 'throttled',
          onlyWhenOverloaded: true,
          ...(options.appWindow === 'shared' ? { shared: true } : {}),
        },
      ];
    },
    interaction: (req: RequestDescriptor): InteractionRef | undefined =>
      req.interactionId === undefined ? undefined : { key: `ix:${req.tenant}:${req.interactionId}`, ttlMs },
  };
}

/**
 * Whether a pool is overloaded in FairServe's sense: its KV cache (tokens reserved or in use over
 * capacity) is at or above `threshold`. OIT throttles only then.
 * @param threshold fraction of KV capacity, in (0, 1]. @default 0.9
 */
export function kvOverloaded(kvTokensUsed: number, kvTokenCapacity: number, threshold = 0.9): boolean {
  if (kvTokenCapacity <= 0) return true;
  return kvTokensUsed / kvTokenCapacity >= threshold;
}
