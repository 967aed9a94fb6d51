import {
  type CostFunction,
  linearCost,
  type RequestDescriptor,
  type SloClass,
  type Usage,
} from '@fairway/core';
import { UnknownSloClassError } from './errors.ts';
import type { OrderingPolicy } from './ordering.ts';

/** Deadline of a request under its SLO class: arrival plus the class's TTFT target, ms. */
export function deadlineMs(req: RequestDescriptor, classes: ReadonlyMap<string, SloClass>): number {
  const cls = classes.get(req.sloClass);
  if (!cls) throw new UnknownSloClassError(req.sloClass, [...classes.keys()]);
  return req.arrivalMs + cls.ttftS * 1000;
}

/** Indexes SLO classes by name for {@link deadlineMs}. */
export function sloClassMap(classes: readonly SloClass[]): ReadonlyMap<string, SloClass> {
  return new Map(classes.map((c) => [c.name, c]));
}

/**
 * Earliest deadline first: one order by `arrival + class TTFT target`, the baseline QLM compares
 * against (QLM section 8, baseline 1) and its fallback when the global scheduler finds no plan in
 * time (QLM section 9). Counters are kept with `cost`, as under every policy.
 *
 * @throws UnknownSloClassError from `score` when a request names a class not in `sloClasses`
 */
export function edfPolicy(
  sloClasses: readonly SloClass[],
  cost: CostFunction = linearCost(),
): OrderingPolicy {
  const classes = sloClassMap(sloClasses);
  return {
    name: 'edf',
    mode: 'score',
    lift: 'none',
    flowOf: (req: RequestDescriptor) => req.tenant,
    score: (req: RequestDescriptor) => deadlineMs(req, classes),
    dispatchCost: (req: RequestDescriptor) => cost.cost(req.inputTokens, 0),
    outputCost: (req: RequestDescriptor, before: number, after: number) =>
      cost.cost(req.inputTokens, after) - cost.cost(req.inputTokens, before),
    finalCost: (_req: RequestDescriptor, usage: Usage) => cost.cost(usage.inputTokens, usage.outputTokens),
  };
}
