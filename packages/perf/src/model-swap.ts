/**
 * What a model swap costs a replica (QLM section 5, model swapping): the time the engine serves
 * nothing while the new model's weights are brought into GPU memory, by the mechanism vLLM offers
 * (DESIGN.md "vLLM surface"): wake a sleeping model from CPU memory, load a LoRA adapter onto the
 * shared base, or restart the engine with the other model from disk. Draining the running batch
 * first is not part of this cost; the runner waits for it in virtual time.
 */
import { modelSpec } from '@fairway/core';
import type { SwapMechanism } from '@fairway/policy';

/** Host↔GPU and disk bandwidth of a node, GB/s. */
export interface NodeBandwidth {
  /** Effective host-to-device copy bandwidth (PCIe), GB/s. */
  readonly hostToDeviceGBps: number;
  /** Model load bandwidth from local NVMe, GB/s. */
  readonly diskGBps: number;
}

/**
 * PCIe generation of each GPU's typical host (gen4 x16 ≈ 25 GB/s effective, gen5 ≈ 50, gen3 ≈ 12)
 * and a local NVMe at about 2 GB/s of sustained safetensors reads.
 */
export const NODE_BANDWIDTH: Readonly<Record<string, NodeBandwidth>> = {
  'A10G-24GB': { hostToDeviceGBps: 25, diskGBps: 2 },
  'V100-32GB': { hostToDeviceGBps: 12, diskGBps: 2 },
  'A100-40GB': { hostToDeviceGBps: 25, diskGBps: 2 },
  'A100-80GB': { hostToDeviceGBps: 25, diskGBps: 2 },
  'H100-80GB': { hostToDeviceGBps: 50, diskGBps: 2 },
};

/** Fixed cost of waking a sleeping vLLM engine (re-allocating the KV cache, warming kernels), s. */
export const WAKE_OVERHEAD_S = 1.5;
/** Fixed cost of starting a vLLM engine (CUDA context, profiling run, CUDA graph capture), s. */
export const RESTART_OVERHEAD_S = 20;
/** Fixed cost of registering a LoRA adapter, s. */
export const LORA_OVERHEAD_S = 0.2;
/** Size of a typical LoRA adapter (rank 16 on the attention projections of a 7B model), GB. */
export const LORA_ADAPTER_GB = 0.03;

/**
 * Seconds to bring `model` into service on a replica of `gpu` × `tp` by `mechanism`: the weight
 * shard each GPU receives over its own link (so TP divides the copy), plus the mechanism's fixed
 * overhead.
 */
export function modelSwapSeconds(model: string, gpu: string, tp: number, mechanism: SwapMechanism): number {
  const spec = modelSpec(model);
  const bw = NODE_BANDWIDTH[gpu] ?? { hostToDeviceGBps: 25, diskGBps: 2 };
  const shardGB = (spec.paramsB * spec.bytesPerParam) / Math.max(1, tp);
  switch (mechanism) {
    case 'sleep-wake':
      return shardGB / bw.hostToDeviceGBps + WAKE_OVERHEAD_S;
    case 'lora':
      return LORA_ADAPTER_GB / bw.hostToDeviceGBps + LORA_OVERHEAD_S;
    case 'reload':
      return (spec.paramsB * spec.bytesPerParam) / bw.diskGBps + RESTART_OVERHEAD_S;
  }
}

/** A swap's cost in seconds and how it is done (the shape of `SwapCost` in `@fairway/scheduler`). */
export interface ModelSwapCost {
  readonly costS: number;
  readonly mechanism: SwapMechanism;
}

/** A swap-cost function for `model` by `mechanism`, as `QlmControl`'s `swappable` takes it. */
export function swapCostOf(
  model: string,
  mechanism: SwapMechanism,
): (gpu: string, tp: number) => ModelSwapCost {
  return (gpu, tp) => ({ costS: modelSwapSeconds(model, gpu, tp, mechanism), mechanism });
}
