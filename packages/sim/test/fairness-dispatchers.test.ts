/**
 * Fairness across dispatchers (DESIGN.md "Fairness semantics"): N stateless gateways share
 * VTC's counters through one store, each charging streamed output in coalesced flushes. The cost of
 * coalescing must stay small: with 4 dispatchers flushing every 50 ms, the service difference of
 * backlogged clients (over every backlogged sub-interval) stays within 1.2× of a centralised VTC
 * that charges every token as it is generated (VTC Algorithm 2). 300 s runs under seeds 1–5
 * (arrivals and step-time noise re-drawn), judged on the median and the worst seed;
 * `npm run bench:dispatchers` prints the whole curve.
 */
import { orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { EVIDENCE_SEEDS, summarizeSeeds } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

async function accumulatedDiff(
  suite: string,
  seed: number,
  dispatchers: number,
  flushMs: number,
  flushTokens?: number,
) {
  const input = buildRunInput(loadScenario(suite), { seed, durationS: 300 });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName('vtc'),
    placement: placementByName('least-kv'),
    dispatchers,
    flushMs,
    ...(flushTokens !== undefined ? { flushTokens } : {}),
  });
  return computeMetrics(run).fairness.accumulatedMaxDiff;
}

/** Per seed, the difference under `dispatchers`/`flushMs` over the centralised one, summarised. */
async function ratioOverSeeds(suite: string, dispatchers: number, flushMs: number, flushTokens?: number) {
  const ratios: number[] = [];
  for (const seed of EVIDENCE_SEEDS) {
    const centralised = await accumulatedDiff(suite, seed, 1, 50, 1);
    ratios.push((await accumulatedDiff(suite, seed, dispatchers, flushMs, flushTokens)) / centralised);
  }
  return ratios;
}

describe('VTC with N dispatchers and coalesced charging, over five seeds', () => {
  for (const suite of ['vtc-overload', 'vtc-poisson-short-long']) {
    it(
      `keeps the service difference on ${suite} within 1.2x of centralised VTC with 4 dispatchers flushing every 50 ms`,
      async () => {
        const s = summarizeSeeds(await ratioOverSeeds(suite, 4, 50));
        expect(s.median, showSeeds(s)).toBeLessThanOrEqual(1.2);
        expect(s.worst, showSeeds(s)).toBeLessThanOrEqual(1.2);
      },
      SEEDED_TIMEOUT_MS,
    );
  }

  it(
    'loses fairness when flushes are rare: charges a second late let a client run ahead',
    async () => {
      // On the uniform overload the counters alone decide who runs, so their staleness shows; on
      // Poisson arrivals the noise of the arrivals dominates at any interval (see the bench).
      // Over seeds 1–5 the ratio to centralised VTC was 1.42, 2.47, 1.10, 4.03, 1.56: above 1 under
      // every seed, but the 2× one seed showed on the noise-free engine is not what the median says.
      const s = summarizeSeeds(await ratioOverSeeds('vtc-overload', 4, 1000, 1_000_000), 'lower');
      expect(s.median, showSeeds(s)).toBeGreaterThan(1.3);
      expect(s.worst, showSeeds(s)).toBeGreaterThan(1);
    },
    SEEDED_TIMEOUT_MS,
  );
});
