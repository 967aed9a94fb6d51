import type { Logger } from '@fairway/core';

/** Stops `stop` on SIGINT/SIGTERM, then exits. */
export function stopOnSignals(stop: () => Promise<void>, logger: Logger): void {
  const handler = (signal: string): void => {
    logger.info({ signal }, 'shutting down');
    stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGINT', handler);
  process.once('SIGTERM', handler);
}
