import {
  evaluatePlan,
  normalizeKindOrder,
  type PlanEvaluation,
  type PlanInstance,
  type QueuePlan,
} from './plan-instance.ts';

/** Options of {@link improvePlan}. */
export interface PlanSearchOptions {
  /** Most full passes over the groups. @default 20 */
  readonly maxPasses?: number;
}

/**
 * Local search over plans: each group in turn is taken out and re-inserted at the position, on
 * any queue it may use, that lowers the plan's objective most; passes repeat until none does.
 * It only ever improves `plan` (moving a group ahead of a running pseudo-group is an eviction),
 * and it gives the MILP a good starting incumbent on instances too large to solve in budget.
 */
export function improvePlan(
  instance: PlanInstance,
  plan: QueuePlan,
  options: PlanSearchOptions = {},
): { plan: QueuePlan; evaluation: PlanEvaluation } {
  const maxPasses = options.maxPasses ?? 20;
  const queues = instance.queues.map((q) => q.id);
  let current = normalizeKindOrder(
    instance,
    Object.fromEntries(queues.map((q) => [q, [...(plan[q] ?? [])]])),
  ) as Record<string, string[]>;
  const first = evaluatePlan(instance, current);
  if (!first.feasible) return { plan, evaluation: first };
  let best: PlanEvaluation & { feasible: true } = first;
  const movable = instance.groups.filter((g) => !g.pinnedFirst).map((g) => g.id);
  const pinned = new Map(instance.groups.map((g) => [g.id, g.pinnedQueue]));

  for (let pass = 0; pass < maxPasses; pass++) {
    let improved = false;
    for (const id of movable) {
      const from = queues.find((q) => current[q]?.includes(id));
      if (from === undefined) continue;
      const without: Record<string, string[]> = {
        ...current,
        [from]: (current[from] as string[]).filter((g) => g !== id),
      };
      let choice:
        | { plan: Record<string, string[]>; evaluation: PlanEvaluation & { feasible: true } }
        | undefined;
      for (const q of queues) {
        const pin = pinned.get(id);
        if (pin !== undefined && pin !== q) continue;
        const base = without[q] as string[];
        for (let pos = 0; pos <= base.length; pos++) {
          const candidate = normalizeKindOrder(instance, {
            ...without,
            [q]: [...base.slice(0, pos), id, ...base.slice(pos)],
          }) as Record<string, string[]>;
          const e = evaluatePlan(instance, candidate);
          if (!e.feasible) continue;
          const bar = choice?.evaluation.objective ?? best.objective;
          if (e.objective < bar - 1e-9 * Math.max(1, Math.abs(bar)))
            choice = { plan: candidate, evaluation: e };
        }
      }
      if (choice) {
        current = choice.plan;
        best = choice.evaluation;
        improved = true;
      }
    }
    if (!improved) break;
  }
  return { plan: current, evaluation: best };
}
