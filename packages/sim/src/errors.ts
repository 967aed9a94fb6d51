import { FairwayError } from '@fairway/core';

/** Stable codes of every error the simulator raises. */
export const SimErrorCode = {
  /** An engine configuration failed validation (see the message for the field). */
  ENGINE_CONFIG_INVALID: 'FAIRWAY_SIM_ENGINE_CONFIG_INVALID',
  /** No cost model or KV capacity can be derived for this (model, GPU, TP) combination. */
  NO_PRESET: 'FAIRWAY_SIM_NO_PRESET',
  /** A sequence was added to an engine that already holds one with the same id. */
  DUPLICATE_SEQUENCE: 'FAIRWAY_SIM_DUPLICATE_SEQUENCE',
  /** A sequence handed to an engine is malformed (negative or non-integer token counts). */
  INVALID_SEQUENCE: 'FAIRWAY_SIM_INVALID_SEQUENCE',
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

/** Base class of simulator errors: a stable code, the engine or request involved, and a cause. */
export class SimError extends FairwayError {
  override readonly name: string = 'SimError';
  /** Engine (replica) id or request id the error is about, when there is one. */
  readonly subject: string | undefined;

  constructor(code: SimErrorCode, message: string, options: { subject?: string; cause?: unknown } = {}) {
    super(code, message, { cause: options.cause });
    this.subject = options.subject;
  }
}
