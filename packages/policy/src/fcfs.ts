import { type CostFunction, linearCost, type RequestDescriptor, type Usage } from '@fairway/core';
import type { OrderingPolicy } from './ordering.ts';

/**
 * First come, first served: one global order by arrival, as vLLM's own queue. Counters are still
 * kept (with the given cost function) so service is measured the same way under every policy.
 */
export function fcfsPolicy(cost: CostFunction = linearCost()): OrderingPolicy {
  return {
    name: 'fcfs',
    mode: 'score',
    lift: 'none',
    flowOf: (req: RequestDescriptor) => req.tenant,
    score: (req: RequestDescriptor) => req.arrivalMs,
    dispatchCost: (req: RequestDescriptor) => cost.cost(req.inputTokens, 0),
    outputCost: (req: RequestDescriptor, before: number, after: number) =>
      cost.cost(req.inputTokens, after) - cost.cost(req.inputTokens, before),
    finalCost: (_req: RequestDescriptor, usage: Usage) => cost.cost(usage.inputTokens, usage.outputTokens),
  };
}
