import type { CliIo } from '../../src/cli-io.ts';
import { run } from '../../src/main.ts';

/** What one in-process `fairway …` run printed and returned. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the CLI in this process with `args`, capturing stdout and stderr (no terminal: no progress bars). */
export async function fairway(...args: string[]): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const io: CliIo = {
    out: (t) => {
      stdout += t;
    },
    err: (t) => {
      stderr += t;
    },
    stderrIsTty: false,
    progressStream: process.stderr,
  };
  const code = await run(['node', 'fairway', ...args], io);
  return { code, stdout, stderr };
}
