import type { PerformanceModel } from '../perf-model/performance-model.ts';

/** A request on a replica as Aladdin sees it: lengths, progress and SLO targets. */
export interface PlacedRequest {
  readonly id: string;
  /** Prompt tokens. */
  readonly inputTokens: number;
  /** Predicted total output tokens (Aladdin section 2.3: one number per request). */
  readonly predictedOutput: number;
  /** Output tokens generated so far; 0 before the request starts. */
  readonly generated: number;
  /** Time the request has spent decoding so far, ms (its ATGT numerator). @default 0 */
  readonly decodeMs?: number | undefined;
  /** Whether the request has been prefilled. Not-started requests may still be moved by re-balancing. */
  readonly started: boolean;
  /** Average token generation time target, ms per output token; none = no decode SLO. */
  readonly atgtMs?: number | undefined;
  /** Time-to-first-token target, ms from arrival; none = no TTFT SLO. */
  readonly ttftMs?: number | undefined;
  /** Time the request has already waited since arrival, ms (counts against its TTFT). @default 0 */
  readonly waitedMs?: number | undefined;
}

/** A replica with its performance model and the requests on it (running or placed, not yet started). */
export interface ReplicaView {
  readonly id: string;
  readonly perf: PerformanceModel;
  readonly requests: readonly PlacedRequest[];
  /** KV tokens placement may fill; defaults to the model's capacity (lower it to keep headroom). */
  readonly kvCapacityTokens?: number | undefined;
  /** Sequences placement may run at once; defaults to the model's `maxSeqs`. */
  readonly maxSeqs?: number | undefined;
}

/** Options shared by Aladdin's placement, re-balancing and capacity norm. */
export interface AladdinOptions {
  /**
   * Weight of output tokens in a request's context, 0–1: the "strictness knob" of Aladdin's
   * constraint (b). 0 meets the ATGT only at the first iteration, 1 at the last. @default 0.5
   */
  readonly gamma?: number;
  /**
   * Fraction of the ATGT context limit placement may fill, 0–1, absorbing output-length prediction
   * error (Aladdin's θ): smaller is safer but needs more replicas. @default 0.9
   */
  readonly theta?: number;
  /**
   * Normalise the capacity norm's two dimensions by the replica's sequence and KV capacity, so
   * replicas of different sizes compare fairly; `false` uses the paper's raw L2 norm. @default true
   */
  readonly normaliseNorm?: boolean;
}

/** Options with defaults applied. */
export interface ResolvedAladdinOptions {
  readonly gamma: number;
  readonly theta: number;
  readonly normaliseNorm: boolean;
}

/** Applies the defaults of {@link AladdinOptions}. */
export function resolveAladdinOptions(options: AladdinOptions = {}): ResolvedAladdinOptions {
  return {
    gamma: options.gamma ?? 0.5,
    theta: options.theta ?? 0.9,
    normaliseNorm: options.normaliseNorm ?? true,
  };
}

/** Total output tokens the request is expected to produce, never less than what it already has plus one. */
export function expectedLength(req: PlacedRequest): number {
  return Math.max(req.predictedOutput, req.generated + 1, 1);
}

/** KV capacity of a replica for placement, tokens. */
export function kvCapacityOf(replica: ReplicaView): number {
  return replica.kvCapacityTokens ?? replica.perf.kvCapacityTokens;
}

/** Sequence capacity of a replica for placement. */
export function seqCapacityOf(replica: ReplicaView): number {
  return replica.maxSeqs ?? replica.perf.maxSeqs;
}
