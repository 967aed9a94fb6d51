import type { RequestDescriptor } from '@fairway/core';

/**
 * A sliding-window limit checked (and consumed) at admission, exact across dispatchers because the
 * store checks and records it atomically. Defined here so policies can build them; the store
 * re-exports it.
 */
export interface WindowLimit {
  /** Window key, e.g. `rpm:tenant:acme`; windows with the same key are one window. */
  readonly key: string;
  /** Largest total `amount` admitted within any window of `windowMs`. */
  readonly limit: number;
  /** What this request consumes: 1 for RPM, reserved tokens for TPM. */
  readonly amount: number;
  readonly windowMs: number;
  /** Checked only when the pool is overloaded and the request opens no exempt interaction (OIT). */
  readonly onlyWhenOverloaded?: boolean;
  /** Error code reported when this limit rejects. */
  readonly code: 'rpm_limited' | 'tpm_limited' | 'throttled';
  /**
   * Whether `settle` replaces the reserved `amount` with the request's true tokens (and `cancel`
   * with 0), so a TPM window counts what was really served.
   * @default true for `tpm_limited`, false otherwise
   */
  readonly trueUp?: boolean;
  /**
   * One window for every tenant, instead of one per tenant (the store scopes windows by tenant).
   * Only for simulations whose tenants stand for the users of shared apps (FairServe's app limit
   * across users); a gateway serving real tenants never sets it. @default false
   */
  readonly shared?: boolean;
}

/** The interaction a request belongs to; while it is open, throttle windows do not apply (OIT). */
export interface InteractionRef {
  readonly key: string;
  /** How long the interaction stays open after its last call was admitted or completed, ms. */
  readonly ttlMs: number;
}

/** What admission knows about a request beyond its descriptor. */
export interface AdmissionContext {
  /** Tokens reserved for the request: prompt plus predicted (or maximum) output. */
  readonly reservedTokens: number;
}

/**
 * Which limits a request is admitted against. Pure: the store checks and records the windows in
 * the same atomic step that enqueues (one Redis round trip).
 */
export interface AdmissionPolicy {
  readonly name: string;
  /** Windows to check, in the order they are checked (the first that rejects is reported). */
  limits(req: RequestDescriptor, ctx: AdmissionContext): WindowLimit[];
  /** The interaction that exempts the request from throttles while open, if any. */
  interaction(req: RequestDescriptor): InteractionRef | undefined;
}

/** Admission against no limits. */
export const NO_ADMISSION_LIMITS: AdmissionPolicy = {
  name: 'none',
  limits: () => [],
  interaction: () => undefined,
};

/** All the limits of several admission policies, checked in the given order. */
export function composeAdmission(...policies: readonly AdmissionPolicy[]): AdmissionPolicy {
  if (policies.length === 1) return policies[0] as AdmissionPolicy;
  return {
    name: policies.map((p) => p.name).join('+') || 'none',
    limits: (req, ctx) => policies.flatMap((p) => p.limits(req, ctx)),
    interaction: (req) => {
      for (const p of policies) {
        const i = p.interaction(req);
        if (i !== undefined) return i;
      }
      return undefined;
    },
  };
}

/**
 * Tokens to reserve for a request at admission (DESIGN.md principle 4): its prompt plus the
 * predicted output clipped to `max_tokens`, or `max_tokens` when there is no prediction.
 */
export function reservedTokensOf(req: RequestDescriptor, predictedOutput: number | undefined): number {
  const out =
    predictedOutput === undefined ? req.maxTokens : Math.min(req.maxTokens, Math.ceil(predictedOutput));
  return req.inputTokens + out;
}
