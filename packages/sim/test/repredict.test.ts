import { describe, expect, it } from 'vitest';
import { runUnderPredicted } from './support/under-predicted.ts';

/** Two replicas; re-prediction on or off, with sequence reports (and their KV check) when given. */
const run = (repredict: boolean, sequences?: { timeIndexedKv: boolean }) =>
  runUnderPredicted('repredict', 2, {
    repredict,
    ...(sequences === undefined ? {} : { reportSequences: true, timeIndexedKv: sequences.timeIndexedKv }),
  });

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
