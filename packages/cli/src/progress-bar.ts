import { Presets, SingleBar } from 'cli-progress';
import type { CliIo } from './cli-io.ts';

/**
 * A progress bar on the CLI's progress stream, or undefined when stderr is not a terminal or the
 * output is JSON (so pipes and `--json` stay clean). `format` is cli-progress's format string.
 */
export function progressBar(io: CliIo, json: boolean | undefined, format: string): SingleBar | undefined {
  if (!io.stderrIsTty || json) return undefined;
  return new SingleBar(
    {
      stream: io.progressStream,
      format,
      hideCursor: true,
      clearOnComplete: true,
      barCompleteChar: '█',
      barIncompleteChar: '░',
    },
    Presets.shades_classic,
  );
}
