import type { Logger } from '@fairway/core';

/** One line a {@link RecordingLogger} received. */
export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  obj: object | string;
  msg: string | undefined;
}

/** A logger that keeps what it is told, so tests can assert that a reason was logged. */
export class RecordingLogger implements Logger {
  readonly lines: LogLine[] = [];
  debug(obj: object | string, msg?: string): void {
    this.lines.push({ level: 'debug', obj, msg });
  }
  info(obj: object | string, msg?: string): void {
    this.lines.push({ level: 'info', obj, msg });
  }
  warn(obj: object | string, msg?: string): void {
    this.lines.push({ level: 'warn', obj, msg });
  }
  error(obj: object | string, msg?: string): void {
    this.lines.push({ level: 'error', obj, msg });
  }
  child(): Logger {
    return this;
  }
  /** Lines at `level` whose JSON mentions `text`. */
  find(level: LogLine['level'], text: string): LogLine[] {
    return this.lines.filter((l) => l.level === level && JSON.stringify(l).includes(text));
  }
}

/** Polls `check` every 5 ms until it returns true, or throws after `timeoutMs`. */
export async function waitFor(check: () => boolean, timeoutMs = 3000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
