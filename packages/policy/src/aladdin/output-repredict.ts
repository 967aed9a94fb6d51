/**
 * Aladdin's re-prediction of an under-estimated output (section 4.3): a running request that has
 * not finished by its predicted output length is predicted again with the conditional average
 * output length of past requests with a similar input — the mean of the past outputs longer than
 * what it has generated so far.
 */

/** Past outputs kept per key by {@link OutputHistory}. @default 512 */
const DEFAULT_PER_KEY = 512;
/** Keys kept by {@link OutputHistory} (the oldest key is dropped first). @default 4096 */
const DEFAULT_MAX_KEYS = 4096;

/** The prompt-length bucket of a request (log2 of its input tokens, as Aladdin's predictor buckets). */
export function promptBucket(inputTokens: number): number {
  return Math.max(0, Math.floor(Math.log2(Math.max(1, inputTokens))));
}

/**
 * The conditional average output: the mean of the `outputs` longer than `generated` tokens, or
 * undefined when none is. Pure.
 */
export function conditionalMeanOutput(outputs: Iterable<number>, generated: number): number | undefined {
  let sum = 0;
  let n = 0;
  for (const o of outputs) {
    if (o > generated) {
      sum += o;
      n++;
    }
  }
  return n === 0 ? undefined : sum / n;
}

/**
 * The new output prediction, in tokens, of a request that has generated `generated` tokens, past
 * what was predicted for it: the conditional average when there is one, else twice what it has
 * generated (nothing longer was seen: assume it is half way); at least one more token, at most
 * `maxTokens`. Pure.
 */
export function repredictOutput(
  generated: number,
  maxTokens: number,
  conditionalMean: number | undefined,
): number {
  const guess = conditionalMean ?? 2 * generated;
  return Math.min(maxTokens, Math.max(generated + 1, Math.ceil(guess)));
}

/** Options of {@link OutputHistory}. */
export interface OutputHistoryOptions {
  /** Most recent outputs kept per key. @default 512 */
  readonly perKey?: number;
  /** Most keys kept; recording a new key past it drops the least recently recorded. @default 4096 */
  readonly maxKeys?: number;
}

/**
 * Recent output lengths per key (a gateway keys them by pool and {@link promptBucket}), bounded in
 * keys and per key, for {@link conditionalMeanOutput}. Deterministic: no clock, no randomness.
 */
export class OutputHistory {
  readonly #perKey: number;
  readonly #maxKeys: number;
  readonly #rings = new Map<string, { values: number[]; next: number }>();

  constructor(options: OutputHistoryOptions = {}) {
    this.#perKey = Math.max(1, Math.floor(options.perKey ?? DEFAULT_PER_KEY));
    this.#maxKeys = Math.max(1, Math.floor(options.maxKeys ?? DEFAULT_MAX_KEYS));
  }

  /** Records a finished request's output length under `key`. */
  record(key: string, outputTokens: number): void {
    let ring = this.#rings.get(key);
    if (ring === undefined) {
      if (this.#rings.size >= this.#maxKeys) {
        const oldest = this.#rings.keys().next().value;
        if (oldest !== undefined) this.#rings.delete(oldest);
      }
      ring = { values: [], next: 0 };
    } else this.#rings.delete(key);
    // Re-inserted: the map's order is least recently recorded first.
    this.#rings.set(key, ring);
    if (ring.values.length < this.#perKey) ring.values.push(outputTokens);
    else ring.values[ring.next] = outputTokens;
    ring.next = (ring.next + 1) % this.#perKey;
  }

  /** Mean of the outputs recorded under `key` longer than `generated`; undefined if none. */
  conditionalMean(key: string, generated: number): number | undefined {
    const ring = this.#rings.get(key);
    return ring === undefined ? undefined : conditionalMeanOutput(ring.values, generated);
  }

  /** Outputs recorded under `key` (at most `perKey`). */
  size(key: string): number {
    return this.#rings.get(key)?.values.length ?? 0;
  }
}
