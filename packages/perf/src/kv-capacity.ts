import { modelSpec } from '@fairway/core';
import { PerfError, PerfErrorCode } from './errors.ts';
import { GPU_HARDWARE, MODEL_ARCHITECTURES } from './hardware-specs.ts';

const GIB = 1024 ** 3;

/**
 * GPU memory vLLM cannot give to the KV cache beyond the weights, per GPU, GiB: the CUDA context,
 * cuBLAS and NCCL workspaces and the allocator's slack ("non-torch memory" in vLLM's profile run).
 */
export const FIXED_RESERVE_GIB = 1.0;

/** What the KV-capacity computation needs to know about an engine. */
export interface KvCapacityInput {
  readonly model: string;
  readonly gpu: string;
  /** Tensor-parallel degree. @default 1 */
  readonly tp?: number;
  /** vLLM's `--gpu-memory-utilization`, 0–1. @default 0.9 */
  readonly gpuMemoryUtilization?: number;
  /** Tokens of the profile run that sizes peak activations. @default 8192 */
  readonly maxNumBatchedTokens?: number;
  /** Sequences whose logits the profile run samples. @default 256 */
  readonly maxNumSeqs?: number;
  /** Tokens per KV block; capacity is rounded down to whole blocks. @default 16 */
  readonly blockSize?: number;
}

/** Every term of the capacity computation, per GPU unless stated, for reports and tests. */
export interface KvCapacityBreakdown {
  /** Memory vLLM may use: utilisation × usable memory, GiB. */
  readonly budgetGiB: number;
  /** This GPU's shard of the weights, GiB. */
  readonly weightsGiB: number;
  /** Fixed reserve plus peak activations and logits of the profile run, GiB. */
  readonly reserveGiB: number;
  /** What is left for KV blocks, GiB. */
  readonly kvGiB: number;
  /** KV bytes one token takes on this GPU (the model's per-token KV ÷ TP). */
  readonly kvBytesPerTokenPerGpu: number;
  /** Tokens the replica's KV cache holds (all GPUs of the replica hold the same tokens). */
  readonly tokens: number;
}

/**
 * KV-cache capacity of one replica, the way vLLM sizes it (InferMax section 2.2): the memory under
 * `gpu_memory_utilization`, minus the weight shard, minus a reserve for the CUDA context and the
 * profile run's peak activations (MLP gate/up outputs and a few residual-width buffers over
 * `max_num_batched_tokens`, plus fp32 logits for `max_num_seqs`), divided by the KV bytes per token
 * on one GPU. Agrees with DESIGN.md's calibration table within a few percent.
 */
export function kvCapacityBreakdown(input: KvCapacityInput): KvCapacityBreakdown {
  const tp = input.tp ?? 1;
  const util = input.gpuMemoryUtilization ?? 0.9;
  const batched = input.maxNumBatchedTokens ?? 8192;
  const seqs = input.maxNumSeqs ?? 256;
  const blockSize = input.blockSize ?? 16;
  const hw = GPU_HARDWARE[input.gpu];
  const arch = MODEL_ARCHITECTURES[input.model];
  if (!hw || !arch)
    throw new PerfError(
      PerfErrorCode.NO_PRESET,
      `no KV-capacity preset for model "${input.model}" on GPU "${input.gpu}"; known GPUs: ${Object.keys(GPU_HARDWARE).join(', ')}; known models: ${Object.keys(MODEL_ARCHITECTURES).join(', ')}`,
      { subject: `${input.model}@${input.gpu}` },
    );
  const spec = modelSpec(input.model);
  const budgetGiB = hw.usableMemoryGiB * util;
  const weightsGiB = (spec.paramsB * 1e9 * spec.bytesPerParam) / tp / GIB;
  const activationBytes =
    batched * ((2 * arch.intermediate) / tp + 4 * arch.hidden) * 2 + seqs * arch.vocab * 4;
  const reserveGiB = FIXED_RESERVE_GIB + activationBytes / GIB;
  const kvGiB = Math.max(0, budgetGiB - weightsGiB - reserveGiB);
  const kvBytesPerTokenPerGpu = spec.kvBytesPerToken / tp;
  const raw = Math.floor((kvGiB * GIB) / kvBytesPerTokenPerGpu);
  return {
    budgetGiB,
    weightsGiB,
    reserveGiB,
    kvGiB,
    kvBytesPerTokenPerGpu,
    tokens: Math.floor(raw / blockSize) * blockSize,
  };
}

/** KV-cache capacity of one replica in tokens (whole blocks); see {@link kvCapacityBreakdown}. */
export function kvCapacityTokens(input: KvCapacityInput): number {
  return kvCapacityBreakdown(input).tokens;
}
