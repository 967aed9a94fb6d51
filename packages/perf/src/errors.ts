import { FairwayError } from '@fairway/core';

/**
 * Stable codes of the errors engine models raise. The values are those they had when this code
 * lived in the simulator (`@fairway/sim`): a stable code does not change with the package.
 */
export const PerfErrorCode = {
  /** No cost model or KV capacity can be derived for this (model, GPU, TP) combination. */
  NO_PRESET: 'FAIRWAY_SIM_NO_PRESET',
  /** A sequence was added to an engine that already holds one with the same id. */
  DUPLICATE_SEQUENCE: 'FAIRWAY_SIM_DUPLICATE_SEQUENCE',
  /** A sequence handed to an engine is malformed (negative or non-integer token counts). */
  INVALID_SEQUENCE: 'FAIRWAY_SIM_INVALID_SEQUENCE',
  /** A planned batch breaks the engine's KV, budget or phase rules (replaying a schedule). */
  INVALID_BATCH_PLAN: 'FAIRWAY_SIM_INVALID_BATCH_PLAN',
} as const;
export type PerfErrorCode = (typeof PerfErrorCode)[keyof typeof PerfErrorCode];

/**
 * Base class of engine-model errors (and of the simulator's, which extend it): a stable code, the
 * engine or request involved, and a cause.
 */
export class PerfError extends FairwayError {
  override readonly name: string = 'PerfError';
  /** Engine (replica) id or request id the error is about, when there is one. */
  readonly subject: string | undefined;

  constructor(code: string, message: string, options: { subject?: string; cause?: unknown } = {}) {
    super(code, message, { cause: options.cause });
    this.subject = options.subject;
  }
}
