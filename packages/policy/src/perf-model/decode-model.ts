import { z } from 'zod';
import { parseInput } from '../errors.ts';
import { type FitQuality, leastSquares } from './least-squares.ts';
import { type DecodeSample, decodeSampleSchema } from './samples.ts';

/**
 * Decode iteration time `t_d = (k2·l_avg + c2)·b + c3` ms, with `b` the batch size and `l_avg` the
 * mean context length (Aladdin section 3.2, Eq. 3). Since `l_avg·b` is the batch's total context,
 * it is linear in (total context, batch size, 1), which is how it is fitted.
 */
export interface DecodeModel {
  /** ms per context token in the batch. */
  readonly k2: number;
  /** ms per sequence in the batch. */
  readonly c2: number;
  /** Fixed ms per iteration. */
  readonly c3: number;
}

/** Milliseconds of one decode iteration of `batchSize` sequences holding `contextTokens` in total. */
export function decodeIterationMs(model: DecodeModel, batchSize: number, contextTokens: number): number {
  if (batchSize <= 0) return 0;
  return model.k2 * contextTokens + model.c2 * batchSize + model.c3;
}

/**
 * Largest total context a batch of `batchSize` may hold with iterations no slower than `budgetMs`:
 * `l_d(b) = (T_dec − c2·b − c3) / k2` (Aladdin Eq. 4). Negative when even an empty context is too slow.
 */
export function maxDecodeContext(model: DecodeModel, batchSize: number, budgetMs: number): number {
  const room = budgetMs - model.c2 * batchSize - model.c3;
  if (model.k2 <= 0) return room >= 0 ? Number.POSITIVE_INFINITY : -1;
  return room / model.k2;
}

/** Largest batch of sequences averaging `avgContext` tokens whose iterations fit `budgetMs`. */
export function maxDecodeBatch(model: DecodeModel, avgContext: number, budgetMs: number): number {
  const perSeq = model.k2 * avgContext + model.c2;
  if (budgetMs < model.c3) return 0;
  if (perSeq <= 0) return Number.POSITIVE_INFINITY;
  return Math.floor((budgetMs - model.c3) / perSeq);
}

/** Fits {@link DecodeModel} by least squares from measured decode iterations. */
export function fitDecodeModel(samples: readonly DecodeSample[]): {
  model: DecodeModel;
  quality: FitQuality;
} {
  const parsed = parseInput('fitDecodeModel', z.array(decodeSampleSchema), samples);
  const fit = leastSquares(
    parsed.map((s) => [s.contextTokens, s.batchSize, 1]),
    parsed.map((s) => s.ms),
    'decode iteration time',
  );
  const [k2, c2, c3] = fit.coefficients as [number, number, number];
  return { model: { k2, c2, c3 }, quality: fit.quality };
}
