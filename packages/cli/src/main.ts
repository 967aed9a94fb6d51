import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { describeError, ExitCode } from './cli-error.ts';
import { type CliIo, processIo } from './cli-io.ts';

/** The version of the `fairway` command: its package's `version`. */
export function cliVersion(): string {
  const pkg: unknown = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  const version = (pkg as { version?: unknown }).version;
  return typeof version === 'string' ? version : 'unknown';
}

/** Adds one command to the program; `setCode` reports the exit code of its action. */
type RegisterCommand = (program: Command, io: CliIo, setCode: (code: number) => void) => void;

/**
 * Every command by name, each module imported only when its command is built: `serve` then never
 * loads the simulator and its plotting libraries, nor `sim` the dispatcher. Listed in the order
 * `--help` shows them.
 */
const COMMANDS: Readonly<Record<string, () => Promise<RegisterCommand>>> = {
  up: async () => (await import('./commands/up.ts')).registerUpCommand,
  sim: async () => (await import('./commands/sim.ts')).registerSimCommand,
  plan: async () => (await import('./commands/plan.ts')).registerPlanCommand,
  profile: async () => (await import('./commands/profile.ts')).registerProfileCommand,
  serve: async () => (await import('./commands/serve.ts')).registerServeCommand,
  agent: async () => (await import('./commands/agent.ts')).registerAgentCommand,
  'engine-sim': async () => (await import('./commands/engine-sim.ts')).registerEngineSimCommand,
  admin: async () => (await import('./commands/admin.ts')).registerAdminCommand,
};

/**
 * Builds the `fairway` command tree; actions report their exit code through `setCode`. With
 * `only`, just that command is built (what running it needs); otherwise every command is.
 */
export async function buildProgram(
  io: CliIo,
  setCode: (code: number) => void,
  only?: string,
): Promise<Command> {
  const program = new Command('fairway')
    .description('fair, SLO-aware gateway for self-hosted vLLM fleets, and its fleet simulator')
    .version(cliVersion(), '-V, --version', 'print the version and exit')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s), writeErr: (s) => io.err(s) });
  const names = only !== undefined && Object.hasOwn(COMMANDS, only) ? [only] : Object.keys(COMMANDS);
  const registers = await Promise.all(names.map((n) => COMMANDS[n]?.()));
  for (const register of registers) register?.(program, io, setCode);
  return program;
}

/**
 * Runs the CLI with `argv` (as `process.argv`: node, script, args…) and returns the exit code:
 * 0 on success, 2 on bad input (one line per problem, no stack trace), 1 on internal errors.
 */
export async function run(argv: readonly string[], io: CliIo = processIo()): Promise<number> {
  let code: number = ExitCode.OK;
  // `fairway <command> …` builds that command alone; help, the version and typos (which get
  // suggestions) build them all.
  const program = await buildProgram(
    io,
    (c) => {
      code = c;
    },
    argv[2],
  );
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
