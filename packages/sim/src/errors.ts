import { PerfError } from '@fairway/perf';

/** Stable codes of every error the simulator raises (its engine models' are `PerfErrorCode`). */
export const SimErrorCode = {
  /** The simulation input is malformed (unsorted arrivals, unknown engine, duplicate ids). */
  RUN_INPUT_INVALID: 'FAIRWAY_SIM_RUN_INPUT_INVALID',
  /** A planned batch breaks the engine's KV, budget or phase rules (replaying a schedule). */
  INVALID_BATCH_PLAN: 'FAIRWAY_SIM_INVALID_BATCH_PLAN',
  /** An instance is larger than the optimal-schedule solver accepts (the message names the limit). */
  INSTANCE_TOO_LARGE: 'FAIRWAY_SIM_INSTANCE_TOO_LARGE',
  /** The optimal-schedule solver found no schedule within its budget. */
  NO_SCHEDULE: 'FAIRWAY_SIM_NO_SCHEDULE',
} as const;
export type SimErrorCode = (typeof SimErrorCode)[keyof typeof SimErrorCode];

/**
 * Base class of simulator errors: a stable code, the engine or request involved, and a cause. It
 * extends the engine models' `PerfError`, so one `instanceof PerfError` catches both.
 */
export class SimError extends PerfError {
  override readonly name: string = 'SimError';

  constructor(code: SimErrorCode, message: string, options: { subject?: string; cause?: unknown } = {}) {
    super(code, message, options);
  }
}
