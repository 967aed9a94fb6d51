/** Stable error codes shared by every fairway package. */
export const ErrorCode = {
  CONFIG_INVALID: 'FAIRWAY_CONFIG_INVALID',
  CONFIG_UNREADABLE: 'FAIRWAY_CONFIG_UNREADABLE',
  SCENARIO_INVALID: 'FAIRWAY_SCENARIO_INVALID',
  UNKNOWN_PRESET: 'FAIRWAY_UNKNOWN_PRESET',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Base class for fairway errors: a stable code, a message a user can act on, and a cause. */
export class FairwayError extends Error {
  override readonly name: string = 'FairwayError';
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** A config or scenario file failed validation; `issues` name each offending field by path. */
export class ConfigError extends FairwayError {
  override readonly name = 'ConfigError';
  readonly issues: readonly { path: string; message: string }[];
  readonly source: string | undefined;

  constructor(
    code: ErrorCode,
    source: string | undefined,
    issues: readonly { path: string; message: string }[],
    options?: { cause?: unknown },
  ) {
    const where = source ? `${source}: ` : '';
    const lines = issues.map((i) => `  - ${i.path || '(root)'}: ${i.message}`).join('\n');
    super(code, `${where}invalid configuration\n${lines}`, options);
    this.issues = issues;
    this.source = source;
  }
}
