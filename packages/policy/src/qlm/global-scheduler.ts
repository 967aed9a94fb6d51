import { PolicyInputError } from '../errors.ts';
import { listPlan } from './list-planner.ts';
import { buildMilp, type MilpTail } from './milp-model.ts';
import type { MilpBudget, MilpSolver } from './milp-solver.ts';
import {
  evaluatePlan,
  type PlanEvaluation,
  type PlanInstance,
  type QueuePlan,
  withoutGroups,
} from './plan-instance.ts';
import { improvePlan } from './plan-search.ts';

/** Options of {@link solveGlobalSchedule}. */
export interface GlobalScheduleOptions {
  /** MILP solver; without one the (improved) EDF plan is used. */
  readonly solver?: MilpSolver | undefined;
  /** Work limits of the solve. @default { timeLimitS: 1 } */
  readonly budget?: MilpBudget | undefined;
  /** Most positions per virtual queue in the MILP (see `buildMilp`). */
  readonly maxPositions?: number | undefined;
  /**
   * Improve the EDF plan by local search and hand it to the MILP as its first incumbent, so a
   * solve stopped by its budget is never worse than that plan. @default true
   */
  readonly warmStart?: boolean | undefined;
  /**
   * Rolling horizon: the MILP decides only the first `headPositions` groups of every virtual queue
   * of the starting plan (which groups run next, where, in what order, and which running groups
   * they evict), with each queue's remaining groups following in their starting order — their
   * lateness priced from the head's end. The model stays small however long the queues are, so a
   * node-limited solve explores it instead of stalling at the root. @default undefined (the
   * whole plan is one MILP)
   */
  readonly headPositions?: number | undefined;
}

/** Where the chosen plan came from. */
export type PlanSource =
  /** The MILP's solution: proven optimal, or an incumbent better than its starting plan. */
  | 'milp'
  /** The MILP ran but did not beat its starting plan (EDF improved by local search) within budget. */
  | 'warm-start'
  /** No MILP solution within budget (or no solver): EDF, improved by local search under `warmStart`. */
  | 'edf-fallback';

/** The global scheduler's decision. */
export interface GlobalSchedule {
  readonly plan: QueuePlan;
  readonly source: PlanSource;
  readonly evaluation: PlanEvaluation & { readonly feasible: true };
  /** Objective of the plain EDF plan, for comparison. */
  readonly edfObjective: number;
  /** How the MILP ended, when one was solved. */
  readonly solverStatus?: 'optimal' | 'feasible' | 'infeasible' | 'no-solution' | undefined;
  /** Why the MILP's solution was not used, when it was not. */
  readonly fallbackReason?: string | undefined;
  /** Groups no queue can serve (no replica can load their model). */
  readonly unplaced: readonly string[];
  /** Size of the MILP solved. */
  readonly milp?: { readonly binaries: number; readonly rows: number } | undefined;
}

function feasible(e: PlanEvaluation): PlanEvaluation & { feasible: true } {
  // The list planner honours every constraint it can; only a contradictory instance (two groups
  // pinned first on one queue) yields an invalid plan.
  if (!e.feasible)
    throw new PolicyInputError('solveGlobalSchedule', [{ path: 'instance', message: e.reason }]);
  return e;
}

/**
 * QLM's global scheduler (section 7): orders the request groups on the virtual queues to minimise
 * the SLO penalty, model swaps included, with a MILP, and falls back to earliest-deadline-first
 * when the solver returns no plan within its budget (section 9). The EDF plan, improved by local
 * search, is the MILP's first incumbent, so a budget-limited solve returns at least that plan.
 * Synchronous and pure apart from the solver's own clock; call it off the request path.
 */
export function solveGlobalSchedule(
  instance: PlanInstance,
  options: GlobalScheduleOptions = {},
): GlobalSchedule {
  const edf = listPlan(instance, 'edf');
  const unplaced = new Set(edf.unplaced);
  const solvable = withoutGroups(instance, unplaced);
  const edfEval = feasible(evaluatePlan(solvable, edf.plan));
  const warm = options.warmStart ?? true;
  const start = warm ? improvePlan(solvable, edf.plan) : { plan: edf.plan, evaluation: edfEval };
  const startEval = feasible(start.evaluation);
  const base = { edfObjective: edfEval.objective, unplaced: [...unplaced] };
  const fallback = (reason: string, extra: Partial<GlobalSchedule> = {}): GlobalSchedule => ({
    plan: start.plan,
    source: 'edf-fallback',
    evaluation: startEval,
    fallbackReason: reason,
    ...base,
    ...extra,
  });
  if (solvable.groups.length === 0) return fallback('nothing to schedule');
  if (!options.solver) return fallback('no MILP solver configured');

  const horizon =
    options.headPositions === undefined
      ? undefined
      : splitHorizon(solvable, start.plan, options.headPositions);
  const sub = horizon ? withoutGroups(solvable, horizon.tailIds) : solvable;
  const model = buildMilp(sub, {
    maxPositions: horizon ? (options.headPositions as number) + 1 : options.maxPositions,
    tails: horizon?.tails,
  });
  const milp = { binaries: model.binaries, rows: model.rows };
  const result = options.solver.solve(
    model.lp,
    options.budget ?? { timeLimitS: 1 },
    warm ? model.start(horizon ? horizon.heads : start.plan) : undefined,
  );
  if (result.status !== 'optimal' && result.status !== 'feasible') {
    return fallback(`MILP ${result.status} (${result.detail})`, { solverStatus: result.status, milp });
  }
  const decoded = model.decode(result.value);
  const plan =
    decoded && horizon
      ? Object.fromEntries(
          solvable.queues.map((q) => [q.id, [...(decoded[q.id] ?? []), ...(horizon.rest[q.id] ?? [])]]),
        )
      : decoded;
  const evaluation = plan ? evaluatePlan(solvable, plan) : undefined;
  if (!plan || !evaluation?.feasible) {
    return fallback('MILP solution is not a valid plan', { solverStatus: result.status, milp });
  }
  const eps = 1e-9 * Math.max(1, Math.abs(startEval.objective));
  const better = evaluation.objective < startEval.objective - eps;
  // A budget-limited incumbent that does not beat the start, or a proven optimum of a model whose
  // positions were too few for the start, loses to the starting plan.
  if ((result.status === 'feasible' && !better) || evaluation.objective > startEval.objective + eps) {
    return {
      plan: start.plan,
      source: 'warm-start',
      evaluation: startEval,
      solverStatus: result.status,
      fallbackReason: `MILP (${result.detail}) did not beat its starting plan`,
      milp,
      ...base,
    };
  }
  return { plan, source: 'milp', evaluation, solverStatus: result.status, milp, ...base };
}

/**
 * Splits a plan into the heads the rolling-horizon MILP decides (the first `head` groups of each
 * queue, and any group that must run first) and the fixed tails after them, with each tail
 * group's start offset from the head's end under the instance's service and swap times.
 */
function splitHorizon(
  instance: PlanInstance,
  plan: QueuePlan,
  head: number,
): {
  heads: QueuePlan;
  rest: Record<string, string[]>;
  tailIds: Set<string>;
  tails: MilpTail[];
} {
  const index = new Map(instance.groups.map((g, i) => [g.id, i]));
  const heads: Record<string, string[]> = {};
  const rest: Record<string, string[]> = {};
  const tailIds = new Set<string>();
  const tails: MilpTail[] = [];
  for (const [q, queue] of instance.queues.entries()) {
    const ids = plan[queue.id] ?? [];
    heads[queue.id] = ids.slice(0, head);
    const tail = ids.slice(head);
    rest[queue.id] = tail;
    if (tail.length === 0) continue;
    let t = 0;
    let model: string | undefined;
    const groups: MilpTail['groups'][number][] = [];
    for (const id of tail) {
      tailIds.add(id);
      const i = index.get(id) as number;
      const g = instance.groups[i] as PlanInstance['groups'][number];
      if (model !== undefined && g.model !== model) t += queue.drainS + (queue.swapS[g.model] ?? 0);
      model = g.model;
      groups.push({
        weight: g.weight,
        size: g.size,
        offsetS: (instance.lateOffsetS[i] as readonly number[])[q] as number,
        afterHeadS: t,
      });
      t += (instance.serviceS[i] as readonly number[])[q] as number;
    }
    const first = instance.groups[index.get(tail[0] as string) as number] as PlanInstance['groups'][number];
    tails.push({ queue: q, firstModel: first.model, groups });
  }
  return { heads, rest, tailIds, tails };
}
