import { createRng, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { runSimulation } from '../src/runner.ts';

/** A burst of `n` requests in the first seconds, then nothing: bins must open, then close. */
function burst(n: number): RequestDescriptor[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `r${i}`,
    tenant: 't',
    model: 'llama-2-7b',
    sloClass: 'interactive',
    inputTokens: 500,
    maxTokens: 1000,
    outputTokens: 1000,
    arrivalMs: i * 20,
  }));
}

const engines = Array.from({ length: 8 }, (_, i) => ({
  id: `e${i}`,
  config: { gpu: 'A100-80GB', model: 'llama-2-7b', kvCapacityTokens: 6000 },
}));

async function run(closeAfterS: number) {
  return runSimulation({
    scenario: 'elastic',
    seed: 1,
    durationS: 300,
    engines,
    arrivals: burst(40),
    ordering: fcfsPolicy(),
    placement: placementByName('aladdin', createRng(1)),
    elastic: { closeAfterS },
  });
}

describe("an elastic fleet (Aladdin's Algorithm 1 opening and closing bins)", () => {
  it('opens bins while requests wait for room, fills each before the next, and closes them when idle', async () => {
    const r = await run(5);
    for (const rec of r.records) expect(rec.finishS).toBeDefined();
    // Each 6,000-token replica takes four 1,500-token reservations: 40 requests need 10, 8 exist.
    expect(r.elastic?.peakOpen).toBe(8);
    expect(r.elastic?.opened).toBeGreaterThanOrEqual(7);
    // Only the engines that were open ran anything.
    const used = new Set(r.records.map((x) => x.replica));
    expect(used.size).toBe(8);
    // Idle bins close: over 300 s the fleet held far fewer than 8 open on average.
    expect(r.elastic!.meanOpen).toBeLessThan(2);
    expect(r.elastic!.meanOpen).toBeGreaterThan(1);
  });

  it('starts with one bin open and never opens another while one has room', async () => {
    const r = await runSimulation({
      scenario: 'elastic-light',
      seed: 1,
      durationS: 120,
      engines,
      arrivals: burst(3),
      ordering: fcfsPolicy(),
      placement: placementByName('aladdin', createRng(1)),
      elastic: { closeAfterS: 5 },
    });
    expect(r.elastic).toEqual({ peakOpen: 1, meanOpen: 1, opened: 0 });
    expect(new Set(r.records.map((x) => x.replica))).toEqual(new Set(['e0']));
  });
});
