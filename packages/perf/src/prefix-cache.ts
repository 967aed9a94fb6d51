/** A full KV block the prefix cache knows by the hash of its tokens and of every token before them. */
export interface CachedBlock {
  readonly hash: string;
  /** Running sequences whose block tables hold it; 0 when it is free but still cached. */
  refs: number;
}

/**
 * The hash-to-block table of vLLM's automatic prefix caching (vLLM V1 `BlockPool`): full blocks
 * registered under their chained hash, reference-counted while sequences hold them, and, once no
 * sequence holds them, kept as free-but-cached blocks in least-recently-freed order until a new
 * allocation evicts them. It does not count free blocks itself: {@link acquire}, {@link release}
 * and {@link evictOldest} say when a block enters or leaves the free pool, and the engine keeps
 * its free count from that.
 */
/**
 * Told what a prefix cache stores and evicts, as vLLM's KV cache events tell it (`BlockStored`,
 * `BlockRemoved`): a block by its hash, a stored one with the hash of the block before it in its
 * sequence (undefined for a first block).
 */
export interface PrefixCacheListener {
  stored(hash: string, parent: string | undefined): void;
  removed(hash: string): void;
}

export class PrefixCache {
  /** Told every block stored and evicted. */
  listener: PrefixCacheListener | undefined;
  readonly #blocks = new Map<string, CachedBlock>();
  /** Cached blocks no sequence holds, the least recently freed first (a Map keeps insertion order). */
  readonly #evictable = new Map<string, CachedBlock>();
  #evictions = 0;

  /** Cached blocks, held or free. */
  get size(): number {
    return this.#blocks.size;
  }

  /** Cached blocks no sequence holds: free blocks an allocation may evict. */
  get evictable(): number {
    return this.#evictable.size;
  }

  /** Cached blocks evicted so far to make room for new ones. */
  get evictions(): number {
    return this.#evictions;
  }

  /**
   * The longest run of `hashes`, from the first, that is cached, at most `maxBlocks` long (vLLM's
   * `find_longest_cache_hit`: the chain stops at the first miss).
   */
  match(hashes: readonly string[], maxBlocks: number): CachedBlock[] {
    const hit: CachedBlock[] = [];
    const n = Math.min(maxBlocks, hashes.length);
    for (let i = 0; i < n; i++) {
      const b = this.#blocks.get(hashes[i]!);
      if (b === undefined) break;
      hit.push(b);
    }
    return hit;
  }

  /** Takes a reference to a cached block; true when it was free (it leaves the free pool). */
  acquire(b: CachedBlock): boolean {
    const wasFree = b.refs === 0;
    if (wasFree) this.#evictable.delete(b.hash);
    b.refs++;
    return wasFree;
  }

  /** Drops a reference; true when no sequence holds the block any more (it joins the free pool). */
  release(b: CachedBlock): boolean {
    b.refs--;
    if (b.refs > 0) return false;
    this.#evictable.set(b.hash, b);
    return true;
  }

  /**
   * Registers a block a sequence just filled under `hash` (after the block hashed `parent`), held by that sequence. Undefined when
   * the hash is already cached: the sequence keeps its own copy uncached (vLLM does not
   * de-duplicate blocks either, so block tables stay append-only).
   */
  insert(hash: string, parent?: string): CachedBlock | undefined {
    if (this.#blocks.has(hash)) return undefined;
    const b: CachedBlock = { hash, refs: 1 };
    this.#blocks.set(hash, b);
    this.listener?.stored(hash, parent);
    return b;
  }

  /** Forgets the least recently freed cached block; false when every cached block is held. */
  evictOldest(): boolean {
    for (const b of this.#evictable.values()) {
      this.#evictable.delete(b.hash);
      this.#blocks.delete(b.hash);
      this.#evictions++;
      this.listener?.removed(b.hash);
      return true;
    }
    return false;
  }
}

/**
 * A what-if for the simulator, not a model of any engine: one prefix cache shared by a whole
 * fleet that holds every block any of its engines ever computed, never evicts, and costs no KV. An
 * engine given it ({@link EngineModelOptions.idealCache}) finds a prompt's longest previously
 * computed run of leading blocks there, skips their prefill and holds no KV for them; its
 * attention still reads them. No placement can find more of a prompt cached, nor hold its hits in
 * less KV, so what a fleet serves with it bounds what more cache hits could make it serve.
 */
export class IdealPrefixCache {
  readonly #seen = new Set<string>();

  /** Blocks ever registered. */
  get size(): number {
    return this.#seen.size;
  }

  /** The longest run of `hashes`, from the first, ever registered, at most `maxBlocks` long. */
  match(hashes: readonly string[], maxBlocks: number): number {
    const n = Math.min(maxBlocks, hashes.length);
    let i = 0;
    while (i < n && this.#seen.has(hashes[i]!)) i++;
    return i;
  }

  /** Registers a block some engine just filled. */
  insert(hash: string): void {
    this.#seen.add(hash);
  }
}
