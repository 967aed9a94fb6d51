import type { Evict } from '@fairway/bus';

/** A recent event the console lists: an admission refusal or an eviction. */
export type ActivityEvent =
  | { readonly kind: 'throttle'; readonly at: number; readonly tenant: string; readonly reason: string }
  | {
      readonly kind: 'eviction';
      readonly at: number;
      readonly replica: string;
      readonly requests: number;
      readonly reason: string | undefined;
    };

/**
 * What this dispatcher served and refused lately, for the live console: cumulative service per
 * tenant (cost units, so the console can plot each tenant's share over time from two readings)
 * and the last {@link ActivityLog.capacity} throttles and evictions. Kept in memory, bounded.
 */
export class ActivityLog {
  /** Events kept, newest last. @default 50 */
  readonly capacity: number;
  readonly #service = new Map<string, number>();
  readonly #events: ActivityEvent[] = [];

  constructor(capacity = 50) {
    this.capacity = capacity;
  }

  /** Adds `cost` units of service delivered to `tenant`. */
  served(tenant: string, cost: number): void {
    this.#service.set(tenant, (this.#service.get(tenant) ?? 0) + cost);
  }

  /** A request of `tenant` refused at admission for `reason` (store code) at `at` (ms). */
  throttled(tenant: string, reason: string, at: number): void {
    this.#push({ kind: 'throttle', at, tenant, reason });
  }

  /** An eviction the control plane published (any dispatcher's requests). */
  evicted(e: Evict): void {
    this.#push({
      kind: 'eviction',
      at: e.at,
      replica: e.replicaId,
      requests: e.requestIds.length,
      reason: e.reason,
    });
  }

  /** Cumulative service per tenant since this dispatcher started. */
  service(): Record<string, number> {
    return Object.fromEntries(this.#service);
  }

  /** The recent events, newest first. */
  recent(): ActivityEvent[] {
    return [...this.#events].reverse();
  }

  #push(e: ActivityEvent): void {
    this.#events.push(e);
    if (this.#events.length > this.capacity) this.#events.shift();
  }
}
