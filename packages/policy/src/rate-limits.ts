import type { RequestDescriptor } from '@fairway/core';
import { z } from 'zod';
import type { AdmissionPolicy, WindowLimit } from './admission.ts';
import { parseInput } from './errors.ts';

/** One minute, the window of RPM and TPM limits. */
export const MINUTE_MS = 60_000;

/** A per-tenant requests-per-minute window (the VTC paper's RPM baseline, section 5.1). */
export function rpmWindow(tenant: string, rpm: number, windowMs = MINUTE_MS): WindowLimit {
  return { key: `rpm:tenant:${tenant}`, limit: rpm, amount: 1, windowMs, code: 'rpm_limited' };
}

/**
 * A per-tenant tokens-per-minute window: `reservedTokens` (prompt + predicted output) are taken at
 * admission and replaced by the true tokens at settle, so the limit is exact and never post-charged.
 */
export function tpmWindow(
  tenant: string,
  tpm: number,
  reservedTokens: number,
  windowMs = MINUTE_MS,
): WindowLimit {
  return {
    key: `tpm:tenant:${tenant}`,
    limit: tpm,
    amount: reservedTokens,
    windowMs,
    code: 'tpm_limited',
    trueUp: true,
  };
}

/** Options of {@link rateLimitAdmission}. */
export interface RateLimitOptions {
  /** Requests per minute per tenant; no RPM limit when absent (or when `rpmOf` returns undefined). */
  readonly rpm?: number;
  /** Tokens per minute per tenant; no TPM limit when absent. */
  readonly tpm?: number;
  /** Per-tenant RPM override (tenant config); falls back to `rpm`. */
  readonly rpmOf?: (tenant: string) => number | undefined;
  /** Per-tenant TPM override; falls back to `tpm`. */
  readonly tpmOf?: (tenant: string) => number | undefined;
  /** Window length, ms. @default 60000 */
  readonly windowMs?: number;
}

const rateLimitSchema = z.object({
  rpm: z.number().int().min(0).optional(),
  tpm: z.number().min(0).optional(),
  windowMs: z.number().positive().optional(),
});

/** Per-tenant RPM and TPM limits, enforced at admission and exact across dispatchers. */
export function rateLimitAdmission(options: RateLimitOptions): AdmissionPolicy {
  parseInput('rateLimitAdmission', rateLimitSchema, {
    rpm: options.rpm,
    tpm: options.tpm,
    windowMs: options.windowMs,
  });
  const windowMs = options.windowMs ?? MINUTE_MS;
  const name = [
    options.rpm !== undefined ? `rpm(${options.rpm})` : '',
    options.tpm !== undefined ? `tpm(${options.tpm})` : '',
  ]
    .filter(Boolean)
    .join('+');
  return {
    name: name || 'rate-limits',
    limits: (req: RequestDescriptor, ctx) => {
      const out: WindowLimit[] = [];
      const rpm = options.rpmOf?.(req.tenant) ?? options.rpm;
      if (rpm !== undefined) out.push(rpmWindow(req.tenant, rpm, windowMs));
      const tpm = options.tpmOf?.(req.tenant) ?? options.tpm;
      if (tpm !== undefined) out.push(tpmWindow(req.tenant, tpm, ctx.reservedTokens, windowMs));
      return out;
    },
    interaction: () => undefined,
  };
}
