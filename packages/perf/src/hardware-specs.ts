/**
 * Hardware and architecture numbers the performance models scale by: what a GPU can move and
 * compute, and how big a model's layers are. `@fairway/core`'s `GPUS` and `MODELS` say what fits in
 * memory; these tables say how fast it runs. Sources are public datasheets and model configs.
 */

/** Throughput characteristics of one GPU type. */
export interface GpuHardware {
  readonly name: string;
  /**
   * Memory the driver reports (`nvidia-smi` total), GiB. The marketing size overstates it for the
   * A10G ("24 GB" is 23,028 MiB) and the H100 (81,559 MiB).
   */
  readonly usableMemoryGiB: number;
  /** Peak HBM/GDDR bandwidth, GB/s (10^9 bytes per second). */
  readonly memoryBandwidthGBps: number;
  /** Dense FP16 tensor-core throughput, TFLOP/s. */
  readonly fp16Tflops: number;
  /** All-reduce over NVLink, when the GPU's servers have it (SXM boards). */
  readonly nvlink?: AllReduceLink | undefined;
  /** All-reduce over PCIe (PCIe boards, or servers without NVLink). */
  readonly pcie: AllReduceLink;
}

/** How fast GPUs of one replica all-reduce over one kind of link. */
export interface AllReduceLink {
  /** One NCCL all-reduce's fixed latency, microseconds. */
  readonly latencyUs: number;
  /** Effective all-reduce bus bandwidth (nccl-tests `busbw`), GB/s. */
  readonly busGBps: number;
}

/** The link GPUs of one replica all-reduce over. */
export type Interconnect = 'nvlink' | 'pcie';

/**
 * PCIe all-reduce by generation: a x16 link carries 16/32/64 GB/s one way (Gen3/4/5); a ring
 * all-reduce through the host bridge reaches about 60% of it as nccl-tests `busbw`, and each call
 * pays about twice NVLink's latency (the hop through the PCIe switch).
 */
const PCIE_GEN3: AllReduceLink = { latencyUs: 50, busGBps: 10 };
const PCIE_GEN4: AllReduceLink = { latencyUs: 40, busGBps: 20 };
const PCIE_GEN5: AllReduceLink = { latencyUs: 30, busGBps: 40 };

/** The link a replica of `gpu` all-reduces over: `interconnect` if given, else NVLink where the GPU has it. */
export function allReduceLink(hw: GpuHardware, interconnect?: Interconnect): AllReduceLink {
  if (interconnect === 'pcie') return hw.pcie;
  return hw.nvlink ?? hw.pcie;
}

/**
 * GPU datasheet numbers. Bandwidth and FLOP/s: NVIDIA A10, V100 (SXM2), A100 (SXM4) and H100
 * (SXM5) datasheets. All-reduce: NVLink generations 2/3/4 measured by nccl-tests at about 130/230/450
 * GB/s bus bandwidth; the A10G (AWS g5) has no NVLink and reduces over PCIe Gen4 (about 20 GB/s).
 * The PCIe figures apply to the PCIe boards of each GPU (Aladdin's A100 testbed: 4 × A100-80GB on PCIe).
 */
export const GPU_HARDWARE: Readonly<Record<string, GpuHardware>> = {
  'A10G-24GB': {
    name: 'A10G-24GB',
    usableMemoryGiB: 23028 / 1024,
    memoryBandwidthGBps: 600,
    fp16Tflops: 125,
    pcie: PCIE_GEN4,
  },
  'V100-32GB': {
    name: 'V100-32GB',
    usableMemoryGiB: 32,
    memoryBandwidthGBps: 900,
    fp16Tflops: 125,
    nvlink: { latencyUs: 25, busGBps: 130 },
    pcie: PCIE_GEN3,
  },
  'A100-40GB': {
    name: 'A100-40GB',
    usableMemoryGiB: 40,
    memoryBandwidthGBps: 1555,
    fp16Tflops: 312,
    nvlink: { latencyUs: 20, busGBps: 230 },
    pcie: PCIE_GEN4,
  },
  'A100-80GB': {
    name: 'A100-80GB',
    usableMemoryGiB: 80,
    memoryBandwidthGBps: 2039,
    fp16Tflops: 312,
    nvlink: { latencyUs: 20, busGBps: 230 },
    pcie: PCIE_GEN4,
  },
  'H100-80GB': {
    name: 'H100-80GB',
    usableMemoryGiB: 81559 / 1024,
    memoryBandwidthGBps: 3350,
    fp16Tflops: 989,
    nvlink: { latencyUs: 15, busGBps: 450 },
    pcie: PCIE_GEN5,
  },
};

/** The layer shapes that set activation memory and attention and all-reduce cost. */
export interface ModelArchitecture {
  readonly name: string;
  readonly layers: number;
  /** Model (residual) width. */
  readonly hidden: number;
  /** MLP width (gate and up projections each have this many outputs). */
  readonly intermediate: number;
  readonly vocab: number;
}

/** From each model's Hugging Face `config.json`. */
export const MODEL_ARCHITECTURES: Readonly<Record<string, ModelArchitecture>> = {
  'llama-2-7b': { name: 'llama-2-7b', layers: 32, hidden: 4096, intermediate: 11008, vocab: 32000 },
  'llama-2-13b': { name: 'llama-2-13b', layers: 40, hidden: 5120, intermediate: 13824, vocab: 32000 },
  'llama-2-70b': { name: 'llama-2-70b', layers: 80, hidden: 8192, intermediate: 28672, vocab: 32000 },
  'llama-3-8b': { name: 'llama-3-8b', layers: 32, hidden: 4096, intermediate: 14336, vocab: 128256 },
};
