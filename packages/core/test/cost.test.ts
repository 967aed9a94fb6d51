import { describe, expect, it } from 'vitest';
import { costFunctionByName, linearCost, profiledCost } from '../src/index.ts';

describe('cost functions', () => {
  it('linear cost defaults to VTC weights 1 (input) and 2 (output)', () => {
    expect(linearCost().cost(256, 256)).toBe(768);
    expect(costFunctionByName('linear', 1, 4).cost(10, 10)).toBe(50);
  });

  it('profiled cost matches VTC appendix B.2', () => {
    expect(profiledCost.cost(0, 0)).toBeCloseTo(11.46);
    expect(profiledCost.cost(100, 10)).toBeCloseTo(2.1 * 100 + 10 + 0.04 * 1000 + 0.032 * 100 + 11.46);
  });

  it('is monotone in both arguments', () => {
    for (const fn of [linearCost(), profiledCost]) {
      expect(fn.cost(11, 10)).toBeGreaterThan(fn.cost(10, 10));
      expect(fn.cost(10, 11)).toBeGreaterThan(fn.cost(10, 10));
    }
  });
});
