import type { RequestDescriptor } from '@fairway/core';
import type { ReplicaState } from '@fairway/policy';
import type { DispatchInput, DispatchResult, QueuedRequest, ReplicaCandidate } from '@fairway/store';
import type { Candidates, Offered } from './candidates.ts';
import type { Charging } from './charging.ts';
import { DrainRate } from './drain-rate.ts';
import type { Dispatched, ResolvedGatewayOptions } from './gateway-options.ts';
import type { OutputPredictions } from './output-prediction.ts';
import type { OwnedRequests } from './owned-requests.ts';
import { type PrefixAffinity, UNBOUNDED } from './prefix-affinity.ts';
import { QueueDeadlines } from './queue-deadline.ts';
import { decodeRequest } from './request-payload.ts';
import type { ReservationView } from './reservation-view.ts';

/** A dispatch the store made. */
export type StoreDispatch = Extract<DispatchResult, { kind: 'dispatched' }>;

/**
 * Dispatch for one gateway (DESIGN.md request path, step 4): work-conserving rounds that take
 * queued requests of a pool in the ordering policy's order onto replicas with room, in the
 * placement policy's order (split by the router's routes when there is one), and the hand-on of
 * each dispatched request to its owner and to `onDispatch`.
 */
export class DispatchRounds {
  readonly #o: ResolvedGatewayOptions;
  readonly #id: string;
  /** The SLO bands, most urgent first. */
  readonly bands: readonly number[];
  readonly #owned: OwnedRequests;
  readonly #view: ReservationView;
  readonly #candidates: Candidates;
  readonly #predictions: OutputPredictions;
  readonly #charging: Charging;
  readonly #affinity: PrefixAffinity;
  readonly #releaseOrphan: (id: string) => Promise<void>;
  readonly #pumping = new Set<string>();
  readonly #again = new Set<string>();
  /** Dispatch rate per pool, for `queue_full`'s Retry-After. */
  readonly drain = new DrainRate();
  /** Queue depths as the store last reported them, for deadline-aware admission. */
  readonly deadlines = new QueueDeadlines();
  /** Requests this gateway picked (any owner). */
  dispatched = 0;

  constructor(deps: {
    options: ResolvedGatewayOptions;
    bands: readonly number[];
    owned: OwnedRequests;
    view: ReservationView;
    candidates: Candidates;
    predictions: OutputPredictions;
    charging: Charging;
    affinity: PrefixAffinity;
    /** Releases a dispatched request of this gateway's that it no longer holds (`Recovery.releaseOrphanedPick`). */
    releaseOrphan: (id: string) => Promise<void>;
  }) {
    this.#o = deps.options;
    this.#id = deps.options.id;
    this.bands = deps.bands;
    this.#owned = deps.owned;
    this.#view = deps.view;
    this.#candidates = deps.candidates;
    this.#predictions = deps.predictions;
    this.#charging = deps.charging;
    this.#affinity = deps.affinity;
    this.#releaseOrphan = deps.releaseOrphan;
  }

  /**
   * A fused call's dispatch was blocked on the window it `offered`: when the view shows room for
   * the blocked request on a replica the window left out, a round offers those.
   */
  async afterBlocked(pool: string, offered: Offered | undefined, reserveTokens: number): Promise<void> {
    if (offered?.more !== true) return;
    const skip = new Set(offered.replicas.map((c) => c.id));
    if (this.#candidates.roomElsewhere(this.#view.states(pool), { pool, reserveTokens, skip }))
      await this.pump(pool);
  }

  /**
   * Where a request of `pool` reserving `reserveTokens`, waiting in the queue of `from`'s engine,
   * can run now: the first replica in placement order, other than `from`, whose engine queues
   * nothing and which the view shows with room for it (by the placement's own bounds), outside
   * `skip`; undefined if none.
   */
  moveTarget(
    pool: string,
    reserveTokens: number,
    from: string,
    skip?: ReadonlySet<string>,
  ): ReplicaCandidate | undefined {
    const states = this.#view.states(pool);
    this.#candidates.dropStale(states);
    return this.#candidates.firstWithRoom(
      states,
      { pool, reserveTokens },
      (s) => s.id !== from && !s.stale && s.waiting === 0 && skip?.has(s.id) !== true,
    );
  }

  /**
   * Dispatches queued requests of `pool` (every pool when omitted) while a replica has room.
   * Returns how many it dispatched. Concurrent calls for one pool coalesce into one loop.
   */
  async pump(pool?: string): Promise<number> {
    if (pool === undefined) {
      let n = 0;
      for (const p of this.#o.replicas.pools()) n += await this.pump(p);
      return n;
    }
    if (this.#pumping.has(pool)) {
      this.#again.add(pool);
      return 0;
    }
    this.#pumping.add(pool);
    let n = 0;
    try {
      do {
        this.#again.delete(pool);
        n += await this.#dispatchLoop(pool);
      } while (this.#again.has(pool));
    } finally {
      this.#pumping.delete(pool);
    }
    return n;
  }

  /**
   * The store's dispatch input for `pool` from `bands` onto `replicas`, with the prefix-affinity
   * bound from the pool's `states` — none under a router, whose routes decide which replicas a
   * band's requests may run on.
   */
  input(
    pool: string,
    bands: readonly number[],
    replicas: ReplicaCandidate[],
    states: readonly ReplicaState[],
  ): DispatchInput {
    const o = this.#o;
    // Where the pool has no prefix affinity, moved requests' replicas are honoured without a load
    // bound: the move chose the replica for its room.
    const affinityTokens =
      o.router === undefined
        ? (this.#affinity.bound(pool, states) ?? (o.moves ? UNBOUNDED : undefined))
        : undefined;
    return {
      pool,
      bands,
      ordering: o.ordering.mode,
      nowMs: o.clock.now(),
      picker: this.#id,
      replicas,
      fit: o.fit,
      ...(affinityTokens !== undefined ? { affinityTokens } : {}),
    };
  }

  /** Counts a dispatch from `pool` (stats and its drain rate). */
  countDispatch(pool: string): void {
    this.dispatched++;
    this.drain.dispatched(pool, this.#o.clock.now());
  }

  /**
   * A request was dispatched by this gateway (any owner): note its reservation in the view unless
   * the store's reply already did, price its prediction, and hand it on — to `started` if this
   * gateway owns it, and to `onDispatch`.
   */
  async handOn(res: StoreDispatch, note: boolean): Promise<void> {
    const own = this.#owned.get(res.req.id);
    if (own === undefined && res.req.owner === this.#id) {
      // Admitted by this gateway, which holds it no more: its admission's reply was lost (a Redis
      // that hung past the command timeout) and its client was told it failed, yet the store ran
      // the admission after all. Nobody waits for it: its dispatch is released, as a dead owner's is.
      await this.#releaseOrphan(res.req.id);
      return;
    }
    if (
      res.req.affinity?.id === res.replica &&
      !this.#inPool(res.req.pool, res.replica) &&
      (await this.#undo(res))
    )
      return;
    if (note) this.#view.add(res.replica, res.req.reserveTokens, 1);
    const req = own?.req ?? decodeRequest(res.req.payload, this.#id);
    const affinity = this.#affinity.dispatched(res.req, req, res.replica);
    const resumeFrom = own?.resumeFrom ?? 0;
    // A resumed request was already priced; its re-queue settled what it had been served.
    const repriced = resumeFrom > 0 ? undefined : await this.#repriceAtDispatch(res.req, req);
    const predicted = repriced?.predicted;
    const d: Dispatched = {
      id: res.req.id,
      req,
      ...(predicted !== undefined ? { predicted } : {}),
      ...(resumeFrom > 0 ? { resumeFrom } : {}),
      replica: res.replica,
      owner: res.req.owner,
      picker: this.#id,
      reserveTokens: res.req.reserveTokens,
      queued: res.req,
      ...(affinity !== undefined ? { affinity } : {}),
    };
    // Its owner may have learnt the placement from the store while this reply was on its way
    // (`locate`: the bus was down or the picker died): it runs already, on this replica.
    if (d.owner === this.#id && !(own?.state === 'running' && own.replica === d.replica))
      this.#charging.started(d);
    this.#o.onDispatch(d);
    if (repriced !== undefined && repriced.delta !== 0)
      await this.#o.store.charge([{ id: res.req.id, amount: repriced.delta }]);
  }

  /** Whether `replica` is a fresh replica of `pool` that takes work now. */
  #inPool(pool: string, replica: string): boolean {
    const source = this.#o.replicas;
    const info = source.replicas(pool).find((r) => r.id === replica);
    return info !== undefined && !info.stale && source.isAvailable?.(replica) !== false;
  }

  /**
   * The store placed a request by affinity on a replica that is no longer a fresh one of its pool
   * (it left after the request was admitted): the dispatch is undone — the request goes back to
   * the head of its queue, without its affinity and its charge — and dispatched again. False
   * when the store cannot re-queue it (it is then handed on where it was placed, and its engine
   * call fails over as any call to a gone replica does).
   */
  async #undo(res: StoreDispatch): Promise<boolean> {
    const store = this.#o.store;
    if (store.requeue === undefined) return false;
    const undone = await store.requeue({
      id: res.req.id,
      nowMs: this.#o.clock.now(),
      servedCost: 0,
      undispatch: true,
    });
    if (undone) await this.pump(res.req.pool);
    return undone;
  }

  async #dispatchLoop(pool: string): Promise<number> {
    const states = await this.#view.roundStates(pool);
    if (!states.some((s) => !s.stale)) return 0;
    const router = this.#o.router;
    if (router === undefined) return this.#dispatchRoute(pool, states, this.bands, undefined, false);
    let n = 0;
    // Routes change as replicas fill (a replica's queue order depends on its state), so re-ask
    // after every round that dispatched something.
    for (;;) {
      let round = 0;
      for (const route of router.routes(pool, states, this.bands))
        round += await this.#dispatchRoute(
          pool,
          states,
          route.bands,
          new Set(route.replicas),
          route.unlimited === true,
        );
      n += round;
      if (round === 0) return n;
    }
  }

  /** Dispatches from `bands` onto the `allowed` replicas (every fresh one when undefined) until blocked. */
  async #dispatchRoute(
    pool: string,
    states: ReplicaState[],
    bands: readonly number[],
    allowed: ReadonlySet<string> | undefined,
    unlimited: boolean,
  ): Promise<number> {
    let n = 0;
    // The request the last dispatch was blocked on, and the replicas tried for it: while the
    // view shows room for it elsewhere, the next dispatch offers the replicas not tried yet.
    let blocked: { id: string; reserveTokens: number; tried: Set<string> } | undefined;
    for (;;) {
      // A replica may have failed or gone stale since the round read the view (its retry may be
      // the very request this round picks next): place only where the source still offers room.
      this.#candidates.dropStale(states);
      const offer = { allowed, unlimited, pool, reserveTokens: blocked?.reserveTokens, skip: blocked?.tried };
      const offered = this.#candidates.list(states, offer);
      const candidates = offered.replicas;
      if (candidates.length === 0 || bands.length === 0) return n;
      const res = await this.#o.store.dispatch(this.input(pool, bands, candidates, states));
      if (res.kind === 'empty' && bands.length === this.bands.length)
        this.deadlines.poolQueued(pool, 0, this.#o.clock.now());
      if (res.kind === 'blocked') {
        if (!offered.more) return n;
        const tried = blocked?.id === res.id ? blocked.tried : new Set<string>();
        for (const c of candidates) tried.add(c.id);
        blocked = { id: res.id, reserveTokens: res.reserveTokens, tried };
        if (
          !this.#candidates.roomElsewhere(states, { ...offer, reserveTokens: res.reserveTokens, skip: tried })
        )
          return n;
        continue;
      }
      blocked = undefined;
      if (res.kind !== 'dispatched') return n;
      n++;
      this.countDispatch(pool);
      const i = states.findIndex((s) => s.id === res.replica);
      const s = states[i];
      if (s)
        states[i] = {
          ...s,
          reservedTokens: s.reservedTokens + res.req.reserveTokens,
          reservedSeqs: s.reservedSeqs + 1,
        };
      await this.handOn(res, true);
    }
  }

  /**
   * VTC(predict) predicts a request's output when it is selected (VTC Algorithm 3, line 25), but the
   * queue priced it at admission, and a request may wait minutes while its flow's history changes
   * (at the start no flow has any). When the policy's dispatch price depends on the prediction,
   * the difference to the price under the flow's prediction now is charged (after the request is
   * on its way); returns that prediction and the difference.
   */
  async #repriceAtDispatch(
    q: QueuedRequest,
    req: RequestDescriptor,
  ): Promise<{ predicted: number | undefined; delta: number } | undefined> {
    if (!this.#predictions.pricesPrediction(req)) return undefined;
    const fresh = await this.#predictions.predictedOutput(q.flow);
    return { predicted: fresh, delta: this.#o.ordering.dispatchCost(req, fresh) - q.dispatchCost };
  }
}
