import type { Logger } from '@fairway/core';
import { UsageError } from './cli-error.ts';

/** How long a stopping command may take by default, ms. */
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 10_000;

/**
 * The shutdown bound, ms: `flag` (`--shutdown-timeout`), else `FAIRWAY_SHUTDOWN_TIMEOUT_MS`, else
 * {@link DEFAULT_SHUTDOWN_TIMEOUT_MS}. A value that is not a positive whole number is a usage error.
 */
export function shutdownTimeoutMs(env: Readonly<Record<string, string | undefined>>, flag?: number): number {
  if (flag !== undefined) {
    if (flag < 1) throw new UsageError(['--shutdown-timeout: must be at least 1 ms']);
    return flag;
  }
  const text = env.FAIRWAY_SHUTDOWN_TIMEOUT_MS;
  if (text === undefined || text === '') return DEFAULT_SHUTDOWN_TIMEOUT_MS;
  const ms = Number(text);
  if (!Number.isInteger(ms) || ms < 1)
    throw new UsageError([`FAIRWAY_SHUTDOWN_TIMEOUT_MS: must be a whole number of ms ≥ 1 (got "${text}")`]);
  return ms;
}

/** How a bounded shutdown ended: `clean` (exit 0), `failed` (its graceful part threw) or `forced` (out of time). */
export type ShutdownOutcome = 'clean' | 'failed' | 'forced';

/** What a command does to stop, and within what bound. */
export interface ShutdownOptions {
  /** The graceful part: stop accepting, let work in hand finish, say goodbye to servers. */
  readonly stop: () => Promise<void>;
  /**
   * Drops whatever `stop` is still waiting on (sockets, server connections) once the bound has
   * passed; given at most a second before the process exits anyway. @default nothing
   */
  readonly force?: () => Promise<void>;
  /** The bound on the graceful part, ms. */
  readonly timeoutMs: number;
  readonly logger: Logger;
}

/** How long `force` may take after the bound, ms: the process exits then whatever it is doing. */
const FORCE_GRACE_MS = 1000;

/**
 * Runs `stop` for at most `timeoutMs`; past that, runs `force` (for at most a second more) and
 * reports `forced`. Never waits longer than the bound plus that second, whatever servers do.
 */
export async function boundedShutdown(o: ShutdownOptions): Promise<ShutdownOutcome> {
  const timers: NodeJS.Timeout[] = [];
  const after = <T>(ms: number, value: T): Promise<T> =>
    new Promise((r) => {
      timers.push(setTimeout(() => r(value), ms));
    });
  try {
    const outcome = await Promise.race([
      o.stop().then(
        () => 'clean' as const,
        (err: unknown) => {
          o.logger.error({ err: err instanceof Error ? err.message : String(err) }, 'shutdown failed');
          return 'failed' as const;
        },
      ),
      after(o.timeoutMs, 'forced' as const),
    ]);
    if (outcome !== 'forced') return outcome;
    o.logger.error(
      { timeoutMs: o.timeoutMs },
      'shutdown did not finish in time: dropping the remaining connections',
    );
    await Promise.race([
      (o.force?.() ?? Promise.resolve()).catch(() => undefined),
      after(FORCE_GRACE_MS, undefined),
    ]);
    return 'forced';
  } finally {
    for (const t of timers) clearTimeout(t);
  }
}

/**
 * On SIGINT or SIGTERM, shuts down within the bound ({@link boundedShutdown}) and exits: 0 after a
 * clean stop, 1 otherwise. A second signal exits at once, with 1.
 */
export function stopOnSignals(o: ShutdownOptions): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals): void => {
    if (stopping) {
      o.logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    o.logger.info({ signal, timeoutMs: o.timeoutMs }, 'shutting down');
    void boundedShutdown(o).then((outcome) => process.exit(outcome === 'clean' ? 0 : 1));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}
