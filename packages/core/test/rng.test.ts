import { describe, expect, it } from 'vitest';
import { createRng, ManualClock } from '../src/index.ts';

describe('seeded RNG', () => {
  it('replays the same sequence for the same seed and differs across seeds', () => {
    const a = createRng(7);
    const b = createRng(7);
    const c = createRng(8);
    const sa = Array.from({ length: 5 }, () => a.next());
    expect(Array.from({ length: 5 }, () => b.next())).toEqual(sa);
    expect(Array.from({ length: 5 }, () => c.next())).not.toEqual(sa);
  });

  it('forks independent, stable streams by label', () => {
    const x1 = createRng(1).fork('tenant-a').next();
    const x2 = createRng(1).fork('tenant-a').next();
    const y = createRng(1).fork('tenant-b').next();
    expect(x1).toBe(x2);
    expect(x1).not.toBe(y);
  });

  it('draws uniform values in [0,1) with the right mean', () => {
    const r = createRng(3);
    let sum = 0;
    for (let i = 0; i < 20000; i++) {
      const v = r.next();
      expect(v).toBeGreaterThanOrEqual(0);
      expect(v).toBeLessThan(1);
      sum += v;
    }
    expect(sum / 20000).toBeCloseTo(0.5, 1);
  });
});

/** Pearson correlation of two equally long samples. */
function correlation(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
    syy += (ys[i]! - my) ** 2;
  }
  return sxy / Math.sqrt(sxx * syy);
}

/** Pearson's χ² of a sample of [0,1) values against the uniform distribution over `bins` equal bins. */
function chiSquareUniform(values: readonly number[], bins: number): number {
  const counts = new Array<number>(bins).fill(0);
  for (const v of values) counts[Math.floor(v * bins)]!++;
  const expected = values.length / bins;
  return counts.reduce((a, c) => a + (c - expected) ** 2 / expected, 0);
}

describe('seeded RNG across nearby seeds', () => {
  const SEEDS = Array.from({ length: 100 }, (_, i) => i + 1);
  // With 100 independent draws a correlation has standard deviation 1/√100 = 0.1: |r| < 0.3 is 3σ.
  // χ² over 10 bins has 9 degrees of freedom; 27.88 is its 99.9th percentile.
  for (const [what, draw] of [
    ['the first draw', (seed: number) => createRng(seed).next()],
    ['the first draw of a forked stream', (seed: number) => createRng(seed).fork('arrivals').next()],
  ] as const) {
    it(`gives seeds 1..100 uncorrelated values for ${what}`, () => {
      const first = SEEDS.map(draw);
      expect(Math.abs(correlation(SEEDS, first))).toBeLessThan(0.3);
      // Neighbouring seeds: seed n's draw against seed n+1's.
      expect(Math.abs(correlation(first.slice(0, -1), first.slice(1)))).toBeLessThan(0.3);
      // And the first draw against the second of the same seed.
      const second = SEEDS.map((s) => {
        const r = createRng(s);
        r.next();
        return r.next();
      });
      expect(Math.abs(correlation(first, second))).toBeLessThan(0.3);
    });

    it(`spreads ${what} of seeds 1..100 uniformly over [0,1)`, () => {
      expect(chiSquareUniform(SEEDS.map(draw), 10)).toBeLessThan(27.88);
    });
  }
});

describe('ManualClock', () => {
  it('moves only forward', () => {
    const c = new ManualClock(5);
    c.advance(10);
    expect(c.now()).toBe(15);
    expect(() => c.set(1)).toThrow(RangeError);
  });
});
