import type { ReplicaRegistry, ReplicaView } from '@fairway/bus';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';

function toInfo(v: ReplicaView): ReplicaInfo {
  return {
    id: v.id,
    pool: v.registration.pool,
    kvCapacityTokens: v.capacity.kvCapacityTokens,
    maxNumSeqs: v.capacity.maxNumSeqs,
    running: v.capacity.running,
    waiting: v.capacity.waiting,
    kvUsage: v.heartbeat?.kvUsage ?? 0,
    // Late heartbeats, draining and sleeping replicas all mean: place nothing new here.
    stale: !v.acceptsWork,
  };
}

/**
 * The fleet as the gateway scheduler sees it, read from the replica registry (registrations and
 * heartbeats from node agents over the bus). A replica that is not fresh and `ready` is reported
 * stale, so it is offered no new work.
 */
export class RegistryReplicaSource implements ReplicaSource {
  readonly #registry: ReplicaRegistry;

  constructor(registry: ReplicaRegistry) {
    this.#registry = registry;
  }

  replicas(pool: string): readonly ReplicaInfo[] {
    return this.#registry.list({ pool }).map(toInfo);
  }

  pools(): readonly string[] {
    return [...new Set(this.#registry.list().map((v) => v.registration.pool))];
  }

  /** The engine URL of a replica, or undefined if it left the registry. */
  urlOf(replicaId: string): string | undefined {
    return this.#registry.get(replicaId)?.registration.url;
  }

  /** Whether any replica of `pool` accepts work now. */
  serving(pool: string): boolean {
    return this.#registry.list({ pool }).some((v) => v.acceptsWork);
  }

  /** Models served by registered replicas. */
  models(): readonly string[] {
    return [...new Set(this.#registry.list().map((v) => v.registration.model))];
  }
}
