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
 *   shard keeping at least `minShare`.
 * - A share that falls falls at once; a share that rises takes only room that no shard held in
 *   the previous epoch. An epoch lasts at least as long as every dispatcher takes to adopt new
 *   shares, so at any time dispatchers use at most two consecutive epochs' shares, and for every
 *   replica the larger of the two, summed over the shards, is at most its capacity. A rise
 *   therefore lands one epoch after the falls that make room for it.
 *
 * The cost is fairness across shards between rebalances: within a shard VTC holds as always;
 * across shards, service follows the shares, which follow the backlog up to two epochs late, and a
 * shard's running requests keep what they hold until they finish. `npm run bench:dispatchers -- --shards` measures that cost against one store.
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
}

const SEP = '~';

/** What one shard's store says at an epoch. */
export interface ShardBacklog {
  /** Summed weights of its backlogged flows; 0 when none is backlogged. */
  readonly weight: number;
}

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

  constructor(inner: ReplicaSource, options: PoolShardsOptions) {
    if (!Number.isInteger(options.count) || options.count < 1)
      throw new RangeError(`shards: count must be a whole number ≥ 1 (got ${options.count})`);
    this.#inner = inner;
    this.#count = options.count;
    this.rebalanceMs = options.rebalanceMs ?? 1000;
    this.#minShare = Math.min(options.minShare ?? 0.02, 1 / options.count);
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
   * A new epoch: moves `pool`'s shares to each shard's backlogged weight. Falls apply in full;
   * rises share the room the previous epoch's shares left, so that the larger of each shard's old
   * and new share, summed, never passes one.
   */
  rebalance(pool: string, backlog: readonly ShardBacklog[]): void {
    const total = backlog.reduce((a, b) => a + b.weight, 0);
    const spread = 1 - this.#count * this.#minShare;
    const shares = this.shares(pool) as number[];
    let room = 1 - shares.reduce((a, x) => a + x, 0);
    for (const [s, b] of backlog.entries()) {
      const t = total > 0 ? this.#minShare + (spread * b.weight) / total : 1 / this.#count;
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
}
