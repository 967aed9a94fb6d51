import type { Rng } from '@fairway/core';
import { type EngineConfig, EngineModel, type IdealPrefixCache } from '@fairway/perf';
import type { SequenceProgress } from '@fairway/policy';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';
import { SimError, SimErrorCode } from './errors.ts';

/** One replica of the simulated fleet. */
export interface ClusterMember {
  readonly id: string;
  /** Pool (model) it serves. */
  readonly pool: string;
  readonly engine: EngineModel;
  /** Position in the cluster, for the runner's per-engine state. */
  readonly index: number;
}

/**
 * The simulated fleet: several engines, possibly of different GPU types and models. It is the
 * gateways' {@link ReplicaSource}, reporting each engine's live state as a fresh report (the
 * simulator has no reporting lag).
 */
export class Cluster implements ReplicaSource {
  readonly members: readonly ClusterMember[];
  readonly #byId = new Map<string, ClusterMember>();
  readonly #byPool = new Map<string, ClusterMember[]>();
  /** Each member's configuration as given, to rebuild its engine for another model. */
  readonly #configs = new Map<string, EngineConfig>();
  /** Each member's step-noise stream (forked by engine id), kept across model swaps. */
  readonly #rngs = new Map<string, Rng | undefined>();

  readonly #reportSequences: boolean;
  readonly #reservationOf: ((requestId: string) => number | undefined) | undefined;
  /** Members closed as bins of an elastic fleet: placement sees them stale (no room). */
  readonly #closed = new Set<string>();
  /** Steps each member's engine has started (a new step changes its sequences' progress). */
  readonly #steps = new Map<string, number>();
  /** Each member's last sequence list and what it was built from. */
  readonly #sequenceLists = new Map<
    string,
    { readonly key: string; readonly list: readonly SequenceProgress[] }
  >();
  /** Clock ms at which each member's step in flight ends (reported with its sequences). */
  readonly #stepEnds = new Map<string, number>();
  readonly #now: () => number;
  readonly #idealCache: IdealPrefixCache | undefined;

  /**
   * Builds one {@link EngineModel} per entry; engine configs are validated and named `engines[i].config`.
   * @param reportSequences report each replica's sequences and the time left of its step in flight
   *   (SLO-aware placement reads them). @default false
   * @param now the simulation clock, ms (for the step time left). @default always 0
   * @param rng step-noise source; each engine gets `rng.fork(id)`. @default each engine's own default
   * @param reservationOf KV tokens the gateways hold reserved for a request, reported with its
   *   sequence (Aladdin's time-indexed KV check reads them). @default not reported
   * @param idealCache one ideal prefix cache every engine looks prompts up in instead of its own
   *   (a what-if, see {@link IdealPrefixCache}). @default each engine's own cache, if configured
   */
  constructor(
    engines: readonly { readonly id: string; readonly config: EngineConfig }[],
    reportSequences = false,
    now: () => number = () => 0,
    rng?: Rng,
    reservationOf?: (requestId: string) => number | undefined,
    idealCache?: IdealPrefixCache,
  ) {
    this.#idealCache = idealCache;
    this.#reportSequences = reportSequences;
    this.#reservationOf = reservationOf;
    this.#now = now;
    const members: ClusterMember[] = [];
    engines.forEach((e, index) => {
      if (this.#byId.has(e.id))
        throw new SimError(
          SimErrorCode.RUN_INPUT_INVALID,
          `engines[${index}].id: duplicate engine id "${e.id}"`,
          {
            subject: e.id,
          },
        );
      const engineRng = rng?.fork(e.id);
      this.#rngs.set(e.id, engineRng);
      const engine = new EngineModel(e.config, `engines[${index}].config`, { rng: engineRng, idealCache });
      const m: ClusterMember = { id: e.id, pool: engine.config.model, engine, index };
      members.push(m);
      this.#byId.set(e.id, m);
      this.#configs.set(e.id, e.config);
      const pool = this.#byPool.get(m.pool);
      if (pool) pool.push(m);
      else this.#byPool.set(m.pool, [m]);
    });
    this.members = members;
  }

  /** The member with this id; throws if there is none. */
  member(id: string): ClusterMember {
    const m = this.#byId.get(id);
    if (!m)
      throw new SimError(SimErrorCode.RUN_INPUT_INVALID, `no engine "${id}" in the cluster`, { subject: id });
    return m;
  }

  replicas(pool: string): readonly ReplicaInfo[] {
    const members = this.#byPool.get(pool);
    if (!members) return [];
    return members.map((m) => {
      const s = m.engine.stats();
      return {
        id: m.id,
        pool: m.pool,
        kvCapacityTokens: s.kvCapacityTokens,
        maxNumSeqs: s.maxNumSeqs,
        running: s.running,
        waiting: s.waiting,
        kvUsage: s.kvUsage,
        stale: this.#closed.has(m.id),
        ...(this.#reportSequences
          ? {
              sequences: this.#sequencesOf(m, s),
              stepRemainingMs: Math.max(0, (this.#stepEnds.get(m.id) ?? 0) - this.#now()),
            }
          : {}),
      };
    });
  }

  /**
   * A member's sequences as placement sees them, with their reservations when those are known:
   * the same list until the member's engine steps or takes or drops a sequence (placement asks for
   * every dispatch, and its KV check is computed once per list).
   */
  #sequencesOf(
    m: ClusterMember,
    s: { readonly running: number; readonly waiting: number },
  ): readonly SequenceProgress[] {
    const key = `${this.#now()}|${this.#steps.get(m.id) ?? 0}|${s.running}|${s.waiting}`;
    const known = this.#sequenceLists.get(m.id);
    if (known?.key === key) return known.list;
    const list = m.engine.sequences(this.#reservationOf);
    this.#sequenceLists.set(m.id, { key, list });
    return list;
  }

  /** Closes a member (an elastic fleet's bin): placement offers it nothing until it opens. */
  close(id: string): void {
    this.#closed.add(id);
  }

  /** Opens a closed member. */
  open(id: string): void {
    this.#closed.delete(id);
  }

  /** Whether a member is closed. */
  isClosed(id: string): boolean {
    return this.#closed.has(id);
  }

  /** A member's engine started a step that ends at `endsAtMs` (clock ms); `undefined`: it is idle. */
  stepInFlight(id: string, endsAtMs: number | undefined): void {
    this.#steps.set(id, (this.#steps.get(id) ?? 0) + 1);
    if (endsAtMs === undefined) this.#stepEnds.delete(id);
    else this.#stepEnds.set(id, endsAtMs);
  }

  pools(): readonly string[] {
    return [...this.#byPool.keys()];
  }

  /**
   * Reloads an idle member's engine with another model (a model swap, QLM section 5): a fresh
   * engine of the same GPU, TP and options, with the KV capacity and step cost of `model` (an
   * explicit capacity or cost model belonged to the old model and is dropped). The member moves
   * to `model`'s pool. Throws if the engine still has work.
   */
  swapModel(id: string, model: string): void {
    const m = this.member(id) as { -readonly [K in keyof ClusterMember]: ClusterMember[K] };
    if (m.engine.hasWork())
      throw new SimError(SimErrorCode.RUN_INPUT_INVALID, `engine "${id}" must be idle to swap models`, {
        subject: id,
      });
    const { costModel: _cost, kvCapacityTokens: _kv, ...rest } = this.#configs.get(id) as EngineConfig;
    m.engine = new EngineModel({ ...rest, model }, `swap of ${id} to ${model}`, {
      rng: this.#rngs.get(id),
      idealCache: this.#idealCache,
    });
    const old = this.#byPool.get(m.pool) ?? [];
    old.splice(old.indexOf(m), 1);
    if (old.length === 0) this.#byPool.delete(m.pool);
    m.pool = model;
    const pool = this.#byPool.get(model);
    if (pool) pool.push(m);
    else this.#byPool.set(model, [m]);
  }
}
