import { createRng } from '@fairway/core';
import { fcfsPolicy, placementByName } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { expect } from 'vitest';
import { type RunInput, runSimulation } from '../../src/runner.ts';

/**
 * 24 requests, one every 250 ms, predicted at 100 output tokens that generate 1,200 — every
 * prediction far too short — run for 600 s on `replicas` A100-80GB engines of 6,000 KV tokens,
 * FCFS, under Aladdin's best fit (which packs the fullest replica first), reserving predictions;
 * `extra` adds what the test varies. Checks that every reservation was released exactly once.
 */
export async function runUnderPredicted(
  scenario: string,
  replicas: number,
  extra: Partial<RunInput> = {},
): Promise<Awaited<ReturnType<typeof runSimulation>>> {
  const store = new MemoryStore();
  const engines = Array.from({ length: replicas }, (_, i) => ({
    id: `e${i}`,
    config: { gpu: 'A100-80GB', model: 'llama-2-7b', kvCapacityTokens: 6000 },
  }));
  const result = await runSimulation({
    scenario,
    seed: 1,
    durationS: 600,
    engines,
    arrivals: Array.from({ length: 24 }, (_, i) => ({
      id: `r${i}`,
      tenant: 't',
      model: 'llama-2-7b',
      sloClass: 'interactive',
      inputTokens: 200,
      maxTokens: 2000,
      outputTokens: 1200,
      arrivalMs: i * 250,
    })),
    ordering: fcfsPolicy(),
    placement: placementByName('aladdin', createRng(1)),
    store,
    reserve: 'predicted',
    outputPredictor: () => 100,
    ...extra,
  });
  for (const e of engines) expect(await store.reserved(e.id)).toEqual({ tokens: 0, seqs: 0 });
  return result;
}
