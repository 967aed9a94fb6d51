import { linearCost, profiledCost, type RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { PolicyInputError } from '../src/errors.ts';
import { lcfPolicy, vtcPolicy, weightedVtcPolicy } from '../src/vtc.ts';

const req = (over: Partial<RequestDescriptor> = {}): RequestDescriptor => ({
  id: 'r',
  tenant: 't',
  model: 'm',
  sloClass: 'interactive',
  inputTokens: 100,
  maxTokens: 300,
  arrivalMs: 5,
  ...over,
});

/** Total charged for a request that streams `out` tokens one at a time, then settles. */
function streamed(p: ReturnType<typeof vtcPolicy>, r: RequestDescriptor, out: number, history?: number) {
  let total = p.dispatchCost(r, history);
  for (let k = 0; k < out; k++) total += p.outputCost(r, k, k + 1, history);
  return { streamed: total, final: p.finalCost(r, { inputTokens: r.inputTokens, outputTokens: out }) };
}

describe('vtcPolicy', () => {
  it('is fair ordering with lift, charging input at dispatch and output as it streams', () => {
    const p = vtcPolicy();
    expect([p.name, p.mode, p.lift]).toEqual(['vtc', 'fair', 'vtc']);
    expect(p.flowOf(req())).toBe('t');
    expect(p.dispatchCost(req(), undefined)).toBe(100);
    expect(p.outputCost(req(), 3, 5, undefined)).toBe(4);
    expect(streamed(p, req(), 50)).toEqual({ streamed: 200, final: 200 });
  });

  it('charges incremental cost of any cost function, e.g. the profiled quadratic', () => {
    const p = vtcPolicy({ cost: profiledCost });
    const { streamed: s, final } = streamed(p, req(), 40);
    expect(s).toBeCloseTo(final, 9);
    expect(final).toBeCloseTo(profiledCost.cost(100, 40), 9);
  });

  it('makes LCF with no lift', () => {
    const p = lcfPolicy();
    expect([p.name, p.lift]).toEqual(['lcf', 'none']);
  });

  it('divides every cost by the tenant weight', () => {
    const p = weightedVtcPolicy((t) => (t === 'gold' ? 4 : 1));
    expect(p.name).toBe('vtc-weighted');
    expect(p.dispatchCost(req({ tenant: 'gold' }), undefined)).toBe(25);
    expect(p.outputCost(req({ tenant: 'gold' }), 0, 2, undefined)).toBe(1);
    expect(p.finalCost(req({ tenant: 'gold' }), { inputTokens: 100, outputTokens: 10 })).toBe(30);
    expect(p.dispatchCost(req({ tenant: 'std' }), undefined)).toBe(100);
  });

  it('rejects a non-positive weight naming the tenant', () => {
    const p = weightedVtcPolicy(() => 0);
    expect(() => p.dispatchCost(req({ tenant: 'x' }), undefined)).toThrow(PolicyInputError);
    expect(() => p.dispatchCost(req({ tenant: 'x' }), undefined)).toThrow(/weights\.x/);
  });

  it('charges the predicted output at dispatch and only the excess while streaming (VTC(predict))', () => {
    const p = vtcPolicy({ prediction: 'history' });
    expect(p.name).toBe('vtc-predict');
    expect(p.dispatchCost(req(), 50)).toBe(100 + 2 * 50);
    expect(p.outputCost(req(), 10, 20, 50)).toBe(0);
    expect(p.outputCost(req(), 49, 52, 50)).toBe(4);
    // Longer than predicted: streamed total equals the final cost.
    expect(streamed(p, req(), 80, 50)).toEqual({ streamed: 260, final: 260 });
    // Shorter than predicted: the final cost refunds the over-charge at settle.
    expect(streamed(p, req(), 20, 50)).toEqual({ streamed: 200, final: 140 });
  });

  it('clips the prediction to max_tokens and treats no history as no prediction', () => {
    const p = vtcPolicy({ prediction: 'history' });
    expect(p.dispatchCost(req({ maxTokens: 30 }), 50)).toBe(160);
    expect(p.dispatchCost(req(), undefined)).toBe(100);
  });

  it('charges the true output length at dispatch under VTC(oracle)', () => {
    const p = vtcPolicy({ prediction: 'oracle', cost: linearCost(1, 2) });
    expect(p.name).toBe('vtc-oracle');
    const r = req({ outputTokens: 70 });
    expect(p.dispatchCost(r, 10)).toBe(240);
    expect(streamed(p, r, 70)).toEqual({ streamed: 240, final: 240 });
  });
});
