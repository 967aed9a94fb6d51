import type { RequestDescriptor } from '@fairway/core';

/**
 * One request this dispatcher holds the client connection of, from admission to settlement. It is
 * created before the request is submitted, so a dispatch decided by any dispatcher — even one that
 * arrives over the bus before `submit` returns — finds it.
 */
export class Ticket {
  readonly id: string;
  readonly req: RequestDescriptor;
  readonly pool: string;
  /** Aborted when an agent evicts the request: the proxy closes the engine connection. */
  readonly evicted = new AbortController();
  /** Aborted when no replica of its pool has taken work for `noReplicaWaitMs` while it waits. */
  readonly unservable = new AbortController();
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
