import { PolicyInputError } from '../errors.ts';
import { listPlan } from './list-planner.ts';
import { buildMilp } from './milp-model.ts';
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

  const model = buildMilp(solvable, { maxPositions: options.maxPositions });
  const milp = { binaries: model.binaries, rows: model.rows };
  const result = options.solver.solve(
    model.lp,
    options.budget ?? { timeLimitS: 1 },
    warm ? model.start(start.plan) : undefined,
  );
  if (result.status !== 'optimal' && result.status !== 'feasible') {
    return fallback(`MILP ${result.status} (${result.detail})`, { solverStatus: result.status, milp });
  }
  const plan = model.decode(result.value);
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
