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
