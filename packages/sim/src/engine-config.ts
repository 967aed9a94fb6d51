import { ErrorCode, MODELS, type ModelSpec, parseWith } from '@fairway/core';
import { z } from 'zod';
import { costModelPreset } from './cost-models.ts';
import type { EngineConfig, EngineModelApi, StepCostModel } from './engine-api.ts';
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
    batchPolicy: z.enum(['prefill-priority', 'decode-priority']).optional(),
    chunkedPrefill: z.boolean().optional(),
    preemption: z.enum(['recompute', 'eviction-free']).optional(),
    priorityScheduling: z.boolean().optional(),
    costModel: costModelSchema.optional(),
    maxModelLen: positiveInt.optional(),
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
    batchPolicy,
    chunkedPrefill,
    preemption: c.preemption ?? 'recompute',
    priorityScheduling: c.priorityScheduling ?? false,
    costModel: c.costModel ?? costModelPreset(c.model, c.gpu, tp),
    maxModelLen:
      c.maxModelLen ??
      (MODELS as Readonly<Record<string, ModelSpec>>)[c.model]?.maxModelLen ??
      Number.POSITIVE_INFINITY,
  };
}
