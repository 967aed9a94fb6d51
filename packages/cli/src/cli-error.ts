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
  /**
   * The environment refused: a file or folder that cannot be read or written, a server that cannot
   * be reached. The message names the path or address and the operating system's reason.
   */
  UNAVAILABLE: 3,
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

/** A failed system call as Node reports it (`fs`, `net`, `dns`): a code such as `ENOENT` and the call. */
type SystemError = NodeJS.ErrnoException & {
  code: string;
  syscall: string;
  address?: string;
  port?: number;
  hostname?: string;
  dest?: string;
};

function isSystemError(err: unknown): err is SystemError {
  if (!(err instanceof Error)) return false;
  const { code, syscall } = err as NodeJS.ErrnoException;
  return typeof code === 'string' && /^E[A-Z0-9]+$/.test(code) && typeof syscall === 'string';
}

/** The first system error in `err`'s `cause` chain (the error itself included), if any. */
function systemErrorIn(err: unknown): SystemError | undefined {
  const seen = new Set<unknown>();
  for (let e: unknown = err; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (isSystemError(e)) return e;
  }
  return undefined;
}

/**
 * The reasons of the codes whose Node message carries none (`connect ECONNREFUSED 127.0.0.1:6379`);
 * file-system messages carry their own (`ENOENT: no such file or directory, open 'x'`).
 */
const REASONS: Readonly<Record<string, string>> = {
  ENOENT: 'no such file or directory',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EEXIST: 'already exists',
  EISDIR: 'is a directory',
  ENOTDIR: 'not a directory',
  ENOSPC: 'no space left on device',
  EROFS: 'read-only file system',
  EMFILE: 'too many open files',
  EADDRINUSE: 'address already in use',
  EADDRNOTAVAIL: 'address not available on this host',
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by peer',
  ETIMEDOUT: 'timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'name lookup failed, try again',
};

/** What the failed call was doing, in words, by Node's `syscall`. */
const ACTIONS: Readonly<Record<string, string>> = {
  open: 'open',
  read: 'read',
  write: 'write',
  mkdir: 'create the folder',
  rmdir: 'remove the folder',
  unlink: 'remove',
  rename: 'rename',
  copyfile: 'copy',
  stat: 'inspect',
  lstat: 'inspect',
  access: 'access',
  scandir: 'list',
  chmod: 'change the mode of',
  connect: 'connect to',
  listen: 'listen on',
  bind: 'bind',
  getaddrinfo: 'resolve',
  spawn: 'run',
};

/** One line for a failed system call: what was attempted, on which path or address, and why. */
function describeSystemError(e: SystemError): string {
  const where =
    e.path !== undefined
      ? `${e.path}${e.dest !== undefined ? ` to ${e.dest}` : ''}`
      : e.address !== undefined
        ? `${e.address.includes(':') ? `[${e.address}]` : e.address}${e.port !== undefined ? `:${e.port}` : ''}`
        : (e.hostname ?? '');
  const reason = REASONS[e.code] ?? /^E[A-Z0-9]+: ([^,]+)/.exec(e.message)?.[1] ?? e.code;
  const action = ACTIONS[e.syscall] ?? e.syscall;
  return `cannot ${action}${where === '' ? '' : ` ${where}`}: ${reason} (${e.code})`;
}

/** Codes of the fairway errors that say a server could not be reached, not that fairway failed. */
const UNREACHABLE = /UNREACHABLE|TRANSPORT|CONNECTION_LOST/;

/**
 * Turns an error into the lines to print and the exit code: validation and usage errors give one
 * line per problem and exit 2, as does a server that cannot listen (busy port, foreign address); a
 * failed system call (a file that cannot be read or written, a server that refuses) or an
 * unreachable server is named with its path or address and the system's reason, exit 3; anything
 * else is internal (exit 1, message only unless `debug`). Secrets (URL passwords, tokens) are
 * redacted from every line.
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
  // A fairway error about a server says which one; its own message beats the socket's.
  if (err instanceof FairwayError && UNREACHABLE.test(err.code))
    return { lines: [`error: ${err.message}`], code: ExitCode.UNAVAILABLE };
  const system = systemErrorIn(err);
  if (system !== undefined)
    return {
      lines: [`error: ${describeSystemError(system)}`, ...(debug && system.stack ? [system.stack] : [])],
      code: ExitCode.UNAVAILABLE,
    };
  const e = err instanceof Error ? err : new Error(String(err));
  return {
    lines: [`internal error: ${e.message}`, ...(debug && e.stack ? [e.stack] : [])],
    code: ExitCode.INTERNAL,
  };
}
