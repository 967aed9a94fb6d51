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

/** What a dispatch is about to place, for {@link Candidates.list}. */
export interface Offer {
  /** Only these replicas (a route's), when given. */
  readonly allowed?: ReadonlySet<string> | undefined;
  /** Offer unlimited room (a route that takes everything routed to it). @default false */
  readonly unlimited?: boolean;
  /** The pool, for a policy that places by the wait of the request to be picked. */
  readonly pool?: string | undefined;
  /**
   * KV tokens the request to be picked reserves, when the caller knows it (the request a dispatch
   * was just blocked on; an arrival is not necessarily the pick: others may be queued before it).
   * @default 1: any room at all
   */
  readonly reserveTokens?: number | undefined;
  /** Replicas the store just found without room for that request: offered only if no other is. */
  readonly skip?: ReadonlySet<string> | undefined;
}

/** The candidates a dispatch offers the store, and whether placement order had more. */
export interface Offered {
  readonly replicas: ReplicaCandidate[];
  /** Fresh replicas were left out by the `maxCandidates` window. */
  readonly more: boolean;
}

/** Whether the view gives candidate `c` (state `s`) room for `reserve` more tokens and a sequence. */
function roomFor(c: ReplicaCandidate, s: ReplicaState, reserve: number): boolean {
  return s.reservedTokens + reserve <= c.tokenCapacity && s.reservedSeqs + 1 <= c.seqCapacity;
}

/**
 * Placement for one gateway: which replicas a dispatch offers the store, in the placement
 * policy's order and with the room each may take.
 *
 * The store reads every replica it is offered, so a dispatch offers at most `maxCandidates` of
 * them whatever the pool's size: first, in placement order, those this gateway's view shows with
 * room for the request; then, if fewer than the window do, the next ones in placement order (the
 * view may predate another dispatcher's settlement: the store's exact check decides). A dispatch
 * blocked while the view still shows room elsewhere is tried again with the window moved there
 * ({@link Candidates.roomElsewhere}), so dispatch stays work-conserving.
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
   * Fresh replicas (of `offer.allowed`, when given) in placement order, as store candidates, at
   * most `maxCandidates` of them (see the class). A policy that decides the whole placement at
   * once (`place`: Aladdin's Algorithm 1) is told how long the request the store will pick has
   * waited — the oldest this gateway holds queued in the pool.
   */
  list(states: readonly ReplicaState[], offer: Offer = {}): Offered {
    const { allowed, pool } = offer;
    const unlimited = offer.unlimited === true;
    const offered = allowed === undefined ? states : states.filter((x) => allowed.has(x.id));
    const all: ReplicaCandidate[] = [];
    const of: ReplicaState[] = [];
    const place = this.#placement.place;
    if (place !== undefined && !unlimited) {
      const ctx = { waitedMs: pool === undefined ? 0 : this.#owned.oldestQueuedWaitMs(pool, this.#o.clock) };
      for (const p of place.call(this.#placement, offered, ctx)) {
        if (p.replica.stale) continue;
        const c = this.#candidate(p.replica, false, false);
        // Room checked against the replica's future KV demand may pass its capacity; the repair
        // guard still takes off what the engine reports beyond the store's reservations.
        const tokenCapacity =
          p.timeIndexedKv === true
            ? p.tokenCapacity - (toCandidate(p.replica).tokenCapacity - c.tokenCapacity)
            : Math.min(c.tokenCapacity, p.tokenCapacity);
        all.push({
          id: c.id,
          tokenCapacity: Math.max(0, tokenCapacity),
          seqCapacity: Math.max(0, Math.min(c.seqCapacity, p.seqCapacity)),
        });
        of.push(p.replica);
      }
    } else {
      for (const s of this.#placement.order(offered))
        if (!s.stale) {
          all.push(this.#candidate(s, unlimited));
          of.push(s);
        }
    }
    return this.#window(all, of, offer);
  }

  /**
   * Whether the view shows room for `offer.reserveTokens` on a fresh replica (of `offer.allowed`)
   * outside `offer.skip`: a dispatch blocked on the replicas it offered can then place elsewhere.
   */
  roomElsewhere(states: readonly ReplicaState[], offer: Offer): boolean {
    const byId = new Map(states.map((s) => [s.id, s]));
    const reserve = offer.reserveTokens ?? 1;
    const first = this.list(states, offer).replicas[0];
    const s = first === undefined ? undefined : byId.get(first.id);
    return (
      first !== undefined &&
      s !== undefined &&
      offer.skip?.has(first.id) !== true &&
      roomFor(first, s, reserve)
    );
  }

  /**
   * The first replica in placement order (of `offer.allowed`) that `eligible` accepts and the view
   * shows with room for `offer.reserveTokens`, as the store's candidate; undefined if none.
   */
  firstWithRoom(
    states: readonly ReplicaState[],
    offer: Offer,
    eligible: (s: ReplicaState) => boolean,
  ): ReplicaCandidate | undefined {
    const byId = new Map(states.map((s) => [s.id, s]));
    const reserve = offer.reserveTokens ?? 1;
    for (const c of this.list(states, offer).replicas) {
      const s = byId.get(c.id);
      if (s !== undefined && eligible(s) && roomFor(c, s, reserve)) return c;
    }
    return undefined;
  }

  /**
   * The first `maxCandidates` of `all` (states in `of`): those with room for the offer's request
   * first, then those without, then those it skips.
   */
  #window(all: ReplicaCandidate[], of: ReplicaState[], offer: Offer): Offered {
    const k = this.#o.maxCandidates;
    if (all.length <= k || this.#o.fit === 'best') return { replicas: all, more: false };
    const reserve = offer.reserveTokens ?? 1;
    const skip = offer.skip;
    const out: ReplicaCandidate[] = [];
    const rest: ReplicaCandidate[] = [];
    const skipped: ReplicaCandidate[] = [];
    for (const [i, c] of all.entries()) {
      if (out.length === k) break;
      if (skip?.has(c.id) === true) {
        if (skipped.length < k) skipped.push(c);
      } else if (roomFor(c, of[i] as ReplicaState, reserve)) out.push(c);
      else if (rest.length < k) rest.push(c);
    }
    for (const c of [...rest, ...skipped]) {
      if (out.length === k) break;
      out.push(c);
    }
    return { replicas: out, more: true };
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
