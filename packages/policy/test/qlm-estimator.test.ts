import { createRng, type Rng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import type { PerformanceModel } from '../src/perf-model/performance-model.ts';
import { OutputLengthStats } from '../src/qlm/output-stats.ts';
import {
  completionTime,
  measureInefficiency,
  normalQuantile,
  type RwtProfile,
  rwtProfileFromPerformance,
  sumEstimates,
  tokenThroughput,
  waitingTime,
} from '../src/qlm/rwt-estimator.ts';

const profile: RwtProfile = {
  decodeMsPerIteration: 50,
  batchSize: 20,
  inefficiency: 1.25,
  prefillMs: 200,
  maxOutputTokens: 1024,
};

describe('waitingTime', () => {
  it('matches the hand calculation of the CLT mean and variance', () => {
    // Θ = 20 / (50 ms × 1.25) = 320 tokens/s; 10 requests of μ 200, σ² 900 ahead.
    expect(tokenThroughput(profile)).toBeCloseTo(320, 12);
    const w = waitingTime(profile, 10, { mean: 200, variance: 900, count: 100 }, 2);
    expect(w.meanS).toBeCloseTo(2000 / 320, 12);
    expect(w.varianceS2).toBeCloseTo(9000 / 320 ** 2, 12);
    expect(w.upperS).toBeCloseTo(6.25 + 2 * Math.sqrt(9000 / 102400), 12);
  });

  it('adds independent parts by their means and variances', () => {
    const a = waitingTime(profile, 10, { mean: 200, variance: 900, count: 1 }, 2);
    const b = waitingTime(profile, 5, { mean: 400, variance: 1600, count: 1 }, 2);
    const sum = sumEstimates([a, b], 2);
    expect(sum.meanS).toBeCloseTo(a.meanS + b.meanS, 12);
    expect(sum.upperS).toBeCloseTo(sum.meanS + 2 * Math.sqrt(a.varianceS2 + b.varianceS2), 12);
  });

  it('uses the standard normal quantile for its confidence', () => {
    expect(normalQuantile(0.5)).toBeCloseTo(0, 9);
    expect(normalQuantile(0.99)).toBeCloseTo(2.326348, 5);
    expect(normalQuantile(0.975)).toBeCloseTo(1.959964, 5);
    expect(normalQuantile(0.01)).toBeCloseTo(-2.326348, 5);
  });
});

/**
 * A continuous-batching engine in miniature: B slots, one token per running sequence per
 * iteration of d ms, waiting requests admitted FCFS into free slots at iteration boundaries.
 * Returns when each queued request started and finished, ms.
 */
function simulateQueue(
  rng: Rng,
  b: number,
  d: number,
  queued: number,
  draw: () => number,
): { start: number[]; finish: number[] } {
  // The running batch is caught mid-flight: each at a uniformly random point of its output.
  const running: { left: number; idx: number }[] = Array.from({ length: b }, () => {
    const len = draw();
    return { left: Math.max(1, len - Math.floor(rng.next() * len)), idx: -1 };
  });
  const lengths = Array.from({ length: queued }, draw);
  const start = new Array<number>(queued).fill(0);
  const finish = new Array<number>(queued).fill(0);
  let next = 0;
  let t = 0;
  while (running.length > 0 || next < queued) {
    while (running.length < b && next < queued) {
      start[next] = t;
      running.push({ left: lengths[next] as number, idx: next });
      next++;
    }
    t += d;
    for (let i = running.length - 1; i >= 0; i--) {
      const r = running[i] as { left: number; idx: number };
      r.left--;
      if (r.left === 0) {
        if (r.idx >= 0) finish[r.idx] = t;
        running.splice(i, 1);
      }
    }
  }
  return { start, finish };
}

describe('completionTime', () => {
  const b = 16;
  const d = 20;
  const maxOut = 2048;
  const mu = 200;
  const sim: RwtProfile = {
    decodeMsPerIteration: d,
    batchSize: b,
    inefficiency: 1,
    prefillMs: 0,
    maxOutputTokens: maxOut,
  };
  // Heavy-tailed lengths like ShareGPT's: lognormal with mean 200, capped at max_tokens.
  const sigma = 0.8;
  const lognormal = (rng: Rng) => () =>
    Math.min(maxOut, Math.max(1, Math.round(Math.exp(Math.log(mu) - sigma ** 2 / 2 + sigma * rng.normal()))));

  it('errs high for short queues, where the conservative decode term dominates', () => {
    const rng = createRng(11);
    const stats = { mean: mu, variance: (Math.exp(sigma ** 2) - 1) * mu ** 2, count: 1000 };
    let trials = 0;
    let conservative = 0;
    for (let trial = 0; trial < 200; trial++) {
      const { finish } = simulateQueue(rng, b, d, 8, lognormal(rng));
      for (let q = 0; q < 8; q++) {
        trials++;
        const est = completionTime(sim, q, stats, normalQuantile(0.99)).meanS * 1000;
        if (est >= (finish[q] as number)) conservative++;
      }
    }
    expect(conservative / trials).toBeGreaterThanOrEqual(0.99);
  });

  it('estimates the wait of a long queue within 10% on average', () => {
    const rng = createRng(12);
    const stats = { mean: mu, variance: (Math.exp(sigma ** 2) - 1) * mu ** 2, count: 1000 };
    const q = 20 * b;
    let actual = 0;
    const runs = 40;
    for (let trial = 0; trial < runs; trial++) {
      const { start } = simulateQueue(rng, b, d, q + 1, lognormal(rng));
      actual += (start[q] as number) / runs;
    }
    const est = waitingTime(sim, q, stats, 0).meanS * 1000;
    expect(Math.abs(est - actual) / actual).toBeLessThan(0.1);
  });
});

describe('rwtProfileFromPerformance', () => {
  it('derives the batch from KV capacity and E[I + O] and the iteration time at the mean context', () => {
    const perf: PerformanceModel = {
      model: 'm',
      gpu: 'g',
      tp: 1,
      kvCapacityTokens: 60_000,
      maxSeqs: 256,
      kv: { h: 1, j: 0 },
      prefill: { k1: 0.2, c1: 10 },
      decode: { k2: 0.0004, c2: 0.1, c3: 10 },
    };
    const p = rwtProfileFromPerformance(
      perf,
      { meanInputTokens: 400, meanOutputTokens: 200, maxOutputTokens: 1024 },
      1.1,
    );
    expect(p.batchSize).toBe(100);
    expect(p.decodeMsPerIteration).toBeCloseTo(0.0004 * 100 * 500 + 0.1 * 100 + 10, 9);
    expect(p.prefillMs).toBeCloseTo(90, 9);
    expect(p.inefficiency).toBe(1.1);
  });

  it('measures the inefficiency factor as ideal over observed throughput', () => {
    const base = { decodeMsPerIteration: 40, batchSize: 20, prefillMs: 0, maxOutputTokens: 100 };
    // Ideal 0.5 tokens/ms; observed 8000 tokens in 20 s = 0.4 tokens/ms.
    expect(measureInefficiency(base, { generatedTokens: 8000, elapsedMs: 20_000 })).toBeCloseTo(1.25, 12);
    expect(measureInefficiency(base, { generatedTokens: 20_000, elapsedMs: 20_000 })).toBe(1);
  });
});

describe('OutputLengthStats', () => {
  it('keeps the running mean and sample variance of each key, and the prior until enough history', () => {
    const stats = new OutputLengthStats({ mean: 100, variance: 50 }, 3);
    const xs = [10, 20, 60];
    stats.observe('k', 10);
    stats.observe('k', 20);
    expect(stats.get('k')).toEqual({ mean: 100, variance: 50, count: 0 });
    stats.observe('k', 60);
    const mean = xs.reduce((a, v) => a + v, 0) / 3;
    const variance = xs.reduce((a, v) => a + (v - mean) ** 2, 0) / 2;
    expect(stats.get('k').mean).toBeCloseTo(mean, 12);
    expect(stats.get('k').variance).toBeCloseTo(variance, 12);
    expect(stats.get('other').mean).toBe(100);
  });
});
