import { pino } from 'pino';

/** Structured logger injected into every component; never a global. */
export interface Logger {
  debug(obj: object | string, msg?: string): void;
  info(obj: object | string, msg?: string): void;
  warn(obj: object | string, msg?: string): void;
  error(obj: object | string, msg?: string): void;
  child(bindings: Record<string, unknown>): Logger;
}

/** A logger that drops everything (tests, simulations). */
export const silentLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
  child: () => silentLogger,
};

/** Options for {@link createLogger}. */
export interface LoggerOptions {
  /** Minimum level. @default 'info' */
  level?: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  /** Component name added to every line. */
  name?: string;
}

/** A pino logger writing JSON lines to stderr (stdout stays free for `--json` output). */
export function createLogger(options: LoggerOptions = {}): Logger {
  const base = pino({ level: options.level ?? 'info', name: options.name }, pino.destination(2));
  return wrap(base);
}

function wrap(p: pino.Logger): Logger {
  const call =
    (level: 'debug' | 'info' | 'warn' | 'error') =>
    (obj: object | string, msg?: string): void => {
      if (typeof obj === 'string') p[level](obj);
      else p[level](obj, msg);
    };
  return {
    debug: call('debug'),
    info: call('info'),
    warn: call('warn'),
    error: call('error'),
    child: (bindings) => wrap(p.child(bindings)),
  };
}
