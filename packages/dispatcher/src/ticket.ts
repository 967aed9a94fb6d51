import type { RequestDescriptor } from '@fairway/core';
import { EngineTimeoutError } from '@fairway/engine';
import type { AffinityOutcome } from '@fairway/scheduler';
import type { ReplicaCandidate } from '@fairway/store';
import { StopSignal } from './stop-signal.ts';

/**
 * The engine failure an engine call was stopped for ({@link Ticket.failOver}: its engine stopped
 * answering); undefined for a call that was not stopped, or was stopped for any other reason
 * (the client left, an eviction, a move).
 */
export function engineHungOf(signal: StopSignal): EngineTimeoutError | undefined {
  return signal.aborted && signal.reason instanceof EngineTimeoutError ? signal.reason : undefined;
}

/**
 * How an engine call that ended early ended: `stopped` when its signal stopped it for a reason
 * other than its engine's ({@link engineHungOf}), and the error that stands for the call — the
 * engine's failure it was stopped for, else what the call failed with.
 */
export function callEnding(failed: unknown, signal: StopSignal): { err: unknown; stopped: boolean } {
  const hung = engineHungOf(signal);
  return { err: hung ?? failed, stopped: signal.aborted && hung === undefined };
}

/** How waiting for a dispatch ends, as the ticket reports it to the one waiter it has. */
export type TicketWake = 'dispatched' | 'no_replica';

/**
 * One request this dispatcher holds the client connection of, from admission to settlement: what
 * the runtime and the bus know of it. It is created before the request is submitted, so a dispatch
 * decided by any dispatcher — even one that arrives over the bus before `submit` returns — finds
 * it; once admitted, its `RequestLifecycle` (request-lifecycle.ts) owns it.
 */
export class Ticket {
  readonly id: string;
  readonly req: RequestDescriptor;
  readonly pool: string;
  /**
   * Set when the request was evicted from its replica (its engine call is aborted, see
   * {@link Ticket.startCall}); cleared when it is queued again.
   */
  evicted = false;
  /** Set when no replica of its pool has taken work for `noReplicaWaitMs` while it waited. */
  unservable = false;
  /** Set once the client's response has opened: from then on the request cannot move. */
  answered = false;
  /**
   * The replica the request is moving to, from an engine queue it waited in (see
   * {@link Ticket.move}), until its lifecycle re-queues it; then cleared.
   */
  moveTo: ReplicaCandidate | undefined;
  /** How many times it was moved. */
  moves = 0;
  /**
   * Set while it is being put back in the queue (from {@link Ticket.requeued} until the store
   * answers): a look-up of its placement made meanwhile may predate the put-back.
   */
  puttingBack = false;
  /** How many times it was put back in the queue. */
  putBacks = 0;
  /**
   * Told when the request is dispatched or found unservable, while someone waits for that
   * (`GatewayRuntime.submit` until its admission is answered, then `waitForDispatch`): a plain callback, not an event listener, so a dispatcher
   * holding thousands of queued requests keeps no listener per request on shared signals.
   */
  waiter: ((wake: TicketWake) => void) | undefined;
  /** The signal of the engine call under way (see {@link Ticket.startCall}). */
  #call: StopSignal | undefined;
  /** The promise {@link Ticket.dispatched} handed out for the current dispatch, if asked for. */
  #dispatched: Promise<string> | undefined;
  /** The replica, once dispatched. */
  replica: string | undefined;
  /** What prefix-cache affinity did for its current dispatch (requests with prefix keys). */
  affinity: AffinityOutcome | undefined;
  /** Monotonic ms at which `submit` returned; undefined while it runs. */
  submittedAt: number | undefined;
  /** Monotonic ms at which the request was dispatched. */
  dispatchedAt: number | undefined;
  #resolve: ((replica: string) => void) | undefined;

  constructor(req: RequestDescriptor, pool: string) {
    this.id = req.id;
    this.req = req;
    this.pool = pool;
  }

  /**
   * Resolves with the replica once the request is dispatched (never rejects); a new one after
   * `requeued`. Made when first asked for: most requests never need it.
   */
  get dispatched(): Promise<string> {
    if (this.#dispatched === undefined)
      this.#dispatched =
        this.replica !== undefined
          ? Promise.resolve(this.replica)
          : new Promise((resolve) => {
              this.#resolve = resolve;
            });
    return this.#dispatched;
  }

  /** Records the dispatch (first call wins), with what prefix-cache affinity did for it, if known. */
  markDispatched(replica: string, atMs: number, affinity?: AffinityOutcome): void {
    if (this.replica !== undefined) return;
    this.replica = replica;
    this.affinity = affinity;
    this.dispatchedAt = atMs;
    this.#resolve?.(replica);
    this.#resolve = undefined;
    this.waiter?.('dispatched');
  }

  /** No replica of its pool takes work: a wait for its dispatch ends with `no_replica`. */
  markUnservable(): void {
    this.unservable = true;
    this.waiter?.('no_replica');
  }

  /**
   * The signal of the next engine call: aborted when the request is evicted or by
   * {@link Ticket.stopCall} (the client left) — at once if `gone` already aborted or it was evicted.
   */
  startCall(gone: StopSignal): StopSignal {
    const call = new StopSignal();
    this.#call = call;
    if (gone.aborted) call.abort(gone.reason);
    else if (this.evicted) call.abort('evicted');
    return call;
  }

  /** Aborts the engine call under way, if any (the client left). */
  stopCall(reason: unknown): void {
    this.#call?.abort(reason);
  }

  /** The request was evicted from its replica (by its agent or the control plane): its engine call is aborted. */
  evict(reason: string): void {
    this.evicted = true;
    this.#call?.abort(reason);
  }

  /**
   * Moves the request, which waits in its engine's queue with nothing sent to the client, to the
   * replica `to`: its engine call is aborted and its lifecycle re-queues it there. False (nothing
   * done) once the client's response has opened or while a move is under way.
   */
  move(to: ReplicaCandidate): boolean {
    const call = this.#stoppableCall();
    if (call === undefined) return false;
    this.moveTo = to;
    this.moves++;
    call.abort('moved');
    return true;
  }

  /**
   * Its replica's engine stopped answering (`err`, phase `hung`) while the request has sent nothing
   * to its client: its engine call is aborted with `err` as the reason, and its lifecycle takes
   * that as the engine's failure (see {@link engineHungOf}). False (nothing done) once the client's
   * response has opened, or with no call under way.
   */
  failOver(err: EngineTimeoutError): boolean {
    const call = this.#stoppableCall();
    if (call === undefined) return false;
    call.abort(err);
    return true;
  }

  /** The engine call under way, while nothing reached the client and no move is under way. */
  #stoppableCall(): StopSignal | undefined {
    const call = this.#call;
    return this.answered || this.moveTo !== undefined || call === undefined || call.aborted
      ? undefined
      : call;
  }

  /**
   * The request is back in the queue (its engine failed before answering, or it was evicted to
   * resume elsewhere): it waits for a new dispatch.
   */
  requeued(): void {
    this.putBacks++;
    this.replica = undefined;
    this.affinity = undefined;
    this.dispatchedAt = undefined;
    this.evicted = false;
    this.#call = undefined;
    this.#dispatched = undefined;
    this.#resolve = undefined;
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
