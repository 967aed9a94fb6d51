import type { EngineTiming } from '@fairway/bus';
import type { ControlConfig } from '@fairway/core';
import { type EngineConfig, fitEnginePerformance, qlmProfile } from '@fairway/perf';
import { decodeIterationMs, type PerformanceModel, prefillMs, type RwtProfile } from '@fairway/policy';

/** What the fleet tells about a (model, gpu, tp): its replicas' KV capacity and batch limit. */
export interface ReplicaShape {
  readonly kvCapacityTokens: number;
  readonly maxNumSeqs: number;
}

/** Prompts and outputs the profiling run uses before any history: this many of the config's means. */
const PROFILE_REQUESTS = 64;
/** A measured speed is trusted within this factor of the preset's either way (garbled metrics). */
const MAX_CORRECTION = 20;

/** How fast the engines of a shape run against its preset: a factor per phase (1: as the preset). */
export interface SpeedCorrection {
  /** Measured decode iteration time over the preset's at the same batch and context. */
  readonly decode: number;
  /** Measured prefill time over the preset's for the same prompt length. */
  readonly prefill: number;
}

const clamp = (x: number) => Math.min(MAX_CORRECTION, Math.max(1 / MAX_CORRECTION, x));

/**
 * What the engines of a shape measured of their own speed (their `/metrics` histograms, see the
 * bus's `EngineTiming`), against what the performance model predicts for the same work: each
 * window's measured time over the model's at its mean batch, context and prompt length, weighted
 * by the tokens (decode) or prefills it saw. 1 for a phase nothing measured yet.
 */
export function speedCorrection(perf: PerformanceModel, timings: readonly EngineTiming[]): SpeedCorrection {
  let decodeMeasured = 0;
  let decodeModelled = 0;
  let prefillMeasured = 0;
  let prefillModelled = 0;
  for (const t of timings) {
    const d = t.decode;
    if (d !== undefined) {
      const modelled = decodeIterationMs(perf.decode, d.meanRunning, d.meanRunning * d.meanContext);
      if (modelled > 0) {
        decodeMeasured += d.interTokenMs * d.tokens;
        decodeModelled += modelled * d.tokens;
      }
    }
    const p = t.prefill;
    if (p !== undefined) {
      const modelled = prefillMs(perf.prefill, p.meanPromptTokens);
      if (modelled > 0) {
        prefillMeasured += p.prefillMs * p.prefills;
        prefillModelled += modelled * p.prefills;
      }
    }
  }
  return {
    decode: decodeModelled > 0 ? clamp(decodeMeasured / decodeModelled) : 1,
    prefill: prefillModelled > 0 ? clamp(prefillMeasured / prefillModelled) : 1,
  };
}

/**
 * QLM's estimator profiles for live replicas. The base is built as the simulator builds it (sim
 * `slo-experiments.ts`): the performance model fitted by profiling the engine model's step-cost
 * preset of the replica's (model, GPU, TP) (`costModelPreset`, `@fairway/perf` `cost-models.ts`,
 * whose coefficients cite their sources), then QLM's profile at the workload's mean lengths with
 * the inefficiency measured on the engine model (`qlmProfile`). The live fleet has no history at
 * start-up, so the workload is the config's prior (`policy.control.inputMean`, `outputMean`), and
 * the replica's registered KV capacity and `max_num_seqs` replace the preset's. A (model, gpu)
 * without a preset (engines announce their served-model name) uses `profileModel` on
 * `profileGpu`. Times are divided by `speedup` (engine-sim `--speed`).
 *
 * Then the engines correct it: the decode time per iteration and the prefill time are scaled by
 * how much slower or faster the shape's engines measured themselves than the preset predicts
 * ({@link speedCorrection} over `timingsOf`), so a GPU, model build or engine version the preset
 * does not describe still gets waiting times from its own speed. The fit is cached per shape; the
 * correction is read on every call.
 */
export function liveProfiles(
  control: ControlConfig,
  shapeOf: (model: string, gpu: string, tp: number) => ReplicaShape | undefined,
  timingsOf: (model: string, gpu: string, tp: number) => readonly EngineTiming[] = () => [],
): (model: string, gpu: string, tp: number) => RwtProfile {
  const cache = new Map<string, { readonly perf: PerformanceModel; readonly profile: RwtProfile }>();
  const lengths = {
    inputTokens: Array.from({ length: PROFILE_REQUESTS }, () => Math.round(control.inputMean)),
    outputTokens: Array.from({ length: PROFILE_REQUESTS }, () => Math.round(control.outputMean)),
  };
  const build = (model: string, gpu: string, tp: number, shape: ReplicaShape | undefined) => {
    const config: EngineConfig = {
      model,
      gpu,
      tp,
      ...(shape ? { kvCapacityTokens: shape.kvCapacityTokens, maxNumSeqs: shape.maxNumSeqs } : {}),
    };
    const perf = fitEnginePerformance(config).model;
    return { perf, profile: qlmProfile(perf, config, lengths) };
  };
  return (model, gpu, tp) => {
    const key = `${model}|${gpu}|${tp}`;
    let base = cache.get(key);
    if (base === undefined) {
      const shape = shapeOf(model, gpu, tp);
      let built: { perf: PerformanceModel; profile: RwtProfile };
      try {
        built = build(model, gpu, tp, shape);
      } catch {
        built = build(control.profileModel, control.profileGpu, tp, shape);
      }
      base = {
        perf: built.perf,
        profile: {
          ...built.profile,
          decodeMsPerIteration: built.profile.decodeMsPerIteration / control.speedup,
          prefillMs: built.profile.prefillMs / control.speedup,
        },
      };
      cache.set(key, base);
    }
    const correction = speedCorrection(base.perf, timingsOf(model, gpu, tp));
    if (correction.decode === 1 && correction.prefill === 1) return base.profile;
    return {
      ...base.profile,
      decodeMsPerIteration: base.profile.decodeMsPerIteration * correction.decode,
      prefillMs: base.profile.prefillMs * correction.prefill,
    };
  };
}
