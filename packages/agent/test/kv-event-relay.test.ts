import { type KvEvents, MemoryBus } from '@fairway/bus';
import { kvBlockKey, kvBlockKeys, systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { startEngineSim } from '@fairway/engine-sim';
import { freePort, waitFor } from '@fairway/testkit';
import { encode } from '@msgpack/msgpack';
import { afterEach, describe, expect, it } from 'vitest';
import { Publisher } from 'zeromq';
import { KvEventRelay, localKvEventsEndpoint, NodeAgent } from '../src/index.ts';

/** A 32-byte block hash whose last byte is `n` (its block key ends in `n`'s hex). */
function hash(n: number): Uint8Array {
  const h = new Uint8Array(32);
  h.fill(0xab, 0, 24);
  h[31] = n;
  return h;
}

/** The block key of {@link hash}`(n)`. */
function key(n: number): string {
  return kvBlockKey(hash(n))!;
}

/** vLLM's array-encoded events, as msgspec writes them. */
const stored = (hashes: unknown[], parent: unknown = null): unknown[] => [
  'BlockStored',
  hashes,
  parent,
  hashes.flatMap(() => Array.from({ length: 16 }, (_, i) => i)),
  16,
  null,
  'GPU',
];
const removed = (hashes: unknown[]): unknown[] => ['BlockRemoved', hashes, 'GPU'];

/** A test engine: a ZMQ PUB that sends vLLM KV event batches with its own seq. */
class FakeEngine {
  readonly socket = new Publisher({ linger: 0 });
  endpoint = '';
  seq = 0n;

  /** Binds a free port (`connect` false), or picks one to connect to once the relay binds it. */
  async open(connect = false): Promise<void> {
    this.endpoint = `tcp://127.0.0.1:${await freePort()}`;
    if (connect) this.socket.connect(this.endpoint);
    else await this.socket.bind(this.endpoint);
  }

  /** Sends a batch `[ts, events]` (or any payload) under the next seq, or under `seq`. */
  async send(
    payload: unknown,
    options: { seq?: bigint; topic?: string; raw?: Uint8Array } = {},
  ): Promise<void> {
    const seq = options.seq ?? this.seq;
    this.seq = seq + 1n;
    const seqBytes = Buffer.alloc(8);
    seqBytes.writeBigInt64BE(seq);
    const body = options.raw ?? encode(payload, { useBigInt64: true });
    await this.socket.send([options.topic ?? 'kv', seqBytes, body]);
  }
}

describe('KvEventRelay', () => {
  const cleanup: (() => Promise<unknown> | unknown)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  /** A relay from a fake engine to a memory bus, once the first (empty) batch came through. */
  async function relayed(
    bind = false,
  ): Promise<{ engine: FakeEngine; relay: KvEventRelay; messages: KvEvents[] }> {
    const engine = new FakeEngine();
    await engine.open(bind);
    cleanup.push(() => engine.socket.close());
    const bus = new MemoryBus();
    cleanup.push(() => bus.close());
    const messages: KvEvents[] = [];
    bus.subscribe('kvEvents', (m) => {
      messages.push(m);
    });
    const relay = new KvEventRelay({
      bus,
      clock: systemClock,
      replicaId: 'gpu-1',
      epoch: 'run-1',
      endpoint: engine.endpoint,
      topic: 'kv',
      bind,
    });
    await relay.start();
    cleanup.push(() => relay.stop());
    // Empty batches until the subscription has reached the engine: the first relayed one says
    // only that the replica's cache is to be forgotten.
    await waitFor(
      async () => {
        await engine.send([Date.now() / 1000, []]);
        return messages.length > 0;
      },
      5000,
      'the relay to subscribe',
    );
    await bus.flush();
    return { engine, relay, messages };
  }

  it('publishes stored, removed and cleared block keys in order, numbered from 0 in the epoch, cleared first', async () => {
    const { engine, messages } = await relayed();
    expect(messages).toEqual([
      { replicaId: 'gpu-1', epoch: 'run-1', seq: 0, events: [['cleared']], at: expect.any(Number) },
    ]);
    const bigHash = 0xfedcba9876543210n;
    await engine.send([
      Date.now() / 1000,
      [
        stored([hash(1), hash(2)]),
        // Integer hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES), as uint64 and as a small integer.
        stored([bigHash, 7], hash(2)),
        removed([hash(1)]),
        // vLLM's map encoding, with fields this relay does not know.
        {
          type: 'BlockStored',
          block_hashes: [hash(3)],
          parent_block_hash: null,
          medium: 'GPU',
          group_idx: 0,
          extra: 1,
        },
        ['BlockUpdated', [hash(4)]],
        // Copies offloaded to the CPU are not in the GPU's prefix cache.
        ['BlockStored', [hash(5)], null, [], 16, null, 'CPU'],
      ],
    ]);
    await engine.send([Date.now() / 1000, [['AllBlocksCleared'], removed([hash(2)])], 0]);
    await waitFor(() => messages.length >= 3, 5000, 'two batches relayed');
    expect(messages.map((m) => m.seq)).toEqual([0, 1, 2]);
    expect(messages[1]!.events).toEqual([
      ['stored', [key(1), key(2), 'fedcba9876543210', '0000000000000007']],
      ['removed', [key(1)]],
      ['stored', [key(3)]],
    ]);
    expect(messages[2]!.events).toEqual([['cleared'], ['removed', [key(2)]]]);
  });

  it("starts over with cleared when the engine's seq skips or a batch cannot be read", async () => {
    const { engine, messages } = await relayed();
    await engine.send([0, [stored([hash(1)])]]);
    // One batch lost between the engine and the relay.
    await engine.send([0, [stored([hash(2)])]], { seq: engine.seq + 1n });
    // Bytes that are no msgpack batch, then a batch that is not [ts, events].
    await engine.send(null, { raw: Uint8Array.of(0xc1, 0xff) });
    await engine.send(null);
    await engine.send([0, [stored([hash(3)])]]);
    // An event whose hashes cannot be block keys: what came before it in the batch is void.
    await engine.send([0, [stored([hash(4)]), stored(['not-a-hash']), stored([hash(5)])]]);
    // Another topic that begins with this one is another publisher's.
    const next = engine.seq;
    await engine.send([0, [stored([hash(9)])]], { topic: 'kv-other', seq: 0n });
    engine.seq = next;
    await engine.send([0, [removed([hash(5)])]]);
    await waitFor(() => messages.length >= 6, 5000, 'the batches relayed');
    await new Promise((r) => setTimeout(r, 100));
    expect(messages.map((m) => [m.seq, m.events])).toEqual([
      [0, [['cleared']]],
      [1, [['stored', [key(1)]]]],
      [2, [['cleared'], ['stored', [key(2)]]]],
      [3, [['cleared'], ['stored', [key(3)]]]],
      [4, [['cleared'], ['stored', [key(5)]]]],
      [5, [['removed', [key(5)]]]],
    ]);
  });

  it('binds the endpoint for an engine that connects its publisher to it', async () => {
    const { engine, messages } = await relayed(true);
    await engine.send([0, [stored([hash(1)])]]);
    await waitFor(() => messages.length >= 2, 5000, 'the batch relayed');
    expect(messages.map((m) => m.events)).toEqual([[['cleared']], [['stored', [key(1)]]]]);
  });

  it('splits a large batch to fit the bus message bounds', async () => {
    const { engine, messages } = await relayed();
    const many = Array.from({ length: 5000 }, (_, i) => BigInt(i + 1));
    const alternating = Array.from({ length: 300 }, (_, i) =>
      i % 2 === 0 ? stored([hash(1)]) : removed([hash(1)]),
    );
    await engine.send([0, [stored(many), ...alternating]]);
    await waitFor(() => messages.length >= 3, 5000, 'the batch relayed');
    const [, first, second] = messages;
    expect(first!.events).toHaveLength(256);
    expect(first!.events[0]).toEqual(['stored', many.slice(0, 4096).map((h) => kvBlockKey(h))]);
    expect(first!.events[1]).toEqual(['stored', [...many.slice(4096).map((h) => kvBlockKey(h)), key(1)]]);
    expect(second!.seq).toBe(first!.seq + 1);
    expect(first!.events.length + second!.events.length).toBe(301);
  });

  it('connects to the loopback address of an engine bound on a wildcard address', () => {
    expect(localKvEventsEndpoint('tcp://*:5557')).toBe('tcp://127.0.0.1:5557');
    expect(localKvEventsEndpoint('tcp://0.0.0.0:5557')).toBe('tcp://127.0.0.1:5557');
    expect(localKvEventsEndpoint('tcp://[::]:5557')).toBe('tcp://[::1]:5557');
    expect(localKvEventsEndpoint('tcp://10.1.2.3:5557')).toBe('tcp://10.1.2.3:5557');
    expect(localKvEventsEndpoint('ipc:///tmp/kv')).toBe('ipc:///tmp/kv');
  });
});

describe('NodeAgent with kvEventsEndpoint', () => {
  it("relays a real engine's KV cache events under its epoch and clears them when the engine goes down", async () => {
    const seed = '7';
    const sim = await startEngineSim({
      speed: 50,
      enablePrefixCaching: true,
      prefixCachingHashAlgo: 'sha256_cbor',
      env: { PYTHONHASHSEED: seed },
      kvEventsConfig: { enable_kv_cache_events: true, endpoint: 'tcp://127.0.0.1:*', topic: 'kv-events' },
    });
    let simOpen = true;
    const engine = new VllmClient({ url: sim.url });
    const bus = new MemoryBus();
    const messages: KvEvents[] = [];
    bus.subscribe('kvEvents', (m) => {
      messages.push(m);
    });
    const agent = new NodeAgent({
      bus,
      engine,
      clock: systemClock,
      replicaId: 'gpu-node-1',
      pool: 'llama',
      model: sim.servedModelName,
      heartbeatIntervalMs: 50,
      kvEventsEndpoint: sim.kvEvents!.endpoint,
      kvEventsTopic: 'kv-events',
    });
    try {
      await agent.start();
      // The relay's subscription reaches the engine a moment after it connects.
      await new Promise((r) => setTimeout(r, 500));
      const body = { prompt: Array.from({ length: 50 }, (_, i) => `token ${i}`).join(' ') };
      const tokenized = (await (
        await fetch(`${sim.url}/tokenize`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        })
      ).json()) as { tokens: number[] };
      await fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, max_tokens: 1 }),
      });
      const keys = kvBlockKeys(tokenized.tokens, 16, seed);
      expect(keys.length).toBeGreaterThan(2);
      await waitFor(() => messages.length > 0, 5000, 'the stored blocks relayed');
      expect(messages[0]).toMatchObject({ replicaId: 'gpu-node-1', epoch: agent.epoch, seq: 0 });
      expect(messages[0]!.events).toEqual([['cleared'], ['stored', keys]]);

      await sim.close();
      simOpen = false;
      await waitFor(() => messages.length > 1, 5000, 'the cleared cache announced');
      expect(messages[1]).toMatchObject({ epoch: agent.epoch, seq: 1, events: [['cleared']] });
    } finally {
      await agent.stop();
      await engine.close();
      if (simOpen) await sim.close();
      await bus.close();
    }
  });

  it('refuses a KV events endpoint it can neither connect to nor bind', () => {
    const options = {
      bus: new MemoryBus(),
      engine: new VllmClient({ url: 'http://127.0.0.1:1' }),
      clock: systemClock,
      replicaId: 'r',
      pool: 'p',
      model: 'm',
    };
    expect(() => new NodeAgent({ ...options, kvEventsEndpoint: 'tcp://*:5557' })).toThrow(/kvEventsEndpoint/);
    expect(() => new NodeAgent({ ...options, kvEventsEndpoint: 'tcp://0.0.0.0:5557' })).toThrow(/wildcard/);
    expect(() => new NodeAgent({ ...options, kvEventsEndpoint: '127.0.0.1:5557' })).toThrow(
      /kvEventsEndpoint/,
    );
    // Bound, a wildcard is where an engine that connects finds it.
    expect(
      () => new NodeAgent({ ...options, kvEventsEndpoint: 'tcp://*:5557', kvEventsBind: true }),
    ).not.toThrow();
  });
});
