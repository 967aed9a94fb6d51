import type { ReplicaState } from '../placement/placement-policy.ts';

/**
 * One dispatch attempt of a gateway round: the store picks from `bands`, in that order (the first
 * non-empty band decides), and reserves the pick on the first (or best-fitting) of `replicas`.
 */
export interface DispatchRoute {
  /** Candidate replica ids; the gateway keeps its placement order among them. */
  readonly replicas: readonly string[];
  /** Bands to take from, in the order the replicas' virtual queues put them. */
  readonly bands: readonly number[];
  /**
   * Offer the replicas unlimited room: QLM without request pulling, where every request assigned
   * to a replica goes to its engine queue at once and the engine's FCFS decides. @default false
   */
  readonly unlimited?: boolean;
}

/**
 * Decides how a gateway dispatches a pool: which bands each replica takes and in what order. The
 * gateway consults it on every dispatch round (arrival, completion, capacity change), so it must
 * be cheap; the heavy planning that sets it runs elsewhere, off the request path.
 */
export interface DispatchRouter {
  /**
   * Routes of one round, tried in order; a replica missing from every route takes nothing.
   * @param replicas the pool's replicas as the gateway sees them now
   * @param bands every band the gateway knows, in priority order
   */
  routes(pool: string, replicas: readonly ReplicaState[], bands: readonly number[]): readonly DispatchRoute[];
}

/** Options of {@link VirtualQueueRouter}. */
export interface VirtualQueueRouterOptions {
  /**
   * Replicas pull from the store only while they have room (QLM request pulling); `false` pushes
   * everything routed to a replica into its engine queue. @default true
   */
  readonly pull?: boolean;
  /**
   * A replica whose virtual queue runs dry takes the remaining bands too, in priority order, so no
   * replica idles while requests wait. Off when groups are pinned (QLM without load balancing).
   * @default true
   */
  readonly workConserving?: boolean;
}

/**
 * QLM's virtual queues (QLM section 4) executed through the shared store: the global scheduler
 * orders request groups on each replica's virtual queue; projected onto priority bands, a
 * replica's queue is the bands of its groups in the order they first appear, and the replica
 * pulls from the store in that band order whenever it has room (QLM section 5, request pulling).
 * Inside a band the store's ordering (fairness) picks the request. Replicas that are draining or
 * swapping models are held and take nothing. Pure state; the planner sets it.
 */
export class VirtualQueueRouter implements DispatchRouter {
  readonly #pull: boolean;
  readonly #workConserving: boolean;
  #queues = new Map<string, readonly number[]>();
  readonly #held = new Set<string>();

  constructor(options: VirtualQueueRouterOptions = {}) {
    this.#pull = options.pull ?? true;
    this.#workConserving = options.workConserving ?? true;
  }

  /** Sets the virtual queues in band terms: replica id → bands in the order its groups come. */
  setQueues(queues: Readonly<Record<string, readonly number[]>>): void {
    const next = new Map<string, readonly number[]>();
    for (const [replica, bands] of Object.entries(queues)) next.set(replica, dedupe(bands));
    this.#queues = next;
  }

  /** The band order of a replica, if the planner gave it one. */
  queueOf(replica: string): readonly number[] | undefined {
    return this.#queues.get(replica);
  }

  /** Holds a replica (draining for a model swap, swapping) or releases it. */
  hold(replica: string, held: boolean): void {
    if (held) this.#held.add(replica);
    else this.#held.delete(replica);
  }

  /** Whether a replica is held. */
  isHeld(replica: string): boolean {
    return this.#held.has(replica);
  }

  routes(
    _pool: string,
    replicas: readonly ReplicaState[],
    bands: readonly number[],
  ): readonly DispatchRoute[] {
    const known = new Set(bands);
    const byOrder = new Map<string, { bands: number[]; replicas: string[] }>();
    for (const r of replicas) {
      if (r.stale || this.#held.has(r.id)) continue;
      const planned = this.#queues.get(r.id);
      let order: number[];
      if (planned === undefined) order = [...bands];
      else {
        order = planned.filter((b) => known.has(b));
        if (this.#workConserving) for (const b of bands) if (!order.includes(b)) order.push(b);
      }
      if (order.length === 0) continue;
      const key = order.join(',');
      const route = byOrder.get(key);
      if (route) route.replicas.push(r.id);
      else byOrder.set(key, { bands: order, replicas: [r.id] });
    }
    return [...byOrder.values()].map((r) => ({
      replicas: r.replicas,
      bands: r.bands,
      ...(this.#pull ? {} : { unlimited: true }),
    }));
  }
}

function dedupe(bands: readonly number[]): number[] {
  const out: number[] = [];
  for (const b of bands) if (!out.includes(b)) out.push(b);
  return out;
}
