/** Where the CLI writes: injected so tests can capture output without spawning a process. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** Whether stderr is an interactive terminal (progress bars are drawn only then). */
  readonly stderrIsTty: boolean;
  /** The stream a progress bar draws on. */
  readonly progressStream: NodeJS.WritableStream;
}

/** The process's real stdout and stderr. */
export function processIo(): CliIo {
  return {
    out: (t) => process.stdout.write(t),
    err: (t) => process.stderr.write(t),
    stderrIsTty: Boolean(process.stderr.isTTY),
    progressStream: process.stderr,
  };
}
