import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { type Clock, type Logger, parseWith, silentLogger, systemClock } from '@fairway/core';
import { z } from 'zod';
import { EngineStartError } from './errors.ts';

const optionsSchema = z.object({
  command: z.string().min(1, 'must name the engine executable'),
  args: z.array(z.string()),
  startTimeoutMs: z.number().positive().default(600_000),
  probeIntervalMs: z.number().positive().default(250),
  backoffInitialMs: z.number().nonnegative().default(500),
  backoffMaxMs: z.number().nonnegative().default(30_000),
  backoffFactor: z.number().min(1).default(2),
  resetBackoffAfterMs: z.number().nonnegative().default(60_000),
  stopTimeoutMs: z.number().positive().default(10_000),
  outputLines: z.number().int().nonnegative().default(40),
});

/** Options of {@link EngineProcess}. */
export interface EngineProcessOptions {
  /** Executable: `vllm` in production, `fairway` or `node` in tests. */
  readonly command: string;
  /** Arguments, e.g. `['serve', 'meta-llama/Llama-2-7b-hf', '--port', '8000']`. */
  readonly args: readonly string[];
  /** Resolves when the engine serves (the engine client's `health()`); rejects otherwise. */
  readonly probe: () => Promise<unknown>;
  /** Extra environment variables for the engine. */
  readonly env?: Readonly<Record<string, string>>;
  readonly cwd?: string;
  readonly logger?: Logger;
  /** Measures uptime for the back-off reset. @default systemClock */
  readonly clock?: Clock;
  /** How long a start may take before it counts as failed, ms (vLLM loads weights for minutes). @default 600000 */
  readonly startTimeoutMs?: number;
  /** Spacing of health probes while starting, ms. @default 250 */
  readonly probeIntervalMs?: number;
  /** First restart delay after a crash, ms. @default 500 */
  readonly backoffInitialMs?: number;
  /** Cap on the restart delay, ms. @default 30000 */
  readonly backoffMaxMs?: number;
  /** Each consecutive failed start multiplies the delay by this. @default 2 */
  readonly backoffFactor?: number;
  /** A process that ran healthy this long before crashing restarts after the initial delay again, ms. @default 60000 */
  readonly resetBackoffAfterMs?: number;
  /** Grace period between SIGTERM and SIGKILL on stop, ms. @default 10000 */
  readonly stopTimeoutMs?: number;
  /** Output lines kept for diagnosis when the engine dies. @default 40 */
  readonly outputLines?: number;
}

/** What happened to the engine process. */
export type EngineProcessEvent =
  | { readonly type: 'starting'; readonly args: readonly string[] }
  | { readonly type: 'ready'; readonly pid: number }
  | { readonly type: 'exit'; readonly code: number | null; readonly signal: string | null }
  | { readonly type: 'restarting'; readonly inMs: number; readonly attempt: number }
  | { readonly type: 'startFailed'; readonly error: EngineStartError };

type State = 'stopped' | 'starting' | 'running' | 'backoff';

/**
 * Runs the engine as a child process: starts it, waits until its health probe passes, restarts it
 * after a crash with capped exponential back-off, and restarts it with other arguments for a full
 * model swap. The engine runs in its own process group so its workers (vLLM spawns several) stop
 * with it.
 */
export class EngineProcess {
  readonly #opts: z.output<typeof optionsSchema>;
  readonly #probe: () => Promise<unknown>;
  readonly #env: Readonly<Record<string, string>> | undefined;
  readonly #cwd: string | undefined;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #listeners = new Set<(e: EngineProcessEvent) => void>();
  readonly #killing = new WeakSet<ChildProcess>();
  readonly #output: string[] = [];
  #args: string[];
  #child: ChildProcess | undefined;
  #state: State = 'stopped';
  #delayMs: number;
  #readySinceMs = 0;
  #restarts = 0;
  #timer: NodeJS.Timeout | undefined;
  /** Whether the engine should be up: set by start(), cleared by stop(). */
  #wanted = false;

  constructor(options: EngineProcessOptions) {
    this.#opts = parseWith(optionsSchema, options, 'EngineProcess options');
    this.#args = [...this.#opts.args];
    this.#probe = options.probe;
    this.#env = options.env;
    this.#cwd = options.cwd;
    this.#logger = options.logger ?? silentLogger;
    this.#clock = options.clock ?? systemClock;
    this.#delayMs = this.#opts.backoffInitialMs;
  }

  /** The current arguments (they change with {@link restart}). */
  get args(): readonly string[] {
    return this.#args;
  }

  /** The engine's process id while one runs. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Whether the engine is up and passed its health probe. */
  get running(): boolean {
    return this.#state === 'running';
  }

  /** Restarts after crashes so far. */
  get restarts(): number {
    return this.#restarts;
  }

  /** The engine's last output lines. */
  get lastOutput(): readonly string[] {
    return [...this.#output];
  }

  /** Calls `listener` on every lifecycle event; returns a function that removes it. */
  on(listener: (e: EngineProcessEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /** Starts the engine and resolves once it is healthy; throws {@link EngineStartError} otherwise. */
  async start(): Promise<void> {
    if (this.#state !== 'stopped') return;
    this.#wanted = true;
    this.#delayMs = this.#opts.backoffInitialMs;
    try {
      await this.#launch();
    } catch (err) {
      this.#wanted = false;
      throw err;
    }
  }

  /** Stops the engine (SIGTERM, then SIGKILL after the grace period) and any pending restart. */
  async stop(): Promise<void> {
    this.#wanted = false;
    this.#state = 'stopped';
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    const child = this.#child;
    this.#child = undefined;
    if (child) await this.#kill(child);
  }

  /** Stops the engine and starts it again, with `args` when given (a full model swap). */
  async restart(args?: readonly string[]): Promise<void> {
    await this.stop();
    if (args) this.#args = [...args];
    await this.start();
  }

  async #launch(): Promise<void> {
    this.#state = 'starting';
    this.#emit({ type: 'starting', args: this.#args });
    const child = spawn(this.#opts.command, this.#args, {
      cwd: this.#cwd,
      env: { ...process.env, ...this.#env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    this.#child = child;
    this.#capture(child);
    const exited = new Promise<{ code: number | null; signal: string | null; error?: Error }>((resolve) => {
      child.once('error', (error) => resolve({ code: null, signal: null, error }));
      child.once('exit', (code, signal) => resolve({ code, signal }));
    });
    void exited.then((how) => this.#onExit(child, how.code, how.signal));
    try {
      await this.#waitHealthy(exited);
    } catch (err) {
      if (this.#child === child) this.#child = undefined;
      await this.#kill(child);
      if (this.#state === 'starting') this.#state = 'stopped';
      throw err;
    }
    this.#state = 'running';
    this.#readySinceMs = this.#clock.now();
    this.#logger.info({ pid: child.pid, args: this.#args }, 'engine process ready');
    this.#emit({ type: 'ready', pid: child.pid ?? -1 });
  }

  async #waitHealthy(
    exited: Promise<{ code: number | null; signal: string | null; error?: Error }>,
  ): Promise<void> {
    const deadline = this.#clock.now() + this.#opts.startTimeoutMs;
    let exit: { code: number | null; signal: string | null; error?: Error } | undefined;
    void exited.then((e) => {
      exit = e;
    });
    for (;;) {
      if (exit) {
        const how = exit.error ? exit.error.message : `code ${exit.code}, signal ${exit.signal}`;
        throw this.#startError(`engine exited while starting (${how})`, exit.error);
      }
      if (this.#state !== 'starting') throw this.#startError('engine start was cancelled');
      try {
        await this.#probe();
        if (!exit) return;
      } catch {
        // Not up yet.
      }
      if (this.#clock.now() > deadline) {
        throw this.#startError(`engine not healthy after ${this.#opts.startTimeoutMs} ms`);
      }
      await new Promise((r) => setTimeout(r, this.#opts.probeIntervalMs));
    }
  }

  #onExit(child: ChildProcess, code: number | null, signal: string | null): void {
    if (this.#killing.has(child)) return;
    const wasRunning = this.#state === 'running' && this.#child === child;
    if (this.#child === child) this.#child = undefined;
    if (!wasRunning) return;
    this.#logger.warn({ code, signal, lastOutput: this.#output.slice(-10) }, 'engine process exited');
    this.#emit({ type: 'exit', code, signal });
    if (this.#clock.now() - this.#readySinceMs >= this.#opts.resetBackoffAfterMs) {
      this.#delayMs = this.#opts.backoffInitialMs;
    }
    this.#scheduleRestart();
  }

  #scheduleRestart(): void {
    const delay = Math.min(this.#delayMs, this.#opts.backoffMaxMs);
    this.#delayMs = Math.min(this.#opts.backoffMaxMs, Math.max(1, this.#delayMs) * this.#opts.backoffFactor);
    this.#state = 'backoff';
    this.#restarts++;
    this.#emit({ type: 'restarting', inMs: delay, attempt: this.#restarts });
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#state !== 'backoff') return;
      this.#launch().catch((err: unknown) => {
        const error =
          err instanceof EngineStartError
            ? err
            : this.#startError(err instanceof Error ? err.message : String(err), err);
        this.#logger.error({ err: error.message }, 'engine restart failed');
        this.#emit({ type: 'startFailed', error });
        // A failed restart backs off and tries again, unless stop() was called meanwhile.
        if (this.#wanted && this.#state === 'stopped') this.#scheduleRestart();
      });
    }, delay);
  }

  async #kill(child: ChildProcess): Promise<void> {
    this.#killing.add(child);
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    this.#signal(child, 'SIGTERM');
    const timer = setTimeout(() => this.#signal(child, 'SIGKILL'), this.#opts.stopTimeoutMs);
    await gone;
    clearTimeout(timer);
  }

  #signal(child: ChildProcess, signal: NodeJS.Signals): void {
    try {
      // The negative pid addresses the engine's process group (it was spawned detached).
      if (child.pid !== undefined) process.kill(-child.pid, signal);
    } catch {
      child.kill(signal);
    }
  }

  #capture(child: ChildProcess): void {
    const keep = (line: string): void => {
      if (this.#opts.outputLines === 0) return;
      this.#output.push(line);
      if (this.#output.length > this.#opts.outputLines) this.#output.shift();
      this.#logger.debug({ line }, 'engine output');
    };
    if (child.stdout) createInterface({ input: child.stdout }).on('line', keep);
    if (child.stderr) createInterface({ input: child.stderr }).on('line', keep);
  }

  #startError(message: string, cause?: unknown): EngineStartError {
    const tail = this.#output.slice(-5);
    return new EngineStartError(
      tail.length === 0 ? message : `${message}; last output:\n  ${tail.join('\n  ')}`,
      { command: this.#opts.command, args: this.#args, lastOutput: [...this.#output] },
      { cause },
    );
  }

  #emit(e: EngineProcessEvent): void {
    for (const l of this.#listeners) {
      try {
        l(e);
      } catch (err) {
        this.#logger.error(
          { err: err instanceof Error ? err.message : String(err) },
          'engine process listener failed',
        );
      }
    }
  }
}

/**
 * The arguments that serve `model` instead: the positional model of `vllm serve <model>`, else the
 * value of `--model`, else `--model <model>` appended; `extra` arguments are appended.
 */
export function argsWithModel(
  args: readonly string[],
  model: string,
  extra: readonly string[] = [],
): string[] {
  const out = [...args];
  const serve = out.indexOf('serve');
  const flag = out.findIndex((a) => a === '--model' || a.startsWith('--model='));
  if (serve >= 0 && serve + 1 < out.length && !out[serve + 1]?.startsWith('-')) out[serve + 1] = model;
  else if (flag >= 0 && out[flag]?.startsWith('--model=')) out[flag] = `--model=${model}`;
  else if (flag >= 0 && flag + 1 < out.length) out[flag + 1] = model;
  else out.push('--model', model);
  return [...out, ...extra];
}
