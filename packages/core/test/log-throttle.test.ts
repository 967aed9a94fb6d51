import { describe, expect, it } from 'vitest';
import { type Logger, LogThrottle } from '../src/logger.ts';

function recorder(): { logger: Logger; lines: { obj: unknown; msg: string | undefined }[] } {
  const lines: { obj: unknown; msg: string | undefined }[] = [];
  const logger: Logger = {
    debug: () => undefined,
    info: () => undefined,
    warn: (obj, msg) => lines.push({ obj, msg }),
    error: () => undefined,
    child: () => logger,
  };
  return { logger, lines };
}

describe('LogThrottle', () => {
  it('writes the first line of a kind, then one per interval with the count held back', () => {
    let now = 0;
    const t = new LogThrottle(1000, () => now);
    const { logger, lines } = recorder();
    for (let i = 0; i < 500; i++) t.warn(logger, 'refused', { i }, 'refused');
    t.warn(logger, 'other', { i: -1 }, 'other kind');
    expect(lines).toEqual([
      { obj: { i: 0 }, msg: 'refused' },
      { obj: { i: -1 }, msg: 'other kind' },
    ]);
    now = 1000;
    t.warn(logger, 'refused', { i: 500 }, 'refused');
    expect(lines[2]).toEqual({ obj: { i: 500, suppressed: 499 }, msg: 'refused' });
  });
});
