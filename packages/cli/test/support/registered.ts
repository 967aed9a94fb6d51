import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import type { NatsBus, Registration } from '@fairway/bus';
import { natsUrl } from '@fairway/testkit';

const BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'fairway.js');

/** A `fairway` process whose node agent has registered on the bus. */
export interface RegisteredProcess {
  readonly proc: ChildProcess;
  readonly registration: Registration;
  /** What it has printed so far, stdout and stderr together. */
  output(): string;
}

/**
 * Spawns `fairway <args> --nats-url <natsUrl()> --prefix <prefix>` and resolves once `bus` (on that
 * prefix) sees its agent's first registration; rejects with the process's output, the process
 * killed, when it exits first or registers nothing in 40 s. The caller kills it once done.
 */
export async function spawnRegistered(
  bus: NatsBus,
  prefix: string,
  args: readonly string[],
  env: Readonly<Record<string, string>> = {},
): Promise<RegisteredProcess> {
  const registered = new Promise<Registration>((r) => bus.subscribe('registration', (m) => r(m)));
  await bus.flush();
  const proc = spawn(process.execPath, [BIN, ...args, '--nats-url', natsUrl(), '--prefix', prefix], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout?.on('data', (b) => {
    output += String(b);
  });
  proc.stderr?.on('data', (b) => {
    output += String(b);
  });
  const exited = new Promise<never>((_, reject) =>
    proc.once('exit', (code) => reject(new Error(`fairway exited with ${code}:\n${output}`))),
  );
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no registration in 40 s:\n${output}`)), 40_000);
  });
  try {
    const registration = await Promise.race([registered, exited, timeout]);
    return { proc, registration, output: () => output };
  } catch (err) {
    proc.kill('SIGKILL');
    throw err;
  } finally {
    clearTimeout(timer);
  }
}
