import { createRng, type Rng } from '@fairway/core';
import type {
  BatchShape,
  EngineConfig,
  EngineEvent,
  EngineModelApi,
  EngineSeqInput,
  EngineStats,
  PlannedBatch,
  StepResult,
} from './engine-api.ts';
import { type ResolvedEngineConfig, resolveEngineConfig } from './engine-config.ts';
import { PerfError, PerfErrorCode } from './errors.ts';
import {
  type CachedBlock,
  type IdealPrefixCache,
  PrefixCache,
  type PrefixCacheListener,
} from './prefix-cache.ts';

/** A sequence's mutable state inside the engine. */
class Seq {
  readonly id: string;
  readonly input: number;
  /** Tokens it generates before stopping: min(outputTokens, maxTokens), at least 1. */
  readonly target: number;
  readonly maxTokens: number;
  readonly priority: number;
  /** Arrival order at this engine; ties and FCFS order. */
  readonly order: number;
  /** Tokens whose KV must be computed before the next token: the input plus, after a preemption, the output so far. */
  prompt: number;
  /** Tokens whose KV is in the cache. */
  computed = 0;
  generated = 0;
  blocks = 0;
  /** Tokens scheduled in the current step (prefill chunk, or 1 for a decode). */
  stepTokens = 0;
  state: 'waiting' | 'running' | 'gone' = 'waiting';
  /** Position in the waiting heap, -1 when not in it. */
  heapIndex = -1;
  /** Engine time since its first token, ms (steps it ran in and steps that stalled it). */
  decodeMs = 0;
  /** Chained hashes of its full blocks (prefix caching); empty when it has none or caching is off. */
  readonly hashes: readonly string[];
  /** Cached blocks it holds, in block order: its prefix-cache hits, then the blocks it filled. */
  refs: CachedBlock[] = [];
  /** Of its {@link blocks}, those an ideal cache served: they hold no KV (`idealCache`). */
  idealBlocks = 0;
  /** Leading blocks already hit or offered to the cache. */
  offered = 0;
  /** Prompt tokens found in the prefix cache when it was first scheduled. */
  cachedTokens: number | undefined;

  constructor(input: EngineSeqInput, order: number) {
    this.id = input.id;
    this.input = input.inputTokens;
    this.maxTokens = input.maxTokens;
    this.target = Math.max(1, Math.min(input.outputTokens, input.maxTokens));
    this.priority = input.priority ?? 0;
    this.order = order;
    this.prompt = input.inputTokens;
    this.hashes = input.blockHashes ?? [];
  }
}

/**
 * The waiting queue: a binary heap on (priority, arrival order). With FCFS (priority all 0) this is
 * vLLM's FCFS queue with preempted sequences back at the front: admission is head-of-line in arrival
 * order, so a preempted sequence is always older than every sequence never admitted.
 */
class WaitingQueue {
  readonly #heap: Seq[] = [];

  get size(): number {
    return this.#heap.length;
  }

  peek(): Seq | undefined {
    return this.#heap[0];
  }

  push(s: Seq): void {
    s.heapIndex = this.#heap.length;
    this.#heap.push(s);
    this.#up(s.heapIndex);
  }

  pop(): Seq | undefined {
    const top = this.#heap[0];
    if (top) this.remove(top);
    return top;
  }

  remove(s: Seq): void {
    const i = s.heapIndex;
    const last = this.#heap.pop()!;
    s.heapIndex = -1;
    if (last === s) return;
    this.#heap[i] = last;
    last.heapIndex = i;
    this.#down(i);
    this.#up(last.heapIndex);
  }

  #less(a: Seq, b: Seq): boolean {
    return a.priority < b.priority || (a.priority === b.priority && a.order < b.order);
  }

  #up(i: number): void {
    const h = this.#heap;
    const s = h[i]!;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const ps = h[p]!;
      if (!this.#less(s, ps)) break;
      h[i] = ps;
      ps.heapIndex = i;
      i = p;
    }
    h[i] = s;
    s.heapIndex = i;
  }

  #down(i: number): void {
    const h = this.#heap;
    const n = h.length;
    const s = h[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && this.#less(h[r]!, h[l]!) ? r : l;
      const cs = h[c]!;
      if (!this.#less(cs, s)) break;
      h[i] = cs;
      cs.heapIndex = i;
      i = c;
    }
    h[i] = s;
    s.heapIndex = i;
  }
}

/** The step-time transform for a noise setting: a fresh factor with mean 1 and CV `cv` per step. */
function stepJitter(noise: EngineModelApi['config']['stepNoise'], rng: Rng): (ms: number) => number {
  const { distribution, cv } = noise;
  if (distribution === 'none' || cv === 0) return (ms) => ms;
  if (distribution === 'normal') return (ms) => ms * Math.max(0.05, 1 + cv * rng.normal());
  const sigma = Math.sqrt(Math.log(1 + cv * cv));
  return (ms) => ms * Math.exp(sigma * rng.normal() - (sigma * sigma) / 2);
}

const byPriorityThenOrder = (a: Seq, b: Seq): number => a.priority - b.priority || a.order - b.order;

/** What an engine model is built with besides its configuration. */
export interface EngineModelOptions {
  /**
   * Source of step-time noise (`config.stepNoise`); the simulator forks it from the run's seed.
   * @default a stream of seed 0 (only drawn from when noise is on)
   */
  readonly rng?: Rng | undefined;
  /**
   * A what-if in place of the engine's own prefix cache ({@link IdealPrefixCache}): prompts hit
   * every leading block any engine sharing it ever computed, at no KV cost. @default none
   */
  readonly idealCache?: IdealPrefixCache | undefined;
}

/** One sequence's progress in an engine ({@link EngineModel.sequences}). */
export interface SequenceState {
  readonly inputTokens: number;
  readonly generated: number;
  readonly decodeMs: number;
  readonly prefilled: boolean;
  /** KV tokens reserved for its request, when the caller knows them. */
  readonly reservedTokens?: number | undefined;
}

/**
 * One simulated vLLM replica, following InferMax's unified scheduler (InferMax section 3.1,
 * Algorithm 1) with vLLM's choices: continuous batching over a paged KV cache; `prefill-priority`
 * (vLLM) runs either new prefills or the running decodes in a step, `decode-priority` (Sarathi)
 * decodes first and fills the token budget with (chunked) prefills in the same step. When a decode
 * needs a block and none is free, the newest running sequence (the lowest-priority one under
 * priority scheduling) is preempted by recompute: its blocks are freed and its output so far is
 * appended to its prompt for a later refill (`preemptionVictim: 'cheapest-refill'` evicts the one
 * with the fewest computed KV tokens instead, InferMax section 4.5). A step processes at most
 * `maxNumBatchedTokens` tokens (C), of which at most `maxNumPrefillTokens` are prompt tokens (P,
 * Sarathi's prefill budget). The eviction-free variant admits a sequence only if
 * its worst case fits — input + max_tokens − 1 KV tokens: the last token is generated but never fed
 * back (InferMax section 3.3) — and never preempts. Step time comes from the
 * configured {@link StepCostModel}.
 *
 * With `enablePrefixCaching`, blocks follow vLLM V1's automatic prefix caching: a sequence's full
 * blocks are registered under their chained hashes ({@link EngineSeqInput.blockHashes}) once
 * computed; at admission the longest cached run of its leading hashes (at most its prompt minus
 * one token) is shared, reference-counted, and only the rest is prefilled; a finished or preempted
 * sequence's cached blocks stay cached as free blocks, tail first, and an allocation that finds no
 * uncached free block evicts the least recently freed one. Cached free blocks count as free, as
 * in vLLM's `kv_cache_usage_perc`.
 *
 * With `admitEverySteps` = k > 0 the engine admits as S-LoRA's router does (the engine the VTC
 * paper measured on): into a running batch only after k decode steps since the last admission,
 * head-of-line, each sequence only if the batch's future KV peak fits ({@link EngineConfig.admitEverySteps});
 * a sequence whose own peak exceeds the pool finishes at once with `ignored: true`. Planned steps
 * ({@link stepPlanned}) ignore the cadence.
 *
 * Deviations from vLLM, chosen for a model that never loses a request: a prompt longer than
 * `maxNumBatchedTokens` (without chunked prefill) runs alone in a step instead of being rejected;
 * a decode preempts only when it actually needs a new block (vLLM v0 asks for one free block per
 * sequence). A prompt that can never fit in the cache finishes at once with `ignored: true`; one over
 * the context length (`maxModelLen`, prompt plus `max_tokens`) is refused at its first step with
 * `contextExceeded: true`, as vLLM's server refuses it with a 400.
 */
export class EngineModel implements EngineModelApi {
  readonly config: ResolvedEngineConfig;
  readonly #numBlocks: number;
  readonly #watermarkBlocks: number;
  readonly #blockSize: number;
  readonly #budget: number;
  readonly #prefillBudget: number;
  readonly #cheapestVictim: boolean;
  readonly #chunked: boolean;
  readonly #decodeFirst: boolean;
  readonly #evictionFree: boolean;
  readonly #priority: boolean;
  /** S-LoRA's admission cadence, decode steps (0: vLLM's, every step). */
  readonly #admitEvery: number;
  /** Decode steps run since the last step that admitted a sequence. */
  #decodesSinceAdmit = 0;
  readonly #seqs = new Map<string, Seq>();
  readonly #waiting = new WaitingQueue();
  /** Sequences refused for their length, reported at the next step. */
  #refused: Seq[] = [];
  /** Running sequences in admission order (the last is the newest). */
  #running: Seq[] = [];
  #freeBlocks: number;
  /** Prompt tokens the step being formed may still take (P). */
  #prefillLeft = 0;
  #order = 0;
  /** The last step's batch as a plan (what {@link stepPlanned} would take to repeat it). */
  #lastBatch: PlannedBatch = { preempt: [], run: [] };
  #preemptions = 0;
  #promptTokens = 0;
  #generationTokens = 0;
  #finished = 0;
  #steps = 0;
  /** vLLM's automatic prefix caching; undefined when off. */
  readonly #cache: PrefixCache | undefined;
  readonly #ideal: IdealPrefixCache | undefined;
  /** Whether prompts are looked up in a prefix cache, the engine's own or an ideal one. */
  readonly #caching: boolean;
  #prefixQueries = 0;
  #prefixHits = 0;
  /** Multiplies a step's modelled time by a draw of the configured noise (identity when off). */
  readonly #jitter: (ms: number) => number;

  /**
   * Validates `config` (throws a `ConfigError` naming the field) and builds an idle engine.
   */
  constructor(config: EngineConfig, source?: string, options: EngineModelOptions = {}) {
    this.config = resolveEngineConfig(config, source);
    this.#jitter = stepJitter(this.config.stepNoise, options.rng ?? createRng(0).fork('step-noise'));
    this.#blockSize = this.config.blockSize;
    this.#numBlocks = Math.floor(this.config.kvCapacityTokens / this.#blockSize);
    this.#watermarkBlocks = this.config.watermark * this.#numBlocks;
    this.#freeBlocks = this.#numBlocks;
    this.#budget = this.config.maxNumBatchedTokens;
    this.#prefillBudget = Math.min(this.config.maxNumPrefillTokens, this.#budget);
    this.#cheapestVictim = this.config.preemptionVictim === 'cheapest-refill';
    this.#chunked = this.config.chunkedPrefill;
    this.#decodeFirst = this.config.batchPolicy === 'decode-priority';
    this.#evictionFree = this.config.preemption === 'eviction-free';
    this.#priority = this.config.priorityScheduling;
    this.#admitEvery = this.config.admitEverySteps;
    this.#ideal = options.idealCache;
    this.#cache = this.config.enablePrefixCaching && !this.#ideal ? new PrefixCache() : undefined;
    this.#caching = this.#cache !== undefined || this.#ideal !== undefined;
  }

  add(seq: EngineSeqInput): void {
    if (this.#seqs.has(seq.id))
      throw new PerfError(PerfErrorCode.DUPLICATE_SEQUENCE, `sequence "${seq.id}" is already in the engine`, {
        subject: seq.id,
      });
    for (const field of ['inputTokens', 'outputTokens', 'maxTokens'] as const) {
      const v = seq[field];
      if (!Number.isInteger(v) || v < (field === 'inputTokens' ? 1 : 0))
        throw new PerfError(
          PerfErrorCode.INVALID_SEQUENCE,
          `sequence "${seq.id}": ${field} must be an integer ≥ ${field === 'inputTokens' ? 1 : 0}, got ${v}`,
          { subject: seq.id },
        );
    }
    const s = new Seq(seq, this.#order++);
    this.#seqs.set(s.id, s);
    // vLLM's server check: the prompt must leave room for one token and for all of max_tokens.
    const len = this.config.maxModelLen;
    if (seq.inputTokens >= len || seq.inputTokens + seq.maxTokens > len) this.#refused.push(s);
    else this.#waiting.push(s);
  }

  abort(id: string): boolean {
    const s = this.#seqs.get(id);
    if (!s) return false;
    if (this.#refused.includes(s)) this.#refused = this.#refused.filter((r) => r !== s);
    else if (s.state === 'waiting') this.#waiting.remove(s);
    else if (s.state === 'running') {
      const i = this.#running.indexOf(s);
      if (i >= 0) this.#running.splice(i, 1);
      this.#free(s);
    }
    s.state = 'gone';
    this.#seqs.delete(id);
    return true;
  }

  hasWork(): boolean {
    return this.#running.length > 0 || this.#waiting.size > 0 || this.#refused.length > 0;
  }

  /**
   * Progress of every sequence in the engine, running then waiting: prompt, output so far, engine
   * time since its first token and whether it has been prefilled (for SLO-aware placement), and,
   * when `reservedOf` knows it, the KV tokens reserved for the sequence's request.
   */
  sequences(reservedOf?: (requestId: string) => number | undefined): SequenceState[] {
    const out: SequenceState[] = [];
    for (const s of this.#seqs.values())
      out.push({
        inputTokens: s.prompt,
        generated: s.generated,
        decodeMs: s.decodeMs,
        prefilled: s.state === 'running' && s.computed >= s.prompt,
        reservedTokens: reservedOf?.(s.id),
      });
    return out;
  }

  /** Output tokens a sequence in the engine has generated so far, or undefined if it is not here. */
  generatedOf(id: string): number | undefined {
    return this.#seqs.get(id)?.generated;
  }

  step(): StepResult {
    const events: EngineEvent[] = [];
    for (const s of this.#refused) {
      s.state = 'gone';
      this.#seqs.delete(s.id);
      events.push({ kind: 'finished', id: s.id, generated: 0, ignored: true, contextExceeded: true });
    }
    this.#refused = [];
    const batch: Seq[] = [];
    if (this.#priority && this.#running.length > 1) this.#running.sort(byPriorityThenOrder);
    let budget = this.#budget;
    this.#prefillLeft = this.#prefillBudget;
    // S-LoRA's router admits into a running batch only every `admitEverySteps` decode steps.
    const mayAdmit =
      this.#admitEvery === 0 || this.#running.length === 0 || this.#decodesSinceAdmit >= this.#admitEvery;
    if (this.#decodeFirst) {
      budget = this.#scheduleDecodes(batch, events, budget);
      budget = this.#continuePrefills(batch, budget);
      if (mayAdmit) this.#admit(batch, events, budget);
    } else {
      budget = this.#continuePrefills(batch, budget);
      if (mayAdmit) this.#admit(batch, events, budget);
      if (batch.length === 0) this.#scheduleDecodes(batch, events, budget);
    }
    if (this.#admitEvery > 0) {
      if (events.some((e) => e.kind === 'scheduled')) this.#decodesSinceAdmit = 0;
      else if (batch.some((q) => q.stepTokens === 1 && q.computed >= q.prompt)) this.#decodesSinceAdmit++;
    }
    return this.#run(batch, events);
  }

  /**
   * Runs a batch chosen outside the engine — an optimal schedule being replayed — under the engine's
   * own rules, and prices it like any other step: the preemptions free their blocks first; a
   * waiting request admitted here allocates its whole prompt (as {@link step} does); a decoding
   * request processes exactly 1 token and takes a new block when it needs one; a prefill chunk
   * shorter than what remains needs `chunkedPrefill`; at most `maxNumSeqs` run, at most C tokens
   * and P prompt tokens are processed. The watermark is not applied: it is the built-in
   * scheduler's admission margin, not capacity. Nothing changes when the plan is rejected.
   *
   * @throws PerfError `INVALID_BATCH_PLAN` naming the sequence and the rule the plan breaks
   */
  stepPlanned(plan: PlannedBatch): StepResult {
    const fail = (message: string, subject?: string): never => {
      throw new PerfError(PerfErrorCode.INVALID_BATCH_PLAN, `planned step ${this.#steps + 1}: ${message}`, {
        ...(subject === undefined ? {} : { subject }),
      });
    };
    const preempt = new Set<Seq>();
    for (const id of plan.preempt ?? []) {
      const s = this.#seqs.get(id);
      if (s?.state !== 'running') fail(`cannot preempt "${id}": it is not running`, id);
      if (this.#evictionFree) fail(`cannot preempt "${id}": the engine is eviction-free`, id);
      preempt.add(s!);
    }
    let free = this.#freeBlocks + this.#freedBy(preempt);
    let running = this.#running.length - preempt.size;
    let tokens = 0;
    let prefill = 0;
    const seen = new Set<string>();
    for (const { id, tokens: t } of plan.run) {
      const s = this.#seqs.get(id);
      if (!s) return fail(`unknown sequence "${id}"`, id);
      if (seen.has(id) || preempt.has(s)) fail(`"${id}" is preempted or listed twice`, id);
      seen.add(id);
      if (!Number.isInteger(t) || t < 1)
        fail(`"${id}" must process a whole number ≥ 1 of tokens, got ${t}`, id);
      if (s.state === 'running' && s.computed >= s.prompt) {
        if (t !== 1) fail(`"${id}" is decoding: it processes 1 token, not ${t}`, id);
        if (s.computed + 1 > s.blocks * this.#blockSize && free-- <= 0)
          fail(`no free KV block for "${id}"'s decode`, id);
      } else {
        const left = s.prompt - s.computed;
        if (t > left) fail(`"${id}" has ${left} prompt tokens left, the plan gives ${t}`, id);
        if (t < left && !this.#chunked)
          fail(`a chunk of ${t} of "${id}"'s ${left} tokens needs chunkedPrefill`, id);
        if (s.state === 'waiting') {
          const need = this.#blocksFor(this.#evictionFree ? s.input + s.maxTokens - 1 : s.prompt);
          if (need > free) fail(`admitting "${id}" needs ${need} KV blocks, ${free} are free`, id);
          if (++running > this.config.maxNumSeqs)
            fail(`admitting "${id}" exceeds maxNumSeqs ${this.config.maxNumSeqs}`, id);
          free -= need;
        }
        prefill += t;
      }
      tokens += t;
    }
    if (tokens > this.#budget) fail(`${tokens} tokens exceed maxNumBatchedTokens ${this.#budget}`);
    if (prefill > this.#prefillBudget)
      fail(`${prefill} prompt tokens exceed maxNumPrefillTokens ${this.#prefillBudget}`);

    const events: EngineEvent[] = [];
    if (preempt.size > 0) {
      this.#running = this.#running.filter((s) => !preempt.has(s));
      for (const s of preempt) this.#preempt(s, events);
    }
    const batch: Seq[] = [];
    for (const { id, tokens: t } of plan.run) {
      const s = this.#seqs.get(id)!;
      if (s.state === 'waiting') {
        const need = this.#blocksFor(this.#evictionFree ? s.input + s.maxTokens - 1 : s.prompt);
        this.#waiting.remove(s);
        s.state = 'running';
        // A planned batch was chosen without the prefix cache: its prefills start from scratch.
        this.#take(s, [], need, false);
        this.#running.push(s);
        events.push({ kind: 'scheduled', id: s.id });
      } else if (s.computed >= s.prompt && s.computed + 1 > s.blocks * this.#blockSize) {
        this.#allocate(1);
        s.blocks++;
      }
      s.stepTokens = t;
      batch.push(s);
    }
    return this.#run(batch, events);
  }

  /**
   * Tells `listener` every block the prefix cache stores and evicts from now on (vLLM's KV cache
   * events); undefined stops telling. No-op without prefix caching.
   */
  watchCache(listener: PrefixCacheListener | undefined): void {
    if (this.#cache) this.#cache.listener = listener;
  }

  /** The last step's batch as a plan: its preemptions, then each request's tokens. */
  lastBatch(): PlannedBatch {
    return this.#lastBatch;
  }

  stats(): EngineStats {
    const used = this.#numBlocks - this.#freeBlocks;
    return {
      running: this.#running.length,
      waiting: this.#waiting.size,
      kvUsedTokens: used * this.#blockSize,
      kvCapacityTokens: this.#numBlocks * this.#blockSize,
      kvUsage: this.#numBlocks === 0 ? 0 : used / this.#numBlocks,
      blockSize: this.#blockSize,
      numGpuBlocks: this.#numBlocks,
      maxNumSeqs: this.config.maxNumSeqs,
      preemptionsTotal: this.#preemptions,
      promptTokensTotal: this.#promptTokens,
      generationTokensTotal: this.#generationTokens,
      requestsFinishedTotal: this.#finished,
      stepsTotal: this.#steps,
      prefixCacheQueriesTotal: this.#prefixQueries,
      prefixCacheHitsTotal: this.#prefixHits,
      prefixCaching: this.#caching,
    };
  }

  /**
   * The KV blocks as counted from the sequences that hold them, for checking the engine's own free
   * count: `inUse` blocks held by running sequences (a shared cached block once), `free` blocks
   * holding nothing, `cachedFree` free blocks still cached, and `refErrors` cached blocks whose
   * reference count differs from the number of running sequences holding them.
   */
  auditKvBlocks(): { total: number; inUse: number; free: number; cachedFree: number; refErrors: number } {
    let inUse = 0;
    const holders = new Map<CachedBlock, number>();
    for (const s of this.#running) {
      inUse += s.blocks - s.refs.length - s.idealBlocks;
      for (const b of s.refs) holders.set(b, (holders.get(b) ?? 0) + 1);
    }
    let refErrors = 0;
    for (const [b, n] of holders) if (b.refs !== n) refErrors++;
    inUse += holders.size;
    const cachedFree = this.#cache?.evictable ?? 0;
    return { total: this.#numBlocks, inUse, free: this.#freeBlocks - cachedFree, cachedFree, refErrors };
  }

  #blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.#blockSize);
  }

  /**
   * Takes `n` blocks from the free pool. Truly free blocks go first; past them, the least recently
   * freed cached blocks are evicted (callers check that `n` blocks are free).
   */
  #allocate(n: number): void {
    this.#freeBlocks -= n;
    const cache = this.#cache;
    if (cache) while (this.#freeBlocks < cache.evictable && cache.evictOldest());
  }

  /**
   * Admits `s` with `need` blocks, `hit` of them its prefix-cache hit (shared with whoever holds
   * them, taken off the free pool when free); its prefill starts after the hit. `looked` says
   * whether the cache was looked up (counted in the prefix-cache stats).
   */
  #take(s: Seq, hit: readonly CachedBlock[] | number, need: number, looked = true): void {
    const cache = this.#cache;
    const hits = typeof hit === 'number' ? hit : hit.length;
    if (cache && typeof hit !== 'number') {
      for (const b of hit) if (cache.acquire(b)) this.#freeBlocks--;
      s.refs = [...hit];
    } else {
      s.idealBlocks = hits;
    }
    if (this.#caching) {
      s.offered = hits;
      s.computed = hits * this.#blockSize;
      const first = s.cachedTokens === undefined;
      if (first) s.cachedTokens = s.computed;
      // vLLM counts the lookups of requests scheduled for the first time; a preempted request's
      // return goes to separate `preempted` stats it does not export.
      if (first && looked) {
        this.#prefixQueries += s.prompt;
        this.#prefixHits += s.computed;
      }
    }
    this.#allocate(need - hits);
    s.blocks = need;
  }

  /**
   * The longest run of `s`'s leading block hashes in the prefix cache. At most the prompt minus
   * one token hits (vLLM's `max_cache_hit_length`): the last prompt token is always computed, for
   * its logits, so a prompt wholly in the cache still prefills its last block.
   */
  #lookup(s: Seq): CachedBlock[] {
    if (!this.#cache || s.hashes.length === 0) return [];
    return this.#cache.match(s.hashes, Math.floor((s.prompt - 1) / this.#blockSize));
  }

  /** The ideal cache's run of `s`'s leading blocks, by the rule of the engine's own lookup; 0 without one. */
  #idealLookup(s: Seq): number {
    if (!this.#ideal || s.hashes.length === 0) return 0;
    return this.#ideal.match(s.hashes, Math.floor((s.prompt - 1) / this.#blockSize));
  }

  /** Registers the blocks `s` has filled since the last call under their hashes. */
  #offer(s: Seq): void {
    const full = Math.min(Math.floor(s.computed / this.#blockSize), s.hashes.length);
    const ideal = this.#ideal;
    if (ideal) {
      for (; s.offered < full; s.offered++) ideal.insert(s.hashes[s.offered]!);
      return;
    }
    const cache = this.#cache!;
    for (; s.offered < full; s.offered++) {
      const b = cache.insert(s.hashes[s.offered]!, s.hashes[s.offered - 1]);
      if (b) s.refs.push(b);
    }
  }

  /** Returns `s`'s blocks: its uncached ones to the free pool, its cached ones last block first. */
  #free(s: Seq): void {
    this.#freeBlocks += s.blocks - s.refs.length - s.idealBlocks;
    const cache = this.#cache;
    // Tail blocks are freed first so that they are evicted first and shared prefixes outlive them.
    if (cache) for (let i = s.refs.length - 1; i >= 0; i--) if (cache.release(s.refs[i]!)) this.#freeBlocks++;
    s.blocks = 0;
    s.refs = [];
    s.idealBlocks = 0;
    s.offered = 0;
  }

  /** Blocks that preempting every sequence of `seqs` would return to the free pool. */
  #freedBy(seqs: ReadonlySet<Seq>): number {
    let freed = 0;
    const drops = new Map<CachedBlock, number>();
    for (const s of seqs) {
      freed += s.blocks - s.refs.length - s.idealBlocks;
      for (const b of s.refs) drops.set(b, (drops.get(b) ?? 0) + 1);
    }
    for (const [b, n] of drops) if (b.refs === n) freed++;
    return freed;
  }

  /** Every running sequence in the decode phase gets one token, preempting the newest when out of blocks. */
  #scheduleDecodes(batch: Seq[], events: EngineEvent[], budget: number): number {
    const running = this.#running;
    for (let i = 0; i < running.length && budget > 0; i++) {
      const s = running[i]!;
      if (s.computed < s.prompt) continue;
      if (s.computed + 1 > s.blocks * this.#blockSize) {
        // Eviction-free sequences reserved their worst case, so only recompute can get here.
        if (this.#cheapestVictim) {
          if (!this.#evictCheapest(s, i, events)) break;
        } else {
          while (this.#freeBlocks === 0 && running.length - 1 > i) this.#preempt(running.pop()!, events);
          if (this.#freeBlocks === 0) {
            running.pop();
            this.#preempt(s, events);
            break;
          }
        }
        this.#allocate(1);
        s.blocks++;
      }
      s.stepTokens = 1;
      batch.push(s);
      budget--;
    }
    return budget;
  }

  /**
   * Frees a block for running[i] (`s`) by preempting, among `s` and the running sequences not yet
   * in this step's batch, the one with the fewest computed KV tokens (cheapest to refill; the newest
   * on a tie), until a block is free. False when `s` itself was the victim.
   */
  #evictCheapest(s: Seq, i: number, events: EngineEvent[]): boolean {
    const running = this.#running;
    while (this.#freeBlocks === 0) {
      let victim = i;
      for (let k = i + 1; k < running.length; k++)
        if (running[k]!.computed <= running[victim]!.computed) victim = k;
      const [v] = running.splice(victim, 1);
      this.#preempt(v!, events);
      if (v === s) return false;
    }
    return true;
  }

  /** Running sequences part-way through a chunked prefill continue, oldest first. */
  #continuePrefills(batch: Seq[], budget: number): number {
    if (!this.#chunked) return budget;
    for (const s of this.#running) {
      if (budget <= 0 || this.#prefillLeft <= 0) break;
      if (s.computed >= s.prompt) continue;
      const chunk = Math.min(s.prompt - s.computed, budget, this.#prefillLeft);
      s.stepTokens = chunk;
      batch.push(s);
      budget -= chunk;
      this.#prefillLeft -= chunk;
    }
    return budget;
  }

  /** Head-of-line admission from the waiting queue, as vLLM: stop at the first that does not fit. */
  #admit(batch: Seq[], events: EngineEvent[], budget: number): number {
    const maxSeqs = this.config.maxNumSeqs;
    for (;;) {
      const s = this.#waiting.peek();
      if (!s || this.#running.length >= maxSeqs) break;
      // vLLM v0 allocates the whole prompt at admission, also under chunked prefill.
      const need = this.#blocksFor(this.#evictionFree ? s.input + s.maxTokens - 1 : s.prompt);
      if (need > this.#numBlocks - this.#watermarkBlocks) {
        this.#waiting.pop();
        this.#ignore(s, events);
        continue;
      }
      const hit = this.#ideal ? this.#idealLookup(s) : this.#lookup(s);
      const hits = typeof hit === 'number' ? hit : hit.length;
      let taken = need - hits;
      if (typeof hit !== 'number') for (const b of hit) if (b.refs === 0) taken++;
      if (this.#freeBlocks - taken < this.#watermarkBlocks) break;
      if (this.#admitEvery > 0 && !this.#peakFits(s)) {
        // Alone it would outgrow the pool: S-LoRA would wait forever; finish it as a prompt that never fits.
        if (this.#running.length > 0) break;
        this.#waiting.pop();
        this.#ignore(s, events);
        continue;
      }
      const left = s.prompt - hits * this.#blockSize;
      let chunk = left;
      const room = Math.min(budget, this.#prefillLeft);
      if (chunk > room) {
        if (this.#chunked && room > 0) chunk = room;
        else if (batch.length === 0 && budget === this.#budget) chunk = left;
        else break;
      }
      this.#waiting.pop();
      s.state = 'running';
      this.#take(s, hit, need);
      s.stepTokens = chunk;
      this.#running.push(s);
      batch.push(s);
      events.push({ kind: 'scheduled', id: s.id });
      budget -= chunk;
      this.#prefillLeft -= chunk;
      if (budget <= 0) break;
    }
    return budget;
  }

  /**
   * S-LoRA's future-peak check (`_can_add_new_req` in its router's request queue): whether the
   * running sequences and `s`, each growing by a token per step to its final length (input +
   * `max_tokens` − 1 KV tokens) and freeing its memory when it gets there, ever need more KV than
   * the pool less the watermark. With the sequences sorted by tokens still to grow, longest first,
   * the peak is at one of their finishing times: when the i-th finishes, the first i hold their
   * current tokens plus its remaining growth. With blocks larger than a token, each live sequence
   * may waste up to a block less one token.
   */
  #peakFits(s: Seq): boolean {
    const seqs = [...this.#running, s].map((q) => {
      const now = Math.max(q.computed, q.prompt);
      return { now, left: Math.max(0, q.input + q.maxTokens - 1 - now) };
    });
    seqs.sort((a, b) => b.left - a.left);
    const capacity = (this.#numBlocks - this.#watermarkBlocks) * this.#blockSize;
    let held = 0;
    for (let i = 0; i < seqs.length; i++) {
      held += seqs[i]!.now;
      if (held + (i + 1) * (seqs[i]!.left + this.#blockSize - 1) > capacity) return false;
    }
    return true;
  }

  #preempt(s: Seq, events: EngineEvent[]): void {
    this.#free(s);
    s.state = 'waiting';
    s.prompt = s.input + s.generated;
    s.computed = 0;
    this.#waiting.push(s);
    this.#preemptions++;
    events.push({ kind: 'preempted', id: s.id });
  }

  #ignore(s: Seq, events: EngineEvent[]): void {
    s.state = 'gone';
    this.#seqs.delete(s.id);
    this.#finished++;
    events.push({ kind: 'finished', id: s.id, generated: s.generated, ignored: true });
  }

  /** Applies the batch: advances every sequence, emits its tokens, retires finished ones, prices the step. */
  #run(batch: Seq[], events: EngineEvent[]): StepResult {
    const decoding = this.#running.filter((s) => s.generated > 0);
    let decodeSeqs = 0;
    let prefillTokens = 0;
    let prefillChunkSq = 0;
    let kvTokensRead = 0;
    let finishedAny = false;
    const preempt: string[] = [];
    for (const e of events) if (e.kind === 'preempted') preempt.push(e.id);
    this.#lastBatch = {
      preempt,
      run: batch.filter((s) => s.state === 'running').map((s) => ({ id: s.id, tokens: s.stepTokens })),
    };
    for (const s of batch) {
      if (s.state !== 'running') continue;
      const t = s.stepTokens;
      const decoding = s.computed >= s.prompt;
      if (decoding) {
        decodeSeqs++;
        kvTokensRead += s.computed + 1;
      } else {
        prefillTokens += t;
        prefillChunkSq += t * t;
        kvTokensRead += s.computed;
        this.#promptTokens += t;
      }
      s.computed += t;
      s.stepTokens = 0;
      if (this.#caching && s.offered < s.hashes.length) this.#offer(s);
      if (s.computed < s.prompt) continue;
      s.generated++;
      this.#generationTokens++;
      if (s.generated === 1)
        events.push(
          this.#caching
            ? { kind: 'first-token', id: s.id, cachedTokens: s.cachedTokens ?? 0 }
            : { kind: 'first-token', id: s.id },
        );
      events.push({ kind: 'token', id: s.id, generated: s.generated });
      if (s.generated >= s.target) {
        this.#free(s);
        s.state = 'gone';
        this.#seqs.delete(s.id);
        this.#finished++;
        finishedAny = true;
        events.push(
          this.#caching
            ? { kind: 'finished', id: s.id, generated: s.generated, cachedTokens: s.cachedTokens ?? 0 }
            : { kind: 'finished', id: s.id, generated: s.generated },
        );
      }
    }
    if (finishedAny) this.#running = this.#running.filter((s) => s.state === 'running');
    const shape: BatchShape = { decodeSeqs, prefillTokens, prefillChunkSq, kvTokensRead };
    const durationMs = batch.length === 0 ? 0 : this.#jitter(this.config.costModel.stepMs(shape));
    if (batch.length > 0) this.#steps++;
    // Every sequence past its first token before the step waits it out, in the batch or stalled.
    for (const s of decoding) s.decodeMs += durationMs;
    return { durationMs, shape, events };
  }
}
