import { decodeIterationMs } from '../perf-model/decode-model.ts';
import { kvTokens } from '../perf-model/kv-model.ts';
import type { PerformanceModel } from '../perf-model/performance-model.ts';
import { prefillMs } from '../perf-model/prefill-model.ts';
import type { LengthStats } from './output-stats.ts';

/**
 * What QLM's request-waiting-time estimator knows about one replica serving one model, from
 * profiling a single batch (QLM section 6, "Offline profiling"; appendix A.1).
 */
export interface RwtProfile {
  /** Decode time per iteration of a full running batch, ms (`d`, `δ` in appendix A). */
  readonly decodeMsPerIteration: number;
  /** Running batch size in steady state (`B ≈ KV capacity / E[I + O]`). */
  readonly batchSize: number;
  /** Inefficiency factor ≥ 1 from preemptions and batch churn (`ε`). */
  readonly inefficiency: number;
  /** Prefill time of a request, ms (`P`). */
  readonly prefillMs: number;
  /** Most output tokens a request may produce: the conservative decode length (`O_max`). */
  readonly maxOutputTokens: number;
}

/** A normal estimate of a duration, seconds. */
export interface TimeEstimate {
  readonly meanS: number;
  readonly varianceS2: number;
  /** `mean + z·sd` at the estimator's confidence. */
  readonly upperS: number;
}

/** Output tokens per second of the replica: `Θ = B / (d·ε)` (QLM Eq. 15). */
export function tokenThroughput(profile: RwtProfile): number {
  return (profile.batchSize * 1000) / (profile.decodeMsPerIteration * profile.inefficiency);
}

/** Standard-normal quantile for a one-sided confidence in (0, 1) (Acklam's rational approximation). */
export function normalQuantile(p: number): number {
  if (p <= 0) return Number.NEGATIVE_INFINITY;
  if (p >= 1) return Number.POSITIVE_INFINITY;
  const a = [
    -39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716,
    2.506628277459239,
  ];
  const b = [
    -54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572,
  ];
  const c = [
    -0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968,
    2.938163982698783,
  ];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const pl = 0.02425;
  const poly = (cs: number[], x: number) => cs.reduce((acc, v) => acc * x + v, 0);
  if (p < pl) {
    const q = Math.sqrt(-2 * Math.log(p));
    return poly(c, q) / (poly(d, q) * q + 1);
  }
  if (p > 1 - pl) {
    const q = Math.sqrt(-2 * Math.log(1 - p));
    return -poly(c, q) / (poly(d, q) * q + 1);
  }
  const q = p - 0.5;
  const r = q * q;
  return (poly(a, r) * q) / (poly(b, r) * r + 1);
}

/**
 * Waiting time of a request with `count` requests of output statistics `stats` queued ahead of it:
 * their output tokens over the replica's throughput. By the central limit theorem the tokens ahead
 * are `N(n·μ_o, n·σ_o²)`, so the wait is normal with mean `n·μ_o/Θ` and variance `n·σ_o²/Θ²`
 * (QLM Eqs. 2–3, 19–20).
 */
export function waitingTime(profile: RwtProfile, count: number, stats: LengthStats, z: number): TimeEstimate {
  const theta = tokenThroughput(profile);
  const meanS = (count * stats.mean) / theta;
  const varianceS2 = (count * stats.variance) / (theta * theta);
  return { meanS, varianceS2, upperS: meanS + z * Math.sqrt(varianceS2) };
}

/** Sum of independent estimates (waits of consecutive groups of one queue). */
export function sumEstimates(parts: readonly TimeEstimate[], z: number): TimeEstimate {
  let meanS = 0;
  let varianceS2 = 0;
  for (const p of parts) {
    meanS += p.meanS;
    varianceS2 += p.varianceS2;
  }
  return { meanS, varianceS2, upperS: meanS + z * Math.sqrt(varianceS2) };
}

/**
 * Decode time of one request, taken at its conservative maximum `O_max·ε·d` because the CLT does
 * not apply to a single request (QLM Eq. 4), in seconds.
 */
export function conservativeDecodeS(profile: RwtProfile): number {
  return (profile.maxOutputTokens * profile.inefficiency * profile.decodeMsPerIteration) / 1000;
}

/**
 * Completion time `C_q = W_q + P + D_q` of the request at 0-based position `position` in a queue of
 * homogeneous requests (QLM Eq. 1): CLT waiting time plus prefill plus the conservative decode. With
 * a short queue the decode term dominates, so the estimate errs high; with a long one the wait
 * dominates and it converges (QLM section 6, Figure 20).
 */
export function completionTime(
  profile: RwtProfile,
  position: number,
  stats: LengthStats,
  z: number,
): TimeEstimate {
  const w = waitingTime(profile, position, stats, z);
  const fixed = profile.prefillMs / 1000 + conservativeDecodeS(profile);
  return { meanS: w.meanS + fixed, varianceS2: w.varianceS2, upperS: w.upperS + fixed };
}

/**
 * A profile from an Aladdin performance model and the workload's mean lengths: the batch the KV
 * cache holds at `E[I + O]` tokens per request (QLM Eq. 16, capped by `max_num_seqs`) and its decode
 * iteration time at the mean context `I + O/2`.
 */
export function rwtProfileFromPerformance(
  perf: PerformanceModel,
  workload: {
    readonly meanInputTokens: number;
    readonly meanOutputTokens: number;
    readonly maxOutputTokens: number;
  },
  inefficiency = 1,
): RwtProfile {
  const perRequest = Math.max(kvTokens(perf.kv, workload.meanInputTokens + workload.meanOutputTokens), 1);
  const batchSize = Math.max(1, Math.min(perf.maxSeqs, Math.floor(perf.kvCapacityTokens / perRequest)));
  const avgContext = workload.meanInputTokens + workload.meanOutputTokens / 2;
  return {
    decodeMsPerIteration: decodeIterationMs(perf.decode, batchSize, batchSize * avgContext),
    batchSize,
    inefficiency,
    prefillMs: prefillMs(perf.prefill, workload.meanInputTokens),
    maxOutputTokens: workload.maxOutputTokens,
  };
}

/**
 * Inefficiency factor from a profiling run: the ideal throughput `B/d` over the measured one
 * (output tokens over elapsed time), never below 1 (QLM Eq. 15).
 */
export function measureInefficiency(
  profile: Omit<RwtProfile, 'inefficiency'>,
  measured: { readonly generatedTokens: number; readonly elapsedMs: number },
): number {
  if (measured.generatedTokens <= 0 || measured.elapsedMs <= 0) return 1;
  const ideal = profile.batchSize / profile.decodeMsPerIteration;
  const actual = measured.generatedTokens / measured.elapsedMs;
  return Math.max(1, ideal / actual);
}
