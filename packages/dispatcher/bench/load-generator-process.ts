// The parent's side of load-generator.ts: forks it into its own process and hands it one phase at
// a time over IPC. Shared by overhead.bench.ts and scale.bench.ts.
import { type ChildProcess, fork } from 'node:child_process';
import { resolve } from 'node:path';
import type { PhaseReport, PhaseRequest } from './load-generator.ts';

const GENERATOR = resolve(import.meta.dirname, 'load-generator.ts');

/** A load generator running in a child process of its own; one phase at a time. */
export class Generator {
  readonly #child: ChildProcess;
  /** Resolves once the child is ready to take a phase. */
  readonly ready: Promise<void>;
  #pending: ((r: PhaseReport) => void) | undefined;
  #fail: ((e: Error) => void) | undefined;

  constructor() {
    this.#child = fork(GENERATOR, [], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
    this.ready = new Promise((r) => {
      this.#child.on('message', (m: { kind: string; message?: string }) => {
        if (m.kind === 'ready') r();
        else if (m.kind === 'report') this.#pending?.(m as PhaseReport);
        else if (m.kind === 'failed') this.#fail?.(new Error(m.message));
      });
    });
    // A generator that dies mid-phase fails the phase instead of leaving it waiting forever.
    this.#child.once('exit', (code, signal) =>
      this.#fail?.(new Error(`the load generator exited (${signal ?? code}) during a phase`)),
    );
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** Runs one phase; resolves with what it measured. */
  run(p: Omit<PhaseRequest, 'kind'>): Promise<PhaseReport> {
    return new Promise((resolvePromise, reject) => {
      this.#pending = resolvePromise;
      this.#fail = reject;
      this.#child.send({ kind: 'phase', ...p });
    });
  }

  /** Asks the child to exit, killing it if it has not after 2 s; resolves once it has. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (child.exitCode !== null || child.signalCode !== null) return;
    this.#pending = undefined;
    this.#fail = undefined;
    await new Promise<void>((r) => {
      const t = setTimeout(() => child.kill('SIGKILL'), 2000);
      child.once('exit', () => {
        clearTimeout(t);
        r();
      });
      if (child.connected) child.send({ kind: 'exit' });
      else child.kill('SIGTERM');
    });
  }
}
