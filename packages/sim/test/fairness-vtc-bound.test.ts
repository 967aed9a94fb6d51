/**
 * VTC's central guarantee (VTC paper, Theorem 4.4): two clients backlogged over an interval receive
 * service that differs by at most 2·max(w_in·L_in, w_out·M), however long the interval — while FCFS
 * lets the difference grow with time. Runs are shortened to 300 s for the bound (every suite is in
 * its steady state well before; the theorem holds at every instant) and to 360 s — the artifact's
 * length for the overload suites — for the growth comparison (FCFS's gap doubles between 195 s and
 * 360 s, enough to tell growth from VTC's bounded oscillation).
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { vtcFairnessBound } from '../src/fairness-bound.ts';
import { computeMetrics, type SimMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';

async function simulate(suite: string, policy: OrderingPolicyName, durationS: number) {
  const input = buildRunInput(loadScenario(suite), { durationS });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy),
    placement: placementByName('least-kv'),
  });
  return { input, metrics: computeMetrics(run) };
}

/** Least-squares slope of the accumulated service difference over time after warm-up (cost units/s). */
function growthRate(m: SimMetrics): number {
  const pts: [number, number][] = [];
  m.series.t.forEach((t, i) => {
    const d = m.series.accumulatedDiff[i];
    if (d !== null && d !== undefined) pts.push([t, d]);
  });
  const mt = pts.reduce((a, [t]) => a + t, 0) / pts.length;
  const md = pts.reduce((a, [, d]) => a + d, 0) / pts.length;
  let num = 0;
  let den = 0;
  for (const [t, d] of pts) {
    num += (t - mt) * (d - md);
    den += (t - mt) ** 2;
  }
  return num / den;
}

describe('VTC fairness bound (Theorem 4.4)', () => {
  it('computes M from the engine: the KV tokens a running batch can hold on the VTC A10G setup', () => {
    const input = buildRunInput(loadScenario('vtc-poisson-short-long-2'), { durationS: 10 });
    const b = vtcFairnessBound(input.engines, input.arrivals);
    expect(b.m).toBe(10_000);
    expect(b.lInput).toBe(512);
    expect(b.bound).toBe(2 * Math.max(1 * 512, 2 * 10_000));
    // Four replicas share counters through one store: their batches together are the fleet's M.
    const fleet = vtcFairnessBound([...input.engines, ...input.engines], input.arrivals);
    expect(fleet.m).toBe(20_000);
  });

  const ALL = [
    'vtc-overload',
    'vtc-proportional',
    'vtc-on-off-less',
    'vtc-on-off-overload',
    'vtc-poisson-short-long',
    'vtc-poisson-short-long-2',
    'vtc-increase',
    'vtc-dist-shift',
    'vtc-real',
    'vtc-overload-multi',
  ];
  it('never lets two backlogged clients differ by more than 2·max(w_in·L_in, w_out·M) in any suite', async () => {
    for (const suite of ALL) {
      const { input, metrics } = await simulate(suite, 'vtc', 300);
      const { bound } = vtcFairnessBound(input.engines, input.arrivals);
      expect(metrics.fairness.accumulatedMaxDiff, suite).toBeLessThanOrEqual(bound);
    }
  });

  // Suites where every client stays backlogged, so the difference of accumulated service since
  // warm-up is exactly the quantity the theorem bounds.
  const BACKLOGGED = [
    'vtc-overload',
    'vtc-on-off-overload',
    'vtc-poisson-short-long',
    'vtc-poisson-short-long-2',
    'vtc-overload-multi',
  ];
  it('keeps the accumulated difference of backlogged clients from growing with time, while FCFS lets it grow steadily', async () => {
    for (const suite of BACKLOGGED) {
      const vtc = await simulate(suite, 'vtc', 360);
      const fcfs = await simulate(suite, 'fcfs', 360);
      const { bound } = vtcFairnessBound(vtc.input.engines, vtc.input.arrivals);
      const vtcRate = growthRate(vtc.metrics);
      const fcfsRate = growthRate(fcfs.metrics);
      // FCFS serves each client in proportion to its request rate: the gap widens steadily...
      expect(fcfsRate, suite).toBeGreaterThan(0);
      const fcfsEnd = fcfs.metrics.series.accumulatedDiff.at(-1)!;
      const fcfsMid = fcfs.metrics.series.accumulatedDiff[Math.floor(fcfs.metrics.series.t.length / 2)]!;
      expect(fcfsEnd, suite).toBeGreaterThan(1.5 * fcfsMid);
      // ...while under VTC it hovers: its trend is under 2% of FCFS's.
      expect(Math.abs(vtcRate), suite).toBeLessThan(0.02 * fcfsRate);
      expect(Math.max(...vtc.metrics.series.accumulatedDiff.map((d) => d ?? 0)), suite).toBeLessThanOrEqual(
        bound,
      );
    }
  });

  it("keeps VTC's max diff on vtc-overload at most half of FCFS's, at equal throughput (±3%)", async () => {
    const vtc = (await simulate('vtc-overload', 'vtc', 600)).metrics;
    const fcfs = (await simulate('vtc-overload', 'fcfs', 600)).metrics;
    expect(vtc.fairness.maxDiff).toBeLessThanOrEqual(fcfs.fairness.maxDiff / 2);
    const t = vtc.throughput.tokensPerS;
    const f = fcfs.throughput.tokensPerS;
    expect(Math.abs(t - f) / f).toBeLessThanOrEqual(0.03);
  });
});
