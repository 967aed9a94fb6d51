import type { Clock } from '@fairway/core';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';

/**
 * The fleet as placement sees it, minus replicas this dispatcher caught failing: a replica whose
 * engine refused, reset or answered 5xx before a request produced anything is reported stale —
 * offered no new work — for `suspectMs`, so the retry of that request (and the requests behind
 * it) go to other replicas. When every replica taking work is a suspect, none is skipped: work
 * is not held back for lack of a better place. Suspicion is local to this dispatcher and lapses by
 * itself: a replica that recovers takes work again once its time is up, and a dead one is dropped
 * by the registry when its heartbeats stop.
 */
export class SuspectReplicas implements ReplicaSource {
  readonly #inner: ReplicaSource;
  readonly #clock: Clock;
  readonly #suspectMs: number;
  /** Replica id → clock ms until which it is skipped. */
  readonly #until = new Map<string, number>();

  /**
   * @param clock monotonic ms clock
   * @param suspectMs how long a failing replica is skipped, ms
   */
  constructor(inner: ReplicaSource, clock: Clock, suspectMs: number) {
    this.#inner = inner;
    this.#clock = clock;
    this.#suspectMs = suspectMs;
  }

  /** Skips `replicaId` for the next `suspectMs`. */
  mark(replicaId: string): void {
    this.#until.set(replicaId, this.#clock.now() + this.#suspectMs);
  }

  /** Whether `replicaId` is skipped now. */
  isSuspect(replicaId: string): boolean {
    const until = this.#until.get(replicaId);
    if (until === undefined) return false;
    if (this.#clock.now() < until) return true;
    this.#until.delete(replicaId);
    return false;
  }

  /** The pool's replicas, suspects reported stale — unless every replica taking work is a suspect. */
  replicas(pool: string): readonly ReplicaInfo[] {
    const all = this.#inner.replicas(pool);
    if (this.#until.size === 0) return all;
    const now = this.#clock.now();
    for (const [id, until] of this.#until) if (now >= until) this.#until.delete(id);
    if (this.#until.size === 0) return all;
    let healthy = false;
    let suspects = false;
    for (const r of all) {
      if (r.stale) continue;
      if (this.isSuspect(r.id)) suspects = true;
      else healthy = true;
    }
    if (!suspects || !healthy) return all;
    return all.map((r) => (!r.stale && this.isSuspect(r.id) ? { ...r, stale: true } : r));
  }

  pools(): readonly string[] {
    return this.#inner.pools();
  }
}
