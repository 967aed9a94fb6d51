/** Options of a {@link PrefixIndex}. */
export interface PrefixIndexOptions {
  /** Most entries one (tenant, pool) holds; its least recently used go first. @default 2048 */
  readonly entriesPerTenant?: number;
  /**
   * Most (tenant, pool) partitions held; the least recently used one goes first when a new one
   * would pass it. @default 128
   */
  readonly maxTenants?: number;
  /**
   * How long an entry is trusted after it was learned, ms of the caller's clock: an engine's
   * prefix cache evicts blocks as other prompts need the room. @default 300000 (5 min)
   */
  readonly ttlMs?: number;
}

interface Entry {
  readonly replica: string;
  readonly atMs: number;
}

/**
 * Which replica each prompt prefix was last sent to, as one dispatcher knows it: learned from its
 * own dispatches and from the other dispatchers' over the bus, kept in memory only (never in the
 * store). Partitioned by tenant and pool, each partition an LRU of bounded size, so a tenant that
 * floods unique prompts evicts only its own entries, and a tenant's prompts never steer another
 * tenant's placement. Memory is bounded by `entriesPerTenant × maxTenants` entries whatever the
 * bus delivers (about 160 bytes each: 42 MB at the defaults). Every operation is O(number of keys).
 */
export class PrefixIndex {
  readonly #perTenant: number;
  readonly #maxTenants: number;
  readonly #ttlMs: number;
  /** (tenant, pool) → key → entry; both maps in least-recently-used-first order. */
  readonly #parts = new Map<string, Map<string, Entry>>();

  constructor(options: PrefixIndexOptions = {}) {
    this.#perTenant = Math.max(1, options.entriesPerTenant ?? 2048);
    this.#maxTenants = Math.max(1, options.maxTenants ?? 128);
    this.#ttlMs = options.ttlMs ?? 300_000;
  }

  /** Records that the prompt with prefix `keys` of `tenant` in `pool` went to `replica` at `nowMs`. */
  learn(tenant: string, pool: string, keys: readonly string[], replica: string, nowMs: number): void {
    if (keys.length === 0) return;
    const name = partName(tenant, pool);
    let part = this.#parts.get(name);
    if (part === undefined) {
      part = new Map();
      if (this.#parts.size >= this.#maxTenants) {
        const oldest = this.#parts.keys().next().value;
        if (oldest !== undefined) this.#parts.delete(oldest);
      }
    } else this.#parts.delete(name);
    this.#parts.set(name, part);
    const entry: Entry = { replica, atMs: nowMs };
    // Shortest first, so the longest (the most specific) is the most recently used.
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i] as string;
      part.delete(key);
      part.set(key, entry);
    }
    while (part.size > this.#perTenant) {
      const oldest = part.keys().next().value;
      if (oldest === undefined) break;
      part.delete(oldest);
    }
  }

  /**
   * The replica of the longest of `keys` (longest first) the index holds for `tenant` in `pool`
   * and learned less than the TTL ago; undefined if none.
   */
  lookup(tenant: string, pool: string, keys: readonly string[], nowMs: number): string | undefined {
    const part = this.#parts.get(partName(tenant, pool));
    if (part === undefined) return undefined;
    for (const key of keys) {
      const e = part.get(key);
      if (e === undefined) continue;
      if (nowMs - e.atMs >= this.#ttlMs) {
        part.delete(key);
        continue;
      }
      part.delete(key);
      part.set(key, e);
      return e.replica;
    }
    return undefined;
  }

  /** Entries held, over every partition. */
  get size(): number {
    let n = 0;
    for (const part of this.#parts.values()) n += part.size;
    return n;
  }
}

function partName(tenant: string, pool: string): string {
  return `${tenant}\u0000${pool}`;
}
