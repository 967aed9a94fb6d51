import type { RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { ORDERING_POLICY_NAMES, orderingPolicyByName } from '../src/ordering-registry.ts';

const req: RequestDescriptor = {
  id: 'r',
  tenant: 't',
  user: 'u',
  app: 'chat',
  model: 'm',
  sloClass: 'interactive',
  inputTokens: 100,
  maxTokens: 100,
  arrivalMs: 0,
};
const wsc = { appProfile: () => ({ id: 'chat', stages: [{ input: 100, system: 0, output: 100 }] }) };
const all = { rpm: 5, weightOf: () => 2, wsc, oit: { userLimit: 3, appLimit: 30 } };

describe('orderingPolicyByName', () => {
  it('builds every named policy with its ordering, lift and admission', () => {
    const summary = Object.fromEntries(
      ORDERING_POLICY_NAMES.map((n) => {
        const p = orderingPolicyByName(n, n === 'rpm' ? all : { ...all, rpm: undefined });
        return [n, [p.mode, p.lift, p.admission?.name ?? '-']];
      }),
    );
    expect(summary).toEqual({
      fcfs: ['score', 'none', '-'],
      rpm: ['score', 'none', 'rpm(5)'],
      lcf: ['fair', 'none', '-'],
      vtc: ['fair', 'vtc', '-'],
      'vtc-weighted': ['fair', 'vtc', '-'],
      'vtc-predict': ['fair', 'vtc', '-'],
      'vtc-oracle': ['fair', 'vtc', '-'],
      'vtc-noisy-oracle': ['fair', 'vtc', '-'],
      wsc: ['fair', 'vtc', '-'],
      'wsc-oit': ['fair', 'vtc', 'oit'],
      edf: ['score', 'none', '-'],
      qlm: ['score', 'none', '-'],
    });
  });

  it('adds exact RPM/TPM limits to any policy', () => {
    const p = orderingPolicyByName('vtc', { tpm: 1000 });
    expect(p.admission?.limits(req, { reservedTokens: 150 })).toEqual([
      { key: 'tpm:tenant:t', limit: 1000, amount: 150, windowMs: 60_000, code: 'tpm_limited', trueUp: true },
    ]);
  });

  it('requires the options a policy cannot do without, naming them', () => {
    expect(() => orderingPolicyByName('rpm')).toThrow(/rpm: required/);
    expect(() => orderingPolicyByName('vtc-weighted')).toThrow(/weightOf: required/);
    expect(() => orderingPolicyByName('wsc')).toThrow(/wsc: required/);
    expect(() => orderingPolicyByName('wsc-oit', { wsc })).toThrow(/oit: required/);
  });

  it('orders EDF by arrival plus the class TTFT target', () => {
    const edf = orderingPolicyByName('edf');
    expect(edf.score({ ...req, arrivalMs: 1000, sloClass: 'batch-1' })).toBe(61_000);
    expect(edf.score({ ...req, arrivalMs: 1000 })).toBe(21_000);
  });

  it('charges weighted costs under vtc-weighted', () => {
    expect(orderingPolicyByName('vtc-weighted', { weightOf: () => 4 }).dispatchCost(req, undefined)).toBe(25);
  });
});
