import type { RequestDescriptor } from '@fairway/core';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';

/**
 * One pool spread over several stores (in production: slot groups on different Redis primaries),
 * so that one pool is not bound to one Redis core: a two-level fair scheduler.
 *
 * - Each tenant belongs to one shard (a stable hash of its id); a shard is a pool of its own in the
 *   store (`<pool>~<shard>`), with its own queues, VTC counters and reservations, so every store
 *   call of a request touches one shard only and stays exact there.
 * - Every replica of the pool serves every shard: each shard sees it with `share` of its KV and
 *   sequence capacity (replica id `<id>~<shard>`), and the shares of a replica never add up to more
 *   than the whole, so no replica is ever over-reserved although no store sees all of it.
 * - Every `rebalanceMs` (an epoch) the shares move to the shards' backlogged weight (the weights
 *   of the flows with requests waiting, as VTC divides service among backlogged clients), each
 *   shard keeping at least `minShare`, and each weight scaled by the shard's service gain.
 * - The service gain closes the loop: a share of KV does not buy every shard the same service
 *   (its requests' shapes, how they pack, how often its flows come and go), so each epoch a
 *   shard's gain moves by (mean rate / its rate)^`serviceGain`, where a shard's rate is how far its
 *   least backlogged VTC counter advanced (service per unit of weight). Shards served more slowly
 *   than the others get more of the replicas, until the rates meet.
 * - A share that falls falls at once; a share that rises takes only room that no shard held in
 *   the previous epoch. An epoch lasts at least as long as every dispatcher takes to adopt new
 *   shares, so at any time dispatchers use at most two consecutive epochs' shares, and for every
 *   replica the larger of the two, summed over the shards, is at most its capacity. A rise
 *   therefore lands one epoch after the falls that make room for it.
 *
 * The cost is fairness across shards between rebalances: within a shard VTC holds as always;
 * across shards, service follows the shares, which follow the backlog up to two epochs late, and a
 * shard's running requests keep what they hold until they finish. The gain equalises rates, not
 * what was already lost: service a shard missed while its share lagged is not paid back.
 * `npm run bench:dispatchers -- --shards` measures that cost against one store.
 */
export interface PoolShardsOptions {
  /** Shards (stores) per pool, ≥ 1. */
  readonly count: number;
  /**
   * How often the shares follow the backlog (an epoch), ms: at least the time every dispatcher
   * takes to adopt new shares. @default 1000
   */
  readonly rebalanceMs?: number | undefined;
  /** The least share a shard keeps, so a tenant arriving to an idle shard is served at once. @default 0.02 */
  readonly minShare?: number | undefined;
  /**
   * How hard a shard's service gain follows its service rate each epoch: the exponent of
   * (mean rate / its rate), each epoch's step kept within 0.8–1.25. 0: shares follow the
   * backlogged weight alone. Larger gains overshoot: rates move only as running requests finish.
   * @default 0.35
   */
  readonly serviceGain?: number | undefined;
}

const SEP = '~';

/** What one shard's store says at an epoch. */
export interface ShardBacklog {
  /** Summed weights of its backlogged flows; 0 when none is backlogged. */
  readonly weight: number;
  /** The least VTC counter among its backlogged flows; undefined when none is backlogged. */
  readonly counter?: number | undefined;
}

/** A step of a shard's service gain is kept within these factors, and a gain within GAIN_RANGE. */
const STEP_MIN = 0.8;
const STEP_MAX = 1.25;
const GAIN_RANGE = 4;

/** The shard a tenant belongs to: FNV-1a of its id, modulo `count`. */
export function shardOf(tenant: string, count: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < tenant.length; i++) {
    h ^= tenant.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % count;
}

/** The replicas of a sharded fleet as each shard's gateway pool sees them (see {@link PoolShardsOptions}). */
export class ShardedReplicas implements ReplicaSource {
  readonly #inner: ReplicaSource;
  readonly #count: number;
  readonly rebalanceMs: number;
  readonly #minShare: number;
  /** Each base pool's shares in use, one per shard. */
  readonly #shares = new Map<string, number[]>();
  readonly #serviceGain: number;
  /** Each base pool's service gains and the counters the last epoch read, one per shard. */
  readonly #loop = new Map<string, { gains: number[]; counters: (number | undefined)[] }>();

  constructor(inner: ReplicaSource, options: PoolShardsOptions) {
    if (!Number.isInteger(options.count) || options.count < 1)
      throw new RangeError(`shards: count must be a whole number ≥ 1 (got ${options.count})`);
    this.#inner = inner;
    this.#count = options.count;
    this.rebalanceMs = options.rebalanceMs ?? 1000;
    this.#minShare = Math.min(options.minShare ?? 0.02, 1 / options.count);
    this.#serviceGain = options.serviceGain ?? 0.35;
    if (!(this.#serviceGain >= 0))
      throw new RangeError(`shards: serviceGain must be ≥ 0 (got ${options.serviceGain})`);
  }

  /** The shard pool a request is queued in. */
  poolOf(req: RequestDescriptor): string {
    return `${req.model}${SEP}${shardOf(req.tenant, this.#count)}`;
  }

  /** The shard of a tenant. */
  shardOf(tenant: string): number {
    return shardOf(tenant, this.#count);
  }

  /** The engine replica behind a shard's replica id. */
  baseReplica(id: string): string {
    const i = id.lastIndexOf(SEP);
    return i < 0 ? id : id.slice(0, i);
  }

  /** The shares in use for `pool` (a base pool), one per shard. */
  shares(pool: string): readonly number[] {
    let s = this.#shares.get(pool);
    if (s === undefined) {
      s = Array.from({ length: this.#count }, () => 1 / this.#count);
      this.#shares.set(pool, s);
    }
    return s;
  }

  replicas(pool: string): readonly ReplicaInfo[] {
    const i = pool.lastIndexOf(SEP);
    if (i < 0) return [];
    const base = pool.slice(0, i);
    const share = this.shares(base)[Number(pool.slice(i + 1))] ?? 0;
    return this.#inner.replicas(base).map((r) => ({
      ...r,
      id: `${r.id}${SEP}${pool.slice(i + 1)}`,
      pool,
      kvCapacityTokens: Math.floor(r.kvCapacityTokens * share),
      maxNumSeqs: Math.floor(r.maxNumSeqs * share),
    }));
  }

  pools(): readonly string[] {
    return this.#inner
      .pools()
      .flatMap((p) => Array.from({ length: this.#count }, (_, s) => `${p}${SEP}${s}`));
  }

  isAvailable(replicaId: string): boolean {
    return this.#inner.isAvailable?.(this.baseReplica(replicaId)) ?? true;
  }

  /**
   * A new epoch: moves `pool`'s shares to each shard's backlogged weight times its service gain.
   * Falls apply in full; rises share the room the previous epoch's shares left, so that the
   * larger of each shard's old and new share, summed, never passes one.
   */
  rebalance(pool: string, backlog: readonly ShardBacklog[]): void {
    const gains = this.#followService(pool, backlog);
    const weights = backlog.map((b, s) => b.weight * (gains[s] ?? 1));
    const total = weights.reduce((a, w) => a + w, 0);
    const spread = 1 - this.#count * this.#minShare;
    const shares = this.shares(pool) as number[];
    let room = 1 - shares.reduce((a, x) => a + x, 0);
    for (const [s, w] of weights.entries()) {
      const t = total > 0 ? this.#minShare + (spread * w) / total : 1 / this.#count;
      const old = shares[s] ?? 0;
      if (t <= old) {
        shares[s] = t;
        continue;
      }
      const add = Math.max(0, Math.min(t - old, room));
      shares[s] = old + add;
      room -= add;
    }
  }

  /**
   * Moves each shard's service gain by (mean rate / its rate)^serviceGain, the rates being how
   * far each shard's least backlogged counter advanced since the last epoch (shards backlogged at
   * both), the mean weighted by backlogged weight; then scales the gains so that their weighted
   * mean is 1. Returns the gains.
   */
  #followService(pool: string, backlog: readonly ShardBacklog[]): readonly number[] {
    let loop = this.#loop.get(pool);
    if (loop === undefined) {
      loop = { gains: backlog.map(() => 1), counters: backlog.map(() => undefined) };
      this.#loop.set(pool, loop);
    }
    const { gains, counters } = loop;
    const rates = backlog.map((b, s) => {
      const before = counters[s];
      return b.weight > 0 && b.counter !== undefined && before !== undefined ? b.counter - before : undefined;
    });
    loop.counters = backlog.map((b) => b.counter);
    if (this.#serviceGain === 0) return gains;
    let weight = 0;
    let sum = 0;
    for (const [s, r] of rates.entries()) {
      if (r === undefined) continue;
      weight += backlog[s]!.weight;
      sum += backlog[s]!.weight * r;
    }
    const mean = weight > 0 ? sum / weight : 0;
    if (mean <= 0) return gains;
    let norm = 0;
    let normWeight = 0;
    for (const [s, r] of rates.entries()) {
      if (r !== undefined && r > 0) {
        const step = Math.min(STEP_MAX, Math.max(STEP_MIN, (mean / r) ** this.#serviceGain));
        gains[s] = Math.min(GAIN_RANGE, Math.max(1 / GAIN_RANGE, gains[s]! * step));
      }
      norm += backlog[s]!.weight * gains[s]!;
      normWeight += backlog[s]!.weight;
    }
    if (norm > 0) for (let s = 0; s < gains.length; s++) gains[s] = gains[s]! * (normWeight / norm);
    return gains;
  }
}
