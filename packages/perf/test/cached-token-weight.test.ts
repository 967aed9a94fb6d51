import { describe, expect, it } from 'vitest';
import { cachedTokenWeightFor, cachedTokenWeightOf, costCoefficients } from '../src/cost-models.ts';

describe('cachedTokenWeightOf', () => {
  it('is the KV read of a cached token over the matmuls and read of a prefilled one', () => {
    const c = costCoefficients('llama-2-7b', 'A100-80GB').coefficients;
    expect(cachedTokenWeightOf(c)).toBeCloseTo(0.00036 / (0.064 + 0.00036), 8);
  });

  it('is small for every preset, and smaller for bigger models whose matmuls dominate', () => {
    const small = cachedTokenWeightFor('llama-2-7b', 'H100-80GB')!;
    const big = cachedTokenWeightFor('llama-2-70b', 'H100-80GB', 4)!;
    expect(small).toBeGreaterThan(0);
    expect(small).toBeLessThan(0.02);
    expect(big).toBeLessThan(small);
  });

  it('is unknown for hardware or models without a preset', () => {
    expect(cachedTokenWeightFor('llama-2-7b', 'TPU-v5')).toBeUndefined();
    expect(cachedTokenWeightFor('mystery-1b', 'A100-80GB')).toBeUndefined();
    expect(cachedTokenWeightFor('llama-2-7b', 'A100-80GB', 0)).toBeUndefined();
  });
});
