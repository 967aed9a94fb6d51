/**
 * VTC Table 2 (section 5.3, real workload): 27 chat clients with skewed, bursty rates on one A10G.
 * Its ordering: VTC's service difference is well below FCFS's and LCF's at the same throughput,
 * while an RPM limit of 5 requests per minute reaches a small difference only by rejecting enough
 * requests to cut throughput to well under two thirds. Full 600 s runs (about 1 s each).
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';

async function simulate(policy: OrderingPolicyName, rpm?: number) {
  const input = buildRunInput(loadScenario('vtc-real'));
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy, rpm === undefined ? {} : { rpm }),
    placement: placementByName('least-kv'),
  });
  return computeMetrics(run);
}

describe('vtc-real (VTC Table 2)', () => {
  it("keeps VTC's Avg Diff well below FCFS's and LCF's at the same throughput, and RPM(5) cuts throughput to well under two thirds", async () => {
    const fcfs = await simulate('fcfs');
    const lcf = await simulate('lcf');
    const vtc = await simulate('vtc');
    const rpm5 = await simulate('rpm', 5);

    expect(vtc.fairness.avgDiff).toBeLessThan(0.5 * fcfs.fairness.avgDiff);
    expect(vtc.fairness.avgDiff).toBeLessThan(0.8 * lcf.fairness.avgDiff);
    expect(vtc.fairness.maxDiff).toBeLessThan(fcfs.fairness.maxDiff);
    expect(vtc.fairness.maxDiff).toBeLessThan(lcf.fairness.maxDiff);
    for (const other of [fcfs, lcf])
      expect(
        Math.abs(vtc.throughput.tokensPerS - other.throughput.tokensPerS) / other.throughput.tokensPerS,
      ).toBeLessThan(0.03);

    // RPM(5) looks fairest by rejecting what the heavy clients send...
    expect(rpm5.requests.rejected).toBeGreaterThan(0.25 * rpm5.requests.arrived);
    expect(rpm5.fairness.avgDiff).toBeLessThan(vtc.fairness.avgDiff);
    // ...and pays with throughput (paper: 340 vs 779 tokens/s).
    expect(rpm5.throughput.tokensPerS).toBeLessThan(0.64 * vtc.throughput.tokensPerS);
  });
});
