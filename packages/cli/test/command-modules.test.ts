import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { natsUrl, redisUrl, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const BIN = resolve(import.meta.dirname, '..', 'bin', 'fairway.js');
const RECORDER = resolve(import.meta.dirname, 'support', 'record-modules.mjs');
const CONFIG = resolve(import.meta.dirname, '..', '..', '..', 'infra', 'fairway.example.yaml');
/** The simulator's sources and its plotting libraries: what only `sim` and `plan` need. */
const SIMULATOR = /\/packages\/sim\/|\/node_modules\/vega/;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'fairway-modules-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * Runs `fairway <args>` with the module recorder and returns the URLs of the modules it loaded:
 * until it exits, or, given `ready`, until a stdout line matches it (then it is stopped).
 */
async function modulesLoadedBy(args: readonly string[], ready?: RegExp): Promise<string[]> {
  const log = join(dir, `${uniquePrefix('modules')}.log`);
  const proc = spawn(process.execPath, ['--import', RECORDER, BIN, ...args], {
    env: { ...process.env, FAIRWAY_TEST_MODULE_LOG: log },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stderr.on('data', (b) => {
    output += String(b);
  });
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  if (ready !== undefined) {
    const seen = await new Promise<boolean>((r) => {
      createInterface({ input: proc.stdout }).on('line', (l) => {
        output += `${l}\n`;
        if (ready.test(l)) r(true);
      });
      void exited.then(() => r(false));
    });
    expect(seen, output).toBe(true);
    proc.kill('SIGTERM');
  } else proc.stdout.resume();
  const code = await exited;
  if (ready === undefined) expect(code, output).toBe(0);
  return readFileSync(log, 'utf8').split('\n').filter(Boolean);
}

describe('what each fairway command loads', () => {
  it('serve starts and listens without loading the simulator or vega', async () => {
    const loaded = await modulesLoadedBy(
      [
        'serve',
        '--config',
        CONFIG,
        '--port',
        '0',
        '--operator-port',
        '0',
        '--redis-url',
        redisUrl(),
        '--nats-url',
        natsUrl(),
        '--prefix',
        uniquePrefix('serve'),
      ],
      /listening on/,
    );
    expect(loaded.some((u) => u.includes('/packages/dispatcher/'))).toBe(true);
    expect(loaded.filter((u) => SIMULATOR.test(u))).toEqual([]);
  });

  it('engine-sim serves without loading the simulator or vega', async () => {
    const loaded = await modulesLoadedBy(
      ['engine-sim', '--port', '0', '--log-level', 'silent'],
      /listening on/,
    );
    expect(loaded.filter((u) => SIMULATOR.test(u))).toEqual([]);
  });

  it('admin and agent load neither the simulator nor vega', async () => {
    const keygen = await modulesLoadedBy(['admin', 'keygen', '--out-dir', join(dir, 'keys')]);
    expect(keygen.filter((u) => SIMULATOR.test(u))).toEqual([]);
    const agent = await modulesLoadedBy(['agent', '--help']);
    expect(agent.some((u) => u.includes('/cli/src/commands/agent.ts'))).toBe(true);
    expect(agent.filter((u) => SIMULATOR.test(u))).toEqual([]);
  });

  it('sim loads the simulator (what the recorder sees is what the process loads)', async () => {
    const loaded = await modulesLoadedBy(['sim', '--list']);
    expect(loaded.some((u) => u.includes('/packages/sim/'))).toBe(true);
  });
});
