import { modelSpec } from '@fairway/core';
import type { BatchShape, StepCostModel } from './engine-api.ts';
import { PerfError, PerfErrorCode } from './errors.ts';
import { allReduceLink, GPU_HARDWARE, type Interconnect, MODEL_ARCHITECTURES } from './hardware-specs.ts';

/**
 * Coefficients of the InferMax batch-time form (InferMax section 3.2; DESIGN.md "Performance
 * models"), all in milliseconds:
 * `max(floorMs, baseMs + perPrefillTokenMs·prefill + perDecodeSeqMs·decodes) + perKvTokenMs·K +
 * perChunkSqMs·Σchunk² + (allReduceBaseMs + allReducePerTokenMs·n)`, where the first term is the
 * non-attention work (memory-bound floor: reading the weights once; compute-bound slope: matmuls
 * per token), `K` is the KV tokens the attention reads, `Σchunk²` the prefill attention, and the
 * last term the tensor-parallel all-reduces over the batch's `n` tokens (zero at TP 1).
 */
export interface StepCostCoefficients {
  /** Memory-bound floor of the non-attention work: the weights read once per step, ms. */
  readonly floorMs: number;
  /** Fixed per-step cost of the compute-bound line (kernel launches, sampling), ms. */
  readonly baseMs: number;
  /** Non-attention cost of one prompt token, ms. */
  readonly perPrefillTokenMs: number;
  /** Non-attention cost of one decoding sequence (one token), ms. */
  readonly perDecodeSeqMs: number;
  /** Attention cost of reading one cached KV token, ms. */
  readonly perKvTokenMs: number;
  /** Prefill-attention cost per squared chunk token, ms. */
  readonly perChunkSqMs: number;
  /** Fixed all-reduce latency per step (2 all-reduces per layer), ms; 0 at TP 1. */
  readonly allReduceBaseMs: number;
  /** All-reduce cost per token in the batch, ms; 0 at TP 1. */
  readonly allReducePerTokenMs: number;
}

/** A measured (or published) fit that presets are derived from. */
export interface CostModelReference {
  readonly model: string;
  readonly gpu: string;
  readonly tp: number;
  readonly coefficients: StepCostCoefficients;
  /** Where the numbers come from. */
  readonly source: string;
}

const noAllReduce = { allReduceBaseMs: 0, allReducePerTokenMs: 0 } as const;

/**
 * The fits every preset is derived from (DESIGN.md "Calibration"). Each row's coefficients:
 *
 * | model, GPU, TP | floor | base | /prefill tok | /decode seq | /KV tok | /chunk² | source |
 * |---|---|---|---|---|---|---|---|
 * | llama-2-7b, A100-80GB, 1 | 9.3 | 2.2 | 0.064 | 0.064 | 3.6e-4 | 1.7e-6 | InferMax §3.2 regressions of Vidur's A100 profiles |
 * | llama-2-7b, H100-80GB, 1 | 5.6 | 2.9 | 0.020 | 0.020 | 2.0e-4 | 0.5e-6 | Vidur H100 profiles, same form |
 * | llama-2-7b, A10G-24GB, 1 | 16.3 | 16.3 | 0.22 | 0.245 | 2.0e-3 | 4.2e-6 | VTC authors' A10G measurements (decode `16.3 + 0.245·b + 0.002·K`, prefill ≈ 0.22 ms/token); /chunk² scaled from A100 by FLOP/s (312/125) |
 * | llama-2-70b, A100-80GB, 4 | 18.4 | 18.4 | 0.156 | 0.156 | 5.6e-5 | 2.1e-6 | non-attention `18.4 + 0.156·n` (DESIGN.md); attention terms scaled from the 7B A100 row; all-reduce added by TP rule |
 */
export const COST_MODEL_REFERENCES: readonly CostModelReference[] = [
  {
    model: 'llama-2-7b',
    gpu: 'A100-80GB',
    tp: 1,
    coefficients: {
      floorMs: 9.3,
      baseMs: 2.2,
      perPrefillTokenMs: 0.064,
      perDecodeSeqMs: 0.064,
      perKvTokenMs: 0.00036,
      perChunkSqMs: 1.7e-6,
      ...noAllReduce,
    },
    source: 'InferMax section 3.2 regressions of Vidur A100 profiles (DESIGN.md calibration)',
  },
  {
    model: 'llama-2-7b',
    gpu: 'H100-80GB',
    tp: 1,
    coefficients: {
      floorMs: 5.6,
      baseMs: 2.9,
      perPrefillTokenMs: 0.02,
      perDecodeSeqMs: 0.02,
      perKvTokenMs: 0.0002,
      perChunkSqMs: 0.5e-6,
      ...noAllReduce,
    },
    source: 'Vidur H100 profiles in the InferMax form (DESIGN.md calibration)',
  },
  {
    model: 'llama-2-7b',
    gpu: 'A10G-24GB',
    tp: 1,
    coefficients: {
      floorMs: 16.3,
      baseMs: 16.3,
      perPrefillTokenMs: 0.22,
      perDecodeSeqMs: 0.245,
      perKvTokenMs: 0.002,
      perChunkSqMs: 1.7e-6 * (312 / 125),
      ...noAllReduce,
    },
    source:
      'VTC authors, A10G measurements: decode 16.3 + 0.245·b + 0.002·K ms, prefill ≈ 0.22 ms/token (DESIGN.md calibration); chunk² term scaled from A100 by FLOP/s',
  },
  {
    model: 'llama-2-70b',
    gpu: 'A100-80GB',
    tp: 4,
    coefficients: {
      floorMs: 18.4,
      baseMs: 18.4,
      perPrefillTokenMs: 0.156,
      perDecodeSeqMs: 0.156,
      // Attention terms from the 7B A100 row by the model rules below (KV bytes 320/512 KiB,
      // layers×hidden 80·8192 / 32·4096), divided by TP 4.
      perKvTokenMs: (0.00036 * (320 / 512)) / 4,
      perChunkSqMs: (1.7e-6 * ((80 * 8192) / (32 * 4096))) / 4,
      ...noAllReduce,
    },
    source: 'DESIGN.md calibration: non-attention 18.4 + 0.156·n ms; attention scaled from the 7B A100 fit',
  },
];

/** The GPU whose 7B fit anchors GPUs without their own fit. */
const ANCHOR_GPU = 'A100-80GB';
const ANCHOR_MODEL = 'llama-2-7b';

/** A cost model built from coefficients: the InferMax form, evaluated without allocation. */
export class LinearStepCostModel implements StepCostModel {
  readonly name: string;
  readonly coefficients: StepCostCoefficients;
  /** How the coefficients were obtained (reference row and scaling rules applied). */
  readonly derivation: string;

  constructor(name: string, coefficients: StepCostCoefficients, derivation = 'given') {
    this.name = name;
    this.coefficients = coefficients;
    this.derivation = derivation;
  }

  /** Milliseconds for a step of this shape; 0 for an empty batch. */
  stepMs(shape: BatchShape): number {
    const c = this.coefficients;
    const n = shape.prefillTokens + shape.decodeSeqs;
    if (n === 0) return 0;
    const linear = c.baseMs + c.perPrefillTokenMs * shape.prefillTokens + c.perDecodeSeqMs * shape.decodeSeqs;
    return (
      Math.max(linear, c.floorMs) +
      c.perKvTokenMs * shape.kvTokensRead +
      c.perChunkSqMs * shape.prefillChunkSq +
      c.allReduceBaseMs +
      c.allReducePerTokenMs * n
    );
  }
}

function findReference(model: string, gpu: string): CostModelReference | undefined {
  return COST_MODEL_REFERENCES.find((r) => r.model === model && r.gpu === gpu);
}

/**
 * Scales a fit to another tensor-parallel degree: the weight read, the matmuls and the KV read are
 * split over the GPUs; launches and sampling are not.
 */
function scaleTp(c: StepCostCoefficients, fromTp: number, toTp: number): StepCostCoefficients {
  const f = fromTp / toTp;
  return {
    floorMs: c.floorMs * f,
    baseMs: c.baseMs,
    perPrefillTokenMs: c.perPrefillTokenMs * f,
    perDecodeSeqMs: c.perDecodeSeqMs * f,
    perKvTokenMs: c.perKvTokenMs * f,
    perChunkSqMs: c.perChunkSqMs * f,
    ...noAllReduce,
  };
}

/**
 * The 7B fit on `gpu`: measured if there is one, else the A100-80GB fit scaled by hardware — the
 * memory-bound terms (floor, KV read) by HBM bandwidth, the compute-bound ones (per-token matmuls,
 * prefill attention) by FP16 FLOP/s; launch overhead kept.
 */
function sevenBFit(gpu: string): { coefficients: StepCostCoefficients; derivation: string } {
  const own = findReference(ANCHOR_MODEL, gpu);
  if (own) return { coefficients: own.coefficients, derivation: own.source };
  const anchor = findReference(ANCHOR_MODEL, ANCHOR_GPU)!;
  const from = GPU_HARDWARE[ANCHOR_GPU]!;
  const to = GPU_HARDWARE[gpu]!;
  const bw = from.memoryBandwidthGBps / to.memoryBandwidthGBps;
  const fl = from.fp16Tflops / to.fp16Tflops;
  const c = anchor.coefficients;
  return {
    coefficients: {
      floorMs: c.floorMs * bw,
      baseMs: c.baseMs,
      perPrefillTokenMs: c.perPrefillTokenMs * fl,
      perDecodeSeqMs: c.perDecodeSeqMs * fl,
      perKvTokenMs: c.perKvTokenMs * bw,
      perChunkSqMs: c.perChunkSqMs * fl,
      ...noAllReduce,
    },
    derivation: `${anchor.source}, scaled to ${gpu} by bandwidth ×${bw.toFixed(2)} and FLOP/s ×${fl.toFixed(2)}`,
  };
}

/**
 * Coefficients for `(model, gpu, tp)`, derived by documented rules:
 * 1. a fit for the same model and GPU is scaled to the TP degree ({@link COST_MODEL_REFERENCES});
 * 2. otherwise the GPU's 7B fit (measured, or the A100-80GB fit scaled by bandwidth and FLOP/s) is
 *    scaled to the model: floor by weight bytes, per-token terms by parameters, launch overhead by
 *    layers, KV read by KV bytes per token, prefill attention by layers × hidden — all ÷ TP;
 * 3. for TP > 1, all-reduce is added (Aladdin section 4.1: compute shrinks as 1/TP, communication
 *    does not): 2 all-reduces per layer, each paying the link's latency, plus the ring traffic
 *    `2·(tp−1)/tp` × (2 · layers · hidden · 2 B) per token over the link's bus bandwidth — NVLink
 *    where the GPU has it unless `interconnect` says `pcie`.
 */
export function costCoefficients(
  model: string,
  gpu: string,
  tp = 1,
  interconnect?: Interconnect,
): { coefficients: StepCostCoefficients; derivation: string } {
  const hw = GPU_HARDWARE[gpu];
  const arch = MODEL_ARCHITECTURES[model];
  if (!hw || !arch || !Number.isInteger(tp) || tp < 1)
    throw new PerfError(
      PerfErrorCode.NO_PRESET,
      `no cost-model preset for model "${model}" on GPU "${gpu}" with tp ${tp}; known GPUs: ${Object.keys(GPU_HARDWARE).join(', ')}; known models: ${Object.keys(MODEL_ARCHITECTURES).join(', ')}; tp must be a positive integer`,
      { subject: `${model}@${gpu}` },
    );
  let base: StepCostCoefficients;
  let derivation: string;
  const own = findReference(model, gpu);
  if (own) {
    base = scaleTp(own.coefficients, own.tp, tp);
    derivation = own.tp === tp ? own.source : `${own.source}, scaled from TP ${own.tp} to TP ${tp}`;
  } else {
    const seven = sevenBFit(gpu);
    const m = modelSpec(model);
    const m7 = modelSpec(ANCHOR_MODEL);
    const a7 = MODEL_ARCHITECTURES[ANCHOR_MODEL]!;
    const c = seven.coefficients;
    const weights = (m.paramsB * m.bytesPerParam) / (m7.paramsB * m7.bytesPerParam);
    const params = m.paramsB / m7.paramsB;
    const layers = arch.layers / a7.layers;
    const attn = (arch.layers * arch.hidden) / (a7.layers * a7.hidden);
    const kv = m.kvBytesPerToken / m7.kvBytesPerToken;
    base = {
      floorMs: (c.floorMs * weights) / tp,
      baseMs: c.baseMs * layers,
      perPrefillTokenMs: (c.perPrefillTokenMs * params) / tp,
      perDecodeSeqMs: (c.perDecodeSeqMs * params) / tp,
      perKvTokenMs: (c.perKvTokenMs * kv) / tp,
      perChunkSqMs: (c.perChunkSqMs * attn) / tp,
      ...noAllReduce,
    };
    derivation =
      model === ANCHOR_MODEL && tp === 1
        ? seven.derivation
        : `${seven.derivation}; scaled to ${model} (weights ×${weights.toFixed(2)}, params ×${params.toFixed(2)}, layers ×${layers.toFixed(2)}, KV ×${kv.toFixed(2)}) and TP ${tp}`;
  }
  if (tp > 1) {
    const link = allReduceLink(hw, interconnect);
    const kind = link === hw.nvlink ? 'NVLink' : 'PCIe';
    const bytesPerToken = 2 * arch.layers * arch.hidden * 2 * ((2 * (tp - 1)) / tp);
    base = {
      ...base,
      allReduceBaseMs: (2 * arch.layers * link.latencyUs) / 1000,
      allReducePerTokenMs: (bytesPerToken / (link.busGBps * 1e9)) * 1000,
    };
    derivation += `; all-reduce over ${kind} at ${link.busGBps} GB/s, ${link.latencyUs} µs per call`;
  }
  return { coefficients: base, derivation };
}

/** The preset step-cost model for `(model, gpu, tp)`; see {@link costCoefficients} for the rules. */
export function costModelPreset(
  model: string,
  gpu: string,
  tp = 1,
  interconnect?: Interconnect,
): LinearStepCostModel {
  const { coefficients, derivation } = costCoefficients(model, gpu, tp, interconnect);
  const link = tp > 1 && interconnect === 'pcie' ? '/pcie' : '';
  return new LinearStepCostModel(`${model}@${gpu}×${tp}${link}`, coefficients, derivation);
}

/**
 * A prompt token's cost when the prefix cache holds it, relative to one prefilled, under the
 * InferMax step form: a prefilled token costs the step its matmuls (`perPrefillTokenMs`) and, once
 * in KV, a read by attention (`perKvTokenMs`); a cached token costs only the read. So the weight
 * is `perKvTokenMs / (perPrefillTokenMs + perKvTokenMs)`. Both then hold KV alike and are read
 * alike by every later step, which is the cost of the request's context and not of its prefill.
 */
export function cachedTokenWeightOf(c: StepCostCoefficients): number {
  const prefilled = c.perPrefillTokenMs + c.perKvTokenMs;
  return prefilled > 0 ? c.perKvTokenMs / prefilled : 1;
}

/**
 * {@link cachedTokenWeightOf} the preset for `(model, gpu, tp)`; undefined when no preset is
 * known (the caller then uses `DEFAULT_CACHED_TOKEN_WEIGHT` of `@fairway/core`).
 */
export function cachedTokenWeightFor(model: string, gpu: string, tp = 1): number | undefined {
  if (GPU_HARDWARE[gpu] === undefined || MODEL_ARCHITECTURES[model] === undefined) return undefined;
  if (!Number.isInteger(tp) || tp < 1) return undefined;
  return cachedTokenWeightOf(costCoefficients(model, gpu, tp).coefficients);
}
