/**
 * The report's model of S-LoRA's router (VTC inside the router, admission every 10 decode steps
 * under the future-peak check) on fairway's engine model: the running batch forms from one client
 * at a time, as in the VTC artifact's published results, unlike fairway's gateway on the same engine.
 */
import { orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { runSloraRouter } from '../bench/slora-router.ts';
import { computeMetrics } from '../src/metrics.ts';
import type { SimRun } from '../src/records.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { SEEDED_TIMEOUT_MS } from './support/seeded.ts';

/** Mean share of the running requests that the largest client holds, sampled every 3 s. */
function oneSided(run: SimRun): number {
  const shares: number[] = [];
  for (let t = 30; t < run.durationS; t += 3) {
    const running = run.records.filter(
      (r) => (r.firstTokenS ?? Infinity) <= t && t < (r.finishS ?? Infinity),
    );
    if (running.length === 0) continue;
    const c1 = running.filter((r) => r.req.tenant === 'client1').length;
    shares.push(Math.max(c1, running.length - c1) / running.length);
  }
  return shares.reduce((a, b) => a + b, 0) / shares.length;
}

describe("VTC inside S-LoRA's router (report probe)", () => {
  it(
    'fills the running batch from one client at a time, where the gateway keeps it mixed',
    async () => {
      const input = buildRunInput(loadScenario('vtc-overload'), { durationS: 360, seed: 1 });
      const router = runSloraRouter(input, 10);
      const gateway = await runSimulation({
        ...input,
        ordering: orderingPolicyByName('vtc'),
        placement: placementByName('least-kv'),
      });
      expect(oneSided(router)).toBeGreaterThan(0.8);
      expect(oneSided(gateway)).toBeLessThan(0.6);
      expect(computeMetrics(router).fairness.avgDiff).toBeGreaterThan(
        5 * computeMetrics(gateway).fairness.avgDiff,
      );
      // Every request the router admitted was admitted once and generated what it asked.
      for (const r of router.records)
        if (r.finishS !== undefined) expect(r.generated).toBe(r.req.outputTokens);
    },
    SEEDED_TIMEOUT_MS,
  );
});
