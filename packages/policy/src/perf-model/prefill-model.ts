import { z } from 'zod';
import { parseInput } from '../errors.ts';
import { type FitQuality, leastSquares } from './least-squares.ts';
import { type PrefillSample, prefillSampleSchema } from './samples.ts';

/**
 * Prefill iteration time, linear in the batch's total prompt tokens and independent of its batch
 * size: `t_pre = k1·Σl_in + c1` ms (Aladdin section 3.2, Eq. 2).
 */
export interface PrefillModel {
  /** ms per prompt token. */
  readonly k1: number;
  /** Fixed ms per prefill iteration. */
  readonly c1: number;
}

/** Milliseconds to prefill a batch of `inputTokens` prompt tokens. */
export function prefillMs(model: PrefillModel, inputTokens: number): number {
  return inputTokens <= 0 ? 0 : model.k1 * inputTokens + model.c1;
}

/** Most prompt tokens one prefill iteration can take and still finish within `budgetMs`. */
export function maxPrefillTokens(model: PrefillModel, budgetMs: number): number {
  if (budgetMs < model.c1) return 0;
  return model.k1 <= 0 ? Number.POSITIVE_INFINITY : Math.floor((budgetMs - model.c1) / model.k1);
}

/** Fits {@link PrefillModel} by least squares from measured prefill batches. */
export function fitPrefillModel(samples: readonly PrefillSample[]): {
  model: PrefillModel;
  quality: FitQuality;
} {
  const parsed = parseInput('fitPrefillModel', z.array(prefillSampleSchema), samples);
  const fit = leastSquares(
    parsed.map((s) => [s.inputTokens, 1]),
    parsed.map((s) => s.ms),
    'prefill time',
  );
  const [k1, c1] = fit.coefficients as [number, number];
  return { model: { k1, c1 }, quality: fit.quality };
}
