import { z } from 'zod';
import { parseInput } from '../errors.ts';
import { type DecodeModel, fitDecodeModel } from './decode-model.ts';
import { fitKvModel, IDENTITY_KV_MODEL, type KvUsageModel } from './kv-model.ts';
import type { FitQuality } from './least-squares.ts';
import { fitPrefillModel, type PrefillModel } from './prefill-model.ts';
import type { DecodeSample, KvSample, PrefillSample } from './samples.ts';

/**
 * What a replica of one (model, GPU, tensor-parallel degree) can do: its KV capacity and the
 * prefill, decode and KV-usage models Aladdin places requests with (Aladdin section 3).
 */
export interface PerformanceModel {
  readonly model: string;
  readonly gpu: string;
  /** Tensor-parallel degree: GPUs per replica. */
  readonly tp: number;
  /** KV-cache capacity of one replica, tokens (`M` in Aladdin). */
  readonly kvCapacityTokens: number;
  /** Most sequences the engine batches at once (vLLM `max_num_seqs`). */
  readonly maxSeqs: number;
  readonly kv: KvUsageModel;
  readonly prefill: PrefillModel;
  readonly decode: DecodeModel;
}

/** Fit error of each part of a {@link PerformanceModel}. */
export interface PerformanceFitReport {
  readonly prefill: FitQuality;
  readonly decode: FitQuality;
  /** Absent when no KV samples were given and the identity model was assumed. */
  readonly kv: FitQuality | undefined;
  /** Worst mean absolute percentage error over the fitted parts, as a fraction. */
  readonly worstMape: number;
}

const identitySchema = z.object({
  model: z.string().min(1),
  gpu: z.string().min(1),
  tp: z.number().int().positive(),
  kvCapacityTokens: z.number().positive(),
  maxSeqs: z.number().int().positive(),
});

/** Where a performance model is fitted from: the replica's identity and measured samples. */
export interface PerformanceSamples {
  readonly model: string;
  readonly gpu: string;
  readonly tp: number;
  readonly kvCapacityTokens: number;
  readonly maxSeqs: number;
  readonly prefill: readonly PrefillSample[];
  readonly decode: readonly DecodeSample[];
  /** Optional KV observations; without them one KV token per context token is assumed. */
  readonly kv?: readonly KvSample[] | undefined;
}

/**
 * Fits a {@link PerformanceModel} by least squares from measured engine metrics or simulator steps
 * (see `samplesFromSteps`) and reports each part's fit error (Aladdin section 6.2 validates < 10%).
 */
export function fitPerformanceModel(samples: PerformanceSamples): {
  model: PerformanceModel;
  report: PerformanceFitReport;
} {
  const id = parseInput('fitPerformanceModel', identitySchema, {
    model: samples.model,
    gpu: samples.gpu,
    tp: samples.tp,
    kvCapacityTokens: samples.kvCapacityTokens,
    maxSeqs: samples.maxSeqs,
  });
  const prefill = fitPrefillModel(samples.prefill);
  const decode = fitDecodeModel(samples.decode);
  const kv = samples.kv && samples.kv.length > 0 ? fitKvModel(samples.kv) : undefined;
  const worstMape = Math.max(prefill.quality.mape, decode.quality.mape, kv?.quality.mape ?? 0);
  return {
    model: { ...id, kv: kv?.model ?? IDENTITY_KV_MODEL, prefill: prefill.model, decode: decode.model },
    report: { prefill: prefill.quality, decode: decode.quality, kv: kv?.quality, worstMape },
  };
}
