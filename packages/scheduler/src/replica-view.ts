import type { ReplicaState, SequenceProgress } from '@fairway/policy';
import type { ReplicaCandidate } from '@fairway/store';

/**
 * What a gateway knows about one replica from outside the store: its size and the load its engine
 * last reported (vLLM `/metrics` through the node agent, or the simulated engine directly).
 */
export interface ReplicaInfo {
  readonly id: string;
  /** Pool (model) the replica serves. */
  readonly pool: string;
  /** KV-cache capacity, tokens. */
  readonly kvCapacityTokens: number;
  /** `max_num_seqs`. */
  readonly maxNumSeqs: number;
  readonly running: number;
  readonly waiting: number;
  /** 0–1. */
  readonly kvUsage: number;
  /** True when the last report is too old to trust; the replica then gets no new requests. */
  readonly stale: boolean;
  /** Progress of each sequence on it, when the source reports it (Aladdin's decode-SLO check). */
  readonly sequences?: readonly SequenceProgress[] | undefined;
  /** Time until its step in flight ends, ms, when the source knows it (Aladdin's TTFT check). */
  readonly stepRemainingMs?: number | undefined;
}

/** Where a gateway reads replicas from: a registry fed by heartbeats, or the simulator's cluster. */
export interface ReplicaSource {
  /** The replicas of `pool`, in any order. */
  replicas(pool: string): readonly ReplicaInfo[];
  /** Pools that have replicas. */
  pools(): readonly string[];
  /**
   * Whether a replica still takes work now — asked before each placement of a dispatch round, so
   * a replica that failed or went silent since the round read `replicas` gets nothing more. For
   * sources whose replicas can fail between reads (a live fleet); must be cheap. @default always
   */
  isAvailable?(replicaId: string): boolean;
  /**
   * Requests per second the pool's replicas finish lately (measured by the engines), for
   * deadline-aware admission; 0 or absent when unknown, and then no deadline is enforced.
   */
  finishRate?(pool: string): number;
}

/** How much of a replica the gateway keeps free of reservations. */
export interface Headroom {
  /** Fraction of KV capacity never reserved, 0–1 (covers vLLM's watermark and block rounding). */
  readonly tokenFraction: number;
  /** Sequence slots never reserved. */
  readonly seqs: number;
}

/** Token and sequence capacity the gateway may reserve on a replica. */
export function reservableCapacity(info: ReplicaInfo, headroom: Headroom): { tokens: number; seqs: number } {
  return {
    tokens: Math.max(0, Math.floor(info.kvCapacityTokens * (1 - headroom.tokenFraction))),
    seqs: Math.max(0, info.maxNumSeqs - headroom.seqs),
  };
}

/** Combines a replica's report with the store's reservations into what placement sees. */
export function replicaState(
  info: ReplicaInfo,
  reserved: { readonly tokens: number; readonly seqs: number },
  headroom: Headroom,
): ReplicaState {
  const cap = reservableCapacity(info, headroom);
  return {
    id: info.id,
    tokenCapacity: cap.tokens,
    seqCapacity: cap.seqs,
    reservedTokens: reserved.tokens,
    reservedSeqs: reserved.seqs,
    running: info.running,
    waiting: info.waiting,
    kvUsage: info.kvUsage,
    stale: info.stale,
    ...(info.sequences !== undefined ? { sequences: info.sequences } : {}),
    ...(info.stepRemainingMs !== undefined ? { stepRemainingMs: info.stepRemainingMs } : {}),
  };
}

/** The store's view of a candidate; a stale replica is offered no room at all. */
export function toCandidate(state: ReplicaState): ReplicaCandidate {
  return state.stale
    ? { id: state.id, tokenCapacity: 0, seqCapacity: 0 }
    : { id: state.id, tokenCapacity: state.tokenCapacity, seqCapacity: state.seqCapacity };
}
