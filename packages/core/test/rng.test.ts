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

describe('ManualClock', () => {
  it('moves only forward', () => {
    const c = new ManualClock(5);
    c.advance(10);
    expect(c.now()).toBe(15);
    expect(() => c.set(1)).toThrow(RangeError);
  });
});
