import type { RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import {
  computeMetrics,
  distribution,
  jainIndex,
  naturalCompare,
  percentile,
  windowServiceDifference,
} from '../src/metrics.ts';
import { ServiceCurve } from '../src/metrics-curve.ts';
import type { RequestRecord, SimRun } from '../src/records.ts';

function req(id: string, tenant: string, input: number, output: number, arrivalS: number): RequestDescriptor {
  return {
    id,
    tenant,
    model: 'llama-2-7b',
    sloClass: 'interactive',
    inputTokens: input,
    maxTokens: output,
    outputTokens: output,
    arrivalMs: arrivalS * 1000,
  };
}

function rec(
  r: RequestDescriptor,
  at: { dispatchS?: number; firstTokenS?: number; finishS?: number; generated?: number },
): RequestRecord {
  return {
    req: r,
    arrivalS: r.arrivalMs / 1000,
    dispatchS: at.dispatchS,
    firstTokenS: at.firstTokenS,
    finishS: at.finishS,
    generated: at.generated ?? (at.finishS !== undefined ? r.outputTokens! : 0),
    preemptions: 0,
    replica: at.dispatchS !== undefined ? 'replica-0' : undefined,
  };
}

/**
 * Two tenants over 120 s. Service (1·in + 2·out) spread over dispatch → finish:
 *  a1: 10 in / 20 out = 50 over [0, 60];  a2: 30 in / 15 out = 60 over [60, 120];
 *  b1: 20 in / 40 out = 100 over [30, 90];
 *  qa: a's request waiting from 0 (never dispatched); qb: b's waiting from 60.
 */
function fixture(): SimRun {
  return {
    scenario: 'fixture',
    policy: 'fcfs',
    placement: 'round-robin',
    seed: 1,
    durationS: 120,
    records: [
      rec(req('a1', 'a', 10, 20, 0), { dispatchS: 0, firstTokenS: 1, finishS: 60 }),
      rec(req('b1', 'b', 20, 40, 0), { dispatchS: 30, firstTokenS: 31, finishS: 90 }),
      rec(req('a2', 'a', 30, 15, 60), { dispatchS: 60, firstTokenS: 61, finishS: 120 }),
      rec(req('qa', 'a', 5, 5, 0), {}),
      rec(req('qb', 'b', 5, 5, 60), {}),
    ],
    samples: [
      { replica: 'replica-0', timeS: 10, running: 1, waiting: 0, kvUsage: 0.2 },
      { replica: 'replica-0', timeS: 20, running: 1, waiting: 0, kvUsage: 0.4 },
      { replica: 'replica-0', timeS: 30, running: 2, waiting: 0, kvUsage: 0.9 },
    ],
    engineSteps: 1234,
    preemptions: 2,
    tenantWeights: { a: 1, b: 1 },
  };
}

describe('percentile and distribution', () => {
  it('interpolates linearly between order statistics', () => {
    expect(percentile([1, 2, 3, 4], 50)).toBe(2.5);
    expect(percentile([1, 2, 3, 4], 99)).toBeCloseTo(3.97, 10);
    expect(percentile([10], 90)).toBe(10);
    expect(percentile([], 50)).toBeUndefined();
    const d = distribution([4, 1, 3, 2]);
    expect(d).toMatchObject({ count: 4, mean: 2.5, p50: 2.5, max: 4 });
    expect(d.p90).toBeCloseTo(3.7, 12);
    expect(d.p99).toBeCloseTo(3.97, 12);
  });
});

describe('naturalCompare', () => {
  it('orders tenant ids with numbers numerically', () => {
    expect(['client10', 'client2', 'client1', 't03', 'b'].sort(naturalCompare)).toEqual([
      'b',
      'client1',
      'client2',
      'client10',
      't03',
    ]);
  });
});

describe('jainIndex', () => {
  it('is 1 for equal shares, 0.9 for a 1:2 split and 1/n when one takes all', () => {
    expect(jainIndex([5, 5, 5])).toBe(1);
    expect(jainIndex([1, 2])).toBeCloseTo(0.9, 12);
    expect(jainIndex([1, 0, 0, 0])).toBe(0.25);
  });
});

describe('windowServiceDifference', () => {
  it('counts a tenant below the top only as far as it also got less than it asked for', () => {
    // max 3; tenant 1: min(3-1, |5-1|) = 2; tenant 2: min(3-2, |2.5-2|) = 0.5
    expect(windowServiceDifference([3, 1, 2], [3, 5, 2.5])).toBe(2.5);
    expect(windowServiceDifference([2, 2], [9, 9])).toBe(0);
  });
});

describe('ServiceCurve', () => {
  it('spreads each cost uniformly over its interval and adds point masses at once', () => {
    const c = new ServiceCurve([
      { start: 0, end: 10, cost: 100 },
      { start: 5, end: 5, cost: 7 },
      { start: 5, end: 15, cost: 20 },
    ]);
    expect(c.at(-1)).toBe(0);
    expect(c.at(5)).toBeCloseTo(57, 10);
    expect(c.at(10)).toBeCloseTo(117, 10);
    expect(c.at(100)).toBeCloseTo(127, 10);
    expect(c.between(2, 8)).toBeCloseTo(60 + 7 + 6, 10);
    expect(c.total).toBeCloseTo(127, 10);
  });
});

describe('computeMetrics', () => {
  it('computes windowed service and the VTC service difference by hand', () => {
    // One tick (ticks = 2): window [30, 90]. y_a = (25 + 30)/60, y_b = 100/60.
    // Requested in the window: a2 (60) for a, qb (15) for b → r_a = 1, r_b = 0.25.
    // diff = min(y_b − y_a, |r_a − y_a|) + min(0, …) = min(0.75, 1/12) = 1/12.
    const m = computeMetrics(fixture(), { warmupS: 0, fairnessTicks: 2 });
    expect(m.fairness.diffTicks).toEqual([60]);
    expect(m.fairness.diffSeries[0]).toBeCloseTo(1 / 12, 10);
    expect(m.fairness.maxDiff).toBeCloseTo(1 / 12, 10);
    expect(m.fairness.avgDiff).toBeCloseTo(1 / 12, 10);
    expect(m.fairness.diffVar).toBeCloseTo(0, 12);
  });

  it('accumulates the service difference only while both tenants are backlogged', () => {
    // Samples every 30 s: A_a = 0, 25, 50, 80, 110; A_b = 0, 0, 50, 100, 100.
    const m = computeMetrics(fixture(), { warmupS: 0, seriesStepS: 30 });
    expect(m.series.t).toEqual([0, 30, 60, 90, 120]);
    expect(m.series.accumulatedService.a).toEqual([0, 25, 50, 80, 110]);
    expect(m.series.accumulatedService.b).toEqual([0, 0, 50, 100, 100]);
    expect(m.series.accumulatedDiff).toEqual([0, 25, 0, 20, 10]);
    // The exact check (every sub-interval, input charged at dispatch, output as it streams): both are
    // backlogged over [0, 30) and [60, 120). Across a2's dispatch at 60 s, whose 30 input tokens are
    // charged at once, D = A_a − A_b jumps from −9.32 to 20.68, a gap of 30; [0, 30) reaches 29.66.
    expect(m.fairness.accumulatedMaxDiff).toBeCloseTo(30, 10);
    // Total service a = 110, b = 100 → Jain = 210² / (2·(110² + 100²)).
    expect(m.fairness.jain).toBeCloseTo(210 ** 2 / (2 * (110 ** 2 + 100 ** 2)), 12);
  });

  it('counts requests, throughput, latencies, preemptions and KV usage', () => {
    const m = computeMetrics(fixture(), { warmupS: 0 });
    expect(m.requests).toEqual({ arrived: 5, completed: 3, rejected: 0, dispatched: 3 });
    // input 10 + 20 + 30 and output 20 + 40 + 15 over 120 s
    expect(m.throughput.tokensPerS).toBeCloseTo(135 / 120, 12);
    expect(m.throughput.outputTokensPerS).toBeCloseTo(75 / 120, 12);
    // TTFTs 1, 31, 1
    expect(m.latency.ttftS.p50).toBe(1);
    expect(m.latency.ttftS.max).toBe(31);
    // TPOT (finish − first) / (out − 1): 59/19, 59/39, 59/14
    expect(m.latency.tpotS.p50).toBeCloseTo(59 / 19, 12);
    expect(m.latency.e2eS.mean).toBeCloseTo((60 + 90 + 60) / 3, 12);
    expect(m.preemptions).toBe(2);
    expect(m.engineSteps).toBe(1234);
    expect(m.kv.meanUsage).toBeCloseTo(0.5, 12);
    expect(m.kv.maxUsage).toBe(0.9);
    const a = m.tenants.find((t) => t.id === 'a')!;
    expect(a).toMatchObject({ arrived: 3, completed: 2, service: 110, inputTokens: 40, outputTokens: 35 });
    expect(a.ttftS.p50).toBe(1);
  });

  it('reports TTFT SLO attainment, counting requests still waiting past their deadline as misses', () => {
    // interactive: 20 s. a1, a2 met; b1 (31 s) missed; qa (deadline 20) and qb (deadline 80) missed.
    const m = computeMetrics(fixture(), { warmupS: 0 });
    expect(m.slo).toEqual([
      {
        sloClass: 'interactive',
        ttftTargetS: 20,
        requests: 5,
        met: 2,
        attainment: 0.4,
        pending: 0,
        refused: 0,
      },
    ]);
  });

  it('can start the service interval at the first token, as the artifact measured', () => {
    const m = computeMetrics(fixture(), { warmupS: 0, seriesStepS: 30, serviceStart: 'first-token' });
    // a1: 50 over [1, 60] → at 30: 50·29/59
    expect(m.series.accumulatedService.a![1]).toBeCloseTo((50 * 29) / 59, 10);
  });

  it('normalises service by tenant weight in the fairness numbers', () => {
    const run = { ...fixture(), tenantWeights: { a: 1, b: 2 } };
    const m = computeMetrics(run, { warmupS: 0 });
    // a: 110, b: 100 / 2 = 50
    expect(m.fairness.jain).toBeCloseTo(160 ** 2 / (2 * (110 ** 2 + 50 ** 2)), 12);
  });

  it('plots TTFT per window from the requests whose first token falls in it', () => {
    const m = computeMetrics(fixture(), { warmupS: 0, seriesStepS: 30, windowS: 60 });
    // First tokens: a1 at 1 s (TTFT 1), b1 at 31 s (TTFT 31), a2 at 61 s (TTFT 1); windows are t ± 30 s.
    expect(m.series.ttft.a).toEqual([1, 1, 1, 1, null]);
    expect(m.series.ttft.b).toEqual([null, 31, 31, null, null]);
  });
});
