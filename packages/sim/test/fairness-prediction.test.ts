/**
 * VTC with length prediction (VTC section 4.4, appendix B.3, Table 5 and Figure 19): charging the
 * predicted output when a request is picked, instead of only as it streams, shrinks the service
 * difference between backlogged clients; a perfect predictor shrinks it most. The paper's Table 5
 * ordering — VTC > VTC(predict) > VTC(oracle) — on `vtc-overload` over the artifact's 6 minutes.
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';

async function simulate(policy: OrderingPolicyName) {
  const input = buildRunInput(loadScenario('vtc-overload'), { durationS: 360 });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy),
    placement: placementByName('least-kv'),
  });
  return computeMetrics(run);
}

describe('VTC(predict) and VTC(oracle) on vtc-overload (VTC Table 5)', () => {
  it('reduce the service difference below plain VTC, the oracle most, at the same throughput', async () => {
    const vtc = await simulate('vtc');
    const predict = await simulate('vtc-predict');
    const oracle = await simulate('vtc-oracle');
    // Figure 19's quantity: the largest difference of accumulated service between the two clients.
    expect(predict.fairness.accumulatedMaxDiff).toBeLessThan(0.75 * vtc.fairness.accumulatedMaxDiff);
    expect(oracle.fairness.accumulatedMaxDiff).toBeLessThan(predict.fairness.accumulatedMaxDiff);
    // Table 5's Avg Diff (windowed service-rate difference).
    expect(predict.fairness.avgDiff).toBeLessThan(vtc.fairness.avgDiff);
    expect(oracle.fairness.avgDiff).toBeLessThan(predict.fairness.avgDiff);
    for (const m of [predict, oracle])
      expect(
        Math.abs(m.throughput.tokensPerS - vtc.throughput.tokensPerS) / vtc.throughput.tokensPerS,
      ).toBeLessThan(0.01);
  });
});
