/**
 * VTC Table 2 (section 5.3, real workload): 27 chat clients, a few dominant ones whose shares shift
 * over the run, bursty arrivals, on one A10G. Its ordering: VTC's service difference is well below
 * FCFS's and LCF's at the same throughput, while an RPM limit of 5 requests per minute reaches a
 * small difference only by rejecting enough requests to cut throughput to well under two thirds
 * (paper: 340 of 779 tokens/s). Full 600 s runs under seeds 1–5 (arrivals and engine step-time
 * noise re-drawn), judged on the median and the worst seed.
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics, type SimMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { EVIDENCE_SEEDS, type SeedSummary, summarizeSeeds } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

async function simulate(
  policy: OrderingPolicyName,
  seed: number,
  rpm?: number,
  scenario = 'vtc-real',
): Promise<SimMetrics> {
  const input = buildRunInput(loadScenario(scenario), { seed });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy, rpm === undefined ? {} : { rpm }),
    placement: placementByName('least-kv'),
  });
  return computeMetrics(run);
}

const show = (s: SeedSummary) => showSeeds(s, 3);

describe('vtc-real (VTC Table 2), over five seeds', () => {
  it(
    "keeps VTC's Avg Diff well below FCFS's and LCF's at the same throughput, and RPM(5) cuts throughput to well under two thirds",
    async () => {
      const runs: { fcfs: SimMetrics; lcf: SimMetrics; vtc: SimMetrics; rpm5: SimMetrics }[] = [];
      for (const seed of EVIDENCE_SEEDS)
        runs.push({
          fcfs: await simulate('fcfs', seed),
          lcf: await simulate('lcf', seed),
          vtc: await simulate('vtc', seed),
          rpm5: await simulate('rpm', seed, 5),
        });
      const over = (f: (r: (typeof runs)[number]) => number, worse: 'higher' | 'lower' = 'higher') =>
        summarizeSeeds(runs.map(f), worse);
      const claims: [string, SeedSummary, number][] = [
        ['VTC / FCFS Avg Diff', over((r) => r.vtc.fairness.avgDiff / r.fcfs.fairness.avgDiff), 0.5],
        ['VTC / LCF Avg Diff', over((r) => r.vtc.fairness.avgDiff / r.lcf.fairness.avgDiff), 0.7],
        ['VTC / FCFS Max Diff', over((r) => r.vtc.fairness.maxDiff / r.fcfs.fairness.maxDiff), 0.5],
        ['VTC / LCF Max Diff', over((r) => r.vtc.fairness.maxDiff / r.lcf.fairness.maxDiff), 0.6],
        [
          '|VTC − FCFS| / FCFS throughput',
          over((r) => Math.abs(r.vtc.throughput.tokensPerS / r.fcfs.throughput.tokensPerS - 1)),
          0.04,
        ],
        [
          '|VTC − LCF| / LCF throughput',
          over((r) => Math.abs(r.vtc.throughput.tokensPerS / r.lcf.throughput.tokensPerS - 1)),
          0.04,
        ],
        // RPM(5) looks fairest by rejecting what the heavy clients send...
        ['RPM(5) / VTC Avg Diff', over((r) => r.rpm5.fairness.avgDiff / r.vtc.fairness.avgDiff), 0.5],
        // ...and pays with throughput.
        [
          'RPM(5) / VTC throughput',
          over((r) => r.rpm5.throughput.tokensPerS / r.vtc.throughput.tokensPerS),
          0.6,
        ],
      ];
      for (const [what, s, below] of claims) {
        expect(s.median, `${what}: ${show(s)}`).toBeLessThan(below);
        expect(s.worst, `${what}: ${show(s)}`).toBeLessThan(below);
      }
      const rejected = over((r) => r.rpm5.requests.rejected / r.rpm5.requests.arrived, 'lower');
      expect(rejected.worst, `RPM(5) rejected share: ${show(rejected)}`).toBeGreaterThan(0.6);
    },
    SEEDED_TIMEOUT_MS,
  );

  it('has a dominant client that fades and another that appears, as in the artifact trace, under every seed', () => {
    for (const seed of EVIDENCE_SEEDS) {
      const { arrivals } = buildRunInput(loadScenario('vtc-real'), { seed });
      const share = (tenant: string, from: number, to: number) => {
        const inEra = arrivals.filter((r) => r.arrivalMs >= from * 1000 && r.arrivalMs < to * 1000);
        return inEra.filter((r) => r.tenant === tenant).length / inEra.length;
      };
      // The design share is 45%; the draws over 200 s land at 34–48% over seeds 1–5.
      expect(share('client1', 0, 200), `seed ${seed}`).toBeGreaterThan(0.3);
      expect(share('client1', 400, 600), `seed ${seed}`).toBeLessThan(0.1);
      expect(share('client3', 0, 200), `seed ${seed}`).toBe(0);
      expect(share('client3', 200, 600), `seed ${seed}`).toBeGreaterThan(0.12);
      expect(new Set(arrivals.map((r) => r.tenant)).size, `seed ${seed}`).toBe(27);
    }
  });
});

describe("vtc-real-trace (VTC Table 2 on the artifact's own trace)", () => {
  it(
    "keeps VTC's Avg Diff below LCF's and FCFS's at the same throughput, and RPM(5) cuts throughput below two thirds",
    async () => {
      const fcfs = await simulate('fcfs', 1, undefined, 'vtc-real-trace');
      const lcf = await simulate('lcf', 1, undefined, 'vtc-real-trace');
      const vtc = await simulate('vtc', 1, undefined, 'vtc-real-trace');
      const rpm5 = await simulate('rpm', 1, 5, 'vtc-real-trace');
      expect(vtc.fairness.avgDiff).toBeLessThan(0.8 * lcf.fairness.avgDiff);
      expect(lcf.fairness.avgDiff).toBeLessThan(0.8 * fcfs.fairness.avgDiff);
      expect(Math.abs(vtc.throughput.tokensPerS / fcfs.throughput.tokensPerS - 1)).toBeLessThan(0.04);
      expect(rpm5.throughput.tokensPerS / vtc.throughput.tokensPerS).toBeLessThan(2 / 3);
    },
    SEEDED_TIMEOUT_MS,
  );
});
