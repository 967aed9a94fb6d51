/** Mean and variance of a request group's output length, tokens (QLM section 6: μ_o, σ_o²). */
export interface LengthStats {
  readonly mean: number;
  readonly variance: number;
  /** Observations behind the numbers (0 for a prior). */
  readonly count: number;
}

/**
 * Output-length history per key (model, SLO class, token profile), kept with Welford's online
 * algorithm; QLM fits each group's μ_o and σ_o from the input/output history of its kind of request.
 * A pure data structure: the caller feeds completions and reads statistics.
 */
export class OutputLengthStats {
  readonly #prior: LengthStats;
  readonly #minCount: number;
  readonly #stats = new Map<string, { count: number; mean: number; m2: number }>();

  /**
   * @param prior what to assume for a key with too little history
   * @param minCount observations a key needs before its own statistics replace the prior. @default 5
   */
  constructor(prior: { mean: number; variance: number }, minCount = 5) {
    this.#prior = { mean: prior.mean, variance: prior.variance, count: 0 };
    this.#minCount = minCount;
  }

  /** Records one completed request's output length. */
  observe(key: string, outputTokens: number): void {
    const s = this.#stats.get(key) ?? { count: 0, mean: 0, m2: 0 };
    s.count++;
    const delta = outputTokens - s.mean;
    s.mean += delta / s.count;
    s.m2 += delta * (outputTokens - s.mean);
    this.#stats.set(key, s);
  }

  /** Statistics for `key`: its own once it has `minCount` observations, else the prior. */
  get(key: string): LengthStats {
    const s = this.#stats.get(key);
    if (!s || s.count < this.#minCount) return this.#prior;
    return { mean: s.mean, variance: s.count > 1 ? s.m2 / (s.count - 1) : 0, count: s.count };
  }
}
