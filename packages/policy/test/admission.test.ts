import type { RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { composeAdmission, reservedTokensOf } from '../src/admission.ts';
import { kvOverloaded, oitAdmission } from '../src/oit.ts';
import { rateLimitAdmission, rpmWindow, tpmWindow } from '../src/rate-limits.ts';

const req = (over: Partial<RequestDescriptor> = {}): RequestDescriptor => ({
  id: 'r',
  tenant: 'acme',
  user: 'ann',
  app: 'chat',
  model: 'm',
  sloClass: 'interactive',
  inputTokens: 100,
  maxTokens: 300,
  arrivalMs: 0,
  ...over,
});

describe('rate limits', () => {
  it('builds a per-tenant RPM window of one minute', () => {
    expect(rpmWindow('acme', 5)).toEqual({
      key: 'rpm:tenant:acme',
      limit: 5,
      amount: 1,
      windowMs: 60_000,
      code: 'rpm_limited',
    });
  });

  it('reserves prompt plus predicted output in the TPM window and trues it up at settle', () => {
    expect(tpmWindow('acme', 10_000, 350)).toMatchObject({ amount: 350, trueUp: true, code: 'tpm_limited' });
    expect(reservedTokensOf(req(), 50)).toBe(150);
    expect(reservedTokensOf(req(), 1000)).toBe(400);
    expect(reservedTokensOf(req(), undefined)).toBe(400);
    expect(reservedTokensOf(req(), 10.2)).toBe(111);
  });

  it('applies per-tenant overrides and skips absent limits', () => {
    const a = rateLimitAdmission({ rpm: 60, rpmOf: (t) => (t === 'big' ? 600 : undefined), tpm: 1000 });
    expect(a.limits(req(), { reservedTokens: 10 }).map((l) => [l.key, l.limit])).toEqual([
      ['rpm:tenant:acme', 60],
      ['tpm:tenant:acme', 1000],
    ]);
    expect(a.limits(req({ tenant: 'big' }), { reservedTokens: 10 })[0]?.limit).toBe(600);
    expect(rateLimitAdmission({ tpm: 5 }).limits(req(), { reservedTokens: 1 })).toHaveLength(1);
  });

  it('rejects invalid limits naming the field', () => {
    expect(() => rateLimitAdmission({ rpm: -1 })).toThrow(/rpm/);
  });
});

describe('oitAdmission', () => {
  const oit = oitAdmission({
    userLimit: 10,
    appLimit: 100,
    appLimitOf: (a) => (a === 'agents' ? 1000 : undefined),
  });

  it('checks the user window, then the app window, only while overloaded', () => {
    const limits = oit.limits(req(), { reservedTokens: 1 });
    expect(limits.map((l) => [l.key, l.limit, l.onlyWhenOverloaded, l.code])).toEqual([
      ['oit:user:ann', 10, true, 'throttled'],
      ['oit:app:chat', 100, true, 'throttled'],
    ]);
    expect(oit.limits(req({ app: 'agents' }), { reservedTokens: 1 })[1]?.limit).toBe(1000);
  });

  it('names the interaction that exempts later calls, scoped to the tenant', () => {
    expect(oit.interaction(req())).toBeUndefined();
    expect(oit.interaction(req({ interactionId: 'x' }))).toEqual({ key: 'ix:acme:x', ttlMs: 60_000 });
  });

  it('detects KV overload at the threshold', () => {
    expect(kvOverloaded(899, 1000)).toBe(false);
    expect(kvOverloaded(900, 1000)).toBe(true);
    expect(kvOverloaded(500, 1000, 0.5)).toBe(true);
    expect(kvOverloaded(0, 0)).toBe(true);
  });

  it('composes with rate limits, OIT first', () => {
    const both = composeAdmission(oit, rateLimitAdmission({ rpm: 5 }));
    expect(both.name).toBe('oit+rpm(5)');
    expect(both.limits(req(), { reservedTokens: 1 }).map((l) => l.key)).toEqual([
      'oit:user:ann',
      'oit:app:chat',
      'rpm:tenant:acme',
    ]);
    expect(both.interaction(req({ interactionId: 'y' }))?.key).toBe('ix:acme:y');
  });
});
