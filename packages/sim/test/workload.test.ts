import { createRng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { generateWorkload, type StreamSpec } from '../src/workload.ts';
import { FAIRSERVE_SIZE_BUCKETS } from '../src/workload-interaction.ts';
import { arrivalTimes } from '../src/workload-rate.ts';

const gaps = (ts: number[]) => ts.slice(1).map((t, i) => t - ts[i]!);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const cv = (xs: number[]) => {
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / xs.length) / m;
};
const between = (ts: number[], a: number, b: number) => ts.filter((t) => t >= a && t < b).length;

describe('arrivalTimes', () => {
  it('draws a Poisson process at the requested rate with exponential gaps', () => {
    const ts = arrivalTimes({ process: 'poisson', rate: 5 }, 0, 2000, createRng(1));
    expect(Math.abs(ts.length / 2000 - 5) / 5).toBeLessThan(0.03);
    expect(cv(gaps(ts))).toBeGreaterThan(0.95);
    expect(cv(gaps(ts))).toBeLessThan(1.05);
  });

  it('draws Gamma arrivals with the requested rate and coefficient of variation', () => {
    const ts = arrivalTimes({ process: 'gamma', rate: 4, cv: 3 }, 0, 5000, createRng(2));
    expect(Math.abs(ts.length / 5000 - 4) / 4).toBeLessThan(0.08);
    expect(Math.abs(cv(gaps(ts)) - 3) / 3).toBeLessThan(0.1);
  });

  it('spaces uniform arrivals exactly 1/rate apart from a random phase', () => {
    const a = arrivalTimes({ process: 'uniform', rate: 1.5 }, 0, 600, createRng(3));
    const b = arrivalTimes({ process: 'uniform', rate: 1.5 }, 0, 600, createRng(4));
    expect(a.length).toBe(900);
    for (const g of gaps(a)) expect(g).toBeCloseTo(1 / 1.5, 9);
    expect(a[0]).toBeLessThan(1 / 1.5);
    expect(a[0]).not.toBe(b[0]);
  });

  it('sends nothing in OFF phases and the full rate in ON phases', () => {
    const ts = arrivalTimes(
      { process: 'uniform', rate: 2, onOff: { onS: 60, offS: 60 } },
      0,
      600,
      createRng(5),
    );
    for (let k = 0; k < 5; k++) {
      expect(between(ts, k * 120, k * 120 + 60)).toBeGreaterThanOrEqual(119);
      expect(between(ts, k * 120 + 60, k * 120 + 120)).toBe(0);
    }
    const offFirst = arrivalTimes(
      { process: 'poisson', rate: 2, onOff: { onS: 60, offS: 60, offFirst: true } },
      0,
      600,
      createRng(5),
    );
    expect(between(offFirst, 0, 60)).toBe(0);
    expect(between(offFirst, 60, 120)).toBeGreaterThan(80);
  });

  it('follows a linear ramp: arrivals per interval match the integral of the rate', () => {
    const ts = arrivalTimes({ process: 'uniform', ramp: { from: 0.2, to: 2 } }, 0, 600, createRng(6));
    // ∫ rate over [0,150) = 150·(0.2 + 0.65)/2 = 63.75; over [450,600) = 150·(1.55 + 2)/2 = 266.25
    expect(Math.abs(between(ts, 0, 150) - 63.75)).toBeLessThanOrEqual(1);
    expect(Math.abs(between(ts, 450, 600) - 266.25)).toBeLessThanOrEqual(1);
    expect(Math.abs(ts.length - 660)).toBeLessThanOrEqual(1);
  });

  it('follows a phase schedule and stops after its last phase', () => {
    const ts = arrivalTimes(
      {
        process: 'uniform',
        phases: [
          { durationS: 100, rate: 1 },
          { durationS: 100, from: 1, to: 3 },
          { durationS: 100, rate: 0.5 },
        ],
      },
      0,
      600,
      createRng(7),
    );
    expect(Math.abs(between(ts, 0, 100) - 100)).toBeLessThanOrEqual(1);
    expect(Math.abs(between(ts, 100, 200) - 200)).toBeLessThanOrEqual(1);
    expect(Math.abs(between(ts, 200, 300) - 50)).toBeLessThanOrEqual(1);
    expect(between(ts, 300, 600)).toBe(0);
  });
});

const stream = (over: Partial<StreamSpec> = {}): StreamSpec => ({
  tenant: 'a',
  arrival: { process: 'poisson', rate: 2 },
  input: { kind: 'uniform', min: 10, max: 100 },
  output: { kind: 'fixed', value: 50 },
  ...over,
});

describe('generateWorkload', () => {
  it('returns requests sorted by arrival with lengths, tenant and SLO class set', () => {
    const reqs = generateWorkload({
      streams: [stream(), stream({ tenant: 'b', sloClass: 'batch-1', app: 'chat' })],
      durationS: 300,
      seed: 1,
      model: 'llama-2-7b',
    });
    for (let i = 1; i < reqs.length; i++)
      expect(reqs[i]!.arrivalMs).toBeGreaterThanOrEqual(reqs[i - 1]!.arrivalMs);
    expect(new Set(reqs.map((r) => r.id)).size).toBe(reqs.length);
    const b = reqs.filter((r) => r.tenant === 'b');
    expect(b.every((r) => r.sloClass === 'batch-1' && r.app === 'chat' && r.outputTokens === 50)).toBe(true);
    expect(reqs.every((r) => r.maxTokens >= r.outputTokens! && r.model === 'llama-2-7b')).toBe(true);
  });

  it('replays exactly for a seed and changes with the seed', () => {
    const spec = { streams: [stream(), stream({ tenant: 'b' })], durationS: 200, model: 'm' };
    expect(generateWorkload({ ...spec, seed: 5 })).toEqual(generateWorkload({ ...spec, seed: 5 }));
    expect(generateWorkload({ ...spec, seed: 6 })).not.toEqual(generateWorkload({ ...spec, seed: 5 }));
  });

  it('leaves a stream unchanged when another stream is added', () => {
    const one = generateWorkload({ streams: [stream()], durationS: 200, seed: 3, model: 'm' });
    const two = generateWorkload({
      streams: [stream({ tenant: 'z', arrival: { process: 'gamma', rate: 9, cv: 2 } }), stream()],
      durationS: 200,
      seed: 3,
      model: 'm',
    });
    expect(two.filter((r) => r.tenant === 'a')).toEqual(one);
  });

  it("sends each request's true output length as max_tokens when asked", () => {
    const reqs = generateWorkload({
      streams: [stream({ output: { kind: 'uniform', min: 5, max: 500 }, maxTokens: 'output' })],
      durationS: 100,
      seed: 1,
      model: 'm',
    });
    expect(reqs.every((r) => r.maxTokens === r.outputTokens)).toBe(true);
    const capped = generateWorkload({
      streams: [stream({ output: { kind: 'uniform', min: 5, max: 500 } })],
      durationS: 100,
      seed: 1,
      model: 'm',
    });
    expect(capped.every((r) => r.maxTokens === 500)).toBe(true);
  });

  it('keeps a stream inside its start and end', () => {
    const reqs = generateWorkload({
      streams: [stream({ startS: 100, endS: 150 })],
      durationS: 300,
      seed: 1,
      model: 'm',
    });
    expect(reqs.length).toBeGreaterThan(50);
    expect(reqs.every((r) => r.arrivalMs >= 100_000 && r.arrivalMs < 150_000)).toBe(true);
  });

  it('draws interaction sizes like FairServe: about 73% single calls, the rest 2-30 calls', () => {
    const reqs = generateWorkload({
      streams: [
        stream({ arrival: { process: 'poisson', rate: 20 }, interaction: { size: { kind: 'fairserve' } } }),
      ],
      durationS: 500,
      seed: 2,
      model: 'm',
    });
    const sizes = new Map<string, number>();
    for (const r of reqs) sizes.set(r.interactionId!, r.interactionSize!);
    const all = [...sizes.values()];
    const single = all.filter((s) => s === 1).length / all.length;
    expect(Math.abs(single - FAIRSERVE_SIZE_BUCKETS[0]!.share)).toBeLessThan(0.02);
    expect(all.filter((s) => s >= 2 && s <= 10).length / all.length).toBeCloseTo(0.26, 1);
    expect(Math.max(...all)).toBeLessThanOrEqual(30);
  });

  it('sends each follow-up call after the previous call’s expected completion plus think time', () => {
    const reqs = generateWorkload({
      streams: [
        stream({
          arrival: { process: 'uniform', rate: 0.01 },
          interaction: {
            size: { kind: 'fixed', value: 3 },
            followUp: {
              mode: 'after-expected-completion',
              ttftS: 0.5,
              tpotS: 0.02,
              thinkS: { kind: 'fixed', value: 2 },
            },
          },
        }),
      ],
      durationS: 1000,
      seed: 4,
      model: 'm',
    });
    const first = reqs.filter((r) => r.interactionId === reqs[0]!.interactionId);
    expect(first.map((r) => r.interactionStage)).toEqual([0, 1, 2]);
    // 0.5 s TTFT + 50 tokens × 0.02 s + 2 s think = 3.5 s between calls
    expect(first[1]!.arrivalMs - first[0]!.arrivalMs).toBeCloseTo(3500, 6);
    expect(first[2]!.arrivalMs - first[1]!.arrivalMs).toBeCloseTo(3500, 6);
  });

  it('spaces calls by a fixed gap when asked', () => {
    const reqs = generateWorkload({
      streams: [
        stream({
          arrival: { process: 'uniform', rate: 0.01 },
          interaction: { size: { kind: 'fixed', value: 2 }, followUp: { mode: 'fixed-gap', gapS: 7 } },
        }),
      ],
      durationS: 1000,
      seed: 4,
      model: 'm',
    });
    expect(reqs[1]!.arrivalMs - reqs[0]!.arrivalMs).toBeCloseTo(7000, 6);
  });
});
