import type { ChildProcess } from 'node:child_process';
import { networkInterfaces } from 'node:os';
import { NatsBus, type Registration } from '@fairway/bus';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { natsUrl, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnRegistered } from './support/registered.ts';
import { fairway } from './support/run-cli.ts';

/**
 * Starts `fairway <args>` and resolves with the first registration its agent publishes on the
 * prefix, or rejects with the process's output.
 */
async function firstRegistration(
  args: readonly string[],
  prefix: string,
  env: Readonly<Record<string, string>> = {},
): Promise<{ registration: Registration; output: string }> {
  const bus = await NatsBus.connect({ servers: natsUrl(), prefix });
  let proc: ChildProcess | undefined;
  try {
    const started = await spawnRegistered(bus, prefix, args, env);
    proc = started.proc;
    // The ready line follows the first registration.
    const deadline = Date.now() + 5000;
    while (!/registered as/.test(started.output()) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    return { registration: started.registration, output: started.output() };
  } finally {
    proc?.kill('SIGKILL');
    await bus.close();
  }
}

/** This host's first non-internal IPv4 address, the one a wildcard listen address is advertised as. */
function firstExternalIpv4(): string | undefined {
  for (const addresses of Object.values(networkInterfaces()))
    for (const a of addresses ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  return undefined;
}

describe('fairway agent --advertise-url', () => {
  let engine: EngineSimHandle;
  beforeAll(async () => {
    engine = await startEngineSim({ port: 0, speed: 10 });
  });
  afterAll(() => engine.close());

  it('registers the advertised URL, not the local --engine-url, with its GPU and tensor-parallel size', async () => {
    const { registration, output } = await firstRegistration(
      ['agent', '--engine-url', engine.url, '--advertise-url', 'http://gpu-node-7.example:8000'].concat([
        '--replica-id',
        'gpu-node-7',
        '--model',
        engine.servedModelName,
        '--gpu',
        'H100-80GB',
        '--tp',
        '2',
        '--log-level',
        'warn',
      ]),
      uniquePrefix('advertise'),
    );
    // GPU and TP are what a dispatcher matches its performance models on.
    expect(registration).toMatchObject({
      replicaId: 'gpu-node-7',
      url: 'http://gpu-node-7.example:8000',
      gpu: 'H100-80GB',
      tp: 2,
    });
    expect(output).toContain(`at ${engine.url}, registered as http://gpu-node-7.example:8000`);
    expect(output).not.toMatch(/loopback/);
  });

  it('registers a loopback --engine-url when none is given, warning that other hosts cannot reach it', async () => {
    const { registration, output } = await firstRegistration(
      ['agent', '--engine-url', engine.url, '--replica-id', 'local-1', '--model', engine.servedModelName],
      uniquePrefix('advertise'),
    );
    expect(registration.url).toBe(engine.url);
    expect(registration.tp).toBe(1);
    expect(output).toMatch(/a loopback address: only dispatchers on this host can reach it/);
  });

  it('refuses a wildcard advertise URL with exit code 2, before connecting to anything', async () => {
    const r = await fairway(
      'agent',
      '--engine-url',
      engine.url,
      '--advertise-url',
      'http://0.0.0.0:8000',
      '--replica-id',
      'x',
      '--model',
      'm',
      '--nats-url',
      'nats://127.0.0.1:1',
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /^error: --advertise-url: 0\.0\.0\.0 is a wildcard address no other host can connect to/,
    );
  });
});

describe('fairway engine-sim with an agent', () => {
  it('takes the advertised URL from FAIRWAY_ADVERTISE_URL, and registers the GPU and TP it simulates', async () => {
    const { registration } = await firstRegistration(
      ['engine-sim', '--port', '0', '--speed', '10', '--replica-id', 'sim-env', '--log-level', 'warn'].concat(
        ['--model', 'llama-2-13b', '--gpu', 'A10G-24GB', '--tp', '2'],
      ),
      uniquePrefix('advertise'),
      { FAIRWAY_ADVERTISE_URL: 'http://10.213.9.9:8000' },
    );
    expect(registration).toMatchObject({
      replicaId: 'sim-env',
      url: 'http://10.213.9.9:8000',
      gpu: 'A10G-24GB',
      tp: 2,
    });
  });

  it("bound to 0.0.0.0, advertises the host's first non-internal IPv4 address, never 0.0.0.0", async () => {
    const args = [
      'engine-sim',
      '--host',
      '0.0.0.0',
      '--port',
      '0',
      '--speed',
      '10',
      '--replica-id',
      'sim-any',
    ];
    const ip = firstExternalIpv4();
    if (ip === undefined) {
      const r = await fairway(...args, '--nats-url', natsUrl(), '--log-level', 'silent');
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/^error: --host: 0\.0\.0\.0 is a wildcard address .* set --advertise-url/);
      return;
    }
    const { registration, output } = await firstRegistration(args, uniquePrefix('advertise'));
    const port = /listening on http:\/\/0\.0\.0\.0:(\d+)/.exec(output)?.[1];
    expect(port, output).toBeDefined();
    expect(registration.url).toBe(`http://${ip}:${port}`);
    expect(output).toContain(`registered as http://${ip}:${port}`);
  });
});
