/**
 * Profiling runs that fit Aladdin's performance models (Aladdin section 3) and QLM's estimator
 * profile (QLM section 6, "Offline profiling") from the simulated engine itself: prefill batches of
 * known prompt sizes, decode iterations of known batch size and context, and the KV blocks a
 * sequence holds. Like profiling a real vLLM replica, only the engine's observable step times are
 * used; the fitted coefficients and their fit error are what placement, planning and `fairway plan`
 * rely on.
 */
import { modelSpec } from '@fairway/core';
import {
  type DecodeSample,
  fitPerformanceModel,
  type KvSample,
  measureInefficiency,
  type PerformanceFitReport,
  type PerformanceModel,
  type PrefillSample,
  type RwtProfile,
  rwtProfileFromPerformance,
} from '@fairway/policy';
import type { BatchShape, EngineConfig, StepCostModel } from './engine-api.ts';
import { EngineModel } from './engine-model.ts';

/** Which shapes a profiling run measures. */
export interface ProfilingGrid {
  /**
   * Prompt tokens of the prefill batches. @default powers of two from 128 up to the smallest of the
   * step budget, the model's context length and 4096 (shorter prompts all cost the step's fixed
   * floor; longer ones leave the linear model's range as attention grows quadratically)
   */
  readonly prefillTokens?: readonly number[];
  /** Sequences per decode batch. @default 1, 2, 4, 8, 16, 24, 32, 48, 64, … up to `maxBatch` */
  readonly batchSizes?: readonly number[];
  /** Context tokens per decoding sequence. @default 128, 512, 1024, 2048 */
  readonly contexts?: readonly number[];
  /**
   * Largest decode batch profiled: the performance model is linear, so it is fitted over the
   * batches placement will use (under an ATGT target a replica never runs the engine's maximum).
   * @default the engine's `maxNumSeqs`
   */
  readonly maxBatch?: number;
}

/** Samples measured on one engine configuration. */
export interface ProfilingSamples {
  readonly prefill: readonly PrefillSample[];
  readonly decode: readonly DecodeSample[];
  readonly kv: readonly KvSample[];
}

/** A fitted performance model, its fit error and how many samples it came from. */
export interface ProfiledModel {
  readonly model: PerformanceModel;
  readonly report: PerformanceFitReport;
  readonly samples: { readonly prefill: number; readonly decode: number; readonly kv: number };
}

function powersOfTwo(from: number, to: number): number[] {
  const out: number[] = [];
  for (let n = from; n <= to; n *= 2) out.push(n);
  return out;
}

function defaultBatches(max: number): number[] {
  const grid = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512];
  const out = grid.filter((b) => b <= max);
  if (!out.includes(max)) out.push(max);
  return out;
}

/** Runs the engine until every sequence has been prefilled; returns false if it never gets there. */
function prefillAll(engine: EngineModel, ids: readonly string[]): boolean {
  for (let guard = 0; guard < 10_000; guard++) {
    if (ids.every((id) => (engine.generatedOf(id) ?? 0) >= 1)) return true;
    if (!engine.hasWork()) return false;
    engine.step();
  }
  return false;
}

/**
 * Measures prefill, decode and KV samples on a fresh engine of `config` for every shape of the
 * grid that fits its KV cache and batch limits. Deterministic (the engine model has no noise).
 */
export function profileEngine(config: EngineConfig, grid: ProfilingGrid = {}): ProfilingSamples {
  const probe = new EngineModel(config, 'profiling');
  const c = probe.config;
  const capacity = c.kvCapacityTokens;
  const budget = c.chunkedPrefill ? c.maxNumBatchedTokens : Math.max(c.maxNumBatchedTokens, 8192);
  const prefill: PrefillSample[] = [];
  const decode: DecodeSample[] = [];
  const kv: KvSample[] = [];

  // Aladdin's prefill model is linear; attention makes long prompts quadratic, so the default
  // grid stops at 4096 tokens (the 99th percentile of the Azure conversation trace's prompts).
  const maxLen = Math.min(budget, modelSpec(c.model).maxModelLen, 4096);
  for (const n of grid.prefillTokens ?? powersOfTwo(128, maxLen)) {
    if (n + c.blockSize * 2 > capacity * 0.9) continue;
    // One prompt, and the same tokens split over 2 and 4 prompts: prefill time depends on the
    // batch's total prompt tokens, not on how many prompts carry them (Aladdin section 3.2).
    for (const k of [1, 2, 4]) {
      if (n % k !== 0 || n / k < 8) continue;
      const engine = new EngineModel(config, 'profiling');
      for (let i = 0; i < k; i++)
        engine.add({ id: `p${i}`, inputTokens: n / k, outputTokens: 2, maxTokens: 2 });
      const r = engine.step();
      if (r.shape.decodeSeqs === 0 && r.shape.prefillTokens === n)
        prefill.push({ inputTokens: n, ms: r.durationMs });
    }
  }

  // KV held by one sequence at context lengths that are not block multiples (block rounding is
  // what the model's constant term j absorbs).
  for (const n of [37, 100, 333, 555, 1000, 1717, 2049, 3001, 4000]) {
    if (n + c.blockSize * 2 > capacity * 0.9 || n > maxLen) continue;
    const engine = new EngineModel(config, 'profiling');
    engine.add({ id: 'k', inputTokens: n, outputTokens: 2, maxTokens: 2 });
    engine.step();
    kv.push({ contextTokens: n, kvTokens: engine.stats().kvUsedTokens });
  }

  const maxBatch = Math.min(grid.maxBatch ?? c.maxNumSeqs, c.maxNumSeqs);
  for (const b of grid.batchSizes ?? defaultBatches(maxBatch)) {
    if (b > c.maxNumSeqs) continue;
    for (const ctx of grid.contexts ?? [128, 512, 1024, 2048]) {
      const steps = 3;
      if (b * (ctx + steps + 2 + c.blockSize) > capacity * 0.95) continue;
      const engine = new EngineModel(config, 'profiling');
      const ids = Array.from({ length: b }, (_, i) => `d${i}`);
      for (const id of ids) engine.add({ id, inputTokens: ctx, outputTokens: 1000, maxTokens: 1000 });
      if (!prefillAll(engine, ids)) continue;
      for (let k = 0; k < steps; k++) {
        const r = engine.step();
        if (r.shape.prefillTokens === 0 && r.shape.decodeSeqs === b)
          decode.push({ batchSize: b, contextTokens: r.shape.kvTokensRead, ms: r.durationMs });
      }
    }
  }
  return { prefill, decode, kv };
}

/**
 * Profiles `config` and fits its {@link PerformanceModel} by least squares, reporting each part's
 * fit error (Aladdin section 6.2 validates its models to within 10%).
 */
export function fitEnginePerformance(config: EngineConfig, grid: ProfilingGrid = {}): ProfiledModel {
  const engine = new EngineModel(config, 'profiling');
  const samples = profileEngine(config, grid);
  const fit = fitPerformanceModel({
    model: engine.config.model,
    gpu: engine.config.gpu,
    tp: engine.config.tp,
    kvCapacityTokens: engine.config.kvCapacityTokens,
    maxSeqs:
      grid.maxBatch === undefined
        ? engine.config.maxNumSeqs
        : Math.min(grid.maxBatch, engine.config.maxNumSeqs),
    prefill: samples.prefill,
    decode: samples.decode,
    kv: samples.kv,
  });
  return {
    ...fit,
    samples: { prefill: samples.prefill.length, decode: samples.decode.length, kv: samples.kv.length },
  };
}

/** Lengths of a workload: what QLM's workload profiling samples (QLM section 6). */
export interface WorkloadLengths {
  readonly inputTokens: readonly number[];
  readonly outputTokens: readonly number[];
}

/**
 * QLM's estimator profile of one (model, GPU, TP) for a workload: the batch and decode iteration
 * time from the fitted performance model at the workload's mean lengths, and the inefficiency
 * factor ε measured by running one engine on requests of the workload (up to two batches' worth)
 * and comparing its token throughput with the ideal `B/d` (QLM Eq. 15).
 */
export function qlmProfile(
  perf: PerformanceModel,
  config: EngineConfig,
  workload: WorkloadLengths,
): RwtProfile {
  const n = Math.min(workload.inputTokens.length, workload.outputTokens.length);
  let inSum = 0;
  let outSum = 0;
  let outMax = 1;
  for (let i = 0; i < n; i++) {
    inSum += workload.inputTokens[i] as number;
    outSum += workload.outputTokens[i] as number;
    outMax = Math.max(outMax, workload.outputTokens[i] as number);
  }
  const mean = {
    meanInputTokens: n ? inSum / n : 1,
    meanOutputTokens: n ? outSum / n : 1,
    maxOutputTokens: outMax,
  };
  const ideal = rwtProfileFromPerformance(perf, mean);
  const engine = new EngineModel(config, 'profiling');
  const count = Math.min(n, 2 * ideal.batchSize);
  for (let i = 0; i < count; i++) {
    const out = Math.max(1, workload.outputTokens[i] as number);
    engine.add({
      id: `w${i}`,
      inputTokens: Math.max(1, workload.inputTokens[i] as number),
      outputTokens: out,
      maxTokens: out,
    });
  }
  let elapsedMs = 0;
  let generated = 0;
  for (let guard = 0; engine.hasWork() && guard < 1_000_000; guard++) {
    const r = engine.step();
    elapsedMs += r.durationMs;
    for (const e of r.events) if (e.kind === 'token') generated++;
  }
  const inefficiency = measureInefficiency(ideal, { generatedTokens: generated, elapsedMs });
  return { ...ideal, inefficiency };
}

/**
 * A step cost model that runs at a fitted performance model's speed (e.g. one `fairway profile`
 * measured on real hardware): a step's prefill costs `k1·tokens + c1` and its decode
 * `k2·context + c2·sequences + c3`, added when a step does both (Aladdin section 3.2).
 */
export function performanceCostModel(perf: PerformanceModel): StepCostModel {
  return {
    name: `profiled ${perf.model} on ${perf.gpu} × ${perf.tp}`,
    stepMs(shape: BatchShape): number {
      const prefill = shape.prefillTokens > 0 ? perf.prefill.k1 * shape.prefillTokens + perf.prefill.c1 : 0;
      const decode =
        shape.decodeSeqs > 0
          ? perf.decode.k2 * shape.kvTokensRead + perf.decode.c2 * shape.decodeSeqs + perf.decode.c3
          : 0;
      return Math.max(0, prefill) + Math.max(0, decode);
    },
  };
}

/** An engine configuration whose replicas have a fitted model's capacity and speed. */
export function performanceEngineConfig(perf: PerformanceModel): EngineConfig {
  return {
    model: perf.model,
    gpu: perf.gpu,
    tp: perf.tp,
    kvCapacityTokens: Math.floor(perf.kvCapacityTokens),
    maxNumSeqs: perf.maxSeqs,
    costModel: performanceCostModel(perf),
  };
}
