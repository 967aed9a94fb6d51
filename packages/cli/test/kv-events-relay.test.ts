import { type KvEvents, NatsBus, type Registration } from '@fairway/bus';
import { kvBlockKeys } from '@fairway/core';
import { startEngineSim } from '@fairway/engine-sim';
import { freePort, natsUrl, uniquePrefix, waitFor } from '@fairway/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { spawnRegistered } from './support/registered.ts';
import { fairway } from './support/run-cli.ts';

const SEED = '11';

async function post(url: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return (await res.json()) as Record<string, unknown>;
}

describe('KV cache events relayed by the node agent', () => {
  const cleanup: (() => Promise<unknown> | unknown)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  /**
   * Runs `fairway <args>` on a fresh prefix and resolves once its agent registered, with the
   * registration and every `kvEvents` message seen on the prefix.
   */
  async function run(args: readonly string[]): Promise<{ registration: Registration; messages: KvEvents[] }> {
    const prefix = uniquePrefix('kv');
    const bus = await NatsBus.connect({ servers: natsUrl(), prefix });
    cleanup.push(() => bus.close());
    const messages: KvEvents[] = [];
    bus.subscribe('kvEvents', (m) => {
      messages.push(m);
    });
    const { proc, registration } = await spawnRegistered(bus, prefix, [...args, '--log-level', 'warn'], {
      PYTHONHASHSEED: SEED,
    });
    cleanup.push(() => proc.kill('SIGKILL'));
    return { registration, messages };
  }

  /** Sends one completion and resolves with the block keys of its prompt's full blocks. */
  async function complete(url: string): Promise<string[]> {
    const body = { prompt: Array.from({ length: 40 }, (_, i) => `relay ${i}`).join(' ') };
    const tokens = (await post(`${url}/tokenize`, body)).tokens as number[];
    await post(`${url}/v1/completions`, { ...body, max_tokens: 1 });
    return kvBlockKeys(tokens, 16, SEED);
  }

  it.each([
    ['binds (a wildcard host)', (port: number) => `tcp://*:${port}`],
    ['connects to (no wildcard)', (port: number) => `tcp://127.0.0.1:${port}`],
  ])('fairway engine-sim --kv-events-config hands an endpoint it %s to its agent', async (_, endpoint) => {
    const port = await freePort();
    const { registration, messages } = await run([
      'engine-sim',
      '--port',
      '0',
      '--speed',
      '50',
      '--replica-id',
      'sim-kv',
      '--enable-prefix-caching',
      '--prefix-caching-hash-algo',
      'sha256_cbor',
      '--kv-events-config',
      JSON.stringify({ enable_kv_cache_events: true, endpoint: endpoint(port) }),
    ]);
    // The relay's subscription reaches the engine a moment after it connects.
    await new Promise((r) => setTimeout(r, 500));
    const keys = await complete(registration.url);
    await waitFor(() => messages.length > 0, 10_000, 'kvEvents on the bus');
    expect(messages[0]).toMatchObject({ replicaId: 'sim-kv', epoch: registration.epoch, seq: 0 });
    expect(messages[0]!.events).toEqual([['cleared'], ['stored', keys]]);
  });

  it('fairway agent --kv-events-endpoint relays the events of the engine at that endpoint', async () => {
    const sim = await startEngineSim({
      speed: 50,
      enablePrefixCaching: true,
      prefixCachingHashAlgo: 'sha256_cbor',
      env: { PYTHONHASHSEED: SEED },
      kvEventsConfig: { enable_kv_cache_events: true, endpoint: 'tcp://127.0.0.1:*', topic: 'kv' },
    });
    cleanup.push(() => sim.close());
    const { registration, messages } = await run([
      'agent',
      '--engine-url',
      sim.url,
      '--replica-id',
      'agent-kv',
      '--model',
      sim.servedModelName,
      '--kv-events-endpoint',
      sim.kvEvents!.endpoint,
      '--kv-events-topic',
      'kv',
    ]);
    await new Promise((r) => setTimeout(r, 500));
    const keys = await complete(sim.url);
    await waitFor(() => messages.length > 0, 10_000, 'kvEvents on the bus');
    expect(messages[0]).toMatchObject({ replicaId: 'agent-kv', epoch: registration.epoch, seq: 0 });
    expect(messages[0]!.events).toEqual([['cleared'], ['stored', keys]]);
  });

  it('fairway agent refuses a wildcard --kv-events-endpoint with exit code 2, before connecting to anything', async () => {
    const r = await fairway(
      'agent',
      '--engine-url',
      'http://127.0.0.1:8000',
      '--replica-id',
      'x',
      '--model',
      'm',
      '--kv-events-endpoint',
      'tcp://*:5557',
      '--nats-url',
      'nats://127.0.0.1:1',
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /^error: --kv-events-endpoint: tcp:\/\/\*:5557 is a wildcard address the agent cannot connect to/,
    );
  });
});
