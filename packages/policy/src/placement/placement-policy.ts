/**
 * Placement: which replica a dispatched request should run on. The gateway hands a policy the
 * replicas of a pool as it last saw them; the policy returns them in order of preference, and the
 * store reserves the request on the first (or best-fitting) one that has room. Policies are pure
 * apart from their own cursor or seeded RNG, so the simulator and the live dispatcher run the same code.
 */

/**
 * Progress of one sequence on a replica, when the replica reports it (the simulator does; a live
 * agent could from vLLM's per-request state): what Aladdin needs to keep every running request's
 * decode SLO when a new prefill would stall it (Aladdin section 4.2, constraint d).
 */
export interface SequenceProgress {
  /** Prompt tokens (including output re-fed after a preemption or eviction). */
  readonly inputTokens: number;
  /** Output tokens generated so far on this replica. */
  readonly generated: number;
  /** Time since its first token, ms: the numerator of its average token generation time. */
  readonly decodeMs: number;
  /** Whether its prompt has been prefilled (a waiting sequence will be prefilled with the next). */
  readonly prefilled: boolean;
  /**
   * KV tokens the store holds reserved for it (prompt and reserved output, grown as its output
   * streams past it): the most context it will reach, so Aladdin can check a replica's future KV
   * demand (time-indexed constraint e) instead of the sum of its reservations. @default unknown
   */
  readonly reservedTokens?: number | undefined;
}

/** What placement knows about one replica: capacity, what the gateway reserved on it, engine load. */
export interface ReplicaState {
  readonly id: string;
  /** KV tokens the gateway may reserve on it in total (capacity minus headroom). */
  readonly tokenCapacity: number;
  /** Sequences it may run at once (`max_num_seqs` minus headroom). */
  readonly seqCapacity: number;
  /** Tokens reserved on it by all dispatchers (the store's count). */
  readonly reservedTokens: number;
  /** Requests reserved on it by all dispatchers. */
  readonly reservedSeqs: number;
  /** Sequences the engine reports running (`vllm:num_requests_running`). */
  readonly running: number;
  /** Sequences the engine reports waiting (`vllm:num_requests_waiting`). */
  readonly waiting: number;
  /** KV-cache usage the engine reports, 0–1 (`vllm:kv_cache_usage_perc`). */
  readonly kvUsage: number;
  /**
   * The last report is too old to trust. A stale replica counts as saturated — never as free —
   * so it is ordered after every fresh one and the gateway gives it no room.
   */
  readonly stale: boolean;
  /** Its sequences' progress, when the replica source reports it. @default unknown */
  readonly sequences?: readonly SequenceProgress[] | undefined;
  /**
   * Time until the engine's step in flight ends, ms, when the source knows it (the simulator
   * does): a prompt sent now is prefilled after it, which counts against its TTFT. @default 0
   */
  readonly stepRemainingMs?: number | undefined;
}

/** What a placement knows about the request the store will place next. */
export interface PlacementContext {
  /**
   * Time the request has waited since arrival, ms (counts against its TTFT, Aladdin constraint c).
   * The store picks the request in the same atomic step, so the gateway passes the wait of the
   * request it expects the pick to be: the oldest it holds queued in the pool. @default 0
   */
  readonly waitedMs?: number | undefined;
}

/** A replica offered to the store with the room the placement allows on it. */
export interface PlacementCandidate {
  readonly replica: ReplicaState;
  /** KV tokens the store may have reserved on it in total after the placement. */
  readonly tokenCapacity: number;
  /** Sequences the store may have reserved on it after the placement. */
  readonly seqCapacity: number;
  /**
   * The token room was checked against the replica's future KV demand — its sequences' progress
   * toward their reservations (Aladdin's time-indexed constraint e) — rather than the sum of its
   * reservations, so it may exceed the replica's capacity: sequences that finish before the others
   * grow free their room first. @default false
   */
  readonly timeIndexedKv?: boolean | undefined;
}

/** A placement policy: orders replicas, best first. */
export interface PlacementPolicy {
  readonly name: string;
  /**
   * Returns the replicas in order of preference. Must return every fresh replica (so dispatch is
   * work-conserving: the store takes the first with room) and put stale ones last.
   */
  order(replicas: readonly ReplicaState[]): readonly ReplicaState[];
  /**
   * The policy for one more dispatcher: stateful policies (a round-robin cursor, a seeded RNG)
   * give each dispatcher its own state; stateless ones return themselves.
   */
  forDispatcher(id: string): PlacementPolicy;
  /**
   * Optional: the room the store may fill on a replica, when the policy bounds it by more than KV
   * and sequence slots — Aladdin turns each replica's SLO constraints into a token and sequence
   * capacity from its performance model, so the store's fit does the bin packing. The gateway
   * offers the smaller of this and the replica's own capacity. Absent: the replica's capacity.
   */
  capacity?(replica: ReplicaState): { readonly tokenCapacity: number; readonly seqCapacity: number };
  /**
   * Optional: the whole placement decision at once — the fresh replicas in order of preference,
   * each with the room the store may fill on it for the request described by `ctx` (Aladdin's
   * Algorithm 1 needs every replica to waive constraint c on the one where a first token comes
   * soonest). When present the gateway uses it instead of `order` and `capacity`, still offering
   * no more than a replica's own capacity.
   */
  place?(replicas: readonly ReplicaState[], ctx: PlacementContext): readonly PlacementCandidate[];
}

/** Requests on a replica as far as anyone knows: the larger of the store's and the engine's count. */
export function queueLength(r: ReplicaState): number {
  return Math.max(r.reservedSeqs, r.running + r.waiting);
}

/** Fraction of a replica's KV the gateway has reserved or the engine reports used, whichever is larger. */
export function kvLoad(r: ReplicaState): number {
  const reserved = r.tokenCapacity > 0 ? r.reservedTokens / r.tokenCapacity : 1;
  return Math.max(reserved, r.kvUsage);
}

/** Deterministic tie-break on replica id (code-unit order). */
export function byId(a: ReplicaState, b: ReplicaState): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * Sorts fresh replicas by `key` — a tuple compared lexicographically, ascending, ties by id — and
 * appends the stale ones, by id.
 */
export function orderBy(
  replicas: readonly ReplicaState[],
  key: (r: ReplicaState) => readonly number[],
): readonly ReplicaState[] {
  const fresh: { r: ReplicaState; k: readonly number[] }[] = [];
  const stale: ReplicaState[] = [];
  for (const r of replicas) {
    if (r.stale) stale.push(r);
    else fresh.push({ r, k: key(r) });
  }
  fresh.sort((a, b) => compareKeys(a.k, b.k) || byId(a.r, b.r));
  stale.sort(byId);
  return [...fresh.map((f) => f.r), ...stale];
}

/** Lexicographic comparison of two load tuples. */
export function compareKeys(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < a.length; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
