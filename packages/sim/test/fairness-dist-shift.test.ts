/**
 * VTC Figure 10 (distribution shift): client 1 stays under its share for five minutes (ON/OFF),
 * then both clients overload the server at 60 req/min each. LCF remembers client 1's deficit from
 * the first phase and serves it first for the whole overload phase; VTC lifts client 1's counter
 * when it returns (Algorithm 2, lines 8–13), so both get the same service. Runs the first two
 * phases (600 of the scenario's 900 s); the third phase plays no part in this property.
 */
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';

/** Service each client received in the overload phase (after 30 s of it, so queues have formed). */
async function overloadPhase(policy: OrderingPolicyName) {
  const input = buildRunInput(loadScenario('vtc-dist-shift'), { durationS: 600 });
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
  it('LCF over-serves the returning client 1 in the overload phase; VTC serves both clients equally', async () => {
    const lcf = await overloadPhase('lcf');
    const vtc = await overloadPhase('vtc');
    // LCF: client 1 gets everything it asks for, client 2 only what is left: well over an equal split.
    expect(lcf.client1 / (lcf.client1 + lcf.client2)).toBeGreaterThan(0.54);
    expect(lcf.client1).toBeGreaterThan(0.97 * lcf.asked1);
    // VTC: the same service for both (within 2%), client 1 queues like client 2.
    expect(Math.abs(vtc.client1 - vtc.client2) / vtc.client2).toBeLessThan(0.02);
    expect(vtc.client1).toBeLessThan(0.93 * vtc.asked1);
  });
});
