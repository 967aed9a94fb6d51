import { writeSync } from 'node:fs';
import { hostname } from 'node:os';
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

/**
 * Bytes of log lines a process holds while stderr's reader is behind (a pipe to a container
 * runtime whose log driver stalls); a turn's lines that would go beyond are dropped and counted.
 */
export const STDERR_BACKLOG_BYTES = 8 * 1024 * 1024;

/** How soon lines held for a full stderr are tried again, ms. */
const STDERR_RETRY_MS = 10;

/** How long a process's exit waits for a full stderr to take the lines it still holds, ms. */
const EXIT_FLUSH_MS = 2000;

/** A write that found a non-blocking stderr full. */
function full(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'EAGAIN' || code === 'EBUSY';
}

/** Newlines in `text`: the lines it ends. */
function linesIn(text: string): number {
  let n = 0;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) n++;
  return n;
}

/**
 * stderr, written once per event-loop turn and never waited for. The lines a turn logs (an
 * access-log line per request a busy dispatcher answers) are held and leave in one write when the
 * turn's I/O is done (`setImmediate`), or sooner once they reach {@link TURN_BUFFER_CHARS}, so a
 * pipe's reader is woken once per turn rather than once per line, and no line waits past its turn.
 *
 * stderr is made non-blocking (a pipe is, once `process.stderr` exists), so a reader that falls
 * behind never stops the process: what a full pipe does not take is held, in order, and tried
 * again every {@link STDERR_RETRY_MS}; beyond {@link STDERR_BACKLOG_BYTES} held, a turn's lines are
 * dropped whole (never part of a line), and once the reader has caught up a warning line says how
 * many. At exit what is held is written, waiting up to {@link EXIT_FLUSH_MS} for a full pipe, and
 * lines logged from then on go out at once. One per process, shared by every logger, so lines keep
 * their order.
 */
class StderrLines implements pino.DestinationStream {
  #turn = '';
  #scheduled = false;
  /** Bytes a full stderr has not taken yet, oldest first; the first may be the rest of a line. */
  readonly #held: Buffer[] = [];
  #heldBytes = 0;
  #dropped = 0;
  #retry: NodeJS.Timeout | undefined;
  #exiting = false;
  #exitUntil: number | undefined;
  readonly #endTurn = (): void => this.#flushTurn();
  readonly #tryAgain = (): void => {
    this.#retry = undefined;
    this.#drain();
  };

  /**
   * Puts a pipe on stderr back in non-blocking mode (libuv's stream handle, as Node opens it for a
   * pipe): the mode belongs to the pipe, shared with every process that inherited it, and a child
   * can take it back to blocking (the Go runtime of esbuild, which tsx starts to compile a module,
   * does). Files and terminals are left as they are.
   */
  readonly #nonBlocking: () => void;

  constructor() {
    // A pipe's descriptor becomes non-blocking when Node opens its stream: a write then finds a
    // full pipe (EAGAIN) instead of waiting for the reader.
    const stream = process.stderr as unknown as { _handle?: { setBlocking?: (blocking: boolean) => number } };
    const handle = stream._handle;
    this.#nonBlocking =
      handle?.setBlocking !== undefined && handle.constructor.name === 'Pipe'
        ? () => handle.setBlocking?.(false)
        : () => undefined;
    process.once('exit', () => {
      this.#exiting = true;
      this.#flushTurn();
    });
  }

  write(line: string): void {
    this.#turn += line;
    if (this.#exiting || this.#turn.length >= TURN_BUFFER_CHARS) this.#flushTurn();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#endTurn);
    }
  }

  #flushTurn(): void {
    this.#scheduled = false;
    const text = this.#turn;
    this.#turn = '';
    if (text.length > 0) {
      if (this.#held.length > 0) this.#hold(text);
      else this.#writeNow(text);
    }
    if (this.#exiting) this.#drainAtExit();
  }

  /** Writes `text`, holding what a full stderr does not take. */
  #writeNow(text: string): void {
    let n: number;
    this.#nonBlocking();
    try {
      n = writeSync(2, text);
    } catch (err) {
      if (full(err)) this.#hold(text);
      // Any other error (the reader closed the pipe): nowhere to write, nothing to hold.
      return;
    }
    if (n < Buffer.byteLength(text)) this.#keep(Buffer.from(text).subarray(n));
  }

  /** Holds a turn's lines behind those already held, or drops them whole when the backlog is full. */
  #hold(text: string): void {
    const bytes = Buffer.byteLength(text);
    if (this.#heldBytes + bytes > STDERR_BACKLOG_BYTES) this.#dropped += linesIn(text);
    else this.#keep(Buffer.from(text));
  }

  /** Holds bytes that must follow what is held (the rest of a line already begun is never dropped). */
  #keep(chunk: Buffer): void {
    this.#held.push(chunk);
    this.#heldBytes += chunk.length;
    if (this.#retry === undefined && !this.#exiting)
      this.#retry = setTimeout(this.#tryAgain, STDERR_RETRY_MS).unref();
  }

  /** Writes what is held until stderr is full again; true once nothing is held. */
  #writeHeld(): boolean {
    this.#nonBlocking();
    while (this.#held.length > 0) {
      const chunk = this.#held[0] as Buffer;
      let n: number;
      try {
        n = writeSync(2, chunk);
      } catch (err) {
        if (full(err)) return false;
        this.#held.length = 0;
        this.#heldBytes = 0;
        return true;
      }
      this.#heldBytes -= n;
      if (n < chunk.length) {
        this.#held[0] = chunk.subarray(n);
        return false;
      }
      this.#held.shift();
    }
    return true;
  }

  #drain(): void {
    if (!this.#writeHeld()) {
      this.#retry ??= setTimeout(this.#tryAgain, STDERR_RETRY_MS).unref();
      return;
    }
    this.#reportDropped();
  }

  /** Once stderr has caught up: a warning line counting the lines dropped since the last one. */
  #reportDropped(): void {
    if (this.#dropped === 0) return;
    const dropped = this.#dropped;
    this.#dropped = 0;
    this.#writeNow(
      `${JSON.stringify({
        level: 40,
        time: Date.now(),
        pid: process.pid,
        hostname: hostname(),
        name: 'logger',
        dropped,
        msg: `logger: ${dropped} log lines dropped: stderr's reader fell behind by more than ${STDERR_BACKLOG_BYTES} bytes`,
      })}\n`,
    );
  }

  /** At exit: writes what is held, waiting for a full stderr up to {@link EXIT_FLUSH_MS} from the exit's start. */
  #drainAtExit(): void {
    if (this.#retry !== undefined) clearTimeout(this.#retry);
    this.#retry = undefined;
    // One wait for the whole exit, however many lines exit handlers log after it began.
    this.#exitUntil ??= Date.now() + EXIT_FLUSH_MS;
    const until = this.#exitUntil;
    const pause = new Int32Array(new SharedArrayBuffer(4));
    let caughtUp = this.#writeHeld();
    while (!caughtUp && Date.now() < until) {
      Atomics.wait(pause, 0, 0, 5);
      caughtUp = this.#writeHeld();
    }
    if (caughtUp) this.#reportDropped();
  }
}

let stderrLines: StderrLines | undefined;

function stderrByTurn(): pino.DestinationStream {
  stderrLines ??= new StderrLines();
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
