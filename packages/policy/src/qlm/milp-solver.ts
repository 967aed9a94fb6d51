import type { Highs } from 'highs';
import { SolverError } from '../errors.ts';

/** Work limits of one MILP solve. */
export interface MilpBudget {
  /** Wall-clock limit inside the solver, seconds; 0 gives up at once. */
  readonly timeLimitS: number;
  /**
   * Branch-and-bound node limit: a deterministic budget (a time limit is not, so the simulator
   * should prefer this one for exact replays). @default unlimited
   */
  readonly maxNodes?: number | undefined;
  /** Relative optimality gap at which to stop. @default 1e-4 */
  readonly relativeGap?: number | undefined;
  /**
   * Run HiGHS's presolve. On the global scheduler's small, big-M-heavy models presolve and the
   * root heuristics cost more than the few branch-and-bound nodes a tight budget allows; off, a
   * node-limited solve is several times faster. @default true
   */
  readonly presolve?: boolean | undefined;
  /** Share of effort HiGHS spends in primal heuristics, 0–1. @default HiGHS's own (0.05) */
  readonly heuristicEffort?: number | undefined;
}

/** Outcome of a MILP solve, independent of the solver behind it. */
export type MilpResult =
  | {
      /** `optimal`: proven within the gap; `feasible`: a limit stopped the search with an incumbent. */
      readonly status: 'optimal' | 'feasible';
      readonly objective: number;
      readonly value: (name: string) => number | undefined;
      /** The solver's own status text. */
      readonly detail: string;
    }
  | {
      /** `infeasible`: proven; `no-solution`: a limit stopped the search before any incumbent. */
      readonly status: 'infeasible' | 'no-solution';
      readonly detail: string;
    };

/** A MILP solver taking CPLEX LP text. Injected so the scheduler stays pure and testable. */
export interface MilpSolver {
  /**
   * Solves `lp` within `budget`. `start` proposes values for some columns (a MIP start); the
   * solver completes and checks it, and keeps it as its first incumbent when it is feasible.
   */
  solve(lp: string, budget: MilpBudget, start?: ReadonlyMap<string, number>): MilpResult;
}

/**
 * A {@link MilpSolver} over HiGHS compiled to WebAssembly (the `highs` package). Load HiGHS once
 * (`await loadHighs()`, or {@link loadHighsSolver}) and reuse it; each solve is synchronous and
 * owns a fresh native model, disposed before it returns.
 *
 * @throws SolverError when HiGHS reports a load, model or solve error (a bug in the model text)
 */
export function highsSolver(highs: Highs): MilpSolver {
  const ms = highs.constants.modelStatus;
  // A node limit (mip_max_nodes) ends the search with `solutionLimit`.
  const limit = new Set<number>([
    ms.timeLimit,
    ms.iterationLimit,
    ms.objectiveBound,
    ms.objectiveTarget,
    ms.solutionLimit,
  ]);
  return {
    solve(lp, budget, start) {
      let model: ReturnType<Highs['createModel']>;
      try {
        model = highs.createModel({ format: 'lp', data: lp });
      } catch (err) {
        throw new SolverError('load error', 'HiGHS rejected the model text', { cause: err });
      }
      try {
        model.options.set({
          output_flag: false,
          time_limit: budget.timeLimitS,
          mip_rel_gap: budget.relativeGap ?? 1e-4,
        });
        if (budget.maxNodes !== undefined) model.options.set({ mip_max_nodes: budget.maxNodes });
        if (budget.presolve === false) model.options.set({ presolve: 'off' });
        if (budget.heuristicEffort !== undefined)
          model.options.set({ mip_heuristic_effort: budget.heuristicEffort });
        const index = new Map<string, number>();
        const numCols = model.getLp().numCols;
        for (let c = 0; c < numCols; c++) index.set(model.getColName(c), c);
        if (start && start.size > 0) {
          const indices: number[] = [];
          const values: number[] = [];
          for (const [name, v] of start) {
            const c = index.get(name);
            if (c === undefined) continue;
            indices.push(c);
            values.push(v);
          }
          model.setSolution({ indices: Int32Array.from(indices), values: Float64Array.from(values) });
        }
        model.run();
        const status = model.getModelStatus();
        const detail = statusName(highs, status);
        if (status === ms.infeasible || status === ms.unboundedOrInfeasible)
          return { status: 'infeasible', detail };
        const hasPrimal =
          model.info.get('primal_solution_status') === highs.constants.solutionStatus.feasible;
        if ((status === ms.optimal || limit.has(status) || status === ms.interrupted) && hasPrimal) {
          const colValue = model.getSolution().colValue;
          return {
            status: status === ms.optimal ? 'optimal' : 'feasible',
            objective: model.getObjectiveValue(),
            value: (name) => {
              const c = index.get(name);
              return c === undefined ? undefined : colValue[c];
            },
            detail,
          };
        }
        if (limit.has(status) || status === ms.interrupted || status === ms.unknown)
          return { status: 'no-solution', detail };
        throw new SolverError(detail, 'HiGHS could not solve the model');
      } finally {
        model.dispose();
      }
    },
  };
}

function statusName(highs: Highs, status: number): string {
  for (const [name, code] of Object.entries(highs.constants.modelStatus)) if (code === status) return name;
  return `status ${status}`;
}

/** Loads the HiGHS WebAssembly module (a one-time, local file read) and wraps it as a {@link MilpSolver}. */
export async function loadHighsSolver(): Promise<MilpSolver> {
  const { default: loadHighs } = await import('highs');
  return highsSolver(await loadHighs());
}
