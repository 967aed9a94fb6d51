// `npx tsx packages/engine-sim/src/bin/engine-sim.ts [flags]`: the simulated engine as a process, for
// benchmarks and for agents that wrap an engine command line.
import { CommanderError } from 'commander';
import { runEngineSimCommand } from '../cli.ts';

try {
  await runEngineSimCommand(process.argv.slice(2));
} catch (err) {
  // commander has already printed its own usage errors.
  if (!(err instanceof CommanderError)) console.error(err instanceof Error ? err.message : err);
  process.exit(err instanceof CommanderError && err.exitCode === 0 ? 0 : 2);
}
