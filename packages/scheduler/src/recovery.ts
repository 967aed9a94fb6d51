import type { RestoredRequest } from '@fairway/store';
import type { Candidates } from './candidates.ts';
import type { DispatchRounds } from './dispatch.ts';
import type { ResolvedGatewayOptions } from './gateway-options.ts';
import type { Owned, OwnedRequests } from './owned-requests.ts';
import type { ReservationView } from './reservation-view.ts';
import type { Settlement } from './settlement.ts';
import type { AdmissionLog } from './state-recovery.ts';

/**
 * What keeps one gateway's hold on the store right through failures (DESIGN.md principle 5): its
 * lease renewed on every heartbeat, requests whose admission reply was lost removed, settlements
 * the store did not answer sent again, and — when the store lost its state (`recoveringStore` in
 * `state-recovery.ts` notices) — everything this gateway holds put back.
 */
export class Recovery {
  readonly #o: ResolvedGatewayOptions;
  readonly #id: string;
  readonly #owned: OwnedRequests;
  readonly #log: AdmissionLog;
  readonly #view: ReservationView;
  readonly #candidates: Candidates;
  readonly #dispatch: DispatchRounds;
  readonly #settlement: Settlement;
  /** Requests whose admission reply was lost: the store may hold them; see {@link Recovery.heartbeat}. */
  readonly #orphans = new Set<string>();
  /** Times this gateway found the store's state lost and put back what it holds. */
  repairs = 0;
  /** Requests put back by those repairs (queued and running). */
  restored = 0;

  constructor(deps: {
    options: ResolvedGatewayOptions;
    owned: OwnedRequests;
    log: AdmissionLog;
    view: ReservationView;
    candidates: Candidates;
    dispatch: DispatchRounds;
    settlement: Settlement;
  }) {
    this.#o = deps.options;
    this.#id = deps.options.id;
    this.#owned = deps.owned;
    this.#log = deps.log;
    this.#view = deps.view;
    this.#candidates = deps.candidates;
    this.#dispatch = deps.dispatch;
    this.#settlement = deps.settlement;
  }

  /**
   * Renews this gateway's lease on everything it holds in the store, retries removing what a
   * lost admission reply may have left there (see `forget`) and settling what a lost settlement
   * left running there (its reservation would otherwise hold its replica's room).
   */
  async heartbeat(): Promise<void> {
    const store = this.#o.store;
    await store.renewOwner(this.#id, this.#o.clock.now(), this.#o.leaseMs);
    for (const id of [...this.#orphans]) await this.#removeOrphan(id);
    await this.#settlement.retryUnsettled();
  }

  /**
   * A request this gateway dispatched for another owner that is gone (its assignment found no
   * subscriber: the owner died and nobody holds the client connection): its reservation is
   * released and it leaves the queue now, rather than when the owner's lease ends — the room it
   * held goes to live requests at once. Retried on every heartbeat until the store answers.
   */
  async releaseOrphanedPick(id: string): Promise<void> {
    if (this.#owned.has(id)) return;
    this.#orphans.add(id);
    await this.#removeOrphan(id);
  }

  /**
   * Requests this gateway holds queued that the store has no record of any more — released by a
   * picker that took this gateway for dead (its assignment found no subscriber for
   * `assignGraceMs` while this gateway was reconnecting to the bus) — go back to the end of their
   * flows' queues with their arrival times, as a repair puts them back. Their window entries were
   * never removed, so none is added; each is charged when it is dispatched again. Requests the
   * store knows meanwhile are skipped. Returns how many went back.
   */
  async putBackLost(ids: readonly string[]): Promise<number> {
    const o = this.#o;
    if (o.store.restore === undefined) return 0;
    const requests: RestoredRequest[] = [];
    for (const id of ids) {
      const own = this.#owned.get(id);
      if (own?.admitted && own.state === 'queued') requests.push(this.#restored(own));
    }
    if (requests.length === 0) return 0;
    const r = await o.store.restore({ nowMs: o.clock.now(), lift: o.ordering.lift, windows: [], requests });
    await this.#dispatch.pump();
    return r.restored;
  }

  /**
   * An admission call failed without an answer (the connection dropped, or timed out, after the
   * store may have run it): the request may be queued, or even dispatched, under this gateway's
   * lease, which it keeps renewing. The client was told the request failed, so nothing may stay
   * held for it: remove it now, and on every heartbeat until the store answers.
   */
  forget(id: string): void {
    this.#orphans.add(id);
    this.#removeOrphan(id).catch(() => undefined);
  }

  /**
   * The store's state was lost (a Redis restart without persistence): put back what this gateway
   * holds, as `recoveringStore` calls it once the epoch is re-established. Window entries it
   * admitted within their windows go back at their admission time and amount; running requests
   * are reserved again on their replicas (charged their dispatch cost in the new counters, so each
   * is charged its final cost once in all: the counters it was charged in before are gone);
   * queued ones go back in the order this gateway admitted them, with their arrival time and flow.
   * For a while after, candidates are also bounded by what the engines report running (see
   * `Candidates`), so work other dispatchers have not put back yet is not placed over.
   */
  async repair(): Promise<void> {
    const o = this.#o;
    const store = o.store;
    if (store.restore === undefined) return;
    const nowMs = o.clock.now();
    const requests: RestoredRequest[] = [];
    for (const own of this.#owned.values()) {
      if (!own.admitted) continue;
      const running = own.state === 'running' && own.replica !== undefined && own.replica !== 'unknown';
      if (own.state === 'running' && !running) continue;
      requests.push(this.#restored(own));
    }
    // Everything the store may rightly list under this gateway; anything else there is a
    // settlement or cancellation the store lost (an AOF crash) and would hold its replica's room.
    const holds = [...this.#owned.keys(), ...this.#settlement.pending()];
    const r = await store.restore({
      nowMs,
      lift: o.ordering.lift,
      windows: this.#log.entries(nowMs),
      requests,
      owner: { id: this.#id, holds },
    });
    this.repairs++;
    this.restored += r.restored;
    this.#view.clear();
    for (const req of requests)
      if (req.replica !== undefined) this.#view.add(req.replica, req.req.reserveTokens + (req.grown ?? 0), 1);
    this.#candidates.guardUntil(nowMs + o.leaseMs);
    // Outside the repair: the dispatch round's store calls wait for the repair to end.
    setTimeout(() => {
      this.#dispatch.pump().catch(() => undefined);
    }, 0);
  }

  /** What `restore` puts back of an owned request: its queue record, its run if it runs, its windows. */
  #restored(own: Owned): RestoredRequest {
    const runs = own.state === 'running' && own.replica !== undefined;
    return {
      req: { ...own.record, dispatchCost: own.queuedCost },
      ...(runs ? { replica: own.replica, grown: own.grown } : {}),
      windows: this.#log.windowsOf(own.req.id),
    };
  }

  /**
   * Cancels an orphan if it is queued; if it was dispatched, puts it back with its charge refunded
   * (nothing was served) and cancels it. Done once the store says it holds neither; a pick by
   * another gateway between the two calls leaves it for the next heartbeat.
   */
  async #removeOrphan(id: string): Promise<void> {
    const store = this.#o.store;
    const nowMs = this.#o.clock.now();
    if (await store.cancel(id, nowMs)) {
      this.#orphans.delete(id);
      return;
    }
    const requeued = store.requeue !== undefined && (await store.requeue({ id, nowMs, servedCost: 0 }));
    if (!requeued || (await store.cancel(id, this.#o.clock.now()))) this.#orphans.delete(id);
  }
}
