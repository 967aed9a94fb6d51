import { leastKvPlacement, vtcPolicy } from '@fairway/policy';
import type { PrefixAffinityMode } from '@fairway/scheduler';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import type { SimRun } from '../src/records.ts';
import { buildReport } from '../src/report.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { scenarioSchema } from '../src/scenario-schema.ts';

/** The multi-turn scenario on three replicas, for 60 simulated seconds, under VTC and least-KV. */
async function multiTurn(mode: PrefixAffinityMode): Promise<SimRun> {
  const input = buildRunInput(loadScenario('multi-turn-chat'), { durationS: 60, prefixAffinity: mode });
  const engines = [0, 1, 2].map((i) => ({ id: `replica-${i}`, config: input.engines[0]!.config }));
  return runSimulation({ ...input, engines, ordering: vtcPolicy(), placement: leastKvPlacement() });
}

/** Of the follow-up turns that ran, the fraction on the replica of the turn before them. */
function sameReplicaShare(run: SimRun): number {
  const turns = new Map<string, string[]>();
  for (const r of run.records)
    if (r.req.interactionId !== undefined && r.replica !== undefined)
      turns.set(r.req.interactionId, [...(turns.get(r.req.interactionId) ?? []), r.replica]);
  let same = 0;
  let all = 0;
  for (const replicas of turns.values())
    for (let k = 1; k < replicas.length; k++) {
      all++;
      if (replicas[k] === replicas[k - 1]) same++;
    }
  return same / all;
}

function ttfts(run: SimRun, tenant: string): number[] {
  return run.records
    .filter((r) => r.req.tenant === tenant && r.firstTokenS !== undefined)
    .map((r) => (r.firstTokenS as number) - r.arrivalS)
    .sort((a, b) => a - b);
}

const median = (xs: readonly number[]): number => xs[Math.floor(xs.length / 2)] as number;

describe('prefix affinity in the simulator', () => {
  it('sends a conversation’s turns back to the replica that holds its history', async () => {
    const off = await multiTurn('off');
    const bounded = await multiTurn('bounded');
    const unbounded = await multiTurn('unbounded');
    expect(off.affinity).toBeUndefined();
    expect(sameReplicaShare(unbounded)).toBe(1);
    expect(sameReplicaShare(bounded)).toBeGreaterThan(0.7);
    expect(sameReplicaShare(off)).toBeLessThan(0.5);
    expect(bounded.affinity!.hit).toBeGreaterThan(bounded.affinity!.bounded);
    const hitRate = (run: SimRun) => buildReport(run, computeMetrics(run), 0).prefixCache?.hitRate ?? 0;
    expect(hitRate(bounded)).toBeGreaterThan(hitRate(off));
    expect(hitRate(unbounded)).toBeGreaterThanOrEqual(hitRate(bounded));
  });

  it('keeps a tenant hammering one long hot prefix spread over the fleet and off another tenant’s latency', async () => {
    const run = async (mode: PrefixAffinityMode) => {
      const scenario = scenarioSchema.parse({
        durationS: 60,
        seed: 5,
        cluster: {
          engines: [
            { gpu: 'A100-80GB', model: 'llama-2-7b', count: 3, options: { enablePrefixCaching: true } },
          ],
        },
        streams: [
          {
            tenant: 'hot',
            arrival: { process: 'poisson', rate: 12 },
            input: { kind: 'uniform', min: 20, max: 100 },
            output: { kind: 'uniform', min: 100, max: 300 },
            maxTokens: 'output',
            prefix: { sharedTokens: 3000 },
          },
          {
            tenant: 'victim',
            arrival: { process: 'poisson', rate: 3 },
            input: { kind: 'uniform', min: 200, max: 800 },
            output: { kind: 'uniform', min: 100, max: 300 },
            maxTokens: 'output',
            prefix: {},
          },
        ],
        prefixAffinity: mode,
      });
      const input = buildRunInput({ name: 'hot-prefix', scenario, baseDir: '.' }, {});
      return runSimulation({ ...input, ordering: vtcPolicy(), placement: leastKvPlacement() });
    };
    const off = await run('off');
    const bounded = await run('bounded');
    expect(bounded.affinity!.hit).toBeGreaterThan(0);
    const hot = bounded.records.filter((r) => r.req.tenant === 'hot' && r.replica !== undefined);
    // Every replica takes a good share of the hot calls (an even one is a third): a replica reserves
    // the hot prefix once for all its calls there, so the one that holds it takes more of them
    // before it reaches the load bound, but not all.
    for (const replica of ['replica-0', 'replica-1', 'replica-2'])
      expect(hot.filter((r) => r.replica === replica).length).toBeGreaterThan(hot.length / 5);
    const victimOff = ttfts(off, 'victim');
    const victimBounded = ttfts(bounded, 'victim');
    expect(median(victimBounded)).toBeLessThanOrEqual(median(victimOff) * 1.1);
    expect(victimBounded[Math.floor(victimBounded.length * 0.99)]).toBeLessThanOrEqual(
      (victimOff[Math.floor(victimOff.length * 0.99)] as number) * 1.1,
    );
  });
});
