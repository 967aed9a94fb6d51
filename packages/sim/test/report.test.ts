import type { RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import type { SimRun } from '../src/records.ts';
import { buildReport, formatReport, reportJson, round } from '../src/report.ts';

function run(): SimRun {
  const req = (id: string, tenant: string, arrivalS: number): RequestDescriptor => ({
    id,
    tenant,
    model: 'llama-2-7b',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 50,
    outputTokens: 50,
    arrivalMs: arrivalS * 1000,
  });
  return {
    scenario: 'fixture',
    policy: 'fcfs',
    placement: 'round-robin',
    seed: 7,
    durationS: 90,
    records: [
      {
        req: req('a1', 'a', 0),
        arrivalS: 0,
        dispatchS: 0,
        firstTokenS: 0.3,
        finishS: 10,
        generated: 50,
        preemptions: 0,
      },
      {
        req: req('b1', 'b', 1),
        arrivalS: 1,
        dispatchS: 10,
        firstTokenS: 10.2,
        finishS: 30,
        generated: 50,
        preemptions: 1,
      },
      {
        req: req('b2', 'b', 2),
        arrivalS: 2,
        rejected: { code: 'RATE_LIMITED', atS: 2 },
        generated: 0,
        preemptions: 0,
      },
    ],
    samples: [],
    engineSteps: 99,
    preemptions: 1,
    tenantWeights: { a: 1, b: 1 },
  };
}

describe('round', () => {
  it('rounds half away from zero deterministically and maps missing values to null', () => {
    expect(round(1.23456, 2)).toBe(1.23);
    expect(round(-0.0001, 2)).toBe(0);
    expect(Object.is(round(-0.0001, 2), -0)).toBe(false);
    expect(round(undefined)).toBeNull();
    expect(round(Number.NaN)).toBeNull();
  });
});

describe('buildReport', () => {
  it('has every field the CLI promises, rounded', () => {
    const r = run();
    const report = buildReport(r, computeMetrics(r), 1234.56);
    expect(report).toMatchObject({
      scenario: 'fixture',
      policy: 'fcfs',
      simulatedS: 90,
      wallMs: 1235,
      requests: { arrived: 3, completed: 2, rejected: 1 },
      throughput: { tokensPerS: round(300 / 90, 2), outputTokensPerS: round(100 / 90, 2) },
      latency: { ttftP50S: round((0.3 + 9.2) / 2), tpotP50S: round((9.7 / 49 + 19.8 / 49) / 2, 4) },
      preemptions: 1,
      engineSteps: 99,
    });
    expect(Object.keys(report.fairness)).toEqual([
      'maxDiff',
      'avgDiff',
      'diffVar',
      'accumulatedMaxDiff',
      'jain',
    ]);
    expect(report.tenants.map((t) => [t.id, t.service, t.serviceShare, t.rejected])).toEqual([
      ['a', 200, 0.5, 0],
      ['b', 200, 0.5, 1],
    ]);
    expect(report.kv).toEqual({ meanUsage: null, maxUsage: null });
  });

  it('gives identical JSON for identical runs apart from wallMs', () => {
    const a = reportJson(buildReport(run(), computeMetrics(run()), 10));
    const b = reportJson(buildReport(run(), computeMetrics(run()), 99));
    expect(a.replace(/"wallMs":\d+/, '')).toBe(b.replace(/"wallMs":\d+/, ''));
    expect(a).not.toBe(b);
    expect(a).not.toContain('\n');
  });
});

describe('formatReport', () => {
  it('prints a summary table and one row per tenant', () => {
    const text = formatReport(buildReport(run(), computeMetrics(run()), 10));
    expect(text).toMatch(/scenario fixture\s+policy fcfs/);
    expect(text).toMatch(/throughput \(in\+out tokens\/s\)\s+3\.33/);
    expect(text).toMatch(/^a\s+1\s+1\s+1\s+0\s+200/m);
    expect(text).toMatch(/^b\s+1\s+2\s+1\s+1\s+200/m);
  });
});
