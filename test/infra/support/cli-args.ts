import { PassThrough } from 'node:stream';
import { buildProgram } from '@fairway/cli';

/** The part of a commander command this needs (the CLI's commands come from two commander copies). */
interface CommandLike {
  action(fn: () => void): unknown;
  readonly commands: readonly CommandLike[];
}

/**
 * Parses `fairway <args>` with the real command tree, every action replaced by a no-op: what a
 * container's command line would meet before doing anything. Returns commander's complaint (an
 * unknown flag, a missing required one, a bad number), or undefined when the line parses.
 */
export async function cliArgsProblem(args: readonly string[]): Promise<string | undefined> {
  const errors: string[] = [];
  const io = {
    out: () => undefined,
    err: (text: string) => {
      errors.push(text);
    },
    stderrIsTty: false,
    progressStream: new PassThrough(),
  };
  const program = await buildProgram(io, () => undefined);
  const silence = (command: CommandLike): void => {
    command.action(() => undefined);
    for (const sub of command.commands) silence(sub);
  };
  for (const command of program.commands as readonly CommandLike[]) silence(command);
  try {
    await program.parseAsync(['node', 'fairway', ...args]);
    return undefined;
  } catch (e) {
    return errors.join('').trim() || String(e);
  }
}
