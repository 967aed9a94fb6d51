/**
 * What an engine's prefix cache served a prompt is known once the prompt is prefilled, and a run's
 * records carry it from then on: a request still decoding when the run ends has its prompt counted
 * at the cost it was served at (the fairness measures' service), not as if none of it were cached.
 * The what-if `chargeCachedAtPrefill` corrects the flow's counter then too.
 */
import { orderingPolicyByName, placementByName } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, parseScenario } from '../src/scenario.ts';

/** One tenant's 1,000-token system prompt before each request, outputs far longer than the run. */
const scenario = parseScenario({
  durationS: 20,
  cluster: {
    engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', count: 1, options: { enablePrefixCaching: true } }],
  },
  tenants: [{ id: 'solo' }],
  streams: [
    {
      tenant: 'solo',
      arrival: { process: 'poisson', rate: 1 },
      input: { kind: 'uniform', min: 50, max: 100 },
      output: { kind: 'uniform', min: 2000, max: 2500 },
      maxTokens: 'output',
      prefix: { sharedTokens: 1000 },
    },
  ],
});

describe('cached prompt tokens in a run’s records', () => {
  it('are recorded when a request is prefilled, so one still decoding at the end carries them', async () => {
    const input = buildRunInput({ name: 'in-flight', baseDir: '.', scenario }, { seed: 1 });
    const run = await runSimulation({
      ...input,
      ordering: orderingPolicyByName('vtc', { cachedTokenWeight: input.cachedTokenWeight }),
      placement: placementByName('least-kv'),
    });
    const decoding = run.records.filter((r) => r.firstTokenS !== undefined && r.finishS === undefined);
    expect(decoding.length).toBeGreaterThan(5);
    expect(decoding.every((r) => r.cachedTokens !== undefined)).toBe(true);
    // Every request after the first found the shared system prompt in the cache (whole blocks).
    const hits = decoding.filter((r) => (r.cachedTokens ?? 0) >= 992);
    expect(hits.length).toBeGreaterThanOrEqual(decoding.length - 1);
  });

  it('charge the flow what its cache served at prefill under chargeCachedAtPrefill, not the full prompt', async () => {
    const input = buildRunInput({ name: 'in-flight', baseDir: '.', scenario }, { seed: 1 });
    const w = input.cachedTokenWeight;
    const counterAfter = async (chargeCachedAtPrefill: boolean) => {
      const store = new MemoryStore();
      const run = await runSimulation({
        ...input,
        store,
        chargeCachedAtPrefill,
        ordering: orderingPolicyByName('vtc', { cachedTokenWeight: w }),
        placement: placementByName('least-kv'),
      });
      const counter = (await store.snapshot('llama-2-7b', 0)).counters.solo ?? 0;
      // Nothing settled: every request ran past the end, so the flow had no cached share to predict.
      expect(run.records.every((r) => r.finishS === undefined)).toBe(true);
      const started = run.records.filter((r) => r.firstTokenS !== undefined);
      const prompts = started.reduce((s, r) => s + r.req.inputTokens - (1 - w) * (r.cachedTokens ?? 0), 0);
      const fullPrompts = started.reduce((s, r) => s + r.req.inputTokens, 0);
      const output = started.reduce((s, r) => s + 2 * r.generated, 0);
      return { counter, prompts, fullPrompts, output, n: started.length };
    };
    // Output is charged in flushes (every 50 ms): a few tokens per request may be uncharged yet.
    const slack = (n: number) => 2 * 8 * n;
    const atPrefill = await counterAfter(true);
    expect(Math.abs(atPrefill.counter - atPrefill.prompts - atPrefill.output)).toBeLessThan(
      slack(atPrefill.n),
    );
    const atSettlement = await counterAfter(false);
    expect(Math.abs(atSettlement.counter - atSettlement.fullPrompts - atSettlement.output)).toBeLessThan(
      slack(atSettlement.n),
    );
    expect(atPrefill.counter).toBeLessThan(atSettlement.counter - 900 * (atPrefill.n - 1));
  });
});
