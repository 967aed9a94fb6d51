import { type GlobalSchedule, solveGlobalSchedule } from './global-scheduler.ts';
import { buildPlanInstance, type EstimatorOptions } from './instance-builder.ts';
import { listPlan } from './list-planner.ts';
import type { MilpBudget, MilpSolver } from './milp-solver.ts';
import { planOperations, type ServingOp } from './operations.ts';
import {
  evaluatePlan,
  type PlanEvaluation,
  type PlanInstance,
  type QueuePlan,
  withoutGroups,
} from './plan-instance.ts';
import type { QlmState } from './qlm-state.ts';

/** Which planner orders the virtual queues. */
export type QueuePlanner =
  /** QLM: the MILP global scheduler with EDF fallback, run when a violation is predicted. */
  | 'qlm'
  /** Earliest deadline first over groups, every time (QLM's EDF baseline). */
  | 'edf'
  /** Arrival order over groups, every time (vLLM's FCFS baseline). */
  | 'fcfs';

/** Options of {@link planQueues}. */
export interface QueuePlannerOptions extends EstimatorOptions {
  /** @default 'qlm' */
  readonly planner?: QueuePlanner;
  readonly solver?: MilpSolver | undefined;
  readonly budget?: MilpBudget | undefined;
  readonly maxPositions?: number | undefined;
  /** See `OperationOptions.minSwapWorkFactor`. @default 0 */
  readonly minSwapWorkFactor?: number | undefined;
  /** See `OperationOptions.maxEvictions`. @default no bound */
  readonly maxEvictions?: number | undefined;
  /** See `GlobalScheduleOptions.headPositions`. @default undefined (whole queues) */
  readonly headPositions?: number | undefined;
}

/** A group the estimator expects to miss its SLO under the current virtual queues. */
export interface PredictedViolation {
  readonly groupId: string;
  /** Expected lateness of its worst member, seconds. */
  readonly latenessS: number;
}

/** The planner's output: new virtual queues and the operations that realise them. */
export interface QueueDecision {
  readonly queues: QueuePlan;
  readonly ops: readonly ServingOp[];
  /** Whether the global scheduler ran (QLM runs it only when a violation is predicted). */
  readonly replanned: boolean;
  /** Violations the estimator predicted for the queues as they were. */
  readonly predicted: readonly PredictedViolation[];
  /** The global scheduler's result, when it ran. */
  readonly schedule?: GlobalSchedule | undefined;
  readonly evaluation: PlanEvaluation;
  /** Groups no replica can serve (their model is loadable nowhere). */
  readonly unplaced: readonly string[];
}

/**
 * The current virtual queues with new groups appended EDF-style, so they can be evaluated: QLM
 * classifies a new request into a group and asks the estimator whether any SLO is now at risk.
 */
function currentPlan(state: QlmState, instance: PlanInstance): { plan: QueuePlan; unplaced: string[] } {
  const prefix: Record<string, string[]> = {};
  for (const r of state.replicas) {
    const running = instance.groups.find((g) => g.running && g.pinnedQueue === r.id);
    prefix[r.id] = [...(running ? [running.id] : []), ...(state.queues[r.id] ?? [])];
  }
  return listPlan(instance, 'edf', prefix);
}

function lateGroups(evaluation: PlanEvaluation): PredictedViolation[] {
  if (!evaluation.feasible) return [];
  return Object.entries(evaluation.groups)
    .filter(([, o]) => o.latenessS > 0)
    .map(([groupId, o]) => ({ groupId, latenessS: o.latenessS }));
}

/**
 * Predicts SLO violations for the virtual queues as they stand (new groups appended): any group
 * whose worst member's estimated TTFT passes its deadline (QLM section 4, "Handling new incoming
 * requests").
 */
export function predictViolations(state: QlmState, options: EstimatorOptions): PredictedViolation[] {
  const instance = buildPlanInstance(state, options);
  const current = currentPlan(state, instance);
  return lateGroups(evaluatePlan(withoutGroups(instance, new Set(current.unplaced)), current.plan));
}

/**
 * One planning round: QLM keeps the current virtual queues (new groups appended) unless the
 * estimator predicts a violation, in which case the global scheduler reorders them; the EDF and
 * FCFS baselines re-plan every round. The chosen queues are then turned into serving operations.
 */
export function planQueues(state: QlmState, options: QueuePlannerOptions): QueueDecision {
  const instance = buildPlanInstance(state, options);
  const planner = options.planner ?? 'qlm';
  let queues: QueuePlan;
  let unplaced: readonly string[];
  let replanned = false;
  let schedule: GlobalSchedule | undefined;
  let predicted: PredictedViolation[] = [];
  if (planner === 'qlm') {
    const current = currentPlan(state, instance);
    const evaluation = evaluatePlan(withoutGroups(instance, new Set(current.unplaced)), current.plan);
    predicted = lateGroups(evaluation);
    if (evaluation.feasible && predicted.length === 0) {
      queues = current.plan;
      unplaced = current.unplaced;
    } else {
      schedule = solveGlobalSchedule(instance, {
        solver: options.solver,
        budget: options.budget,
        maxPositions: options.maxPositions,
        headPositions: options.headPositions,
      });
      queues = schedule.plan;
      unplaced = schedule.unplaced;
      replanned = true;
    }
  } else {
    const list = listPlan(instance, planner);
    queues = list.plan;
    unplaced = list.unplaced;
    replanned = true;
  }
  const ops = planOperations(state, queues, {
    flags: options.flags,
    outputStats: options.outputStats,
    ...(options.minSwapWorkFactor !== undefined ? { minSwapWorkFactor: options.minSwapWorkFactor } : {}),
    ...(options.maxEvictions !== undefined ? { maxEvictions: options.maxEvictions } : {}),
  });
  const evaluation = evaluatePlan(withoutGroups(instance, new Set(unplaced)), queues);
  return { queues, ops, replanned, predicted, schedule, evaluation, unplaced };
}
