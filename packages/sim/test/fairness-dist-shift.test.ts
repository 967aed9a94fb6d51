/**
 * VTC Figure 10 (distribution shift): client 1 stays under its share for five minutes (ON/OFF),
 * then both clients overload the server at 60 req/min each. LCF remembers client 1's deficit from
 * the first phase and serves it first for the whole overload phase; VTC lifts client 1's counter
 * when it returns (Algorithm 2, lines 8–13), so both get the same service. Runs the first two
 * phases (600 of the scenario's 900 s); the third phase plays no part in this property. Judged
 * under each of seeds 1–5 (arrival phases and engine step-time noise re-drawn).
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { EVIDENCE_SEEDS, summarizeSeeds } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

/** Service each client received in the overload phase (after 30 s of it, so queues have formed). */
async function overloadPhase(policy: OrderingPolicyName, seed: number) {
  const input = buildRunInput(loadScenario('vtc-dist-shift'), { durationS: 600, seed });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy),
    placement: placementByName('least-kv'),
  });
  const m = computeMetrics(run);
  const at = (id: string, t: number) => m.series.accumulatedService[id]![m.series.t.indexOf(t)]!;
  const served = (id: string) => at(id, 600) - at(id, 330);
  // What the client asked for in the phase: requests arriving in it, at cost input + 2·output.
  const asked = (id: string) =>
    run.records
      .filter((r) => r.req.tenant === id && r.arrivalS >= 330 && r.arrivalS < 600)
      .reduce((a, r) => a + r.req.inputTokens + 2 * r.req.outputTokens!, 0);
  return {
    client1: served('client1'),
    client2: served('client2'),
    asked1: asked('client1'),
  };
}

describe('vtc-dist-shift (VTC Figure 10)', () => {
  it(
    'LCF over-serves the returning client 1 in the overload phase; VTC serves both clients equally, under every seed',
    async () => {
      const lcf = [];
      const vtc = [];
      for (const seed of EVIDENCE_SEEDS) {
        lcf.push(await overloadPhase('lcf', seed));
        vtc.push(await overloadPhase('vtc', seed));
      }
      // LCF: client 1 gets everything it asks for, client 2 only what is left: well over an equal split.
      const lcfShare = summarizeSeeds(
        lcf.map((x) => x.client1 / (x.client1 + x.client2)),
        'lower',
      );
      expect(lcfShare.worst, `LCF client 1 share: ${showSeeds(lcfShare)}`).toBeGreaterThan(0.54);
      const lcfAsked = summarizeSeeds(
        lcf.map((x) => x.client1 / x.asked1),
        'lower',
      );
      expect(lcfAsked.worst, `LCF client 1 served / asked: ${showSeeds(lcfAsked)}`).toBeGreaterThan(0.97);
      // VTC: the same service for both (within 2%), client 1 queues like client 2.
      const vtcGap = summarizeSeeds(vtc.map((x) => Math.abs(x.client1 - x.client2) / x.client2));
      expect(vtcGap.worst, `VTC |client 1 − client 2| / client 2: ${showSeeds(vtcGap)}`).toBeLessThan(0.02);
      const vtcAsked = summarizeSeeds(vtc.map((x) => x.client1 / x.asked1));
      expect(vtcAsked.worst, `VTC client 1 served / asked: ${showSeeds(vtcAsked)}`).toBeLessThan(0.93);
    },
    SEEDED_TIMEOUT_MS,
  );
});
