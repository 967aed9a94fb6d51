import type { RequestDescriptor } from '@fairway/core';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';

/**
 * One pool spread over several stores (in production: slot groups on different Redis primaries),
 * so that one pool is not bound to one Redis core: a two-level fair scheduler.
 *
 * - Each tenant belongs to one shard (a stable hash of its id); a shard is a pool of its own in the
 *   store (`<pool>~<shard>`), with its own queues, VTC counters and reservations, so every store
 *   call of a request touches one shard only and stays exact there.
 * - Every replica of the pool serves every shard: each shard sees it with an allotment of its KV
 *   tokens and sequence slots (replica id `<id>~<shard>`), and a replica's allotments never add up
 *   to more than the whole, so no replica is ever over-reserved although no store sees all of it.
 *
 * How the allotments move is the controller's business.
 *
 * - **Hand-off** (the default) gives the room a finishing request frees to the shard VTC would
 *   serve next, as one store would give it to the flow with the least counter: when another shard
 *   is backlogged and its least counter is below the finishing shard's (or the finishing shard has
 *   nothing queued), the room leaves the finishing shard's allotment of that replica for the other
 *   shard's, and the dispatcher that settled the request dispatches into it in the other shard's
 *   store (one more round trip, to the other shard only). Dispatchers decide on a view of every
 *   shard's backlog and least counter at most `viewMs` old. A shard that rejoins the backlog has
 *   its counters read from the least of the others' on (an offset kept until it next rejoins), as
 *   VTC lifts a returning flow, so an idle shard never comes back with credit; at every view, an
 *   idle shard hands on the room its running requests do not hold, above its minimum.
 * - **Epoch** moves every replica's allotments to the shards' backlogged weight each `rebalanceMs`,
 *   each weight scaled by a service gain that follows how far each shard's least counter advanced
 *   (service per unit of weight); a fall applies at once and a rise takes only room no shard held
 *   in the previous epoch. Service a shard loses while its share lags is never paid back, so
 *   fairness across shards follows the epoch: kept for comparison.
 *
 * `npm run bench:dispatchers -- --shards` measures the fairness cost of each against one store.
 */
export interface PoolShardsOptions {
  /** Shards (stores) per pool, ≥ 1. */
  readonly count: number;
  /** How the shards share the replicas (see {@link ShardedReplicas}). @default 'handoff' */
  readonly controller?: 'handoff' | 'epoch' | undefined;
  /**
   * Hand-off: the age of the dispatchers' view of every shard's backlog and least counter, ms
   * (every store call returns its shard's; dispatchers pass theirs on over the bus). @default 25
   */
  readonly viewMs?: number | undefined;
  /**
   * Epoch: how often the shares follow the backlog, ms: at least the time every dispatcher takes
   * to adopt new shares. @default 1000
   */
  readonly rebalanceMs?: number | undefined;
  /** The least share of every replica a shard keeps, so a tenant arriving to an idle shard is served at once. @default 0.02 */
  readonly minShare?: number | undefined;
  /**
   * Epoch: how hard a shard's service gain follows its service rate each epoch: the exponent of
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

/** A replica's KV tokens and sequence slots, one allotment per shard (hand-off). */
interface Allotment {
  readonly tokens: number[];
  readonly seqs: number[];
  /** What each shard keeps whatever it hands on (`minShare` of the replica). */
  readonly minTokens: number;
  readonly minSeqs: number;
}

/** The replicas of a sharded fleet as each shard's gateway pool sees them (see {@link PoolShardsOptions}). */
export class ShardedReplicas implements ReplicaSource {
  readonly #inner: ReplicaSource;
  /** Shards per pool. */
  readonly count: number;
  readonly controller: 'handoff' | 'epoch';
  /** How often the runner shows the controller every shard's backlog ({@link observe}), ms. */
  readonly intervalMs: number;
  readonly #minShare: number;
  /** Epoch: each base pool's shares in use, one per shard. */
  readonly #shares = new Map<string, number[]>();
  readonly #serviceGain: number;
  /** Epoch: each base pool's service gains and the counters the last epoch read, one per shard. */
  readonly #loop = new Map<string, { gains: number[]; counters: (number | undefined)[] }>();
  /** Hand-off: each base replica's allotments. */
  readonly #allot = new Map<string, Allotment>();
  /**
   * Hand-off: each base pool's view, per shard: backlogged or not, and its least counter plus
   * the offset it was given when it last rejoined the backlog.
   */
  readonly #view = new Map<
    string,
    { backlogged: boolean[]; counters: (number | undefined)[]; offsets: number[] }
  >();
  /** Hand-off: finished requests seen, and rooms handed to another shard. */
  readonly handoffs = { completions: 0, handedOff: 0 };

  constructor(inner: ReplicaSource, options: PoolShardsOptions) {
    if (!Number.isInteger(options.count) || options.count < 1)
      throw new RangeError(`shards: count must be a whole number ≥ 1 (got ${options.count})`);
    this.#inner = inner;
    this.count = options.count;
    this.controller = options.controller ?? 'handoff';
    this.intervalMs = this.controller === 'handoff' ? (options.viewMs ?? 25) : (options.rebalanceMs ?? 1000);
    if (!(this.intervalMs > 0))
      throw new RangeError(`shards: viewMs and rebalanceMs must be > 0 (got ${this.intervalMs})`);
    this.#minShare = Math.min(options.minShare ?? 0.02, 1 / options.count);
    this.#serviceGain = options.serviceGain ?? 0.35;
    if (!(this.#serviceGain >= 0))
      throw new RangeError(`shards: serviceGain must be ≥ 0 (got ${options.serviceGain})`);
  }

  /** The shard pool a request is queued in. */
  poolOf(req: RequestDescriptor): string {
    return this.shardPool(req.model, shardOf(req.tenant, this.count));
  }

  /** The store pool of shard `shard` of base pool `pool`. */
  shardPool(pool: string, shard: number): string {
    return `${pool}${SEP}${shard}`;
  }

  /** The shard of a tenant. */
  shardOf(tenant: string): number {
    return shardOf(tenant, this.count);
  }

  /** The engine replica behind a shard's replica id. */
  baseReplica(id: string): string {
    const i = id.lastIndexOf(SEP);
    return i < 0 ? id : id.slice(0, i);
  }

  /** Epoch: the shares in use for `pool` (a base pool), one per shard. */
  shares(pool: string): readonly number[] {
    let s = this.#shares.get(pool);
    if (s === undefined) {
      s = Array.from({ length: this.count }, () => 1 / this.count);
      this.#shares.set(pool, s);
    }
    return s;
  }

  /** Hand-off: a replica's allotments, KV tokens and sequence slots per shard, evenly split when first seen. */
  allotment(r: ReplicaInfo): Allotment {
    let a = this.#allot.get(r.id);
    if (a === undefined) {
      a = {
        tokens: Array.from({ length: this.count }, () => r.kvCapacityTokens / this.count),
        seqs: Array.from({ length: this.count }, () => r.maxNumSeqs / this.count),
        minTokens: r.kvCapacityTokens * this.#minShare,
        minSeqs: r.maxNumSeqs * this.#minShare,
      };
      this.#allot.set(r.id, a);
    }
    return a;
  }

  replicas(pool: string): readonly ReplicaInfo[] {
    const i = pool.lastIndexOf(SEP);
    if (i < 0) return [];
    const base = pool.slice(0, i);
    const shard = Number(pool.slice(i + 1));
    const share = this.controller === 'epoch' ? (this.shares(base)[shard] ?? 0) : undefined;
    return this.#inner.replicas(base).map((r) => {
      const a = share === undefined ? this.allotment(r) : undefined;
      return {
        ...r,
        id: `${r.id}${SEP}${shard}`,
        pool,
        kvCapacityTokens: Math.floor(a ? a.tokens[shard]! : r.kvCapacityTokens * share!),
        maxNumSeqs: Math.floor(a ? a.seqs[shard]! : r.maxNumSeqs * share!),
      };
    });
  }

  pools(): readonly string[] {
    return this.#inner
      .pools()
      .flatMap((p) => Array.from({ length: this.count }, (_, s) => this.shardPool(p, s)));
  }

  isAvailable(replicaId: string): boolean {
    return this.#inner.isAvailable?.(this.baseReplica(replicaId)) ?? true;
  }

  /**
   * What the shards' stores say now, every {@link intervalMs}: with hand-off, the dispatchers'
   * view; with epochs, a new epoch ({@link rebalance}).
   */
  observe(pool: string, backlog: readonly ShardBacklog[]): void {
    if (this.controller === 'epoch') {
      this.rebalance(pool, backlog);
      return;
    }
    let v = this.#view.get(pool);
    if (v === undefined) {
      v = {
        backlogged: backlog.map(() => false),
        counters: backlog.map(() => undefined),
        offsets: backlog.map(() => 0),
      };
      this.#view.set(pool, v);
    }
    const now = backlog.map((b) => b.weight > 0 && b.counter !== undefined);
    for (const [s, b] of backlog.entries()) {
      // A shard rejoining the backlog starts from the least counter of the shards that stayed in it.
      if (now[s] && !v.backlogged[s]) {
        let least: number | undefined;
        for (const [o, c] of backlog.entries()) {
          if (o === s || !now[o] || !v.backlogged[o]) continue;
          const eff = c.counter! + v.offsets[o]!;
          if (least === undefined || eff < least) least = eff;
        }
        if (least !== undefined) v.offsets[s] = Math.max(v.offsets[s]!, least - b.counter!);
      }
      v.counters[s] = now[s] ? b.counter! + v.offsets[s]! : undefined;
    }
    v.backlogged = now;
  }

  /** Hand-off: the backlogged shard with the least counter, other than `but`, or undefined. */
  #least(v: { counters: (number | undefined)[] }, but: number): number | undefined {
    let to: number | undefined;
    for (const [s, c] of v.counters.entries()) {
      if (s === but || c === undefined) continue;
      if (to === undefined || c < v.counters[to]!) to = s;
    }
    return to;
  }

  /** Hand-off: moves up to `tokens` and `seqs` of `replica` from shard `from` to shard `to`, keeping `from`'s minimum. */
  #move(a: Allotment, from: number, to: number, tokens: number, seqs: number): boolean {
    const t = Math.max(0, Math.min(tokens, a.tokens[from]! - a.minTokens));
    const q = Math.max(0, Math.min(seqs, a.seqs[from]! - a.minSeqs));
    if (t === 0 && q === 0) return false;
    a.tokens[from] = a.tokens[from]! - t;
    a.tokens[to] = a.tokens[to]! + t;
    a.seqs[from] = a.seqs[from]! - q;
    a.seqs[to] = a.seqs[to]! + q;
    return true;
  }

  /**
   * Hand-off: shard `shard` of `pool`, holding `heldTokens` and `heldSeqs` of base replica
   * `replica` for its running requests, has nothing queued: the room it does not use, above its
   * minimum, goes to the backlogged shard with the least counter (an idle shard's room would
   * otherwise wait for requests it does not have to finish). Returns that shard, or undefined.
   */
  releaseIdle(
    pool: string,
    replica: string,
    shard: number,
    heldTokens: number,
    heldSeqs: number,
  ): number | undefined {
    const v = this.#view.get(pool);
    const a = this.#allot.get(replica);
    if (v === undefined || a === undefined || v.counters[shard] !== undefined) return undefined;
    const to = this.#least(v, shard);
    if (to === undefined) return undefined;
    return this.#move(a, shard, to, a.tokens[shard]! - heldTokens, a.seqs[shard]! - heldSeqs)
      ? to
      : undefined;
  }

  /**
   * Hand-off: a request of `shard` that held `tokens` and one sequence slot on base replica
   * `replica` of `pool` has finished. When another shard is backlogged with a least counter below
   * this shard's, or this shard has nothing queued, the room goes to the backlogged shard with the
   * least counter, as far as this shard's allotment stays above its minimum. Returns the shard
   * that received it (whose store the caller dispatches in next), or undefined.
   */
  release(pool: string, replica: string, shard: number, tokens: number): number | undefined {
    this.handoffs.completions++;
    const v = this.#view.get(pool);
    const a = this.#allot.get(replica);
    if (v === undefined || a === undefined) return undefined;
    const to = this.#least(v, shard);
    if (to === undefined) return undefined;
    const mine = v.counters[shard];
    if (mine !== undefined && mine <= v.counters[to]!) return undefined;
    if (!this.#move(a, shard, to, tokens, 1)) return undefined;
    this.handoffs.handedOff++;
    return to;
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
    const spread = 1 - this.count * this.#minShare;
    const shares = this.shares(pool) as number[];
    let room = 1 - shares.reduce((a, x) => a + x, 0);
    for (const [s, w] of weights.entries()) {
      const t = total > 0 ? this.#minShare + (spread * w) / total : 1 / this.count;
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
