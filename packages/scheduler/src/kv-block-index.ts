/** Options of a {@link KvBlockIndex}. */
export interface KvBlockIndexOptions {
  /**
   * Most blocks held for a replica that has not said how many it can hold ({@link
   * KvBlockIndex.setReplica}); past a replica's capacity its oldest blocks go first. @default 262144
   */
  readonly maxBlocksPerReplica?: number;
}

/** KV cache events of one replica, in order (the bus's `kvEvents`). */
export interface KvBlockEvents {
  readonly replicaId: string;
  /** The publisher's run; a new one means the events of the last run may be incomplete. */
  readonly epoch: string;
  /** Increases by one per message within an epoch. */
  readonly seq: number;
  readonly events: readonly (
    | readonly ['stored', readonly string[]]
    | readonly ['removed', readonly string[]]
    | readonly ['cleared']
  )[];
}

/** The longest run of a prompt's blocks some replicas hold: how many blocks, and who holds them. */
export interface KvBlockMatch {
  readonly blocks: number;
  /** The tokens those blocks hold (blocks × the replicas' block size). */
  readonly tokens: number;
  readonly replicas: readonly string[];
}

interface ReplicaBlocks {
  epoch: string;
  seq: number;
  /** Oldest stored first (a Set keeps insertion order). */
  readonly keys: Set<string>;
  capacity: number;
  blockSize: number;
}

/**
 * Which KV blocks each replica's prefix cache holds, as its engine's KV cache events tell it (vLLM
 * `--kv-events-config`, relayed by the replica's agent): the precise counterpart of the prefix
 * index, which only knows where this fleet sent each prompt. Blocks are named by their block keys
 * (`kvBlockKey` in core). Memory is bounded per replica by its cache's capacity in blocks, so a
 * replica whose events run ahead of its removals cannot grow the index past what it can hold; a
 * message out of sequence makes the replica's blocks unknown until its next events, since the lost
 * ones may have removed blocks. A lookup is O(log n) in the prompt's blocks: a prompt's blocks
 * chain, and an engine evicts a sequence's last blocks first, so a replica holding block i holds
 * the blocks before it.
 */
export class KvBlockIndex {
  readonly #maxBlocks: number;
  readonly #replicas = new Map<string, ReplicaBlocks>();
  /** Block key → replicas holding it. */
  readonly #holders = new Map<string, Set<string>>();

  constructor(options: KvBlockIndexOptions = {}) {
    this.#maxBlocks = Math.max(1, options.maxBlocksPerReplica ?? 262_144);
  }

  /**
   * A replica's cache geometry: its block size in tokens, and its capacity in blocks (its KV
   * tokens over its block size), which bounds the blocks held for it.
   */
  setReplica(replica: string, blockSize: number, capacityBlocks: number): void {
    const r = this.#replica(replica);
    r.blockSize = Math.max(1, Math.floor(blockSize));
    r.capacity = Math.max(1, Math.min(Math.floor(capacityBlocks), this.#maxBlocks));
    this.#trim(replica, r);
  }

  /** Applies one replica's events message (see {@link KvBlockEvents}). */
  apply(msg: KvBlockEvents): void {
    const r = this.#replica(msg.replicaId);
    if (r.epoch !== msg.epoch || msg.seq !== r.seq + 1) this.clear(msg.replicaId);
    r.epoch = msg.epoch;
    r.seq = msg.seq;
    for (const e of msg.events) {
      if (e[0] === 'stored') this.store(msg.replicaId, e[1]);
      else if (e[0] === 'removed') this.remove(msg.replicaId, e[1]);
      else this.clear(msg.replicaId);
    }
  }

  /** Records blocks a replica's cache stored. */
  store(replica: string, keys: readonly string[]): void {
    const r = this.#replica(replica);
    for (const k of keys) {
      if (r.keys.has(k)) continue;
      r.keys.add(k);
      let h = this.#holders.get(k);
      if (h === undefined) {
        h = new Set();
        this.#holders.set(k, h);
      }
      h.add(replica);
    }
    this.#trim(replica, r);
  }

  /** Records blocks a replica's cache evicted. */
  remove(replica: string, keys: readonly string[]): void {
    const r = this.#replicas.get(replica);
    if (r === undefined) return;
    for (const k of keys) if (r.keys.delete(k)) this.#unhold(k, replica);
  }

  /** Forgets every block of a replica (its cache was cleared, or its events are incomplete). */
  clear(replica: string): void {
    const r = this.#replicas.get(replica);
    if (r === undefined) return;
    for (const k of r.keys) this.#unhold(k, replica);
    r.keys.clear();
  }

  /** Forgets a replica that left the fleet. */
  forget(replica: string): void {
    this.clear(replica);
    this.#replicas.delete(replica);
  }

  /**
   * The longest run of `keys` (a prompt's block keys, first block first) that one of `candidates`
   * holds, with every candidate holding that run; undefined when none holds the first block.
   */
  longest(keys: readonly string[], candidates: { has(replica: string): boolean }): KvBlockMatch | undefined {
    const heldBy = (i: number): string[] => {
      const h = this.#holders.get(keys[i] as string);
      if (h === undefined) return [];
      const out: string[] = [];
      for (const r of h) if (candidates.has(r)) out.push(r);
      return out;
    };
    let replicas = keys.length === 0 ? [] : heldBy(0);
    if (replicas.length === 0) return undefined;
    // Largest i with block i held by a candidate; block 0 is.
    let lo = 0;
    let hi = keys.length - 1;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      const held = heldBy(mid);
      if (held.length > 0) {
        lo = mid;
        replicas = held;
      } else hi = mid - 1;
    }
    const blockSize = this.#replicas.get(replicas[0] as string)?.blockSize ?? 16;
    return { blocks: lo + 1, tokens: (lo + 1) * blockSize, replicas };
  }

  /**
   * The tokens of the longest run of `keys` (first block first) that `replica` holds (its blocks ×
   * its block size); 0 when it holds not even the first.
   */
  tokensOn(keys: readonly string[], replica: string): number {
    const r = this.#replicas.get(replica);
    if (r === undefined || keys.length === 0 || !r.keys.has(keys[0] as string)) return 0;
    let lo = 0;
    let hi = keys.length - 1;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (r.keys.has(keys[mid] as string)) lo = mid;
      else hi = mid - 1;
    }
    return (lo + 1) * r.blockSize;
  }

  /** Blocks held for each replica known. */
  *replicaBlocks(): Generator<readonly [string, number]> {
    for (const [id, r] of this.#replicas) yield [id, r.keys.size];
  }

  /** Blocks held for a replica. */
  blocksOf(replica: string): number {
    return this.#replicas.get(replica)?.keys.size ?? 0;
  }

  /** Blocks held, over every replica. */
  get size(): number {
    let n = 0;
    for (const r of this.#replicas.values()) n += r.keys.size;
    return n;
  }

  #replica(id: string): ReplicaBlocks {
    let r = this.#replicas.get(id);
    if (r === undefined) {
      r = { epoch: '', seq: -1, keys: new Set(), capacity: this.#maxBlocks, blockSize: 16 };
      this.#replicas.set(id, r);
    }
    return r;
  }

  #trim(replica: string, r: ReplicaBlocks): void {
    for (const k of r.keys) {
      if (r.keys.size <= r.capacity) break;
      r.keys.delete(k);
      this.#unhold(k, replica);
    }
  }

  #unhold(key: string, replica: string): void {
    const h = this.#holders.get(key);
    if (h === undefined) return;
    h.delete(replica);
    if (h.size === 0) this.#holders.delete(key);
  }
}
