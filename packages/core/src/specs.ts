import type { GpuSpec, ModelSpec } from './domain.ts';
import { ErrorCode, FairwayError } from './errors.ts';

const KIB = 1024;

/** GPU types fairway has presets for. */
export const GPUS = {
  'A10G-24GB': { name: 'A10G-24GB', memoryGiB: 24 },
  'V100-32GB': { name: 'V100-32GB', memoryGiB: 32 },
  'A100-40GB': { name: 'A100-40GB', memoryGiB: 40 },
  'A100-80GB': { name: 'A100-80GB', memoryGiB: 80 },
  'H100-80GB': { name: 'H100-80GB', memoryGiB: 80 },
} as const satisfies Record<string, GpuSpec>;
export type GpuName = keyof typeof GPUS;

/**
 * Models fairway has presets for. KV bytes per token (fp16) from DESIGN.md "Calibration":
 * 7B 512 KiB (32 layers × 4096 × 2 × 2 B), 13B 800 KiB, 70B 320 KiB (GQA, 8 KV heads);
 * Llama-3-8B 128 KiB (32 layers × 8 KV heads × 128 × 2 × 2 B).
 */
export const MODELS = {
  'llama-2-7b': {
    name: 'llama-2-7b',
    paramsB: 6.74,
    bytesPerParam: 2,
    kvBytesPerToken: 512 * KIB,
    maxModelLen: 4096,
  },
  'llama-2-13b': {
    name: 'llama-2-13b',
    paramsB: 13.0,
    bytesPerParam: 2,
    kvBytesPerToken: 800 * KIB,
    maxModelLen: 4096,
  },
  'llama-2-70b': {
    name: 'llama-2-70b',
    paramsB: 69.0,
    bytesPerParam: 2,
    kvBytesPerToken: 320 * KIB,
    maxModelLen: 4096,
  },
  'llama-3-8b': {
    name: 'llama-3-8b',
    paramsB: 8.03,
    bytesPerParam: 2,
    kvBytesPerToken: 128 * KIB,
    maxModelLen: 8192,
  },
} as const satisfies Record<string, ModelSpec>;
export type ModelName = keyof typeof MODELS;

/** Looks up a GPU preset by name, with an error listing the known ones. */
export function gpuSpec(name: string): GpuSpec {
  const spec = (GPUS as Record<string, GpuSpec>)[name];
  if (!spec)
    throw new FairwayError(
      ErrorCode.UNKNOWN_PRESET,
      `unknown GPU "${name}"; known: ${Object.keys(GPUS).join(', ')}`,
    );
  return spec;
}

/** Looks up a model preset by name, with an error listing the known ones. */
export function modelSpec(name: string): ModelSpec {
  const spec = (MODELS as Record<string, ModelSpec>)[name];
  if (!spec)
    throw new FairwayError(
      ErrorCode.UNKNOWN_PRESET,
      `unknown model "${name}"; known: ${Object.keys(MODELS).join(', ')}`,
    );
  return spec;
}
