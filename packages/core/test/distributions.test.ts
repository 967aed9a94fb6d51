import { createRng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { lengthSampler, sampleGamma } from '../src/distributions.ts';

function draw(n: number, f: () => number): number[] {
  return Array.from({ length: n }, f);
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const sd = (xs: number[]) => {
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / xs.length);
};

describe('lengthSampler', () => {
  it('returns the fixed value every time', () => {
    const s = lengthSampler({ kind: 'fixed', value: 256 });
    const rng = createRng(1);
    expect(new Set(draw(100, () => s.sample(rng)))).toEqual(new Set([256]));
    expect(s.max).toBe(256);
  });

  it('draws uniform integers within bounds with the right mean', () => {
    const s = lengthSampler({ kind: 'uniform', min: 16, max: 512 });
    const rng = createRng(2);
    const xs = draw(20_000, () => s.sample(rng));
    expect(Math.min(...xs)).toBe(16);
    expect(Math.max(...xs)).toBe(512);
    expect(xs.every(Number.isInteger)).toBe(true);
    expect(mean(xs)).toBeCloseTo(264, -1);
  });

  it('matches a lognormal given by median and p90', () => {
    const s = lengthSampler({ kind: 'lognormal', median: 1020, p90: 2500 });
    const rng = createRng(3);
    const xs = draw(20_000, () => s.sample(rng)).sort((a, b) => a - b);
    expect(xs[10_000]!).toBeGreaterThan(1020 * 0.96);
    expect(xs[10_000]!).toBeLessThan(1020 * 1.04);
    expect(xs[18_000]!).toBeGreaterThan(2500 * 0.95);
    expect(xs[18_000]!).toBeLessThan(2500 * 1.05);
  });

  it('matches a lognormal given by mean and sigma, clipped to its range', () => {
    const s = lengthSampler({ kind: 'lognormal', mean: 256, sigma: 0.5, min: 2, max: 977 });
    const rng = createRng(4);
    const xs = draw(20_000, () => s.sample(rng));
    expect(Math.abs(mean(xs) - 256) / 256).toBeLessThan(0.03);
    expect(Math.max(...xs)).toBeLessThanOrEqual(977);
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(2);
  });

  it('draws Zipf ranks with P(k) proportional to k^-s', () => {
    const s = lengthSampler({ kind: 'zipf', min: 1, max: 50, s: 1.2 });
    const rng = createRng(5);
    const counts = new Map<number, number>();
    for (const x of draw(50_000, () => s.sample(rng))) counts.set(x, (counts.get(x) ?? 0) + 1);
    const ratio = counts.get(1)! / counts.get(2)!;
    expect(ratio).toBeGreaterThan(2 ** 1.2 * 0.93);
    expect(ratio).toBeLessThan(2 ** 1.2 * 1.07);
    expect(Math.max(...counts.keys())).toBeLessThanOrEqual(50);
  });

  it('resamples empirical values only from the given set', () => {
    const s = lengthSampler({ kind: 'empirical', values: [3, 7, 7, 100] });
    const rng = createRng(6);
    const xs = draw(4000, () => s.sample(rng));
    expect(new Set(xs)).toEqual(new Set([3, 7, 100]));
    expect(xs.filter((x) => x === 7).length / xs.length).toBeCloseTo(0.5, 1);
    expect(s.mean).toBeCloseTo(29.25);
  });

  it('rejects inconsistent parameters', () => {
    expect(() => lengthSampler({ kind: 'uniform', min: 10, max: 5 })).toThrow(/max/);
    expect(() => lengthSampler({ kind: 'lognormal', mean: 10 })).toThrow(/mean and sigma/);
    expect(() => lengthSampler({ kind: 'empirical', values: [] })).toThrow(/empty/);
  });

  it('replays the same lengths for the same seed', () => {
    const s = lengthSampler({ kind: 'lognormal', mean: 136, sigma: 1 });
    const a = createRng(9);
    const b = createRng(9);
    expect(draw(50, () => s.sample(a))).toEqual(draw(50, () => s.sample(b)));
  });
});

describe('sampleGamma', () => {
  it.each([
    [0.25, 4],
    [1, 1],
    [9, 0.5],
  ])('has mean shape·scale and CV 1/sqrt(shape) (shape %f)', (shape, scale) => {
    const rng = createRng(11);
    const xs = draw(40_000, () => sampleGamma(rng, shape, scale));
    expect(Math.abs(mean(xs) - shape * scale) / (shape * scale)).toBeLessThan(0.04);
    expect(Math.abs(sd(xs) / mean(xs) - 1 / Math.sqrt(shape)) * Math.sqrt(shape)).toBeLessThan(0.06);
    expect(xs.every((x) => x > 0)).toBe(true);
  });
});
