import { ErrorCode, MODELS, type ModelSpec, parseWith } from '@fairway/core';
import { z } from 'zod';
import { costModelPreset } from './cost-models.ts';
import type { EngineConfig, EngineModelApi, StepCostModel } from './engine-api.ts';
import { GPU_HARDWARE } from './hardware-specs.ts';
import { kvCapacityTokens } from './kv-capacity.ts';

/** An engine configuration with every default applied, as {@link EngineModelApi.config} exposes it. */
export type ResolvedEngineConfig = EngineModelApi['config'];

const costModelSchema = z.custom<StepCostModel>(
  (v) =>
    typeof v === 'object' &&
    v !== null &&
    typeof (v as { name?: unknown }).name === 'string' &&
    typeof (v as { stepMs?: unknown }).stepMs === 'function',
  { message: 'must be an object with a string "name" and a "stepMs(shape)" function' },
);

const positiveInt = z.number().int().positive();

/**
 * Coefficient of variation of a real vLLM decode step's time, the default magnitude of
 * {@link StepNoise}. Measured single-stream decode on vLLM (vllm-project/vllm PR #51349, `vllm bench
 * serve`, max concurrency 1, H800): inter-token latency median 4.62 ms, p99 5.83 ms. With one request
 * in flight every inter-token gap is one decode step, and a lognormal with p99/median = 1.262 has
 * σ = ln(1.262)/2.326 = 0.100, i.e. a CV of 0.10. (Under load ITL spreads far more — p99 3× the
 * median in PR #31826 at concurrency 8 — but that spread is prefills sharing steps, which the engine
 * model already prices; the noise is only what is left of a step the model prices exactly.)
 */
export const VLLM_STEP_JITTER_CV = 0.1;

/** zod schema of {@link StepNoise}, shared with scenario files. */
export const stepNoiseSchema = z
  .object({
    distribution: z.enum(['none', 'lognormal', 'normal']),
    cv: z.number().min(0).max(2).optional(),
  })
  .strict();

/** zod schema of {@link EngineConfig}; the source of truth for what an engine accepts. */
export const engineConfigSchema = z
  .object({
    gpu: z.string().min(1),
    model: z.string().min(1),
    tp: positiveInt.optional(),
    kvCapacityTokens: positiveInt.optional(),
    blockSize: positiveInt.optional(),
    watermark: z.number().min(0).max(0.5).optional(),
    maxNumSeqs: positiveInt.optional(),
    maxNumBatchedTokens: positiveInt.optional(),
    maxNumPrefillTokens: positiveInt.optional(),
    batchPolicy: z.enum(['prefill-priority', 'decode-priority']).optional(),
    chunkedPrefill: z.boolean().optional(),
    preemption: z.enum(['recompute', 'eviction-free']).optional(),
    preemptionVictim: z.enum(['newest', 'cheapest-refill']).optional(),
    priorityScheduling: z.boolean().optional(),
    interconnect: z.enum(['nvlink', 'pcie']).optional(),
    costModel: costModelSchema.optional(),
    stepNoise: stepNoiseSchema.optional(),
    maxModelLen: positiveInt.optional(),
    enablePrefixCaching: z.boolean().optional(),
    admitEverySteps: z.number().int().min(0).optional(),
  })
  .strict();

/**
 * Validates an engine configuration and applies vLLM's defaults; the KV capacity comes from the
 * (model, GPU, TP) memory computation and the step cost from the preset unless overridden. Throws a
 * `ConfigError` naming the offending field (prefixed by `source`, e.g. `engines[2]`).
 */
export function resolveEngineConfig(config: EngineConfig, source?: string): ResolvedEngineConfig {
  const c = parseWith(engineConfigSchema, config, source, ErrorCode.CONFIG_INVALID);
  const tp = c.tp ?? 1;
  const batchPolicy = c.batchPolicy ?? 'prefill-priority';
  const chunkedPrefill = c.chunkedPrefill ?? batchPolicy === 'decode-priority';
  const maxNumSeqs = c.maxNumSeqs ?? 256;
  const maxNumBatchedTokens = c.maxNumBatchedTokens ?? (chunkedPrefill ? 2048 : 8192);
  const blockSize = c.blockSize ?? 16;
  const kvCapacity =
    c.kvCapacityTokens ??
    kvCapacityTokens({ model: c.model, gpu: c.gpu, tp, maxNumBatchedTokens, maxNumSeqs, blockSize });
  return {
    gpu: c.gpu,
    model: c.model,
    tp,
    kvCapacityTokens: kvCapacity,
    blockSize,
    watermark: c.watermark ?? 0.01,
    maxNumSeqs,
    maxNumBatchedTokens,
    maxNumPrefillTokens: c.maxNumPrefillTokens ?? maxNumBatchedTokens,
    batchPolicy,
    chunkedPrefill,
    preemption: c.preemption ?? 'recompute',
    preemptionVictim: c.preemptionVictim ?? 'newest',
    priorityScheduling: c.priorityScheduling ?? false,
    interconnect: c.interconnect ?? (GPU_HARDWARE[c.gpu]?.nvlink !== undefined ? 'nvlink' : 'pcie'),
    costModel: c.costModel ?? costModelPreset(c.model, c.gpu, tp, c.interconnect),
    stepNoise: {
      distribution: c.stepNoise?.distribution ?? 'none',
      cv: c.stepNoise?.distribution === 'none' ? 0 : (c.stepNoise?.cv ?? VLLM_STEP_JITTER_CV),
    },
    maxModelLen:
      c.maxModelLen ??
      (MODELS as Readonly<Record<string, ModelSpec>>)[c.model]?.maxModelLen ??
      Number.POSITIVE_INFINITY,
    enablePrefixCaching: c.enablePrefixCaching ?? false,
    admitEverySteps: c.admitEverySteps ?? 0,
  };
}
