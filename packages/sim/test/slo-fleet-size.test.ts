import type { RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { fewestPassing } from '../src/plan.ts';
import type { RequestRecord, SimRun } from '../src/records.ts';
import { attainmentBounds } from '../src/slo-experiments.ts';

describe('fewestPassing', () => {
  it('probes fleet sizes upward from one and returns the first that passes', async () => {
    const probed: number[] = [];
    const found = await fewestPassing(async (n) => {
      probed.push(n);
      return n >= 4;
    }, 16);
    expect(found).toBe(4);
    expect(probed).toEqual([1, 2, 3, 4]);
  });

  it('returns the smallest passing size even when larger sizes fail, never bisecting', async () => {
    // Passes at 2, fails at 3–9, passes from 10: a bisection over 1..16 would probe 8 first.
    const probed: number[] = [];
    const found = await fewestPassing(async (n) => {
      probed.push(n);
      return n === 2 || n >= 10;
    }, 16);
    expect(found).toBe(2);
    expect(probed).toEqual([1, 2]);
  });

  it('returns undefined once every size up to the cap has failed, probing each once', async () => {
    const probed: number[] = [];
    const found = await fewestPassing(async (n) => {
      probed.push(n);
      return false;
    }, 16);
    expect(found).toBeUndefined();
    expect(probed).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
  });
});

function batch2(id: string, arrivalS: number): RequestDescriptor {
  return {
    id,
    tenant: 'docs',
    model: 'llama-2-7b',
    sloClass: 'batch-2',
    inputTokens: 2500,
    maxTokens: 900,
    outputTokens: 900,
    arrivalMs: arrivalS * 1000,
  };
}

function run(records: RequestRecord[]): SimRun {
  return {
    scenario: 'fixture',
    policy: 'edf',
    placement: 'least-kv',
    seed: 1,
    durationS: 360,
    records,
    samples: [],
    engineSteps: 0,
    preemptions: 0,
    tenantWeights: { docs: 1 },
  };
}

describe('attainmentBounds', () => {
  // batch-2's target is 1 h: in a 360-s run a document not yet started is still in time.
  const served = (id: string) => {
    const r = batch2(id, 10);
    return {
      req: r,
      arrivalS: 10,
      dispatchS: 20,
      firstTokenS: 21,
      finishS: 60,
      generated: 900,
      preemptions: 0,
    };
  };
  const waiting = (id: string): RequestRecord => ({
    req: batch2(id, 30),
    arrivalS: 30,
    generated: 0,
    preemptions: 0,
  });
  const refused = (id: string): RequestRecord => ({
    req: batch2(id, 5),
    arrivalS: 5,
    rejected: { code: 'context_length_exceeded', atS: 6 },
    generated: 0,
    preemptions: 0,
  });

  it('counts a request never started as a miss in the low bound and as met in the high one', () => {
    const [c] = computeMetrics(run([served('d1'), served('d2'), served('d3'), waiting('d4')]), {
      warmupS: 0,
    }).slo;
    // The simulator's attainment leaves the waiting document out: 3 of 3.
    expect(c).toMatchObject({
      sloClass: 'batch-2',
      requests: 3,
      met: 3,
      attainment: 1,
      pending: 1,
      refused: 0,
    });
    expect(attainmentBounds(c!)).toEqual({ low: 0.75, high: 1 });
  });

  it('leaves out requests no replica of the model can serve', () => {
    const [c] = computeMetrics(run([served('d1'), served('d2'), refused('d3')]), { warmupS: 0 }).slo;
    expect(c).toMatchObject({ requests: 3, met: 2, pending: 0, refused: 1 });
    expect(attainmentBounds(c!)).toEqual({ low: 1, high: 1 });
  });

  it('is undefined for a class with no request a replica could serve', () => {
    expect(attainmentBounds({ requests: 1, met: 0, pending: 0, refused: 1 })).toBeUndefined();
  });
});
