/**
 * Placement by the engines' KV cache events in the simulator (`kvEvents`): every engine's prefix
 * cache tells one shared index what it stores and evicts, and a request goes to the replica holding
 * the longest run of its prompt's blocks — whoever sent them, since the cache is the engine's —
 * and is charged for the tokens held there as cached.
 */
import { orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, parseScenario } from '../src/scenario.ts';

/**
 * Two tenants whose apps send one 2,000-token system prompt: `first` starts alone, `second` a few
 * seconds later while `first`'s requests still decode (long outputs), on three replicas.
 */
const scenario = parseScenario({
  durationS: 30,
  cluster: {
    engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', count: 3, options: { enablePrefixCaching: true } }],
  },
  tenants: [{ id: 'first' }, { id: 'second' }],
  streams: [
    {
      tenant: 'first',
      arrival: { process: 'uniform', rate: 0.5 },
      endS: 4,
      input: { kind: 'uniform', min: 50, max: 100 },
      output: { kind: 'uniform', min: 1500, max: 2000 },
      maxTokens: 'output',
      prefix: { sharedTokens: 2000, sharedPrefix: 'rules' },
    },
    {
      tenant: 'second',
      arrival: { process: 'uniform', rate: 0.5 },
      startS: 5,
      endS: 12,
      input: { kind: 'uniform', min: 50, max: 100 },
      output: { kind: 'uniform', min: 1500, max: 2000 },
      maxTokens: 'output',
      prefix: { sharedTokens: 2000, sharedPrefix: 'rules' },
    },
  ],
});

async function run(kvEvents: boolean, seed: number) {
  const input = buildRunInput({ name: 'kv-events', baseDir: '.', scenario }, { seed });
  return runSimulation({
    ...input,
    ordering: orderingPolicyByName('vtc', { cachedTokenWeight: input.cachedTokenWeight }),
    placement: placementByName('least-kv'),
    prefixAffinity: 'bounded',
    kvEvents,
  });
}

describe('placement by KV cache events in the simulator', () => {
  it('sends a tenant’s first prompt to the replica holding another tenant’s copy of its system prompt', async () => {
    for (const seed of [1, 2, 3]) {
      const firstOf = (r: Awaited<ReturnType<typeof run>>) =>
        r.records
          .filter((x) => x.req.tenant === 'second' && x.firstTokenS !== undefined)
          .sort((a, b) => a.arrivalS - b.arrivalS)[0];
      const holders = (r: Awaited<ReturnType<typeof run>>) =>
        new Set(r.records.filter((x) => x.req.tenant === 'first').map((x) => x.replica));
      const withEvents = await run(true, seed);
      const without = await run(false, seed);
      // With the events it lands where `first`'s requests run, and finds the prompt cached.
      expect(holders(withEvents).has(firstOf(withEvents)?.replica), `seed ${seed}`).toBe(true);
      expect(firstOf(withEvents)?.cachedTokens ?? 0, `seed ${seed}`).toBeGreaterThanOrEqual(1984);
      // The prefix index knows only `second`'s own placements: least-KV places it elsewhere.
      expect(firstOf(without)?.cachedTokens ?? 0, `seed ${seed}`).toBe(0);
    }
  });
});
