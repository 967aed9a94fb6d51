/**
 * The contract of one simulated vLLM replica. The discrete-event simulator drives it in virtual time;
 * `fairway engine-sim` drives the same model in real time behind vLLM's HTTP API. The model never
 * reads a clock: `step()` says how long the step takes and the caller advances time.
 */

/** How the engine forms a batch (InferMax section 3, unified algorithm). */
export type BatchPolicy =
  /** vLLM default: a step runs either new prefills (priority) or the running decodes. */
  | 'prefill-priority'
  /** Sarathi-style hybrid batching: decodes first, chunked prefills fill the token budget. */
  | 'decode-priority';

/** What happens when KV blocks run out. */
export type PreemptionMode =
  /** vLLM: preempt the newest running request, free its blocks, recompute it later. */
  | 'recompute'
  /** Admit a request only if its worst case (input + max output) fits: never preempts. */
  | 'eviction-free';

/** Which running request a preemption evicts when KV blocks run out. */
export type PreemptionVictim =
  /** vLLM: the newest running request (the lowest-priority one under priority scheduling). */
  | 'newest'
  /**
   * InferMax section 4.5's finding: evict the request whose refill is cheapest — the fewest
   * computed KV tokens to recompute — so long requests are not thrown away; ties go to the newest.
   */
  | 'cheapest-refill';

/** Configuration of one engine (one replica, possibly tensor-parallel over several GPUs). */
export interface EngineConfig {
  /** GPU preset name, e.g. `A100-80GB`. */
  readonly gpu: string;
  /** Model preset name, e.g. `llama-2-7b`. */
  readonly model: string;
  /** Tensor-parallel degree (GPUs per replica). @default 1 */
  readonly tp?: number;
  /** KV capacity in tokens; overrides the value computed from GPU memory (e.g. VTC's 10,000). */
  readonly kvCapacityTokens?: number;
  /** Tokens per KV block. @default 16 */
  readonly blockSize?: number;
  /** Fraction of blocks kept free before admitting new prefills (vLLM's watermark). @default 0.01 */
  readonly watermark?: number;
  /** Most sequences in one batch. @default 256 */
  readonly maxNumSeqs?: number;
  /** Most tokens processed in one step. @default 8192 (2048 with chunked prefill) */
  readonly maxNumBatchedTokens?: number;
  /** @default 'prefill-priority' */
  readonly batchPolicy?: BatchPolicy;
  /**
   * Most prompt (prefill) tokens in one step: Sarathi's prefill budget P beside the step budget C
   * (`maxNumBatchedTokens`; InferMax section 3.1, Table 1: Sarathi C = 4096, P = 512).
   * @default maxNumBatchedTokens (P = C)
   */
  readonly maxNumPrefillTokens?: number;
  /** Split long prompts over several steps (Sarathi). @default false (true under decode-priority) */
  readonly chunkedPrefill?: boolean;
  /** @default 'recompute' */
  readonly preemption?: PreemptionMode;
  /** @default 'newest' */
  readonly preemptionVictim?: PreemptionVictim;
  /** Order the waiting queue by `priority` (lower first), as `--scheduling-policy priority`. @default false */
  readonly priorityScheduling?: boolean;
  /**
   * Link the replica's GPUs all-reduce over at TP > 1 (its cost is in the preset step cost).
   * @default NVLink where the GPU has it, else PCIe
   */
  readonly interconnect?: 'nvlink' | 'pcie';
  /** Cost-model override; defaults to the preset for (model, gpu, tp, interconnect). */
  readonly costModel?: StepCostModel;
  /**
   * Random jitter on every step's time, drawn from the RNG the engine is given (the simulator
   * forks it from the run's seed). @default off (`{ distribution: 'none' }`): a step takes exactly
   * its cost model's time, so fits and exact schedules see the model itself.
   */
  readonly stepNoise?: StepNoise;
  /**
   * Context length, tokens (vLLM's `--max-model-len`): a sequence whose prompt reaches it, or whose
   * prompt plus `max_tokens` exceeds it, is rejected as vLLM's server rejects it (HTTP 400).
   * @default the model preset's context length (unlimited for a model without a preset)
   */
  readonly maxModelLen?: number;
  /**
   * vLLM's automatic prefix caching (`--enable-prefix-caching`): full KV blocks are kept under the
   * chained hash of their tokens after their sequence leaves, and a sequence whose leading block
   * hashes ({@link EngineSeqInput.blockHashes}) are cached skips their prefill. vLLM V1 turns it on
   * by default; the model keeps it off unless asked, so every result obtained without it stands.
   * @default false
   */
  readonly enablePrefixCaching?: boolean;
  /**
   * S-LoRA's admission cadence (the router VTC runs on: `max_wait_tokens`, 10): while sequences
   * run, new ones are admitted only once at least this many decode steps have passed since the
   * last admission (an idle engine admits at once), and a sequence is admitted only if the batch's
   * future peak of KV use fits — every running and admitted sequence growing to its `max_tokens`,
   * each freeing its memory when it finishes. 0 keeps vLLM's admission: every step, the prompt
   * alone checked against free blocks. @default 0
   */
  readonly admitEverySteps?: number;
}

/** Distribution of the factor a step's time is multiplied by. */
export type StepNoiseDistribution =
  /** No jitter. */
  | 'none'
  /** exp(σ·z − σ²/2) with σ² = ln(1 + cv²): mean 1, right-skewed, never negative. */
  | 'lognormal'
  /** 1 + cv·z, floored at 0.05 (mean 1 up to the floor). */
  | 'normal';

/** Step-time noise: a multiplicative factor with mean 1 and coefficient of variation `cv`. */
export interface StepNoise {
  readonly distribution: StepNoiseDistribution;
  /** Coefficient of variation of the factor (std / mean). @default VLLM_STEP_JITTER_CV (0.10) */
  readonly cv?: number;
}

/** Time of one engine step, from the batch's shape (DESIGN.md "Performance models"). */
export interface StepCostModel {
  readonly name: string;
  /** Milliseconds for a step. */
  stepMs(shape: BatchShape): number;
}

/** What the cost model sees of a batch. */
export interface BatchShape {
  /** Sequences decoding one token this step. */
  readonly decodeSeqs: number;
  /** Prompt tokens prefilled this step (sum over chunks). */
  readonly prefillTokens: number;
  /** Sum over prefill chunks of chunk length squared (attention cost of prefill). */
  readonly prefillChunkSq: number;
  /** KV tokens read by the batch's attention (context of every sequence in the step). */
  readonly kvTokensRead: number;
}

/** A sequence handed to the engine. */
export interface EngineSeqInput {
  readonly id: string;
  readonly inputTokens: number;
  /** How many tokens the sequence will generate before it stops (EOS or `max_tokens`). */
  readonly outputTokens: number;
  /** `max_tokens`: the worst case the eviction-free variant reserves. */
  readonly maxTokens: number;
  /** vLLM priority, lower first (only with `priorityScheduling`). */
  readonly priority?: number;
  /** LoRA adapter / model name this sequence needs, if any. */
  readonly adapter?: string;
  /**
   * The sequence's identity for prefix caching: the hash of each full block of `blockSize` tokens,
   * chained as vLLM's are (block i's hash covers every token up to the end of block i, so equal
   * hashes mean equal prefixes). The prompt's full blocks come first; hashes past the prompt name
   * the blocks its answer will fill, when the caller knows them (a simulated conversation does).
   * The last, partial block has no hash and is never cached. Ignored without `enablePrefixCaching`.
   */
  readonly blockHashes?: readonly string[];
}

/** Something that happened to a sequence during a step; applied at the end of the step. */
export type EngineEvent =
  | { readonly kind: 'scheduled'; readonly id: string }
  | {
      readonly kind: 'first-token';
      readonly id: string;
      /** As `finished`'s: what the prefix cache served its prompt, known once it is prefilled. */
      readonly cachedTokens?: number;
    }
  | { readonly kind: 'token'; readonly id: string; readonly generated: number }
  | {
      readonly kind: 'finished';
      readonly id: string;
      readonly generated: number;
      /** True when the engine dropped the sequence because its prompt can never fit in the cache. */
      readonly ignored?: boolean;
      /**
       * True when the engine refused the sequence without running it: prompt plus `max_tokens` over
       * the context length (vLLM answers 400 `context_length_exceeded`).
       */
      readonly contextExceeded?: boolean;
      /**
       * Prompt tokens found in the prefix cache when the sequence was first scheduled (vLLM's
       * `num_cached_tokens`, reported as `usage.prompt_tokens_details.cached_tokens`). Present
       * only with `enablePrefixCaching`.
       */
      readonly cachedTokens?: number;
    }
  | { readonly kind: 'preempted'; readonly id: string };

/**
 * A batch chosen outside the engine (an optimal schedule replayed): which running requests to
 * preempt first, then how many tokens each request processes — a prefill chunk, or 1 for a decode.
 */
export interface PlannedBatch {
  readonly preempt?: readonly string[] | undefined;
  readonly run: readonly { readonly id: string; readonly tokens: number }[];
}

/** Result of one step. */
export interface StepResult {
  /** Duration of the step, ms. Zero when the engine had nothing to run. */
  readonly durationMs: number;
  readonly shape: BatchShape;
  /** Events in the order they happened. A `token` event is emitted for every generated token. */
  readonly events: readonly EngineEvent[];
}

/** Live counters and gauges, the numbers vLLM exports on `/metrics`. */
export interface EngineStats {
  readonly running: number;
  readonly waiting: number;
  /** KV tokens in use (allocated blocks × block size). */
  readonly kvUsedTokens: number;
  readonly kvCapacityTokens: number;
  /** Used / total blocks, 0–1 (`vllm:kv_cache_usage_perc`). */
  readonly kvUsage: number;
  readonly blockSize: number;
  readonly numGpuBlocks: number;
  readonly maxNumSeqs: number;
  readonly preemptionsTotal: number;
  /** Prompt tokens prefilled (recomputed ones included, prefix-cache hits not). */
  readonly promptTokensTotal: number;
  readonly generationTokensTotal: number;
  /**
   * Prompt tokens looked up in the prefix cache by sequences scheduled for the first time
   * (`vllm:prefix_cache_queries`); 0 without `enablePrefixCaching`.
   */
  readonly prefixCacheQueriesTotal: number;
  /** Of those, tokens found in the cache (`vllm:prefix_cache_hits`). */
  readonly prefixCacheHitsTotal: number;
  /** Whether the engine caches prefixes (`enable_prefix_caching` of `vllm:cache_config_info`). */
  readonly prefixCaching: boolean;
  readonly requestsFinishedTotal: number;
  readonly stepsTotal: number;
}

/** One replica's engine model. Implemented by `EngineModel` in `engine-model.ts`. */
export interface EngineModelApi {
  readonly config: Readonly<Required<Omit<EngineConfig, 'costModel' | 'kvCapacityTokens' | 'stepNoise'>>> & {
    readonly kvCapacityTokens: number;
    readonly costModel: StepCostModel;
    readonly stepNoise: Required<StepNoise>;
  };
  /** Adds a sequence to the waiting queue. Throws if the id is already present. */
  add(seq: EngineSeqInput): void;
  /** Removes a sequence wherever it is and frees its KV blocks; false if unknown. */
  abort(id: string): boolean;
  /** True when a step would do something. */
  hasWork(): boolean;
  /** Runs one step: forms the batch, returns its duration and the events it produces. */
  step(): StepResult;
  stats(): EngineStats;
}
