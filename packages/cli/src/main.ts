import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { describeError, ExitCode } from './cli-error.ts';
import { type CliIo, processIo } from './cli-io.ts';
import { registerAdminCommand } from './commands/admin.ts';
import { registerAgentCommand } from './commands/agent.ts';
import { registerEngineSimCommand } from './commands/engine-sim.ts';
import { registerPlanCommand } from './commands/plan.ts';
import { registerProfileCommand } from './commands/profile.ts';
import { registerServeCommand } from './commands/serve.ts';
import { registerSimCommand } from './commands/sim.ts';
import { registerUpCommand } from './commands/up.ts';

/** The version of the `fairway` command: its package's `version`. */
export function cliVersion(): string {
  const pkg: unknown = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  const version = (pkg as { version?: unknown }).version;
  return typeof version === 'string' ? version : 'unknown';
}

/** Builds the `fairway` command tree; actions report their exit code through `setCode`. */
export function buildProgram(io: CliIo, setCode: (code: number) => void): Command {
  const program = new Command('fairway')
    .description('fair, SLO-aware gateway for self-hosted vLLM fleets, and its fleet simulator')
    .version(cliVersion(), '-V, --version', 'print the version and exit')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s), writeErr: (s) => io.err(s) });
  registerUpCommand(program, io, setCode);
  registerSimCommand(program, io, setCode);
  registerPlanCommand(program, io, setCode);
  registerProfileCommand(program, io, setCode);
  registerServeCommand(program, io, setCode);
  registerAgentCommand(program, io, setCode);
  registerEngineSimCommand(program, io, setCode);
  registerAdminCommand(program, io, setCode);
  return program;
}

/**
 * Runs the CLI with `argv` (as `process.argv`: node, script, args…) and returns the exit code:
 * 0 on success, 2 on bad input (one line per problem, no stack trace), 1 on internal errors.
 */
export async function run(argv: readonly string[], io: CliIo = processIo()): Promise<number> {
  let code: number = ExitCode.OK;
  const program = buildProgram(io, (c) => {
    code = c;
  });
  try {
    await program.parseAsync([...argv]);
    return code;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? ExitCode.OK : ExitCode.USAGE;
    const d = describeError(err, process.env.FAIRWAY_DEBUG === '1');
    io.err(`${d.lines.join('\n')}\n`);
    return d.code;
  }
}
