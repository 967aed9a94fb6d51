import { capacityNorm } from './capacity-norm.ts';
import {
  type AladdinOptions,
  type PlacedRequest,
  type ReplicaView,
  type ResolvedAladdinOptions,
  resolveAladdinOptions,
} from './replica-view.ts';
import { checkPlacement, type FeasibilityResult } from './slo-feasibility.ts';

/** A request to place: lengths and SLO targets. It has not started anywhere yet. */
export interface IncomingRequest {
  readonly id: string;
  readonly inputTokens: number;
  /** Predicted output tokens. */
  readonly predictedOutput: number;
  /** TTFT target, ms from arrival. */
  readonly ttftMs?: number | undefined;
  /** ATGT target, ms per output token. */
  readonly atgtMs?: number | undefined;
  /** Time already waited since arrival, ms. @default 0 */
  readonly waitedMs?: number | undefined;
}

/** Where best fit put a request, or that no replica can take it (Aladdin: open a new bin). */
export type PlacementDecision =
  | {
      readonly kind: 'placed';
      readonly replica: string;
      /** Capacity norm of the chosen replica before the request was added. */
      readonly norm: number;
      readonly prediction: FeasibilityResult;
      /** Replicas tried first and refused, with why. */
      readonly rejected: readonly RejectedReplica[];
    }
  | { readonly kind: 'needs-replica'; readonly rejected: readonly RejectedReplica[] };

/** A replica best fit skipped and the constraint it would have broken. */
export interface RejectedReplica {
  readonly replica: string;
  readonly result: FeasibilityResult & { readonly ok: false };
}

/** The request as it will sit on a replica once placed. */
export function asPlaced(req: IncomingRequest): PlacedRequest {
  return {
    id: req.id,
    inputTokens: req.inputTokens,
    predictedOutput: req.predictedOutput,
    generated: 0,
    decodeMs: 0,
    started: false,
    atgtMs: req.atgtMs,
    ttftMs: req.ttftMs,
    waitedMs: req.waitedMs ?? 0,
  };
}

/** Replicas ordered fullest first by capacity norm (ties by id, so the order is deterministic). */
export function byCapacityNorm(
  replicas: readonly ReplicaView[],
  options: ResolvedAladdinOptions,
): { replica: ReplicaView; norm: number }[] {
  return replicas
    .map((replica) => ({ replica, norm: capacityNorm(replica, options) }))
    .sort(
      (a, b) => b.norm - a.norm || (a.replica.id < b.replica.id ? -1 : a.replica.id > b.replica.id ? 1 : 0),
    );
}

/**
 * Aladdin's request placement (Algorithm 1): best fit for online multi-dimensional bin packing.
 * Replicas are sorted by capacity norm from fullest to emptiest and the request goes to the first
 * one on which every SLO still holds; if none can take it, a new replica is needed.
 */
export function placeBestFit(
  req: IncomingRequest,
  replicas: readonly ReplicaView[],
  options?: AladdinOptions,
): PlacementDecision {
  const opts = resolveAladdinOptions(options);
  const placed = asPlaced(req);
  const rejected: RejectedReplica[] = [];
  for (const { replica, norm } of byCapacityNorm(replicas, opts)) {
    const result = checkPlacement(replica, placed, opts);
    if (result.ok) return { kind: 'placed', replica: replica.id, norm, prediction: result, rejected };
    rejected.push({ replica: replica.id, result });
  }
  return { kind: 'needs-replica', rejected };
}

/**
 * The replicas that can take `req` without breaking an SLO, in best-fit order: what a placement
 * policy hands the store as candidates (the store then takes the first with room).
 */
export function rankBestFit(
  req: IncomingRequest,
  replicas: readonly ReplicaView[],
  options?: AladdinOptions,
): string[] {
  const opts = resolveAladdinOptions(options);
  const placed = asPlaced(req);
  return byCapacityNorm(replicas, opts)
    .filter(({ replica }) => checkPlacement(replica, placed, opts).ok)
    .map(({ replica }) => replica.id);
}
