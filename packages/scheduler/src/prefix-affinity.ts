import type { Clock, RequestDescriptor } from '@fairway/core';
import type { ReplicaState } from '@fairway/policy';
import type { PrefixPart, QueuedRequest, ReplicaCandidate } from '@fairway/store';
import type { KvBlockIndex } from './kv-block-index.ts';
import { PrefixIndex } from './prefix-index.ts';

/**
 * How placement uses prefix-cache affinity:
 * - `off`: not at all (placement policy order only);
 * - `bounded`: a request goes to the replica that served its prompt's start while that replica
 *   holds at most `loadFactor` × the pool's mean reserved KV tokens (fair affinity);
 * - `unbounded`: to that replica whenever it has room (affinity only, as prefix-aware routers
 *   without a load bound do).
 */
export type PrefixAffinityMode = 'off' | 'bounded' | 'unbounded';

/**
 * What affinity did for a dispatched request with prefix keys: `hit` placed it on the replica its
 * prefix was found on; `bounded` found one but placed it elsewhere (over the load bound, no room,
 * or gone); `miss` found none.
 */
export type AffinityOutcome = 'hit' | 'bounded' | 'miss';

/** A placement the prefix index learned, as other dispatchers are told it. */
export interface PrefixLearned {
  readonly tenant: string;
  readonly pool: string;
  readonly keys: readonly string[];
  readonly replica: string;
}

/** Prefix-cache affinity options of a gateway. */
export interface PrefixAffinityOptions {
  /** The mode, or the mode of each pool. */
  readonly mode: PrefixAffinityMode | ((pool: string) => PrefixAffinityMode);
  /**
   * Under `bounded`: most KV tokens a replica may hold reserved, as a multiple of the pool's mean,
   * and still take a request by affinity. @default 1.25
   */
  readonly loadFactor?: number;
  /**
   * Under `bounded`: the bound is never below this fraction of the pool's mean reservable KV
   * tokens, so a lightly loaded fleet (where one request is already far above the mean) keeps
   * its affinity; above it, only `loadFactor` bounds. @default 0.05
   */
  readonly floor?: number;
  /**
   * The index looked up at admission and taught by every dispatch (share one between gateways
   * of one process, or feed it what other dispatchers publish). @default a fresh index
   */
  readonly index?: PrefixIndex;
  /** Called for every placement the index learns from this gateway's dispatches (publish it). */
  readonly onLearn?: (learned: PrefixLearned) => void;
  /**
   * Which blocks each replica's prefix cache holds, from its engine's KV cache events: a request
   * with block keys (`RequestDescriptor.promptBlockKeys`) goes to the replica holding the longest run
   * of them, and is charged for the tokens it holds at the cached-token weight. @default none
   */
  readonly kvBlocks?: KvBlockIndex;
}

/** A replica that holds the start of a request's prompt, by its engine's KV cache events. */
export interface KvAffinity {
  readonly candidate: ReplicaCandidate;
  /** The prompt tokens its cache holds (at most all but the prompt's last token, which is always computed). */
  readonly cachedTokens: number;
}

/** The bound `unbounded` passes the store: more than any replica holds. */
export const UNBOUNDED = 1e15;

/**
 * Prefix-cache affinity for one gateway. At admission the request's prefix keys are looked up
 * (longest match) and the replica found, if it is fresh in the pool, goes into the queued request
 * with the room the gateway sees on it; each dispatch passes the store the load bound, so the
 * store — which decides which request is picked — places an affine pick there only while the
 * replica is within it. Every dispatch teaches the index where the request's keys went.
 */
export class PrefixAffinity {
  readonly #mode: (pool: string) => PrefixAffinityMode;
  readonly #loadFactor: number;
  readonly #floor: number;
  readonly #clock: Clock;
  readonly #onLearn: ((learned: PrefixLearned) => void) | undefined;
  readonly index: PrefixIndex;
  readonly kvBlocks: KvBlockIndex | undefined;
  /** Dispatched requests with prefix keys, by outcome. */
  readonly outcomes: Record<AffinityOutcome, number> = { hit: 0, bounded: 0, miss: 0 };

  constructor(options: PrefixAffinityOptions | undefined, clock: Clock) {
    const mode = options?.mode ?? 'off';
    this.#mode = typeof mode === 'function' ? mode : () => mode;
    this.#loadFactor = options?.loadFactor ?? 1.25;
    this.#floor = options?.floor ?? 0.05;
    this.#clock = clock;
    this.#onLearn = options?.onLearn;
    this.index = options?.index ?? new PrefixIndex();
    this.kvBlocks = options?.kvBlocks;
  }

  /** The pool's mode. */
  modeOf(pool: string): PrefixAffinityMode {
    return this.#mode(pool);
  }

  /**
   * The replica a request's prompt start was last placed on, with its room as `states` show it,
   * if the pool uses affinity and that replica is fresh in it.
   */
  affinityOf(
    req: RequestDescriptor,
    pool: string,
    states: readonly ReplicaState[],
  ): ReplicaCandidate | undefined {
    const keys = req.prefixKeys;
    if (keys === undefined || keys.length === 0 || this.#mode(pool) === 'off') return undefined;
    const id = this.index.lookup(req.tenant, pool, keys, this.#clock.now());
    if (id === undefined) return undefined;
    const s = states.find((x) => x.id === id);
    if (s === undefined || s.stale) return undefined;
    return { id, tokenCapacity: s.tokenCapacity, seqCapacity: s.seqCapacity };
  }

  /**
   * The fresh replica of `pool` whose prefix cache holds the longest run of a request's prompt
   * blocks (`promptBlockKeys`, else `blockHashes`), by the KV block index, the least reserved of those that hold it; with
   * the prompt tokens it holds. Undefined without an index, block keys or affinity, or when no
   * fresh replica holds the prompt's first block.
   */
  kvAffinityOf(
    req: RequestDescriptor,
    pool: string,
    states: readonly ReplicaState[],
  ): KvAffinity | undefined {
    const keys = req.promptBlockKeys ?? req.blockHashes;
    const index = this.kvBlocks;
    if (index === undefined || keys === undefined || keys.length === 0 || this.#mode(pool) === 'off')
      return undefined;
    const fresh = new Map<string, ReplicaState>();
    for (const s of states) if (!s.stale) fresh.set(s.id, s);
    const match = index.longest(keys, fresh);
    if (match === undefined) return undefined;
    let best: ReplicaState | undefined;
    for (const id of match.replicas) {
      const s = fresh.get(id) as ReplicaState;
      if (best === undefined || s.reservedTokens < best.reservedTokens) best = s;
    }
    if (best === undefined) return undefined;
    return {
      candidate: { id: best.id, tokenCapacity: best.tokenCapacity, seqCapacity: best.seqCapacity },
      cachedTokens: Math.max(0, Math.min(match.tokens, req.inputTokens - 1)),
    };
  }

  /**
   * The prompt tokens of a request that `replica`'s prefix cache holds now, by the KV block index
   * (at most all but the prompt's last token); undefined without an index, block keys (`keys`,
   * else the request's `blockHashes`) or affinity in the pool.
   */
  kvCachedOn(
    req: RequestDescriptor,
    keys: readonly string[] | undefined,
    pool: string,
    replica: string,
  ): number | undefined {
    const blocks = keys ?? req.blockHashes;
    const index = this.kvBlocks;
    if (index === undefined || blocks === undefined || blocks.length === 0 || this.#mode(pool) === 'off')
      return undefined;
    return Math.max(0, Math.min(index.tokensOn(blocks, replica), req.inputTokens - 1));
  }

  /**
   * The store's affinity bound for a dispatch from `pool` (`DispatchInput.affinityTokens`):
   * under `bounded`, `loadFactor` × the mean KV tokens reserved on its fresh replicas, or `floor`
   * × their mean capacity if that is more; undefined (affinity ignored) under `off`.
   */
  bound(pool: string, states: readonly ReplicaState[]): number | undefined {
    const mode = this.#mode(pool);
    if (mode === 'off') return undefined;
    if (mode === 'unbounded') return UNBOUNDED;
    let sum = 0;
    let capacity = 0;
    let n = 0;
    for (const s of states) {
      if (s.stale) continue;
      sum += s.reservedTokens;
      capacity += s.tokenCapacity;
      n++;
    }
    return n === 0 ? 0 : Math.max(this.#loadFactor * sum, this.#floor * capacity) / n;
  }

  /**
   * The parts of a request's prompt start that the requests on one replica hold once
   * (`QueuedRequest.prefixParts`): its prefix keys with their parts' tokens, if the pool places by
   * affinity (its engines cache prefixes). Parts are kept from the shortest key on while their
   * tokens fit in the prompt's, so no request reserves less than its prompt's tail.
   */
  prefixParts(req: RequestDescriptor, pool: string): PrefixPart[] | undefined {
    const keys = req.prefixKeys;
    const tokens = req.prefixTokens;
    if (keys === undefined || tokens === undefined || tokens.length !== keys.length) return undefined;
    if (keys.length === 0 || this.#mode(pool) === 'off') return undefined;
    let sum = 0;
    let from = keys.length;
    while (from > 0 && sum + (tokens[from - 1] as number) <= req.inputTokens) sum += tokens[--from] as number;
    if (from === keys.length) return undefined;
    const parts: PrefixPart[] = [];
    for (let i = from; i < keys.length; i++)
      parts.push({ key: keys[i] as string, tokens: tokens[i] as number });
    return parts;
  }

  /**
   * A request was dispatched onto `replica`: teaches the index (and `onLearn`) where its keys went
   * and returns what affinity did for it; undefined for a request without keys or a pool without
   * affinity.
   */
  dispatched(queued: QueuedRequest, req: RequestDescriptor, replica: string): AffinityOutcome | undefined {
    const keys = req.prefixKeys;
    if (keys === undefined || keys.length === 0 || this.#mode(queued.pool) === 'off') return undefined;
    this.index.learn(req.tenant, queued.pool, keys, replica, this.#clock.now());
    this.#onLearn?.({ tenant: req.tenant, pool: queued.pool, keys, replica });
    const a = queued.affinity;
    const outcome: AffinityOutcome = a === undefined ? 'miss' : a.id === replica ? 'hit' : 'bounded';
    this.outcomes[outcome]++;
    return outcome;
  }
}
