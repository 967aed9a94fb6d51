import { createRng, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, placementByName } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { runSimulation } from '../src/runner.ts';

/** Requests predicted at 100 output tokens that generate 1,200: every prediction is far too short. */
function underPredicted(n: number): RequestDescriptor[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `r${i}`,
    tenant: 't',
    model: 'llama-2-7b',
    sloClass: 'interactive',
    inputTokens: 200,
    maxTokens: 2000,
    outputTokens: 1200,
    arrivalMs: i * 250,
  }));
}

async function run(repredict: boolean, sequences?: { timeIndexedKv: boolean }) {
  const store = new MemoryStore();
  const engines = ['e0', 'e1'].map((id) => ({
    id,
    config: { gpu: 'A100-80GB', model: 'llama-2-7b', kvCapacityTokens: 6000 },
  }));
  const result = await runSimulation({
    scenario: 'repredict',
    seed: 1,
    durationS: 600,
    engines,
    arrivals: underPredicted(24),
    ordering: fcfsPolicy(),
    // Aladdin's best fit packs the fullest replica first.
    placement: placementByName('aladdin', createRng(1)),
    store,
    reserve: 'predicted',
    outputPredictor: () => 100,
    repredict,
    ...(sequences === undefined ? {} : { reportSequences: true, timeIndexedKv: sequences.timeIndexedKv }),
  });
  for (const e of engines) expect(await store.reserved(e.id)).toEqual({ tokens: 0, seqs: 0 });
  return result;
}

describe('simulation with Aladdin re-prediction (section 4.3)', () => {
  it('grows the reservations of outputs that outrun their prediction, so the engines preempt less', async () => {
    const without = await run(false);
    const withRe = await run(true);
    for (const r of [...without.records, ...withRe.records]) expect(r.finishS).toBeDefined();
    const grown = (r: typeof without) =>
      Object.values(r.prediction?.errors ?? {}).reduce((a, e) => a + e.grownTokens, 0);
    // Both see the under-estimates; only re-prediction grows the reservations.
    expect(without.prediction?.repredictions).toBeGreaterThan(0);
    expect(grown(without)).toBe(0);
    expect(grown(withRe)).toBeGreaterThan(0);
    // Every request outran its prediction on the replica it ran on.
    const under = Object.values(withRe.prediction?.errors ?? {}).reduce((a, e) => a + e.underEstimated, 0);
    expect(under).toBe(24);
    expect(withRe.preemptions).toBeLessThan(without.preemptions);
  });
});

describe("simulation with Aladdin's time-indexed KV check (constraint e)", () => {
  it('keeps requests off a replica whose running sequences outgrew their reservations, so the engines preempt less', async () => {
    // The same under-predicted arrivals, reservations never grown: by the sum of reservations
    // each replica looks nearly empty; by its sequences' progress it is full.
    const sum = await run(false, { timeIndexedKv: false });
    const timeIndexed = await run(false, { timeIndexedKv: true });
    for (const r of [...sum.records, ...timeIndexed.records]) expect(r.finishS).toBeDefined();
    expect(sum.preemptions).toBeGreaterThan(0);
    expect(timeIndexed.preemptions).toBeLessThan(sum.preemptions);
  });
});
