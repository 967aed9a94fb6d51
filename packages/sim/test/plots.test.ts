import type { RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { renderPlots } from '../src/plots.ts';
import type { RequestRecord, SimRun } from '../src/records.ts';

function run(): SimRun {
  const records: RequestRecord[] = [];
  // Two tenants, one request every 2 s each, served back to back: b gets twice a's output.
  for (let i = 0; i < 60; i++) {
    for (const [tenant, out] of [
      ['alpha', 50],
      ['beta', 100],
    ] as const) {
      const req: RequestDescriptor = {
        id: `${tenant}-${i}`,
        tenant,
        model: 'llama-2-7b',
        sloClass: 'interactive',
        inputTokens: 20,
        maxTokens: out,
        outputTokens: out,
        arrivalMs: i * 2000,
      };
      records.push({
        req,
        arrivalS: i * 2,
        dispatchS: i * 2 + 0.5,
        firstTokenS: i * 2 + 0.7,
        finishS: i * 2 + 2,
        generated: out,
        preemptions: 0,
      });
    }
  }
  return {
    scenario: 'plot-fixture',
    policy: 'fcfs',
    placement: 'round-robin',
    seed: 1,
    durationS: 120,
    records,
    samples: [],
    engineSteps: 0,
    preemptions: 0,
    tenantWeights: { alpha: 1, beta: 1 },
  };
}

describe('renderPlots', () => {
  it('renders the service-rate, accumulated-service and TTFT figures as SVG with the tenants in the legend', async () => {
    const plots = await renderPlots(computeMetrics(run()), 'plot-fixture');
    expect(plots.map((p) => p.file)).toEqual([
      'service-rate.svg',
      'accumulated-service-diff.svg',
      'accumulated-service.svg',
      'ttft.svg',
    ]);
    for (const p of plots) {
      expect(p.svg.startsWith('<svg')).toBe(true);
      expect(p.svg).toContain('time (s)');
      expect(p.svg).toMatch(/<path[^>]+d="M/);
    }
    expect(plots[0]!.svg).toContain('alpha');
    expect(plots[0]!.svg).toContain('beta');
    expect(plots[3]!.svg).toContain('mean TTFT');
  });
});
