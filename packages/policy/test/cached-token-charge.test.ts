import {
  cachedPromptTokens,
  chargedPromptTokens,
  DEFAULT_CACHED_TOKEN_WEIGHT,
  profiledCost,
  type RequestDescriptor,
} from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { CachedShareHistory } from '../src/cached-share.ts';
import { PolicyInputError } from '../src/errors.ts';
import { orderingPolicyByName } from '../src/ordering-registry.ts';
import { vtcPolicy } from '../src/vtc.ts';
import { wscPolicy } from '../src/wsc.ts';

const req = (over: Partial<RequestDescriptor> = {}): RequestDescriptor => ({
  id: 'r',
  tenant: 't',
  model: 'm',
  sloClass: 'interactive',
  inputTokens: 1000,
  maxTokens: 300,
  arrivalMs: 0,
  ...over,
});

describe('cachedPromptTokens', () => {
  it('is the engine’s cached count, clamped to [0, prompt tokens]', () => {
    expect(cachedPromptTokens({ inputTokens: 100, outputTokens: 5 })).toBe(0);
    expect(cachedPromptTokens({ inputTokens: 100, outputTokens: 5, cachedTokens: 64 })).toBe(64);
    expect(cachedPromptTokens({ inputTokens: 100, outputTokens: 5, cachedTokens: 1e9 })).toBe(100);
    expect(cachedPromptTokens({ inputTokens: 100, outputTokens: 5, cachedTokens: -16 })).toBe(0);
    expect(cachedPromptTokens({ inputTokens: 100, outputTokens: 5, cachedTokens: Number.NaN })).toBe(0);
  });
});

describe('chargedPromptTokens', () => {
  it('counts prefilled tokens at 1 and cached ones at the weight', () => {
    expect(chargedPromptTokens({ inputTokens: 1000, outputTokens: 0, cachedTokens: 800 }, 0.1)).toBeCloseTo(
      280,
    );
    expect(chargedPromptTokens({ inputTokens: 1000, outputTokens: 0, cachedTokens: 800 }, 1)).toBe(1000);
    expect(chargedPromptTokens({ inputTokens: 1000, outputTokens: 0, cachedTokens: 800 }, 0)).toBe(200);
  });

  it('never charges a cached token more than a prefilled one, nor less than nothing', () => {
    expect(chargedPromptTokens({ inputTokens: 1000, outputTokens: 0, cachedTokens: 800 }, 3)).toBe(1000);
    expect(chargedPromptTokens({ inputTokens: 1000, outputTokens: 0, cachedTokens: 800 }, -1)).toBe(200);
  });
});

describe('VTC with cached-token charging', () => {
  it('charges the whole prompt at dispatch and settles cached tokens at the weight', () => {
    const p = vtcPolicy({ cachedTokenWeight: 0.25 });
    expect(p.dispatchCost(req(), undefined)).toBe(1000);
    // 200 prefilled + 800 · 0.25 cached, plus 2 per output token.
    expect(p.finalCost(req(), { inputTokens: 1000, outputTokens: 10, cachedTokens: 800 })).toBe(420);
    expect(p.finalCost(req(), { inputTokens: 1000, outputTokens: 10 })).toBe(1020);
  });

  it('lowers a cached request’s charge by (1 − weight) per cached token, whatever the engine claims beyond the prompt', () => {
    const p = vtcPolicy({ cachedTokenWeight: 0.1 });
    const full = p.finalCost(req(), { inputTokens: 1000, outputTokens: 50 });
    const cached = p.finalCost(req(), { inputTokens: 1000, outputTokens: 50, cachedTokens: 600 });
    expect(full - cached).toBeCloseTo(600 * 0.9);
    const overclaimed = p.finalCost(req(), { inputTokens: 1000, outputTokens: 50, cachedTokens: 5000 });
    expect(overclaimed).toBeCloseTo(1000 * 0.1 + 100);
  });

  it('uses DEFAULT_CACHED_TOKEN_WEIGHT when none is given, and a weight per request when a function is', () => {
    const usage = { inputTokens: 1000, outputTokens: 0, cachedTokens: 1000 };
    expect(vtcPolicy().finalCost(req(), usage)).toBeCloseTo(1000 * DEFAULT_CACHED_TOKEN_WEIGHT);
    const byModel = vtcPolicy({ cachedTokenWeight: (r) => (r.model === 'big' ? 0.01 : 0.5) });
    expect(byModel.finalCost(req({ model: 'big' }), usage)).toBeCloseTo(10);
    expect(byModel.finalCost(req(), usage)).toBeCloseTo(500);
  });

  it('divides the weighted cost by the tenant weight and applies it to any cost function', () => {
    const p = vtcPolicy({ cachedTokenWeight: 0.5, weightOf: () => 2 });
    expect(p.finalCost(req(), { inputTokens: 1000, outputTokens: 0, cachedTokens: 1000 })).toBe(250);
    const q = vtcPolicy({ cost: profiledCost, cachedTokenWeight: 0.5 });
    expect(q.finalCost(req(), { inputTokens: 1000, outputTokens: 4, cachedTokens: 1000 })).toBeCloseTo(
      profiledCost.cost(500, 4),
    );
  });

  it('rejects a weight outside [0, 1]', () => {
    expect(() => vtcPolicy({ cachedTokenWeight: 1.5 })).toThrow(PolicyInputError);
    expect(() =>
      vtcPolicy({ cachedTokenWeight: () => -1 }).finalCost(req(), {
        inputTokens: 10,
        outputTokens: 0,
        cachedTokens: 5,
      }),
    ).toThrow(PolicyInputError);
  });

  it('reaches every counter-based policy built by name', () => {
    const usage = { inputTokens: 1000, outputTokens: 0, cachedTokens: 1000 };
    for (const name of ['lcf', 'vtc', 'vtc-predict', 'vtc-oracle'] as const)
      expect(orderingPolicyByName(name, { cachedTokenWeight: 0.2 }).finalCost(req(), usage)).toBeCloseTo(200);
  });
});

describe('WSC with cached-token charging', () => {
  const profile = { id: 'agent', stages: [{ input: 100, system: 900, output: 100 }] };
  const norm = 1 / (100 + 2 * 900 + 100);
  const p = wscPolicy({ appProfile: () => profile, cachedTokenWeight: 0.1 });
  const r = req({ app: 'agent', user: 'u', inputTokens: 1000, systemTokens: 900 });

  it('charges cached tokens against the system prompt first (β), then the rest (α)', () => {
    const full = (2 * 900 + 100) * norm;
    expect(p.finalCost(r, { inputTokens: 1000, outputTokens: 0 })).toBeCloseTo(full);
    expect(p.finalCost(r, { inputTokens: 1000, outputTokens: 0, cachedTokens: 900 })).toBeCloseTo(
      (2 * 900 * 0.1 + 100) * norm,
    );
    expect(p.finalCost(r, { inputTokens: 1000, outputTokens: 0, cachedTokens: 950 })).toBeCloseTo(
      (2 * 900 * 0.1 + 50 * 0.1 + 50) * norm,
    );
  });

  it('leaves the dispatch charge whole (the hit is known only at settlement)', () => {
    expect(p.dispatchCost(r, undefined)).toBeCloseTo((2 * 900 + 100) * norm);
  });
});

describe('predicting the cached share at dispatch', () => {
  it("charges a flow's next prompt at its recent cached share, corrected to the engine's count at settlement", () => {
    const p = vtcPolicy({ cachedTokenWeight: 0.1 });
    expect(p.dispatchCost(req(), undefined)).toBe(1000);
    p.settled!(req(), { inputTokens: 1000, outputTokens: 10, cachedTokens: 800 });
    // 80% predicted cached: 200 + 800 · 0.1.
    expect(p.dispatchCost(req(), undefined)).toBeCloseTo(280);
    // Another flow has no history yet.
    expect(p.dispatchCost(req({ tenant: 'other' }), undefined)).toBe(1000);
    // What it is charged in the end is the engine's count, whatever was predicted.
    expect(p.finalCost(req(), { inputTokens: 1000, outputTokens: 10 })).toBe(1020);
  });

  it('moves the prediction halfway towards each settled request', () => {
    const p = vtcPolicy({ cachedTokenWeight: 0 });
    p.settled!(req(), { inputTokens: 1000, outputTokens: 0, cachedTokens: 1000 });
    p.settled!(req(), { inputTokens: 1000, outputTokens: 0 });
    expect(p.dispatchCost(req(), undefined)).toBeCloseTo(500);
  });

  it('charges the whole prompt at dispatch when prediction is off', () => {
    const p = vtcPolicy({ cachedTokenWeight: 0.1, predictCached: false });
    expect(p.settled).toBeUndefined();
    expect(p.dispatchCost(req(), undefined)).toBe(1000);
  });

  it('predicts for WSC flows too, against the system prompt first', () => {
    const profile = { id: 'agent', stages: [{ input: 100, system: 900, output: 100 }] };
    const p = wscPolicy({ appProfile: () => profile, cachedTokenWeight: 0 });
    const r = req({ app: 'agent', user: 'u', inputTokens: 1000, systemTokens: 900 });
    p.settled!(r, { inputTokens: 1000, outputTokens: 0, cachedTokens: 900 });
    const norm = 1 / (100 + 2 * 900 + 100);
    expect(p.dispatchCost(r, undefined)).toBeCloseTo(100 * norm);
  });
});

describe('CachedShareHistory', () => {
  it('remembers at most maxFlows flows, forgetting the least recently updated', () => {
    const h = new CachedShareHistory(2);
    const all = { inputTokens: 10, outputTokens: 0, cachedTokens: 10 };
    h.observe('a', all);
    h.observe('b', all);
    h.observe('a', all);
    h.observe('c', all);
    expect(h.predict('a', 10)).toBe(10);
    expect(h.predict('b', 10)).toBe(0);
    expect(h.predict('c', 10)).toBe(10);
  });
});
