/**
 * VTC with length prediction (VTC section 4.4, appendix B.3, Table 5 and Figure 19) on
 * `vtc-overload` over the artifact's 6 minutes: charging the predicted output when a request is
 * picked (Algorithm 3), instead of only as it streams, shrinks the service difference between
 * backlogged clients. VTC(predict) prices a flow without history at `max_tokens`, so every flow is
 * charged for its in-flight output from its first request; here every output is 256 = max_tokens,
 * so it prices exactly like the oracle. Without that prior the first window is the worst of the
 * run: the first requests of both clients are charged only as they stream. The paper's ±50% noisy
 * oracle costs fairness against the exact one. Every claim is judged over seeds 1–5 (arrivals,
 * prediction errors and engine step-time noise re-drawn): median and worst case.
 */
import { type OrderingPolicy, orderingPolicyByName, placementByName, vtcPolicy } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics, type SimMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { EVIDENCE_SEEDS, type SeedSummary, summarizeSeeds } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

async function simulate(ordering: OrderingPolicy, seed: number): Promise<SimMetrics> {
  const input = buildRunInput(loadScenario('vtc-overload'), { durationS: 360, seed });
  const run = await runSimulation({ ...input, ordering, placement: placementByName('least-kv') });
  return computeMetrics(run);
}

/** The metrics of each named policy under each of {@link EVIDENCE_SEEDS}, one record per seed. */
async function runsOverSeeds(
  policies: Readonly<Record<string, (seed: number) => OrderingPolicy>>,
): Promise<Record<string, SimMetrics>[]> {
  const out: Record<string, SimMetrics>[] = [];
  for (const seed of EVIDENCE_SEEDS) {
    const m: Record<string, SimMetrics> = {};
    for (const [k, make] of Object.entries(policies)) m[k] = await simulate(make(seed), seed);
    out.push(m);
  }
  return out;
}

const show = (s: SeedSummary) => showSeeds(s, 3);

describe('VTC(predict) and VTC(oracle) on vtc-overload (VTC Table 5), over five seeds', () => {
  it(
    'reduce the Avg Diff and the accumulated difference below plain VTC under every seed, and the Max Diff in the median, at the same throughput',
    async () => {
      // `everySeed: false`: the claim holds on the median only. Max Diff is the largest of 19 windows
      // and swings from seed to seed: predict/VTC was 0.25, 1.37, 0.33, 1.21, 0.75 over seeds 1–5.
      const checks: { what: string; s: SeedSummary; below: number; everySeed?: false }[] = [];
      const runs = await runsOverSeeds({
        vtc: () => orderingPolicyByName('vtc'),
        predict: () => orderingPolicyByName('vtc-predict'),
        oracle: () => orderingPolicyByName('vtc-oracle'),
      });
      for (const k of ['predict', 'oracle'] as const) {
        const ratio = (f: (m: SimMetrics) => number) => summarizeSeeds(runs.map((r) => f(r[k]!) / f(r.vtc!)));
        checks.push(
          { what: `${k} Max Diff / VTC's`, s: ratio((m) => m.fairness.maxDiff), below: 1, everySeed: false },
          { what: `${k} Avg Diff / VTC's`, s: ratio((m) => m.fairness.avgDiff), below: 1 },
          // Figure 19's quantity: the largest difference of accumulated service between the clients.
          {
            what: `${k} accumulated difference / VTC's`,
            s: ratio((m) => m.fairness.accumulatedMaxDiff),
            below: 1,
          },
          {
            what: `${k} |throughput − VTC's| / VTC's`,
            s: summarizeSeeds(
              runs.map((r) => Math.abs(r[k]!.throughput.tokensPerS / r.vtc!.throughput.tokensPerS - 1)),
            ),
            below: 0.01,
          },
        );
      }
      for (const c of checks) {
        expect(c.s.median, `${c.what}: ${show(c.s)}`).toBeLessThan(c.below);
        if (c.everySeed !== false) expect(c.s.worst, `${c.what}: ${show(c.s)}`).toBeLessThan(c.below);
      }
      // Exact predictions from the first request (the max_tokens prior): the oracle's windows exactly.
      for (const r of runs) expect(r.predict!.fairness.diffSeries).toEqual(r.oracle!.fairness.diffSeries);
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    'without a prior for flows without history, is worst in the start-up window and like the oracle after it',
    async () => {
      const runs = await runsOverSeeds({
        noPrior: () => vtcPolicy({ prediction: 'history', expectedOutput: 0 }),
        oracle: () => orderingPolicyByName('vtc-oracle'),
      });
      for (const { noPrior, oracle } of runs) {
        const [first, ...rest] = noPrior!.fairness.diffSeries;
        expect(first).toBe(noPrior!.fairness.maxDiff);
        const later = oracle!.fairness.diffSeries.slice(1);
        expect(rest).toHaveLength(later.length);
        for (const [i, d] of rest.entries()) expect(d).toBeCloseTo(later[i]!, 6);
      }
      const startUp = summarizeSeeds(
        runs.map((r) => r.noPrior!.fairness.diffSeries[0]! / r.oracle!.fairness.diffSeries[0]!),
        'lower',
      );
      // The first window is several times the oracle's under every seed.
      expect(startUp.median, `first window / oracle's: ${show(startUp)}`).toBeGreaterThan(3);
      expect(startUp.worst, `first window / oracle's: ${show(startUp)}`).toBeGreaterThan(1.5);
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    'with ±50% noise (the paper\'s "VTC (±50%)") is less fair than the exact oracle, at the same throughput',
    async () => {
      const runs = await runsOverSeeds({
        oracle: () => orderingPolicyByName('vtc-oracle'),
        noisy: (seed) => orderingPolicyByName('vtc-noisy-oracle', { seed }),
      });
      const ratio = (f: (m: SimMetrics) => number) =>
        summarizeSeeds(
          runs.map((r) => f(r.noisy!) / f(r.oracle!)),
          'lower',
        );
      const avg = ratio((m) => m.fairness.avgDiff);
      const acc = ratio((m) => m.fairness.accumulatedMaxDiff);
      expect(avg.median, `noisy / oracle Avg Diff: ${show(avg)}`).toBeGreaterThan(2);
      expect(avg.worst, `noisy / oracle Avg Diff: ${show(avg)}`).toBeGreaterThan(1);
      expect(acc.worst, `noisy / oracle accumulated difference: ${show(acc)}`).toBeGreaterThan(1);
      const tput = summarizeSeeds(
        runs.map((r) => Math.abs(r.noisy!.throughput.tokensPerS / r.oracle!.throughput.tokensPerS - 1)),
      );
      expect(tput.worst, `|throughput ratio − 1|: ${show(tput)}`).toBeLessThan(0.01);
    },
    SEEDED_TIMEOUT_MS,
  );
});
