import { FairwayError, formatPath } from '@fairway/core';
import type { z } from 'zod';

/** Stable error codes of the scheduling store. */
export const StoreErrorCode = {
  /** An argument failed validation; `issues` name the offending fields. */
  INPUT_INVALID: 'FAIRWAY_STORE_INPUT_INVALID',
  /** A Lua script found the stored state inconsistent (a bug or a foreign writer under the prefix). */
  STATE_CORRUPT: 'FAIRWAY_STORE_STATE_CORRUPT',
  /** A Lua script received arguments it cannot interpret (client and script versions disagree). */
  SCRIPT_ARGS: 'FAIRWAY_STORE_SCRIPT_ARGS',
  /** Redis answered with something the typed wrapper cannot decode. */
  REPLY_INVALID: 'FAIRWAY_STORE_REPLY_INVALID',
  /** The store's state was written by another key layout version (see `STORE_LAYOUT_VERSION`). */
  LAYOUT_MISMATCH: 'FAIRWAY_STORE_LAYOUT_MISMATCH',
  /**
   * The store's state vanished (its epoch marker is missing or was re-established by another
   * dispatcher since this one last saw it: Redis restarted without persistence, or was flushed).
   * Nothing was changed; the caller re-establishes the epoch (`adoptEpoch`), puts back what it
   * holds (`restore`) and retries.
   */
  STATE_LOST: 'FAIRWAY_STORE_STATE_LOST',
  /** The store was used after `close()`. */
  CLOSED: 'FAIRWAY_STORE_CLOSED',
} as const;
export type StoreErrorCode = (typeof StoreErrorCode)[keyof typeof StoreErrorCode];

/** Base class of every store error: a stable code, the operation that failed, and a cause. */
export class StoreError extends FairwayError {
  override readonly name: string = 'StoreError';
  /** Store operation (`admit`, `dispatch`, …) that failed. */
  readonly operation: string;

  constructor(code: StoreErrorCode, operation: string, message: string, options?: { cause?: unknown }) {
    super(code, `${operation}: ${message}`, options);
    this.operation = operation;
  }
}

/** An argument to a store operation is invalid; the message names every offending field. */
export class StoreInputError extends StoreError {
  override readonly name = 'StoreInputError';
  readonly issues: readonly { readonly path: string; readonly message: string }[];

  constructor(operation: string, issues: readonly { path: string; message: string }[]) {
    super(
      StoreErrorCode.INPUT_INVALID,
      operation,
      `invalid input\n${issues.map((i) => `  - ${i.path || '(root)'}: ${i.message}`).join('\n')}`,
    );
    this.issues = issues;
  }
}

/** A Lua script returned a negative error code (see {@link scriptErrorFromCode}). */
export class StoreScriptError extends StoreError {
  override readonly name = 'StoreScriptError';
  /** Versioned script name, e.g. `dispatch:1`. */
  readonly script: string;
  /** The negative integer the script returned. */
  readonly scriptCode: number;

  constructor(code: StoreErrorCode, script: string, scriptCode: number, message: string) {
    super(code, script, message);
    this.script = script;
    this.scriptCode = scriptCode;
  }
}

/** Negative integers the Lua scripts return; mapped to typed errors by {@link scriptErrorFromCode}. */
export const ScriptErrorCode = {
  STATE_CORRUPT: -1,
  BAD_ARGUMENTS: -2,
  /** The epoch the caller passed is not the store's: its state was lost since (see `STATE_LOST`). */
  STATE_LOST: -3,
} as const;

/** Maps a script's negative return code to a typed error (the one place that knows the codes). */
export function scriptErrorFromCode(script: string, code: number, detail = ''): StoreScriptError {
  const suffix = detail ? ` (${detail})` : '';
  switch (code) {
    case ScriptErrorCode.STATE_CORRUPT:
      return new StoreScriptError(
        StoreErrorCode.STATE_CORRUPT,
        script,
        code,
        `stored scheduling state is inconsistent${suffix}`,
      );
    case ScriptErrorCode.BAD_ARGUMENTS:
      return new StoreScriptError(
        StoreErrorCode.SCRIPT_ARGS,
        script,
        code,
        `script rejected its arguments${suffix}`,
      );
    case ScriptErrorCode.STATE_LOST:
      return new StoreScriptError(
        StoreErrorCode.STATE_LOST,
        script,
        code,
        `the store's state was lost (its epoch changed)${suffix}`,
      );
    default:
      return new StoreScriptError(
        StoreErrorCode.REPLY_INVALID,
        script,
        code,
        `unknown script code ${code}${suffix}`,
      );
  }
}

/** Validates `data` with `schema`, throwing a {@link StoreInputError} that names each bad field. */
export function parseInput<S extends z.ZodType>(operation: string, schema: S, data: unknown): z.infer<S> {
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  throw new StoreInputError(
    operation,
    result.error.issues.map((i) => ({ path: formatPath(i.path), message: i.message })),
  );
}
