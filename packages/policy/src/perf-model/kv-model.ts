import { z } from 'zod';
import { parseInput } from '../errors.ts';
import { type FitQuality, leastSquares } from './least-squares.ts';
import { type KvSample, kvSampleSchema } from './samples.ts';

/** KV-cache usage of one sequence, `kv = h·(l_in + l_out) + j` tokens (Aladdin section 3.1, Eq. 1). */
export interface KvUsageModel {
  /** KV tokens per context token. */
  readonly h: number;
  /** Constant KV tokens per sequence (block rounding). */
  readonly j: number;
}

/** One KV token per context token: what an unpaged cache would hold. */
export const IDENTITY_KV_MODEL: KvUsageModel = { h: 1, j: 0 };

/** KV tokens a sequence of `contextTokens` holds. */
export function kvTokens(model: KvUsageModel, contextTokens: number): number {
  return model.h * contextTokens + model.j;
}

/** Fits {@link KvUsageModel} by least squares; needs at least two distinct context lengths. */
export function fitKvModel(samples: readonly KvSample[]): { model: KvUsageModel; quality: FitQuality } {
  const parsed = parseInput('fitKvModel', z.array(kvSampleSchema), samples);
  const fit = leastSquares(
    parsed.map((s) => [s.contextTokens, 1]),
    parsed.map((s) => s.kvTokens),
    'KV usage',
  );
  const [h, j] = fit.coefficients as [number, number];
  return { model: { h, j }, quality: fit.quality };
}
