import type { ReplicaRegistry, ReplicaView } from '@fairway/bus';
import type { SequenceProgress } from '@fairway/policy';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';

/** Where each replica's running sequences are read from (`SequenceReports`). */
export interface SequenceSource {
  /** Changes whenever `sequencesOf` may answer differently. */
  version(): number;
  sequencesOf(replica: string): readonly SequenceProgress[];
}

function toInfo(v: ReplicaView, pool: string, sequences: SequenceSource | undefined): ReplicaInfo {
  return {
    id: v.id,
    pool,
    kvCapacityTokens: v.capacity.kvCapacityTokens,
    maxNumSeqs: v.capacity.maxNumSeqs,
    running: v.capacity.running,
    waiting: v.capacity.waiting,
    kvUsage: v.heartbeat?.kvUsage ?? 0,
    // Late heartbeats, draining and sleeping replicas all mean: place nothing new here.
    stale: !v.acceptsWork,
    ...(sequences === undefined ? {} : { sequences: sequences.sequencesOf(v.id) }),
  };
}

/**
 * The fleet as the gateway scheduler sees it, read from the replica registry (registrations and
 * heartbeats from node agents over the bus). A replica that is not fresh and `ready` is reported
 * stale, so it is offered no new work. The config file is the source of truth for pools: a replica
 * whose model a configured pool serves belongs to that pool, whatever pool its agent announced;
 * the announced pool counts only for models the config does not name.
 */
export class RegistryReplicaSource implements ReplicaSource {
  readonly #registry: ReplicaRegistry;
  readonly #configuredPool: (model: string) => string | undefined;
  /** Each pool's replicas, derived from the registry list they were read from (see `replicas`). */
  readonly #byPool = new Map<
    string,
    {
      readonly from: readonly ReplicaView[];
      readonly version: number;
      readonly infos: readonly ReplicaInfo[];
    }
  >();
  /** Running sequences of each replica, when placement uses them (Aladdin). */
  #sequences: SequenceSource | undefined;

  readonly #rates = new Map<string, { readonly untilMs: number; readonly perS: number }>();

  /** @param configuredPool the configured pool serving a model, if any */
  constructor(registry: ReplicaRegistry, configuredPool: (model: string) => string | undefined) {
    this.#registry = registry;
    this.#configuredPool = configuredPool;
  }

  /** Reports each replica's running sequences with it from now on. */
  reportSequences(source: SequenceSource): void {
    this.#sequences = source;
  }

  /** The pool a registered replica belongs to. */
  poolOf(v: ReplicaView): string {
    return this.#configuredPool(v.registration.model) ?? v.registration.pool;
  }

  /**
   * A pool's replicas. Read for every request, so derived once per registry list: the registry
   * returns the same array until a replica changes or goes stale, and so does this (and, with
   * sequence reports, until they change).
   */
  replicas(pool: string): readonly ReplicaInfo[] {
    const all = this.#registry.list();
    const sequences = this.#sequences;
    const version = sequences?.version() ?? 0;
    const known = this.#byPool.get(pool);
    if (known?.from === all && known.version === version) return known.infos;
    const infos: ReplicaInfo[] = [];
    for (const v of all) if (this.poolOf(v) === pool) infos.push(toInfo(v, pool, sequences));
    this.#byPool.set(pool, { from: all, version, infos });
    return infos;
  }

  pools(): readonly string[] {
    return [...new Set(this.#registry.list().map((v) => this.poolOf(v)))];
  }

  /**
   * What the pool's fresh replicas finish per second (their engines' counters), summed at most
   * every 250 ms: asked on admissions, it costs nothing in the size of the pool.
   */
  finishRate(pool: string): number {
    const known = this.#rates.get(pool);
    const now = performance.now();
    if (known !== undefined && now < known.untilMs) return known.perS;
    let perS = 0;
    for (const r of this.replicas(pool)) if (!r.stale) perS += this.#registry.finishRateOf(r.id);
    this.#rates.set(pool, { untilMs: now + 250, perS });
    return perS;
  }

  /** The pool serving `model`: the configured one, else the one its replicas announced. */
  poolFor(model: string): string | undefined {
    const configured = this.#configuredPool(model);
    if (configured !== undefined) return configured;
    const v = this.#registry.list({ model })[0];
    return v === undefined ? undefined : v.registration.pool;
  }

  /** Whether a replica is registered, fresh and ready now. */
  isAvailable(replicaId: string): boolean {
    return this.#registry.get(replicaId)?.acceptsWork ?? false;
  }

  /** The engine URL of a replica, or undefined if it left the registry. */
  urlOf(replicaId: string): string | undefined {
    return this.#registry.get(replicaId)?.registration.url;
  }

  /** Whether any replica of `pool` accepts work now. */
  serving(pool: string): boolean {
    return this.#registry.list().some((v) => v.acceptsWork && this.poolOf(v) === pool);
  }

  /** Models served by registered replicas. */
  models(): readonly string[] {
    return [...new Set(this.#registry.list().map((v) => v.registration.model))];
  }
}
