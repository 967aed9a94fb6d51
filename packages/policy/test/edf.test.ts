import { DEFAULT_SLO_CLASSES, type RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { edfPolicy } from '../src/edf.ts';
import { UnknownSloClassError } from '../src/errors.ts';

const req = (id: string, sloClass: string, arrivalMs: number): RequestDescriptor => ({
  id,
  tenant: 't',
  model: 'm',
  sloClass,
  inputTokens: 100,
  maxTokens: 100,
  arrivalMs,
});

describe('edfPolicy', () => {
  it('scores a request by arrival plus its class TTFT target', () => {
    const edf = edfPolicy(DEFAULT_SLO_CLASSES);
    expect(edf.mode).toBe('score');
    expect(edf.score(req('a', 'interactive', 1000))).toBe(21_000);
    expect(edf.score(req('b', 'batch-1', 0))).toBe(60_000);
  });

  it('orders a late interactive request before an earlier batch request', () => {
    const edf = edfPolicy(DEFAULT_SLO_CLASSES);
    const batch = req('batch', 'batch-1', 0);
    const inter = req('inter', 'interactive', 30_000);
    const order = [batch, inter].sort((x, y) => edf.score(x) - edf.score(y)).map((r) => r.id);
    expect(order).toEqual(['inter', 'batch']);
  });

  it('rejects a request of an unknown class with a typed error naming it', () => {
    const edf = edfPolicy(DEFAULT_SLO_CLASSES);
    expect(() => edf.score(req('x', 'gold', 0))).toThrow(UnknownSloClassError);
    expect(() => edf.score(req('x', 'gold', 0))).toThrow(/"gold"/);
  });

  it('charges tokens like every other policy', () => {
    const edf = edfPolicy(DEFAULT_SLO_CLASSES);
    const r = req('a', 'interactive', 0);
    expect(edf.dispatchCost(r, undefined)).toBe(100);
    expect(edf.finalCost(r, { inputTokens: 100, outputTokens: 10 })).toBe(120);
  });
});
