/**
 * Weighted VTC (VTC section 4.3 and appendix B.1, Figure 16): four overloaded clients with weights
 * 1:2:3:4 receive service in that proportion; plain VTC, ignoring weights, serves them equally.
 * Shortened to 300 of the scenario's 600 s: all four are backlogged from the first seconds on.
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';

async function shares(policy: OrderingPolicyName): Promise<number[]> {
  const input = buildRunInput(loadScenario('vtc-weighted'), { durationS: 300 });
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
  it('serves four overloaded clients weighted 1:2:3:4 within ±10% of those shares', async () => {
    const got = await shares('vtc-weighted');
    [0.1, 0.2, 0.3, 0.4].forEach((want, i) => {
      expect(Math.abs(got[i]! - want) / want, `client${i + 1}: ${got[i]}`).toBeLessThanOrEqual(0.1);
    });
  });

  it('serves them equally under plain VTC, which ignores the weights', async () => {
    for (const s of await shares('vtc')) expect(Math.abs(s - 0.25) / 0.25).toBeLessThanOrEqual(0.02);
  });
});
