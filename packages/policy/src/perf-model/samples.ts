import { z } from 'zod';

const count = z.number().int().nonnegative();
const positiveCount = z.number().int().positive();
const duration = z.number().nonnegative().finite();

/** One measured prefill batch: its total prompt tokens and how long it took. */
export const prefillSampleSchema = z.object({
  /** Prompt tokens processed in the batch (sum over requests). */
  inputTokens: positiveCount,
  /** Duration of the prefill iteration, ms. */
  ms: duration,
});
/** One measured prefill batch. */
export type PrefillSample = z.infer<typeof prefillSampleSchema>;

/** One measured decode iteration: batch size, total context and duration. */
export const decodeSampleSchema = z.object({
  /** Sequences decoding one token in the iteration. */
  batchSize: positiveCount,
  /** KV tokens the batch attends over (sum of every sequence's context: prompt + generated so far). */
  contextTokens: count,
  /** Duration of the decode iteration, ms. */
  ms: duration,
});
/** One measured decode iteration. */
export type DecodeSample = z.infer<typeof decodeSampleSchema>;

/** One KV-cache observation: a sequence's context length and the KV tokens it occupies. */
export const kvSampleSchema = z.object({
  /** Prompt plus generated tokens of the sequence. */
  contextTokens: count,
  /** KV-cache tokens it holds (allocated blocks × block size). */
  kvTokens: count,
});
/** One KV-cache observation. */
export type KvSample = z.infer<typeof kvSampleSchema>;

/**
 * One engine step as an engine model or vLLM's step log reports it. Structurally the simulator's
 * `BatchShape` plus its duration, so simulator step results can be passed as they are (policy does
 * not import the simulator).
 */
export interface StepSample {
  readonly decodeSeqs: number;
  readonly prefillTokens: number;
  readonly kvTokensRead: number;
  /** Duration of the step, ms. */
  readonly durationMs: number;
}

/** Prefill and decode samples split out of engine steps. */
export interface SplitSamples {
  readonly prefill: readonly PrefillSample[];
  readonly decode: readonly DecodeSample[];
  /** Steps that mixed prefill and decode (hybrid batching); Aladdin's two models cannot use them. */
  readonly mixed: number;
}

/**
 * Splits engine steps into the prefill-only and decode-only samples Aladdin's models are fitted on
 * (Aladdin section 3.2 models the two phases separately, as vLLM's default batching runs them).
 */
export function samplesFromSteps(steps: readonly StepSample[]): SplitSamples {
  const prefill: PrefillSample[] = [];
  const decode: DecodeSample[] = [];
  let mixed = 0;
  for (const s of steps) {
    if (s.durationMs <= 0) continue;
    if (s.prefillTokens > 0 && s.decodeSeqs === 0) {
      prefill.push({ inputTokens: s.prefillTokens, ms: s.durationMs });
    } else if (s.decodeSeqs > 0 && s.prefillTokens === 0) {
      decode.push({ batchSize: s.decodeSeqs, contextTokens: s.kvTokensRead, ms: s.durationMs });
    } else if (s.decodeSeqs > 0 && s.prefillTokens > 0) {
      mixed++;
    }
  }
  return { prefill, decode, mixed };
}
