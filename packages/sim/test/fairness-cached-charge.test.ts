/**
 * VTC's bound (Theorem 4.4) with prompts charged at their computed cost: on shared-prefix
 * workloads, where the engines' prefix caches serve most of each prompt and counters charge those
 * tokens at the fleet's cached-token weight (corrected at settlement from the engine's count), two
 * backlogged tenants still never differ by more than 2·max(w_in·L_in, w_out·M) in service measured
 * the same way, over five seeds (seeds 1–5 on the A10G: VTC's worst 4,999 against a bound of 40,000;
 * FCFS's best 93,588).
 */
import { orderingPolicyByName, placementByName } from '@fairway/policy';
import type { PrefixAffinityMode } from '@fairway/scheduler';
import { describe, expect, it } from 'vitest';
import { backloggedServiceGap, vtcFairnessBound } from '../src/fairness-bound.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, type LoadedScenario, loadScenario, parseScenario } from '../src/scenario.ts';
import { overSeeds } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

/** Two chat tenants, one sending three times the other, on one A10G (a 10,000-token running batch). */
const SMALL: LoadedScenario = {
  name: 'cached-charge-a10g',
  baseDir: '.',
  scenario: parseScenario({
    durationS: 240,
    cluster: {
      engines: [
        {
          gpu: 'A10G-24GB',
          model: 'llama-2-7b',
          kvCapacityTokens: 10_000,
          options: { enablePrefixCaching: true, stepNoise: { distribution: 'lognormal' } },
        },
      ],
    },
    tenants: [{ id: 'heavy' }, { id: 'light' }],
    streams: (['heavy', 'light'] as const).map((tenant) => ({
      tenant,
      arrival: { process: 'poisson' as const, rate: tenant === 'heavy' ? 0.6 : 0.2 },
      input: { kind: 'uniform' as const, min: 20, max: 200 },
      output: { kind: 'uniform' as const, min: 20, max: 200 },
      maxTokens: 'output' as const,
      interaction: {
        size: { kind: 'uniform' as const, min: 3, max: 8 },
        followUp: { mode: 'after-completion' as const, thinkS: { kind: 'exponential' as const, mean: 2 } },
      },
      prefix: { sharedTokens: 400, conversation: true, maxContextTokens: 2048 },
    })),
  }),
};

async function gapOverSeeds(
  loaded: LoadedScenario,
  policy: 'vtc' | 'fcfs',
  durationS?: number,
  prefixAffinity: PrefixAffinityMode = 'off',
  kvEvents = false,
) {
  let bound = 0;
  let cachedShare = 0;
  const gap = await overSeeds(async (seed) => {
    const input = buildRunInput(loaded, { seed, ...(durationS ? { durationS } : {}) });
    const run = await runSimulation({
      ...input,
      ordering: orderingPolicyByName(policy, { cachedTokenWeight: input.cachedTokenWeight }),
      placement: placementByName('least-kv'),
      prefixAffinity,
      kvEvents,
    });
    bound = vtcFairnessBound(input.engines, input.arrivals).bound;
    const pc = run.prefixCache!;
    cachedShare = Math.min(cachedShare || 1, pc.hits / pc.queries);
    return backloggedServiceGap(run, { cachedTokenWeight: input.cachedTokenWeight }).gap;
  });
  return { gap, bound, cachedShare };
}

describe('VTC fairness bound with cached-token charging (Theorem 4.4), five seeds', () => {
  it(
    'holds on one overloaded engine whose prefix cache serves half the prompt tokens, where FCFS exceeds it',
    async () => {
      const { gap, bound, cachedShare } = await gapOverSeeds(SMALL, 'vtc');
      // About half of all prompt tokens looked up come from the cache (the shared system prompt
      // and each conversation's history).
      expect(cachedShare).toBeGreaterThan(0.4);
      expect(gap.worst, `${showSeeds(gap, 0)} vs bound ${bound}`).toBeLessThanOrEqual(bound);
      // The workload does separate policies: FCFS serves the heavy tenant three times as much.
      const fcfs = await gapOverSeeds(SMALL, 'fcfs');
      expect(fcfs.gap.best, showSeeds(fcfs.gap, 0)).toBeGreaterThan(bound);
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    'holds across a fleet of four replicas on the multi-turn and shared-system-prompt workloads, with affinity off, bounded and unbounded',
    async () => {
      for (const name of ['multi-turn-chat-fleet', 'tenants-shared-prompt'])
        for (const affinity of ['off', 'bounded', 'unbounded'] as const) {
          const { gap, bound } = await gapOverSeeds(loadScenario(name), 'vtc', 120, affinity);
          expect(
            gap.worst,
            `${name}, affinity ${affinity}: ${showSeeds(gap, 0)} vs bound ${bound}`,
          ).toBeLessThanOrEqual(bound);
        }
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    'holds with placement and dispatch charges by the engines’ KV cache events on every fleet workload',
    async () => {
      for (const name of [
        'multi-turn-chat-fleet',
        'tenants-shared-prompt',
        'agents-shared-prompt',
        'coding-assistant-fleet',
      ]) {
        const { gap, bound } = await gapOverSeeds(loadScenario(name), 'vtc', 120, 'bounded', true);
        expect(gap.worst, `${name}: ${showSeeds(gap, 0)} vs bound ${bound}`).toBeLessThanOrEqual(bound);
      }
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    'holds on one engine with bounded affinity (a one-replica fleet: affinity cannot move work)',
    async () => {
      const { gap, bound } = await gapOverSeeds(SMALL, 'vtc', undefined, 'bounded');
      expect(gap.worst, `${showSeeds(gap, 0)} vs bound ${bound}`).toBeLessThanOrEqual(bound);
    },
    SEEDED_TIMEOUT_MS,
  );
});
