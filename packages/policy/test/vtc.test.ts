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

  it('clips the prediction to max_tokens', () => {
    const p = vtcPolicy({ prediction: 'history' });
    expect(p.dispatchCost(req({ maxTokens: 30 }), 50)).toBe(160);
  });

  it('prices a flow without history at max_tokens, refunding the excess at settle', () => {
    const p = vtcPolicy({ prediction: 'history' });
    expect(p.dispatchCost(req(), undefined)).toBe(100 + 2 * 300);
    expect(p.outputCost(req(), 0, 300, undefined)).toBe(0);
    expect(streamed(p, req(), 40, undefined)).toEqual({ streamed: 700, final: 180 });
  });

  it('prices a flow without history at the configured expected output instead', () => {
    const p = vtcPolicy({ prediction: 'history', expectedOutput: 64 });
    expect(p.dispatchCost(req(), undefined)).toBe(100 + 2 * 64);
    expect(p.dispatchCost(req(), 10)).toBe(120);
    expect(() => vtcPolicy({ prediction: 'history', expectedOutput: -1 })).toThrow(/expectedOutput/);
  });

  it('charges the true output length at dispatch under VTC(oracle)', () => {
    const p = vtcPolicy({ prediction: 'oracle', cost: linearCost(1, 2) });
    expect(p.name).toBe('vtc-oracle');
    const r = req({ outputTokens: 70 });
    expect(p.dispatchCost(r, 10)).toBe(240);
    expect(streamed(p, r, 70)).toEqual({ streamed: 240, final: 240 });
  });

  describe('noisy oracle (VTC Table 5, "VTC (±50%)")', () => {
    const p = vtcPolicy({ prediction: 'noisy-oracle', seed: 7 });
    const predictionOf = (policy: ReturnType<typeof vtcPolicy>, r: RequestDescriptor) =>
      (policy.dispatchCost(r, undefined) - r.inputTokens) / 2;
    const reqs = Array.from({ length: 2000 }, (_, i) =>
      req({ id: `client1-${i}`, outputTokens: 200, maxTokens: 200 }),
    );

    it('predicts within ±50% of the true output, the same value on every call', () => {
      expect(p.name).toBe('vtc-noisy-oracle');
      for (const r of reqs.slice(0, 50)) {
        const x = predictionOf(p, r);
        expect(x).toBeGreaterThanOrEqual(100);
        expect(x).toBeLessThanOrEqual(300);
        expect(predictionOf(p, r)).toBe(x);
      }
    });

    it('draws errors that are uniform, unbiased and independent between consecutive requests', () => {
      const u = reqs.map((r) => (predictionOf(p, r) - 100) / 200);
      const mean = u.reduce((a, b) => a + b, 0) / u.length;
      expect(mean).toBeGreaterThan(0.47);
      expect(mean).toBeLessThan(0.53);
      expect(u.filter((x) => x < 0.1).length / u.length).toBeCloseTo(0.1, 1);
      let lag = 0;
      for (let i = 1; i < u.length; i++) lag += (u[i]! - 0.5) * (u[i - 1]! - 0.5);
      expect(Math.abs((12 * lag) / (u.length - 1))).toBeLessThan(0.1);
    });

    it('is not clipped to max_tokens, charges the excess as it streams and settles exactly', () => {
      const over = reqs.find((r) => predictionOf(p, r) > 200)!;
      const under = reqs.find((r) => predictionOf(p, r) < 200)!;
      expect(streamed(p, over, 200)).toEqual({ streamed: expect.any(Number), final: 500 });
      expect(streamed(p, over, 200).streamed).toBeGreaterThan(500);
      expect(streamed(p, under, 200).streamed).toBeCloseTo(500, 9);
    });

    it('changes its errors with the seed', () => {
      const q = vtcPolicy({ prediction: 'noisy-oracle', seed: 8 });
      expect(reqs.slice(0, 20).filter((r) => predictionOf(p, r) !== predictionOf(q, r)).length).toBe(20);
    });
  });
});
