import type { Clock } from '@fairway/core';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';

/** Options of {@link SuspectReplicas}. */
export interface SuspectReplicasOptions {
  /** The fleet from the registry. */
  readonly inner: ReplicaSource;
  /** Monotonic ms clock. */
  readonly clock: Clock;
  /** How long a failing replica is held out before a health probe may bring it back, ms. */
  readonly holdMs: number;
  /** The registration epoch of a replica now; undefined once it left the registry. */
  readonly epochOf: (replicaId: string) => string | undefined;
  /** Asks the replica's engine directly whether it answers (`GET /health`). */
  readonly probe: (replicaId: string) => Promise<boolean>;
}

interface Suspicion {
  /** The registration epoch the failure was seen on: a re-registered (restarted) replica is not suspect. */
  readonly epoch: string;
  /** Clock ms before which no probe may clear it. */
  readonly holdUntil: number;
}

/**
 * The fleet as placement sees it, minus the replicas whose engine failed a call: a replica that
 * refused, reset or answered 5xx (seen here, or reported by another dispatcher over the bus) is
 * reported stale — offered no new work, and never counted as empty room — until it shows it is
 * back: its agent registers a new epoch (a restarted replica), or, once `holdMs` has passed, a
 * direct probe of its engine's `/health` succeeds. A replica whose heartbeats stop is dropped by
 * the registry itself. With every replica suspect, none takes work: clients get a 503 at once
 * instead of waiting for a dead engine.
 */
export class SuspectReplicas implements ReplicaSource {
  readonly #o: SuspectReplicasOptions;
  readonly #suspects = new Map<string, Suspicion>();
  readonly #probing = new Set<string>();

  constructor(options: SuspectReplicasOptions) {
    this.#o = options;
  }

  /**
   * Holds `replicaId` out of placement (its current epoch, or `epoch` when a report names one) for
   * at least `holdMs` (@default the `holdMs` option), then until a probe succeeds. A replica held
   * out already keeps the later of its hold and this one.
   * Returns false when there is nothing to suspend: the replica left, or the report is about an
   * epoch it no longer runs.
   */
  mark(replicaId: string, epoch?: string, holdMs: number = this.#o.holdMs): boolean {
    const current = this.#o.epochOf(replicaId);
    if (current === undefined || (epoch !== undefined && epoch !== current)) return false;
    const held = this.#suspects.get(replicaId);
    const until = this.#o.clock.now() + holdMs;
    this.#suspects.set(replicaId, {
      epoch: current,
      holdUntil: held?.epoch === current ? Math.max(held.holdUntil, until) : until,
    });
    return true;
  }

  /** Whether `replicaId` is held out now. */
  isSuspect(replicaId: string): boolean {
    const s = this.#suspects.get(replicaId);
    if (s === undefined) return false;
    if (this.#o.epochOf(replicaId) === s.epoch) return true;
    this.#suspects.delete(replicaId);
    return false;
  }

  /** Replica ids held out now. */
  suspects(): string[] {
    return [...this.#suspects.keys()].filter((id) => this.isSuspect(id));
  }

  /**
   * Probes every suspect whose hold has passed (one probe per replica at a time) and clears those
   * whose engine answers. Resolves with the ids cleared.
   */
  async probe(): Promise<string[]> {
    const now = this.#o.clock.now();
    const due = this.suspects().filter(
      (id) => !this.#probing.has(id) && (this.#suspects.get(id)?.holdUntil ?? 0) <= now,
    );
    const cleared: string[] = [];
    await Promise.all(
      due.map(async (id) => {
        this.#probing.add(id);
        try {
          const s = this.#suspects.get(id);
          if ((await this.#o.probe(id).catch(() => false)) && this.#suspects.get(id) === s) {
            this.#suspects.delete(id);
            cleared.push(id);
          }
        } finally {
          this.#probing.delete(id);
        }
      }),
    );
    return cleared;
  }

  /** The pool's replicas, suspects reported stale. */
  replicas(pool: string): readonly ReplicaInfo[] {
    const all = this.#o.inner.replicas(pool);
    if (this.#suspects.size === 0) return all;
    return all.map((r) => (!r.stale && this.isSuspect(r.id) ? { ...r, stale: true } : r));
  }

  pools(): readonly string[] {
    return this.#o.inner.pools();
  }

  finishRate(pool: string): number {
    return this.#o.inner.finishRate?.(pool) ?? 0;
  }

  /** Whether a replica takes work now: not suspect, and available in the inner source. */
  isAvailable(replicaId: string): boolean {
    return !this.isSuspect(replicaId) && (this.#o.inner.isAvailable?.(replicaId) ?? true);
  }
}
