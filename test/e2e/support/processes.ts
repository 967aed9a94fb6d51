import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';

/** The `fairway` executable as a user runs it (`npx fairway` resolves to this script). */
export const FAIRWAY_BIN = resolve(
  import.meta.dirname,
  '..',
  '..',
  '..',
  'packages',
  'cli',
  'bin',
  'fairway.js',
);

/** A `fairway` process started by a test. */
export interface FairwayProcess {
  readonly proc: ChildProcess;
  /** The first stdout line that matched, and its first capture group. */
  readonly line: string;
  readonly url: string;
  /** Output lines so far (stdout and stderr), for failure messages. */
  readonly output: string[];
  /** SIGKILL: the process dies at once, holding whatever it held. */
  kill9(): void;
  /** SIGTERM, then waits for the exit. */
  stop(): Promise<void>;
}

/**
 * Spawns `fairway <args>` and resolves once a stdout line matches `ready` (whose first group is
 * the URL), or rejects with the process's output after `timeoutMs`. `bin` runs another copy of the
 * CLI (the image test's reproduced install).
 */
export function startFairway(
  args: readonly string[],
  ready: RegExp,
  env: Readonly<Record<string, string>> = {},
  timeoutMs = 30_000,
  bin = FAIRWAY_BIN,
): Promise<FairwayProcess> {
  const proc = spawn(process.execPath, [bin, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  createInterface({ input: proc.stderr! }).on('line', (l) => {
    output.push(l);
    if (output.length > 200) output.shift();
  });
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`fairway ${args.join(' ')} did not start in ${timeoutMs} ms:\n${output.join('\n')}`));
    }, timeoutMs);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`fairway ${args.join(' ')} exited with ${code}:\n${output.join('\n')}`));
    });
    createInterface({ input: proc.stdout! }).on('line', (l) => {
      output.push(l);
      const m = ready.exec(l);
      if (m === null) return;
      clearTimeout(timer);
      resolvePromise({
        proc,
        line: l,
        url: m[1] ?? '',
        output,
        kill9: () => proc.kill('SIGKILL'),
        async stop() {
          if (proc.exitCode !== null || proc.signalCode !== null) return;
          proc.kill('SIGTERM');
          const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
          await exited;
          clearTimeout(t);
        },
      });
    });
  });
}
