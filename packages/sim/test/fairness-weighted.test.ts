/**
 * Weighted VTC (VTC section 4.3 and appendix B.1, Figure 16): four overloaded clients with weights
 * 1:2:3:4 receive service in that proportion; plain VTC, ignoring weights, serves them equally.
 * Shortened to 300 of the scenario's 600 s: all four are backlogged from the first seconds on.
 * Judged under each of seeds 1–5 (arrival phases and engine step-time noise re-drawn): the worst
 * seed must meet the bound.
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { EVIDENCE_SEEDS, summarizeSeeds } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

async function shares(policy: OrderingPolicyName, seed: number): Promise<number[]> {
  const input = buildRunInput(loadScenario('vtc-weighted'), { durationS: 300, seed });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy, { weightOf: (t) => input.tenantWeights[t] ?? 1 }),
    placement: placementByName('least-kv'),
  });
  const m = computeMetrics(run, { warmupS: 30 });
  // Service after warm-up, when every client is backlogged.
  const served = m.tenants.map((t) => {
    const acc = m.series.accumulatedService[t.id]!;
    return acc.at(-1)!;
  });
  const total = served.reduce((a, b) => a + b, 0);
  return served.map((s) => s / total);
}

describe('weighted VTC on vtc-weighted (VTC Figure 16)', () => {
  /** Per seed, the largest relative error of any client's share against `want`. */
  async function worstError(policy: OrderingPolicyName, want: readonly number[]) {
    const errors: number[] = [];
    for (const seed of EVIDENCE_SEEDS) {
      const got = await shares(policy, seed);
      errors.push(Math.max(...want.map((w, i) => Math.abs(got[i]! - w) / w)));
    }
    return summarizeSeeds(errors);
  }

  it(
    'serves four overloaded clients weighted 1:2:3:4 within ±10% of those shares under every seed',
    async () => {
      const e = await worstError('vtc-weighted', [0.1, 0.2, 0.3, 0.4]);
      expect(e.worst, `largest share error: ${showSeeds(e)}`).toBeLessThanOrEqual(0.1);
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    'serves them equally under plain VTC, which ignores the weights, under every seed',
    async () => {
      const e = await worstError('vtc', [0.25, 0.25, 0.25, 0.25]);
      expect(e.worst, `largest share error: ${showSeeds(e)}`).toBeLessThanOrEqual(0.02);
    },
    SEEDED_TIMEOUT_MS,
  );
});
