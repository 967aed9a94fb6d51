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

async function run(moves: boolean) {
  const store = new MemoryStore();
  const engines = ['e0', 'e1', 'e2'].map((id) => ({
    id,
    config: { gpu: 'A100-80GB', model: 'llama-2-7b', kvCapacityTokens: 6000 },
  }));
  const result = await runSimulation({
    scenario: 'moves',
    seed: 1,
    durationS: 600,
    engines,
    arrivals: underPredicted(24),
    ordering: fcfsPolicy(),
    // Aladdin's fit packs the fullest replica first: its engine fills while the store counts it nearly empty.
    placement: placementByName('aladdin', createRng(1)),
    store,
    reserve: 'predicted',
    outputPredictor: () => 100,
    ...(moves ? { moves: { afterMs: 1000 } } : {}),
  });
  // Every reservation, moved ones included, was released exactly once.
  for (const e of engines) expect(await store.reserved(e.id)).toEqual({ tokens: 0, seqs: 0 });
  return result;
}

const meanTtft = (r: Awaited<ReturnType<typeof run>>) =>
  r.records.reduce((a, x) => a + ((x.firstTokenS as number) - x.arrivalS), 0) / r.records.length;

describe('simulation with requests moved out of engine queues (policy.moves)', () => {
  it('moves requests an engine queues to replicas with room, and they start sooner', async () => {
    const without = await run(false);
    const moved = await run(true);
    for (const r of [...without.records, ...moved.records]) {
      expect(r.finishS).toBeDefined();
      expect(r.generated).toBe(1200);
    }
    expect(without.records.some((r) => r.moves !== undefined)).toBe(false);
    const n = moved.records.reduce((a, r) => a + (r.moves ?? 0), 0);
    expect(n).toBeGreaterThan(0);
    // A request moves at most twice, and only before its first token.
    expect(Math.max(...moved.records.map((r) => r.moves ?? 0))).toBeLessThanOrEqual(2);
    expect(meanTtft(moved)).toBeLessThan(meanTtft(without) / 2);
  });
});
