import { ConfigError, FairwayError, redactSecrets } from '@fairway/core';

/** Exit codes of the `fairway` command. */
export const ExitCode = {
  OK: 0,
  /** Something failed that is not the user's input: a bug or an environment problem. */
  INTERNAL: 1,
  /**
   * Bad input: unknown scenario, policy or option, an invalid or unreadable file, a port or address
   * the command cannot listen on.
   */
  USAGE: 2,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** A problem with what the user typed; printed as one line per problem, without a stack trace. */
export class UsageError extends FairwayError {
  override readonly name = 'UsageError';
  readonly problems: readonly string[];

  constructor(problems: readonly string[]) {
    super('FAIRWAY_CLI_USAGE', problems.join('\n'));
    this.problems = problems;
  }
}

/** Says why a server could not listen, naming the option that fixes it; undefined for other errors. */
function listenProblem(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  // The fields Node sets on a failed `listen`.
  const { code, syscall, address, port } = err as NodeJS.ErrnoException & { address?: string; port?: number };
  if (syscall !== 'listen') return undefined;
  const where = `${port === undefined ? 'the port' : `port ${port}`}${address === undefined ? '' : ` on ${address}`}`;
  switch (code) {
    case 'EADDRINUSE':
      return `${where} is already in use (set --port)`;
    case 'EADDRNOTAVAIL':
      return `cannot listen on ${address ?? 'that address'}: it is not an address of this host (set --host)`;
    case 'EACCES':
      return `not permitted to listen on ${where} (set --port to 1024 or above)`;
    default:
      return undefined;
  }
}

/**
 * Turns an error into the lines to print and the exit code: validation and usage errors give one
 * line per problem and exit 2, as does a server that cannot listen (busy port, foreign address);
 * anything else is internal (exit 1, message only unless `debug`). Secrets (URL passwords, tokens)
 * are redacted from every line.
 */
export function describeError(err: unknown, debug = false): { lines: string[]; code: ExitCode } {
  const d = describeUnredacted(err, debug);
  return { lines: d.lines.map(redactSecrets), code: d.code };
}

function describeUnredacted(err: unknown, debug: boolean): { lines: string[]; code: ExitCode } {
  const listen = listenProblem(err);
  if (listen !== undefined) return { lines: [`error: ${listen}`], code: ExitCode.USAGE };
  if (err instanceof UsageError)
    return { lines: err.problems.map((p) => `error: ${p}`), code: ExitCode.USAGE };
  if (err instanceof ConfigError) {
    const where = err.source ? `${err.source}: ` : '';
    return {
      lines: err.issues.map((i) => `error: ${where}${i.path ? `${i.path}: ` : ''}${i.message}`),
      code: ExitCode.USAGE,
    };
  }
  if (err instanceof FairwayError && /INVALID|UNKNOWN|UNREADABLE/.test(err.code))
    return { lines: err.message.split('\n').map((l) => `error: ${l}`), code: ExitCode.USAGE };
  const e = err instanceof Error ? err : new Error(String(err));
  return {
    lines: [`internal error: ${e.message}`, ...(debug && e.stack ? [e.stack] : [])],
    code: ExitCode.INTERNAL,
  };
}
