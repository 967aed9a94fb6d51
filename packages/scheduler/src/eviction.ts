import type { ReplicaCandidate } from '@fairway/store';
import type { Charging } from './charging.ts';
import type { ResolvedGatewayOptions } from './gateway-options.ts';
import type { OwnedRequests } from './owned-requests.ts';
import type { ReservationView } from './reservation-view.ts';

/**
 * Eviction for one gateway: running requests it owns go back to the head of their flow's queue —
 * evicted with the output they have (QLM section 5), or as if never dispatched when their engine
 * failed before producing anything.
 */
export class Eviction {
  readonly #o: ResolvedGatewayOptions;
  readonly #owned: OwnedRequests;
  readonly #view: ReservationView;
  readonly #charging: Charging;
  /** Running requests this gateway evicted and re-queued (`evict`). */
  evicted = 0;

  constructor(deps: {
    options: ResolvedGatewayOptions;
    owned: OwnedRequests;
    view: ReservationView;
    charging: Charging;
  }) {
    this.#o = deps.options;
    this.#owned = deps.owned;
    this.#view = deps.view;
    this.#charging = deps.charging;
  }

  /**
   * Evicts a running request this gateway owns (QLM section 5, request eviction): stops charging
   * it, and puts it back at the head of its flow's queue in the store with the `generated` output
   * tokens it has so far, its flow charged exactly for what was served. It resumes from that
   * output when it is dispatched again (`Dispatched.resumeFrom`). The caller aborts it on the
   * engine and calls `pump` once it has evicted what it needs. Returns false if the request is
   * not running here or the store cannot re-queue.
   */
  async evict(id: string, generated: number): Promise<boolean> {
    const own = this.#owned.get(id);
    const store = this.#o.store;
    if (own === undefined || own.state !== 'running' || store.requeue === undefined) return false;
    const servedCost = this.#o.ordering.finalCost(own.req, {
      inputTokens: own.req.inputTokens,
      outputTokens: generated,
    });
    if (!(await store.requeue({ id, nowMs: this.#o.clock.now(), servedCost }))) return false;
    this.#charging.close(id);
    this.#view.release(own);
    own.state = 'queued';
    own.replica = undefined;
    own.resumeFrom = generated;
    this.#owned.running--;
    this.evicted++;
    return true;
  }

  /**
   * Puts a running request this gateway owns whose engine call failed before it produced
   * anything (connection refused or reset, engine 5xx) back at the head of its flow's queue, as
   * if it had never been dispatched: its reservation is released, its charge undone, and its next
   * dispatch charges (and prices its prediction) as the first did. The caller dispatches it again
   * with `pump`. With `moveTo` (a request taken out of its engine's queue) it is placed on that
   * replica when it has room (`RequeueInput.moveTo`). Returns false if the request is not running
   * here or the store cannot re-queue.
   */
  async requeueUnserved(id: string, moveTo?: ReplicaCandidate): Promise<boolean> {
    const own = this.#owned.get(id);
    const store = this.#o.store;
    if (own === undefined || own.state !== 'running' || store.requeue === undefined) return false;
    const replica = own.replica;
    // Queued before the store call: once it is back in the queue another gateway may dispatch it,
    // and that assignment can arrive before the store's reply.
    this.#charging.close(id);
    own.state = 'queued';
    own.replica = undefined;
    this.#owned.running--;
    let ok = false;
    try {
      ok = await store.requeue({
        id,
        nowMs: this.#o.clock.now(),
        servedCost: 0,
        dispatchCost: own.queuedCost,
        ...(moveTo === undefined ? {} : { moveTo }),
      });
    } finally {
      if (!ok && own.state === 'queued') {
        own.state = 'running';
        own.replica = replica;
        this.#owned.running++;
        this.#charging.open(own);
      }
    }
    if (ok && replica !== undefined) {
      this.#view.add(replica, -own.reserveTokens - own.grown, -1);
      own.grown = 0;
    }
    return ok;
  }
}
