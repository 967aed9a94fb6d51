import { type LengthSpec, lengthSampler } from '@fairway/core';
import { z } from 'zod';
import { faultConfigSchema } from './faults.ts';
import { kvEventsConfigSchema } from './kv-events-config.ts';

const posInt = z.number().int().positive();

/** A `LengthSpec` of `@fairway/core` (or a bare token count), checked by building its sampler. */
const lengthSpecSchema = z
  .union([posInt.transform((value): LengthSpec => ({ kind: 'fixed', value })), z.custom<LengthSpec>()])
  .superRefine((spec, ctx) => {
    if (typeof spec !== 'object' || spec === null || typeof (spec as { kind?: unknown }).kind !== 'string') {
      ctx.addIssue({
        code: 'custom',
        message: 'must be a token count or a length distribution with a "kind"',
      });
      return;
    }
    try {
      if (!lengthSampler(spec)) ctx.addIssue({ code: 'custom', message: `unknown kind "${spec.kind}"` });
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
    }
  });

/**
 * Options of the simulated engine (`fairway engine-sim`), mirroring `vllm serve` flags where one
 * exists. The engine model's own options (`EngineConfig` in `@fairway/perf`) are passed through.
 */
export const engineSimOptionsSchema = z
  .object({
    /** Interface to listen on. @default '127.0.0.1' */
    host: z.string().min(1).default('127.0.0.1'),
    /** TCP port; 0 picks a free one. @default 0 */
    port: z.number().int().min(0).max(65535).default(0),
    /** Model preset of the engine model, e.g. `llama-2-7b`. @default 'llama-2-7b' */
    model: z.string().min(1).default('llama-2-7b'),
    /** Name clients use in `model` (`--served-model-name`). @default the `model` preset name */
    servedModelName: z.string().min(1).optional(),
    /** GPU preset, e.g. `A100-80GB`. @default 'A100-80GB' */
    gpu: z.string().min(1).default('A100-80GB'),
    /** Tensor-parallel degree. @default 1 */
    tp: posInt.default(1),
    /** KV capacity in tokens; overrides the one computed from GPU memory. */
    kvCapacityTokens: posInt.optional(),
    /** Tokens per KV block. @default 16 */
    blockSize: posInt.optional(),
    /** Most sequences in a batch (`--max-num-seqs`). @default 256 */
    maxNumSeqs: posInt.optional(),
    /** Most tokens in a step (`--max-num-batched-tokens`). */
    maxNumBatchedTokens: posInt.optional(),
    batchPolicy: z.enum(['prefill-priority', 'decode-priority']).optional(),
    chunkedPrefill: z.boolean().optional(),
    preemption: z.enum(['recompute', 'eviction-free']).optional(),
    /**
     * What the served model does, as vLLM's `--task` / `--runner`: `generate` serves chat and text
     * completions, `embed` serves `POST /v1/embeddings` (and refuses generation, as vLLM does).
     * @default 'generate'
     */
    task: z.enum(['generate', 'embed']).default('generate'),
    /** Length of an embedding model's vectors. @default 384 */
    embeddingDimensions: posInt.default(384),
    /**
     * The embedding model is trained for shorter vectors (Matryoshka): `dimensions` in a request
     * may ask for fewer. Without it, vLLM refuses `dimensions`. @default false
     */
    matryoshka: z.boolean().default(false),
    /** `--scheduling-policy`: `priority` orders the waiting queue by the request's `priority`. @default 'fcfs' */
    schedulingPolicy: z.enum(['fcfs', 'priority']).default('fcfs'),
    /** Longest prompt + output (`--max-model-len`). @default the model preset's, capped by KV capacity */
    maxModelLen: posInt.optional(),
    /** Model milliseconds per real millisecond; 10 runs ten times faster than the GPU would. @default 1 */
    speed: z.number().positive().default(1),
    /**
     * Coalesce each stream's chunks into one write every this many ms (one token per chunk still);
     * 0 writes each step's chunk when the step ends, for exact timing. Benchmarks with high speed
     * factors use it so the engine is not bound by one socket write per token. @default 0
     */
    streamFlushMs: z.number().nonnegative().default(0),
    /**
     * How far (real ms) the step schedule may fall behind the clock before it slips. A stall of
     * the machine shorter than this is caught up on the schedule, so model latencies do not see
     * it; a longer one delays the next step (and shows as queue and step time) instead of being
     * caught up in a burst of back-to-back steps. @default 50
     */
    maxLagMs: z.number().positive().default(50),
    /**
     * Local path of the model's Hugging Face `tokenizer.json`: prompts are counted with it over the
     * chat template, as vLLM does. @default a word-piece stand-in (see `wordPieceCounter`)
     */
    tokenizer: z.string().min(1).optional(),
    /**
     * vLLM's `--enable-prefix-caching`: prompts are hashed into chained block hashes and the engine
     * model keeps computed blocks cached for later prompts with the same prefix. (vLLM V1 turns it
     * on by default; the simulated engine keeps it off unless asked, as the engine model does.)
     * @default false
     */
    enablePrefixCaching: z.boolean().default(false),
    /**
     * vLLM's `--prefix-caching-hash-algo`: `sha256` hashes a JSON encoding of the prompt's tokens;
     * `sha256_cbor` hashes their token ids as vLLM does (CBOR, seeded by `PYTHONHASHSEED`), so
     * that a gateway that tokenizes a prompt through `/tokenize` computes the engine's block hashes.
     * @default 'sha256'
     */
    prefixCachingHashAlgo: z.enum(['sha256', 'sha256_cbor']).default('sha256'),
    /**
     * vLLM's `--kv-events-config` (field names as vLLM's `KVEventsConfig`): publish the prefix
     * cache's `BlockStored` / `BlockRemoved` events over ZMQ. @default off
     */
    kvEventsConfig: kvEventsConfigSchema.optional(),
    /**
     * vLLM's `--enable-prompt-tokens-details`: `usage.prompt_tokens_details.cached_tokens` is
     * reported when some of the prompt was found in the prefix cache. @default false
     */
    enablePromptTokensDetails: z.boolean().default(false),
    /** Seed of every random draw (output lengths, faults, ids). @default 0 */
    seed: z.number().int().nonnegative().default(0),
    /**
     * Natural output length of a request (before `max_tokens`) when neither the
     * `fairway_output_tokens` field nor the `x-fairway-output-tokens` header gives one.
     * @default uniform 16–512 tokens
     */
    outputTokens: lengthSpecSchema.default({ kind: 'uniform', min: 16, max: 512 }),
    /** Injected faults (all off by default); changeable at runtime via `POST /fairway/faults`. */
    faults: faultConfigSchema.default(faultConfigSchema.parse({})),
  })
  .strict();

/** Options of the simulated engine, as given. */
export type EngineSimOptionsInput = z.input<typeof engineSimOptionsSchema>;
/** Options of the simulated engine, with defaults applied. */
export type EngineSimOptions = z.output<typeof engineSimOptionsSchema>;
