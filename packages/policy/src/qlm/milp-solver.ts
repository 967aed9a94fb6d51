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
  solve(lp: string, budget: MilpBudget): MilpResult;
}

const LIMIT_STATUSES = new Set([
  'Time limit reached',
  'Iteration limit reached',
  'Bound on objective reached',
  'Target for objective reached',
  'Unknown',
]);

/**
 * A {@link MilpSolver} over HiGHS compiled to WebAssembly (the `highs` package). Load HiGHS once
 * with `await (await import('highs')).default()` — or {@link loadHighsSolver} — and reuse it; each
 * solve is synchronous and gets a fresh native instance.
 *
 * @throws SolverError when HiGHS reports a load, model or solve error (a bug in the model text)
 */
export function highsSolver(highs: Highs): MilpSolver {
  return {
    solve(lp, budget) {
      const options: Record<string, number | boolean | string> = {
        output_flag: false,
        time_limit: budget.timeLimitS,
        mip_rel_gap: budget.relativeGap ?? 1e-4,
      };
      if (budget.maxNodes !== undefined) options.mip_max_nodes = budget.maxNodes;
      let result: ReturnType<Highs['solve']>;
      try {
        result = highs.solve(lp, options);
      } catch (err) {
        throw new SolverError('exception', 'HiGHS rejected the model', { cause: err });
      }
      const status = result.Status;
      if (status === 'Infeasible' || status === 'Primal infeasible or unbounded') {
        return { status: 'infeasible', detail: status };
      }
      const hasIncumbent =
        typeof result.ObjectiveValue === 'number' && Number.isFinite(result.ObjectiveValue);
      if (status === 'Optimal' || (LIMIT_STATUSES.has(status) && hasIncumbent)) {
        const columns = result.Columns as Record<string, { Primal?: number }>;
        return {
          status: status === 'Optimal' ? 'optimal' : 'feasible',
          objective: result.ObjectiveValue,
          value: (name) => columns[name]?.Primal,
          detail: status,
        };
      }
      if (LIMIT_STATUSES.has(status)) return { status: 'no-solution', detail: status };
      throw new SolverError(status, 'HiGHS could not solve the model');
    },
  };
}

/** Loads the HiGHS WebAssembly module (a one-time, local file read) and wraps it as a {@link MilpSolver}. */
export async function loadHighsSolver(): Promise<MilpSolver> {
  const { default: loadHighs } = await import('highs');
  return highsSolver(await loadHighs());
}
