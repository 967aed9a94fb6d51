/** One line a {@link RecordingLogger} received. */
export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  obj: object | string;
  msg: string | undefined;
}

/**
 * A logger that keeps what it is told, so tests can assert that a reason was logged (and that a
 * secret was not). Structurally a `@fairway/core` Logger.
 */
export class RecordingLogger {
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
  child(): RecordingLogger {
    return this;
  }
  /** Lines at `level` whose JSON mentions `text`. */
  find(level: LogLine['level'], text: string): LogLine[] {
    return this.lines.filter((l) => l.level === level && JSON.stringify(l).includes(text));
  }
}
