import { z } from 'zod';
import { parseInput } from '../errors.ts';
import type { PerformanceFitReport, PerformanceModel } from './performance-model.ts';

const finite = z.number().finite();
const fraction = z.number().nonnegative().finite();

const fitQualitySchema = z
  .object({
    samples: z.number().int().nonnegative(),
    mape: fraction,
    maxApe: fraction,
    r2: finite,
  })
  .strict();

/**
 * A performance model as `fairway profile` writes it and `fairway plan --perf-model` and the
 * dispatcher's `policy.performanceModels` read it: the (model, GPU, TP) it describes, Aladdin's
 * coefficients (ms and tokens), each fit's error, and where and when it was measured.
 */
export const performanceModelFileSchema = z
  .object({
    /** File format version. */
    version: z.literal(1),
    /** Model name as the fleet's config and presets spell it (e.g. `llama-3-8b`). */
    model: z.string().min(1),
    /** GPU name (e.g. `A100-80GB`). */
    gpu: z.string().min(1),
    /** Tensor-parallel degree: GPUs per replica. */
    tp: z.number().int().positive(),
    /** KV-cache capacity of one replica, tokens (`num_gpu_blocks × block_size`). */
    kvCapacityTokens: z.number().positive(),
    /** Most sequences the engine batches at once (vLLM `max_num_seqs`). */
    maxSeqs: z.number().int().positive(),
    /** KV tokens of a sequence `h·context + j`. */
    kv: z.object({ h: finite, j: finite }).strict(),
    /** Prefill ms `k1·prompt tokens + c1`. */
    prefill: z.object({ k1: finite, c1: finite }).strict(),
    /** Decode iteration ms `k2·batch context + c2·batch size + c3`. */
    decode: z.object({ k2: finite, c2: finite, c3: finite }).strict(),
    /** Fit error of each part (MAPE and worst error as fractions; R²). */
    fit: z
      .object({
        prefill: fitQualitySchema,
        decode: fitQualitySchema,
        kv: fitQualitySchema.optional(),
        worstMape: fraction,
      })
      .strict(),
    /** Where the samples came from. */
    measured: z
      .object({
        /** `engine`: a running engine's `/metrics`; `simulator`: simulated engine steps. */
        source: z.enum(['engine', 'simulator']),
        /** Base URL of the profiled engine. */
        url: z.string().optional(),
        /** Model name the engine serves. */
        servedModel: z.string().optional(),
        /** When the profile was taken, ISO 8601. */
        at: z.iso.datetime(),
        /** Samples behind each fit. */
        samples: z
          .object({
            prefill: z.number().int().nonnegative(),
            decode: z.number().int().nonnegative(),
            kv: z.number().int().nonnegative(),
          })
          .strict(),
      })
      .strict(),
  })
  .strict();

/** A performance-model file's content. */
export type PerformanceModelFile = z.infer<typeof performanceModelFileSchema>;

/** Where a fitted model was measured, for {@link toPerformanceModelFile}. */
export type PerformanceMeasurement = PerformanceModelFile['measured'];

/** The file content of a fitted model, its fit report and where it was measured. */
export function toPerformanceModelFile(
  model: PerformanceModel,
  report: PerformanceFitReport,
  measured: PerformanceMeasurement,
): PerformanceModelFile {
  return parseInput('toPerformanceModelFile', performanceModelFileSchema, {
    version: 1,
    model: model.model,
    gpu: model.gpu,
    tp: model.tp,
    kvCapacityTokens: model.kvCapacityTokens,
    maxSeqs: model.maxSeqs,
    kv: { h: model.kv.h, j: model.kv.j },
    prefill: { k1: model.prefill.k1, c1: model.prefill.c1 },
    decode: { k2: model.decode.k2, c2: model.decode.c2, c3: model.decode.c3 },
    fit: {
      prefill: report.prefill,
      decode: report.decode,
      ...(report.kv ? { kv: report.kv } : {}),
      worstMape: report.worstMape,
    },
    measured,
  });
}

/**
 * Validates a performance-model file's parsed JSON and returns its model; throws a
 * `PolicyInputError` naming the offending field.
 */
export function parsePerformanceModelFile(value: unknown): {
  model: PerformanceModel;
  file: PerformanceModelFile;
} {
  const file = parseInput('parsePerformanceModelFile', performanceModelFileSchema, value);
  const { model, gpu, tp, kvCapacityTokens, maxSeqs, kv, prefill, decode } = file;
  return { model: { model, gpu, tp, kvCapacityTokens, maxSeqs, kv, prefill, decode }, file };
}
