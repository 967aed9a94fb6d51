import type { Usage } from './domain.ts';

/**
 * Cost of serving tokens, the quantity fairness is measured in (VTC section 4.2). A cost function
 * must be monotone in both arguments; VTC's counters grow by the cost divided by the flow's weight.
 */
export interface CostFunction {
  readonly name: string;
  /** Cost of a request with `nIn` prompt tokens and `nOut` output tokens. */
  cost(nIn: number, nOut: number): number;
}

/** Linear cost `wIn·nIn + wOut·nOut`; VTC's default weights are 1 and 2. */
export function linearCost(wIn = 1, wOut = 2): CostFunction {
  return {
    name: wIn === 1 && wOut === 2 ? 'linear' : `linear(${wIn},${wOut})`,
    cost: (nIn, nOut) => wIn * nIn + wOut * nOut,
  };
}

/**
 * VTC's profiled cost for Llama-2-7B on A10G (VTC appendix B.2):
 * `h(np, nq) = 2.1·np + nq + 0.04·np·nq + 0.032·nq² + 11.46`.
 * Charged incrementally, the marginal cost of the k-th output token is `h(np, k) − h(np, k−1)`.
 */
export const profiledCost: CostFunction = {
  name: 'profiled',
  cost: (np, nq) => 2.1 * np + nq + 0.04 * np * nq + 0.032 * nq * nq + 11.46,
};

/** Cost functions selectable by name in config and scenario files. */
export type CostFunctionName = 'linear' | 'profiled';

/** Resolves a cost function by name (`linear` uses `wIn`/`wOut`, default 1/2). */
export function costFunctionByName(name: CostFunctionName, wIn = 1, wOut = 2): CostFunction {
  switch (name) {
    case 'linear':
      return linearCost(wIn, wOut);
    case 'profiled':
      return profiledCost;
  }
}

/**
 * Relative cost of a prompt token read from the prefix cache, against one prefilled, when the
 * pool's performance model is not known: a cached token skips the prefill's matmuls but is still
 * read by attention. The weights derived from the built-in performance models lie between 0.0003
 * (70B) and 0.01 (7B on H100) (`cachedTokenWeightOf` in `@fairway/perf`); for hardware it does
 * not know, fairway charges ten times the largest of them rather than guess low.
 */
export const DEFAULT_CACHED_TOKEN_WEIGHT = 0.1;

/** Prompt tokens the engine served from its prefix cache, clamped to [0, prompt tokens]. */
export function cachedPromptTokens(usage: Usage): number {
  const c = usage.cachedTokens;
  if (c === undefined || !(c > 0)) return 0;
  return Math.min(Math.floor(c), Math.max(0, usage.inputTokens));
}

/**
 * Prompt tokens as fairness counters charge them: prefilled ones count 1, cached ones
 * `cachedWeight` (clamped to [0, 1], so a cached token never costs more than a prefilled one).
 */
export function chargedPromptTokens(usage: Usage, cachedWeight: number): number {
  const w = Math.min(1, Math.max(0, cachedWeight));
  return usage.inputTokens - (1 - w) * cachedPromptTokens(usage);
}
