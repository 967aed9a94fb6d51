import type { PlacementPolicy, ReplicaState } from '@fairway/policy';
import type { ReplicaCandidate } from '@fairway/store';
import type { ResolvedGatewayOptions } from './gateway-options.ts';
import type { OwnedRequests } from './owned-requests.ts';
import { toCandidate } from './replica-view.ts';

/** Room offered to a replica that takes everything routed to it (QLM without pulling). */
const UNLIMITED = 1e15;

/** A candidate's room less what its engine reports running beyond the store's reservations. */
function guarded(c: ReplicaCandidate, s: ReplicaState): ReplicaCandidate {
  const unseenSeqs = Math.max(0, s.running + s.waiting - s.reservedSeqs);
  const unseenTokens = Math.max(0, s.kvUsage * s.tokenCapacity - s.reservedTokens);
  return {
    id: c.id,
    tokenCapacity: Math.max(0, c.tokenCapacity - unseenTokens),
    seqCapacity: Math.max(0, c.seqCapacity - unseenSeqs),
  };
}

/**
 * Placement for one gateway: which replicas a dispatch offers the store, in the placement
 * policy's order and with the room each may take.
 */
export class Candidates {
  readonly #o: ResolvedGatewayOptions;
  readonly #placement: PlacementPolicy;
  readonly #owned: OwnedRequests;
  /** Until when (clock ms) candidates are bounded by what engines report, after a repair. */
  #guardUntil = Number.NEGATIVE_INFINITY;

  constructor(options: ResolvedGatewayOptions, owned: OwnedRequests) {
    this.#o = options;
    this.#placement = options.placement;
    this.#owned = owned;
  }

  /** Bounds candidates by what their engines report until clock ms `untilMs` (after a repair). */
  guardUntil(untilMs: number): void {
    this.#guardUntil = untilMs;
  }

  /**
   * Fresh replicas (of `allowed`, when given) in placement order, as store candidates. A policy
   * that decides the whole placement at once (`place`: Aladdin's Algorithm 1) is told how long the
   * request the store will pick has waited — the oldest this gateway holds queued in `pool`.
   */
  list(
    states: readonly ReplicaState[],
    allowed: ReadonlySet<string> | undefined,
    unlimited: boolean,
    pool?: string,
  ): ReplicaCandidate[] {
    const offered = allowed === undefined ? states : states.filter((x) => allowed.has(x.id));
    const out: ReplicaCandidate[] = [];
    const place = this.#placement.place;
    if (place !== undefined && !unlimited) {
      const ctx = { waitedMs: pool === undefined ? 0 : this.#owned.oldestQueuedWaitMs(pool, this.#o.clock) };
      for (const p of place.call(this.#placement, offered, ctx)) {
        if (p.replica.stale) continue;
        const c = this.#candidate(p.replica, false, false);
        out.push({
          id: c.id,
          tokenCapacity: Math.max(0, Math.min(c.tokenCapacity, p.tokenCapacity)),
          seqCapacity: Math.max(0, Math.min(c.seqCapacity, p.seqCapacity)),
        });
      }
      return out;
    }
    for (const s of this.#placement.order(offered)) if (!s.stale) out.push(this.#candidate(s, unlimited));
    return out;
  }

  /** Marks stale, in a round's `states`, every replica the source says no longer takes work. */
  dropStale(states: ReplicaState[]): void {
    const source = this.#o.replicas;
    if (source.isAvailable === undefined) return;
    for (const [i, s] of states.entries())
      if (!s.stale && !source.isAvailable(s.id)) states[i] = { ...s, stale: true };
  }

  /**
   * The store's view of a candidate, bounded by the placement policy's capacity if it has one.
   * After a repair (for one lease, the time every other dispatcher needs to notice the loss and
   * put back what it holds) its room is also reduced by what its engine last reported beyond the
   * store's reservations — sequences running or waiting, KV tokens in use — so work not yet put
   * back is not placed over: an engine is overcommitted at most until its next heartbeat.
   */
  #candidate(s: ReplicaState, unlimited: boolean, bounded = true): ReplicaCandidate {
    const c = this.#o.clock.now() < this.#guardUntil ? guarded(toCandidate(s), s) : toCandidate(s);
    if (unlimited && !s.stale) return { id: c.id, tokenCapacity: UNLIMITED, seqCapacity: UNLIMITED };
    const bound = bounded ? this.#placement.capacity?.(s) : undefined;
    if (bound === undefined) return c;
    return {
      id: c.id,
      tokenCapacity: Math.max(0, Math.min(c.tokenCapacity, bound.tokenCapacity)),
      seqCapacity: Math.max(0, Math.min(c.seqCapacity, bound.seqCapacity)),
    };
  }
}
