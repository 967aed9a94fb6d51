import type { RequestDescriptor } from '@fairway/core';

/** How waiting for a dispatch ends, as the ticket reports it to the one waiter it has. */
export type TicketWake = 'dispatched' | 'no_replica';

/**
 * One request this dispatcher holds the client connection of, from admission to settlement. It is
 * created before the request is submitted, so a dispatch decided by any dispatcher — even one that
 * arrives over the bus before `submit` returns — finds it.
 */
export class Ticket {
  readonly id: string;
  readonly req: RequestDescriptor;
  readonly pool: string;
  /** Set when an agent evicted the request (its engine call is aborted, see {@link abortOnEvict}). */
  evicted = false;
  /** Set when no replica of its pool has taken work for `noReplicaWaitMs` while it waited. */
  unservable = false;
  /**
   * Told when the request is dispatched or found unservable, while someone waits for that
   * (`GatewayRuntime.waitForDispatch`): a plain callback, not an event listener, so a dispatcher
   * holding thousands of queued requests keeps no listener per request on shared signals.
   */
  waiter: ((wake: TicketWake) => void) | undefined;
  /** Aborted on eviction: the engine call's controller. */
  #onEvict: AbortController | undefined;
  /** Resolves with the replica once the request is dispatched (never rejects); renewed by `requeued`. */
  dispatched: Promise<string>;
  /** The replica, once dispatched. */
  replica: string | undefined;
  /** Monotonic ms at which `submit` returned; undefined while it runs. */
  submittedAt: number | undefined;
  /** Monotonic ms at which the request was dispatched. */
  dispatchedAt: number | undefined;
  #resolve: (replica: string) => void = () => undefined;

  constructor(req: RequestDescriptor, pool: string) {
    this.id = req.id;
    this.req = req;
    this.pool = pool;
    this.dispatched = this.#nextDispatch();
  }

  #nextDispatch(): Promise<string> {
    return new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  /** Records the dispatch (first call wins). */
  markDispatched(replica: string, atMs: number): void {
    if (this.replica !== undefined) return;
    this.replica = replica;
    this.dispatchedAt = atMs;
    this.#resolve(replica);
    this.waiter?.('dispatched');
  }

  /** No replica of its pool takes work: a wait for its dispatch ends with `no_replica`. */
  markUnservable(): void {
    this.unservable = true;
    this.waiter?.('no_replica');
  }

  /** Aborts `engineCall` when the request is evicted (at once if it already was). */
  abortOnEvict(engineCall: AbortController): void {
    this.#onEvict = engineCall;
    if (this.evicted) engineCall.abort('evicted');
  }

  /** An agent evicted the request: its engine call is aborted. */
  evict(reason: string): void {
    this.evicted = true;
    this.#onEvict?.abort(reason);
  }

  /** The request is back in the queue (its engine failed before answering): it waits for a new dispatch. */
  requeued(): void {
    this.replica = undefined;
    this.dispatchedAt = undefined;
    this.dispatched = this.#nextDispatch();
  }

  /**
   * Time spent waiting for capacity, ms: zero when the request was dispatched while being
   * submitted (that time is the gateway's own overhead), else from admission to dispatch.
   */
  queueMs(): number {
    if (this.dispatchedAt === undefined || this.submittedAt === undefined) return 0;
    return Math.max(0, this.dispatchedAt - this.submittedAt);
  }
}
