/**
 * VTC's central guarantee (VTC paper, Theorem 4.4): for any two clients and ANY interval [t1, t2)
 * in which both are backlogged, the service they receive differs by at most
 * 2·max(w_in·L_in, w_out·M). The check runs over every such sub-interval exactly
 * (`backloggedServiceGap`), on engines with vLLM's step-time jitter, over five seeds (median and
 * worst): VTC stays within the bound in every suite, while FCFS exceeds it wherever backlogged
 * clients send at different rates and LCF exceeds it on the real workload, where clients return
 * with counters lagging behind (the paper's Table 2 footnote: LCF's isolation "can be broken by
 * newly joined clients whose virtual counter is lagging behind").
 */
import type { RequestDescriptor } from '@fairway/core';
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { backloggedServiceGap, vtcFairnessBound } from '../src/fairness-bound.ts';
import { computeMetrics } from '../src/metrics.ts';
import type { RequestRecord, SimRun } from '../src/records.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { overSeeds, type SeedSummary } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

async function simulate(suite: string, policy: OrderingPolicyName, durationS: number, seed: number) {
  const input = buildRunInput(loadScenario(suite), { durationS, seed });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy, { seed }),
    placement: placementByName('least-kv'),
  });
  return { run, bound: vtcFairnessBound(input.engines, input.arrivals).bound };
}

/** The theorem's quantity over every backlogged sub-interval, per seed, and the bound (equal across seeds). */
async function gapOverSeeds(suite: string, policy: OrderingPolicyName, durationS: number) {
  let bound = 0;
  const gap = await overSeeds(async (seed) => {
    const s = await simulate(suite, policy, durationS, seed);
    bound = s.bound;
    return backloggedServiceGap(s.run).gap;
  });
  return { gap, bound };
}

const show = (s: SeedSummary) => showSeeds(s, 0);

/** A request of `tenant` waiting from `arrivalS` until `dispatchS` (never, if undefined), then charged `cost` at once. */
function rec(tenant: string, arrivalS: number, dispatchS: number | undefined, cost = 1): RequestRecord {
  const req: RequestDescriptor = {
    id: `${tenant}-${arrivalS}-${dispatchS}`,
    tenant,
    model: 'm',
    sloClass: 'interactive',
    inputTokens: cost,
    maxTokens: 0,
    outputTokens: 0,
    arrivalMs: arrivalS * 1000,
  };
  return { req, arrivalS, dispatchS, generated: 0, preemptions: 0 };
}

function runOf(records: RequestRecord[], durationS = 10): SimRun {
  return {
    scenario: 't',
    policy: 'p',
    placement: 'x',
    seed: 1,
    durationS,
    records,
    samples: [],
    engineSteps: 0,
    preemptions: 0,
    tenantWeights: { f: 1, g: 1 },
  };
}

describe('backloggedServiceGap', () => {
  // f and g both wait from 0 to the end; f is charged 100 at 1 s and 8 s, g 300 at 5 s.
  const charges = [rec('f', 1, 1, 100), rec('g', 5, 5, 300), rec('f', 8, 8, 100)];

  it('finds the largest gap over every sub-interval, not only those starting when the backlog starts', () => {
    const g = backloggedServiceGap(runOf([rec('f', 0, undefined), rec('g', 0, undefined), ...charges]));
    // From t = 0 the gap never exceeds 200 (g's 300 against f's 100); from just after f's charge
    // at 1 s to just after g's at 5 s (or up to f's next at 8 s) it is 300.
    expect(g.gap).toBe(300);
    expect(g.where?.flows).toEqual(['f', 'g']);
    expect(g.where?.fromS).toBe(1);
    expect([5, 8]).toContain(g.where?.toS);
  });

  it('counts only intervals in which both flows are backlogged', () => {
    // g's waiting request leaves at 4 s: the charges after it are outside every joint interval.
    const g = backloggedServiceGap(runOf([rec('f', 0, undefined), rec('g', 0, 4), ...charges]));
    expect(g.gap).toBe(100);
    expect(backloggedServiceGap(runOf([rec('f', 0, undefined), ...charges])).gap).toBe(0);
  });

  it('normalises by weight', () => {
    const run = runOf([rec('f', 0, undefined), rec('g', 0, undefined), rec('f', 2, 2, 200)]);
    expect(backloggedServiceGap({ ...run, tenantWeights: { f: 2, g: 1 } }).gap).toBe(100);
  });
});

describe('VTC fairness bound (Theorem 4.4), every sub-interval, five seeds with step-time noise', () => {
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
  it(
    'VTC never lets two backlogged clients differ by more than 2·max(w_in·L_in, w_out·M) in any suite',
    async () => {
      for (const suite of ALL) {
        const { gap, bound } = await gapOverSeeds(suite, 'vtc', 300);
        expect(gap.worst, `${suite}: ${show(gap)} vs bound ${bound}`).toBeLessThanOrEqual(bound);
      }
    },
    SEEDED_TIMEOUT_MS,
  );

  // Backlogged clients sending at different rates: FCFS serves them in proportion to their rates.
  const FCFS_UNBOUNDED = [
    'vtc-overload',
    'vtc-on-off-overload',
    'vtc-poisson-short-long',
    'vtc-poisson-short-long-2',
    'vtc-real',
  ];
  it(
    'FCFS exceeds the bound under every seed wherever backlogged clients send at different rates',
    async () => {
      for (const suite of FCFS_UNBOUNDED) {
        const { gap, bound } = await gapOverSeeds(suite, 'fcfs', suite === 'vtc-real' ? 600 : 300);
        expect(gap.best, `${suite}: ${show(gap)} vs bound ${bound}`).toBeGreaterThan(bound);
      }
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    'LCF exceeds the bound in the median over seeds on the real workload, where clients return with lagging counters',
    async () => {
      // Whether a returning client is itself backlogged (sends above what LCF hands it) depends on the
      // draw: under seed 3 none is, and LCF stays at 8196 (seeds 1–5: 56229, 47681, 8196, 43435, 40910).
      const { gap, bound } = await gapOverSeeds('vtc-real', 'lcf', 600);
      expect(gap.median, `vtc-real: ${show(gap)} vs bound ${bound}`).toBeGreaterThan(bound);
    },
    SEEDED_TIMEOUT_MS,
  );

  it(
    "keeps VTC's windowed max diff on vtc-overload at most half of FCFS's under every seed, at equal throughput (±3%)",
    async () => {
      for (const seed of [1, 2, 3, 4, 5]) {
        const vtc = computeMetrics((await simulate('vtc-overload', 'vtc', 600, seed)).run);
        const fcfs = computeMetrics((await simulate('vtc-overload', 'fcfs', 600, seed)).run);
        expect(vtc.fairness.maxDiff, `seed ${seed}`).toBeLessThanOrEqual(fcfs.fairness.maxDiff / 2);
        const t = vtc.throughput.tokensPerS;
        const f = fcfs.throughput.tokensPerS;
        expect(Math.abs(t - f) / f, `seed ${seed}`).toBeLessThanOrEqual(0.03);
      }
    },
    SEEDED_TIMEOUT_MS,
  );
});
