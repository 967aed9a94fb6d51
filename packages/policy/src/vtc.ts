import { type CostFunction, linearCost, type RequestDescriptor, type Usage } from '@fairway/core';
import { PolicyInputError } from './errors.ts';
import type { LiftMode, OrderingPolicy } from './ordering.ts';

/** Where VTC takes a request's output length from when it is dispatched (VTC section 4.4). */
export type OutputPrediction =
  /** Nothing is predicted: output is charged only as it streams (plain VTC, Algorithm 2). */
  | 'none'
  /** Mean of the flow's last five outputs (`SchedulingStore.predictedOutput`), VTC(predict). */
  | 'history'
  /** The true output length (`RequestDescriptor.outputTokens`), VTC(oracle). */
  | 'oracle';

/** Options of {@link vtcPolicy}. */
export interface VtcOptions {
  /** Cost of serving `h(n_in, n_out)` (VTC section 4.2). @default linearCost() (1, 2) */
  readonly cost?: CostFunction;
  /** Counter lift when a flow becomes backlogged; `none` makes the policy LCF. @default 'vtc' */
  readonly lift?: LiftMode;
  /** Weight of a tenant: its counter grows by cost ÷ weight (weighted VTC, section 4.3). @default 1 */
  readonly weightOf?: (tenant: string) => number;
  /** Output-length prediction charged at dispatch and corrected as tokens stream. @default 'none' */
  readonly prediction?: OutputPrediction;
  /** Policy name in reports. @default derived from the options */
  readonly name?: string;
}

/**
 * The Virtual Token Counter family (VTC paper, Algorithm 2 and section 4): the backlogged tenant
 * with the least counter is served next; counters grow by the cost of served tokens divided by the
 * tenant's weight, input at dispatch and output as it streams. With a prediction, the predicted
 * output is charged at dispatch, output beyond it as it streams, and the excess refunded at the
 * end (Algorithm 3). Pass the same `predictedOutput` to `dispatchCost` and `outputCost`.
 */
export function vtcPolicy(options: VtcOptions = {}): OrderingPolicy {
  const cost = options.cost ?? linearCost();
  const lift = options.lift ?? 'vtc';
  const prediction = options.prediction ?? 'none';
  const weightOf = options.weightOf;
  const weight = (tenant: string): number => {
    if (weightOf === undefined) return 1;
    const w = weightOf(tenant);
    if (!(w > 0) || !Number.isFinite(w)) {
      throw new PolicyInputError('vtcPolicy', [
        { path: `weights.${tenant}`, message: `must be a positive number, got ${w}` },
      ]);
    }
    return w;
  };
  const predicted = (req: RequestDescriptor, history: number | undefined): number => {
    let p = 0;
    if (prediction === 'oracle') p = req.outputTokens ?? history ?? 0;
    else if (prediction === 'history') p = history ?? 0;
    return Math.max(0, Math.min(p, req.maxTokens));
  };
  const base = lift === 'none' ? 'lcf' : 'vtc';
  const variant = prediction === 'history' ? '-predict' : prediction === 'oracle' ? '-oracle' : '';
  const weighted = weightOf !== undefined ? '-weighted' : '';
  return {
    name: options.name ?? `${base}${weighted}${variant}`,
    mode: 'fair',
    lift,
    flowOf: (req) => req.tenant,
    score: (req) => req.arrivalMs,
    dispatchCost: (req, history) => cost.cost(req.inputTokens, predicted(req, history)) / weight(req.tenant),
    outputCost: (req, before, after, history) => {
      const p = predicted(req, history);
      const from = Math.max(before, p);
      const to = Math.max(after, p);
      if (to <= from) return 0;
      return (cost.cost(req.inputTokens, to) - cost.cost(req.inputTokens, from)) / weight(req.tenant);
    },
    finalCost: (req, usage: Usage) => cost.cost(req.inputTokens, usage.outputTokens) / weight(req.tenant),
  };
}

/** Least Counter First: VTC's counters without the lift (the VTC paper's LCF baseline, section 5.1). */
export function lcfPolicy(cost?: CostFunction): OrderingPolicy {
  return vtcPolicy({ ...(cost ? { cost } : {}), lift: 'none' });
}

/** Weighted VTC (VTC section 4.3): tenant `t` gets a share proportional to `weightOf(t)`. */
export function weightedVtcPolicy(weightOf: (tenant: string) => number, cost?: CostFunction): OrderingPolicy {
  return vtcPolicy({ ...(cost ? { cost } : {}), weightOf });
}
