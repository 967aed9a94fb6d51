import { cachedPromptTokens, type Usage } from '@fairway/core';

/**
 * Each flow's recent share of prompt tokens the engines' prefix caches served, learned from the
 * engines' usage as requests settle (an exponentially weighted mean, the latest request weighing
 * `smoothing`). Counters charge a request's prompt at dispatch with this share predicted cached,
 * since the hit itself is known only when the engine answers; settlement corrects the charge to the
 * engine's count. The share comes only from engine usage, never from a request, and is kept for
 * at most `maxFlows` flows (the least recently updated forgotten first), so flows a client invents
 * cannot grow it without bound.
 */
export class CachedShareHistory {
  readonly #share = new Map<string, number>();
  readonly #maxFlows: number;
  readonly #smoothing: number;

  /**
   * @param maxFlows flows remembered. @default 10,000
   * @param smoothing weight of the latest request in the mean, in (0, 1]. @default 0.5
   */
  constructor(maxFlows = 10_000, smoothing = 0.5) {
    this.#maxFlows = maxFlows;
    this.#smoothing = smoothing;
  }

  /** Prompt tokens of a `inputTokens`-token prompt of `flow` predicted to come from the cache. */
  predict(flow: string, inputTokens: number): number {
    return (this.#share.get(flow) ?? 0) * inputTokens;
  }

  /** Learns from a settled request of `flow`: its prompt and the tokens the engine's cache served. */
  observe(flow: string, usage: Usage): void {
    if (!(usage.inputTokens > 0)) return;
    const share = cachedPromptTokens(usage) / usage.inputTokens;
    const before = this.#share.get(flow);
    const next = before === undefined ? share : before + this.#smoothing * (share - before);
    this.#share.delete(flow);
    this.#share.set(flow, next);
    if (this.#share.size > this.#maxFlows) {
      const oldest = this.#share.keys().next().value;
      if (oldest !== undefined) this.#share.delete(oldest);
    }
  }
}
