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

/** Options of {@link solveGlobalSchedule}. */
export interface GlobalScheduleOptions {
  /** MILP solver; without one the EDF plan is used. */
  readonly solver?: MilpSolver | undefined;
  /** Work limits of the solve. @default { timeLimitS: 1 } */
  readonly budget?: MilpBudget | undefined;
  /** Most positions per virtual queue in the MILP (see `buildMilp`). */
  readonly maxPositions?: number | undefined;
}

/** Where the chosen plan came from. */
export type PlanSource =
  /** The MILP's solution (optimal, or the incumbent when a limit stopped it). */
  | 'milp'
  /** EDF list scheduling, because the MILP found no plan in budget or EDF's plan was cheaper. */
  | 'edf-fallback';

/** The global scheduler's decision. */
export interface GlobalSchedule {
  readonly plan: QueuePlan;
  readonly source: PlanSource;
  readonly evaluation: PlanEvaluation & { readonly feasible: true };
  /** How the MILP ended, when one was solved. */
  readonly solverStatus?: 'optimal' | 'feasible' | 'infeasible' | 'no-solution' | undefined;
  /** Why EDF was used, when it was. */
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
 * when the solver returns no plan within its budget (section 9). The EDF plan is always computed
 * (it is cheap) and kept when a time-limited incumbent is worse than it. Synchronous and pure apart
 * from the solver's own clock; call it off the request path.
 */
export function solveGlobalSchedule(
  instance: PlanInstance,
  options: GlobalScheduleOptions = {},
): GlobalSchedule {
  const edf = listPlan(instance, 'edf');
  const unplaced = new Set(edf.unplaced);
  const solvable = withoutGroups(instance, unplaced);
  const edfEval = feasible(evaluatePlan(solvable, edf.plan));
  const fallback = (reason: string, extra: Partial<GlobalSchedule> = {}): GlobalSchedule => ({
    plan: edf.plan,
    source: 'edf-fallback',
    evaluation: edfEval,
    fallbackReason: reason,
    unplaced: [...unplaced],
    ...extra,
  });
  if (solvable.groups.length === 0) return fallback('nothing to schedule');
  if (!options.solver) return fallback('no MILP solver configured');

  const model = buildMilp(solvable, { maxPositions: options.maxPositions });
  const milp = { binaries: model.binaries, rows: model.rows };
  const result = options.solver.solve(model.lp, options.budget ?? { timeLimitS: 1 });
  if (result.status !== 'optimal' && result.status !== 'feasible') {
    return fallback(`MILP ${result.status} (${result.detail})`, { solverStatus: result.status, milp });
  }
  const plan = model.decode(result.value);
  const evaluation = plan ? evaluatePlan(solvable, plan) : undefined;
  if (!plan || !evaluation?.feasible) {
    return fallback('MILP solution is not a valid plan', { solverStatus: result.status, milp });
  }
  if (result.status === 'feasible' && edfEval.objective < evaluation.objective) {
    return fallback('EDF plan is cheaper than the MILP incumbent', { solverStatus: result.status, milp });
  }
  return { plan, source: 'milp', evaluation, solverStatus: result.status, unplaced: [...unplaced], milp };
}
