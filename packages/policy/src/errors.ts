import { FairwayError, formatPath } from '@fairway/core';
import type { z } from 'zod';

/** Stable error codes of the policy package. */
export const PolicyErrorCode = {
  /** An argument failed validation; `issues` name the offending fields. */
  INPUT_INVALID: 'FAIRWAY_POLICY_INPUT_INVALID',
  /** A fit had too few samples or samples that cannot determine the coefficients. */
  FIT_UNDERDETERMINED: 'FAIRWAY_POLICY_FIT_UNDERDETERMINED',
  /** A request names an SLO class the policy was not configured with. */
  UNKNOWN_SLO_CLASS: 'FAIRWAY_POLICY_UNKNOWN_SLO_CLASS',
  /** The MILP solver failed in a way that is not a timeout or an infeasible model. */
  SOLVER_FAILED: 'FAIRWAY_POLICY_SOLVER_FAILED',
} as const;
export type PolicyErrorCode = (typeof PolicyErrorCode)[keyof typeof PolicyErrorCode];

/** Base class of policy errors: a stable code, a message a user can act on, and a cause. */
export class PolicyError extends FairwayError {
  override readonly name: string = 'PolicyError';

  constructor(code: PolicyErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** An argument to a policy function is invalid; the message names every offending field. */
export class PolicyInputError extends PolicyError {
  override readonly name = 'PolicyInputError';
  /** Function or option set that rejected its input, e.g. `fitDecodeModel`. */
  readonly operation: string;
  readonly issues: readonly { readonly path: string; readonly message: string }[];

  constructor(operation: string, issues: readonly { path: string; message: string }[]) {
    super(
      PolicyErrorCode.INPUT_INVALID,
      `${operation}: invalid input\n${issues.map((i) => `  - ${i.path || '(root)'}: ${i.message}`).join('\n')}`,
    );
    this.operation = operation;
    this.issues = issues;
  }
}

/** A least-squares fit cannot determine its coefficients (too few or degenerate samples). */
export class FitError extends PolicyError {
  override readonly name = 'FitError';
  /** What was being fitted, e.g. `decode iteration time`. */
  readonly target: string;
  readonly samples: number;

  constructor(target: string, samples: number, message: string) {
    super(PolicyErrorCode.FIT_UNDERDETERMINED, `${target}: ${message} (${samples} samples)`);
    this.target = target;
    this.samples = samples;
  }
}

/** A request's SLO class is not among the classes a policy was built with. */
export class UnknownSloClassError extends PolicyError {
  override readonly name = 'UnknownSloClassError';
  readonly sloClass: string;
  readonly known: readonly string[];

  constructor(sloClass: string, known: readonly string[]) {
    super(
      PolicyErrorCode.UNKNOWN_SLO_CLASS,
      `unknown SLO class "${sloClass}" (known: ${known.join(', ') || 'none'})`,
    );
    this.sloClass = sloClass;
    this.known = known;
  }
}

/** The MILP solver reported an error (not a timeout and not infeasibility). */
export class SolverError extends PolicyError {
  override readonly name = 'SolverError';
  /** Status string the solver reported. */
  readonly status: string;

  constructor(status: string, message: string, options?: { cause?: unknown }) {
    super(PolicyErrorCode.SOLVER_FAILED, `MILP solver: ${message} (status ${status})`, options);
    this.status = status;
  }
}

/** Validates `data` with `schema`, throwing a {@link PolicyInputError} that names each bad field. */
export function parseInput<S extends z.ZodType>(operation: string, schema: S, data: unknown): z.infer<S> {
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  throw new PolicyInputError(
    operation,
    result.error.issues.map((i) => ({ path: formatPath(i.path), message: i.message })),
  );
}
