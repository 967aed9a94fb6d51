import { pino } from 'pino';
import { REDACTED, redactSecrets, SECRET_FIELDS } from './redaction.ts';

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
  /** Where lines go (tests capture them). @default stderr */
  destination?: pino.DestinationStream;
}

const SECRET = new Set(SECRET_FIELDS);

/**
 * A log call's object with its secrets redacted: the value of every secret field (SECRET_FIELDS)
 * at the top level, one level down and in a nested object's `headers`, and the secrets inside
 * every string there ({@link redactSecrets}). One walk over the
 * fields the line has (pino's own `redact` with wildcard paths costs ten times the rest of a line).
 */
function scrub(obj: object, depth = 0): object {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (SECRET.has(k)) out[k] = REDACTED;
    else if (typeof v === 'string') out[k] = redactSecrets(v);
    else if (v instanceof Error) out[k] = redactSecrets(v.message);
    else if (
      v !== null &&
      typeof v === 'object' &&
      !Array.isArray(v) &&
      (depth === 0 || (depth === 1 && k === 'headers'))
    )
      out[k] = scrub(v, depth + 1);
    else out[k] = v;
  }
  return out;
}

/**
 * A pino logger writing JSON lines to stderr (stdout stays free for `--json` output). Every line
 * is redacted: secret fields (`authorization`, `password`, `token`, `key`, …) and, in every string
 * of the line and its message, URL passwords, secret query parameters and bearer credentials
 * ({@link redactSecrets}).
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const base = pino(
    {
      level: options.level ?? 'info',
      name: options.name,
      hooks: {
        logMethod(args, method) {
          const scrubbed = args.map((a) =>
            typeof a === 'string' ? redactSecrets(a) : a !== null && typeof a === 'object' ? scrub(a) : a,
          );
          return method.apply(this, scrubbed as Parameters<typeof method>);
        },
      },
    },
    options.destination ?? stderrByTurn(),
  );
  return wrap(base);
}

/** Characters a turn's lines may reach before they are written without waiting for the turn's end. */
const TURN_BUFFER_CHARS = 8192;

let stderrLines: pino.DestinationStream | undefined;

/**
 * stderr, written once per event-loop turn: the lines a turn logs (an access-log line per request
 * a busy dispatcher answers) are held and leave in one write when the turn's I/O is done
 * (`setImmediate`), or sooner once they reach {@link TURN_BUFFER_CHARS}; what is held is written at
 * exit, and lines logged from then on go out at once. A line is never held past the turn that
 * wrote it, so nothing waits on a timer, and a pipe's reader (a container runtime) is woken once
 * per turn rather than once per line. One per process, shared by every logger, so lines keep
 * their order. The writes are pino's synchronous destination (sonic-boom, which handles partial
 * writes and a full pipe).
 */
function stderrByTurn(): pino.DestinationStream {
  if (stderrLines !== undefined) return stderrLines;
  const out = pino.destination({ dest: 2, sync: true });
  let held = '';
  let scheduled = false;
  const write = (): void => {
    scheduled = false;
    if (held.length === 0) return;
    const lines = held;
    held = '';
    out.write(lines);
  };
  // From exit on there is no next turn: what is held leaves now and later lines at once.
  let exiting = false;
  process.once('exit', () => {
    exiting = true;
    write();
  });
  stderrLines = {
    write(line: string): void {
      held += line;
      if (exiting || held.length >= TURN_BUFFER_CHARS) write();
      else if (!scheduled) {
        scheduled = true;
        setImmediate(write);
      }
    },
  };
  return stderrLines;
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
    child: (bindings) => wrap(p.child(scrub(bindings))),
  };
}

/**
 * Holds back repeats of a warning that outsiders can trigger at will (a refused bus message, a
 * refused admin event): the first line of each kind is written, then at most one per `intervalMs`,
 * carrying how many were held back since (`suppressed`). Kinds are fixed strings of the caller's,
 * never values from the message, so the table stays small whatever arrives.
 */
export class LogThrottle {
  readonly #intervalMs: number;
  readonly #now: () => number;
  readonly #kinds = new Map<string, { next: number; suppressed: number }>();

  /** @param intervalMs least time between two lines of one kind, ms. @default 10000 */
  constructor(intervalMs = 10_000, now: () => number = () => performance.now()) {
    this.#intervalMs = intervalMs;
    this.#now = now;
  }

  /** Writes `obj`/`msg` at warn level unless a line of `kind` went out less than `intervalMs` ago. */
  warn(logger: Logger, kind: string, obj: object, msg: string): void {
    const t = this.#now();
    const k = this.#kinds.get(kind);
    if (k !== undefined && t < k.next) {
      k.suppressed++;
      return;
    }
    const suppressed = k?.suppressed ?? 0;
    this.#kinds.set(kind, { next: t + this.#intervalMs, suppressed: 0 });
    logger.warn(suppressed > 0 ? { ...obj, suppressed } : obj, msg);
  }
}
