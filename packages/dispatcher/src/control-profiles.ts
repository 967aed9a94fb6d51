import type { ControlConfig } from '@fairway/core';
import { type EngineConfig, fitEnginePerformance, qlmProfile } from '@fairway/perf';
import type { RwtProfile } from '@fairway/policy';

/** What the fleet tells about a (model, gpu, tp): its replicas' KV capacity and batch limit. */
export interface ReplicaShape {
  readonly kvCapacityTokens: number;
  readonly maxNumSeqs: number;
}

/** Prompts and outputs the profiling run uses before any history: this many of the config's means. */
const PROFILE_REQUESTS = 64;

/**
 * QLM's estimator profiles for live replicas, built as the simulator builds them
 * (sim `slo-experiments.ts`): the performance model fitted by profiling the engine model's step-cost
 * preset of the replica's (model, GPU, TP) (`costModelPreset`, `@fairway/perf` `cost-models.ts`,
 * whose coefficients cite their sources), then QLM's profile at the workload's mean lengths with
 * the inefficiency measured on the engine model (`qlmProfile`). The live fleet has no history at
 * start-up, so the workload is the config's prior (`policy.control.inputMean`, `outputMean`), and
 * the replica's registered KV capacity and `max_num_seqs` replace the preset's. A (model, gpu)
 * without a preset (engines announce their served-model name) uses `profileModel` on
 * `profileGpu`. Times are divided by `speedup` (engine-sim `--speed`). Cached per shape.
 */
export function liveProfiles(
  control: ControlConfig,
  shapeOf: (model: string, gpu: string, tp: number) => ReplicaShape | undefined,
): (model: string, gpu: string, tp: number) => RwtProfile {
  const cache = new Map<string, RwtProfile>();
  const lengths = {
    inputTokens: Array.from({ length: PROFILE_REQUESTS }, () => Math.round(control.inputMean)),
    outputTokens: Array.from({ length: PROFILE_REQUESTS }, () => Math.round(control.outputMean)),
  };
  const build = (model: string, gpu: string, tp: number, shape: ReplicaShape | undefined): RwtProfile => {
    const config: EngineConfig = {
      model,
      gpu,
      tp,
      ...(shape ? { kvCapacityTokens: shape.kvCapacityTokens, maxNumSeqs: shape.maxNumSeqs } : {}),
    };
    const perf = fitEnginePerformance(config).model;
    return qlmProfile(perf, config, lengths);
  };
  return (model, gpu, tp) => {
    const key = `${model}|${gpu}|${tp}`;
    let p = cache.get(key);
    if (p !== undefined) return p;
    const shape = shapeOf(model, gpu, tp);
    let base: RwtProfile;
    try {
      base = build(model, gpu, tp, shape);
    } catch {
      base = build(control.profileModel, control.profileGpu, tp, shape);
    }
    p = {
      ...base,
      decodeMsPerIteration: base.decodeMsPerIteration / control.speedup,
      prefillMs: base.prefillMs / control.speedup,
    };
    cache.set(key, p);
    return p;
  };
}
