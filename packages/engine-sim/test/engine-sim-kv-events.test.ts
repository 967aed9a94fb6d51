import { ConfigError, kvBlockHashes } from '@fairway/core';
import { freePort, waitFor } from '@fairway/testkit';
import { decode } from '@msgpack/msgpack';
import { afterEach, describe, expect, it } from 'vitest';
import { Subscriber } from 'zeromq';
import { runEngineSimCommand } from '../src/cli.ts';
import { type EngineSimHandle, type StartEngineSimOptions, startEngineSim } from '../src/server.ts';

const SEED = '42';
const BLOCK = 16;

/** One ZMQ message as a vLLM KV events subscriber receives it. */
interface Received {
  readonly frames: number;
  readonly topic: string;
  /** The 8-byte seq frame, read as vLLM writes it (big-endian). */
  readonly seq: bigint;
  readonly seqBytes: number;
  /** The payload decoded without any schema: what is on the wire. */
  readonly batch: unknown;
}

/** A ZMQ SUB socket on an engine's KV events, recording every message. */
class EventTap {
  readonly received: Received[] = [];
  readonly #sub = new Subscriber();
  readonly #loop: Promise<void>;
  readonly #handshake: Promise<void>;

  private constructor(topic: string) {
    this.#handshake = new Promise((r) => this.#sub.events.on('handshake', () => r()));
    this.#sub.subscribe(topic);
    this.#loop = (async () => {
      for await (const frames of this.#sub) {
        this.received.push({
          frames: frames.length,
          topic: frames[0]!.toString('utf8'),
          seq: frames[1]!.readBigInt64BE(),
          seqBytes: frames[1]!.length,
          batch: decode(frames[2]!, { useBigInt64: true }),
        });
      }
    })();
  }

  /** Connects to a publisher that binds `endpoint`. */
  static async connect(endpoint: string, topic = ''): Promise<EventTap> {
    const tap = new EventTap(topic);
    tap.#sub.connect(endpoint);
    await tap.ready();
    return tap;
  }

  /** Binds `endpoint` for a publisher that connects to it. */
  static async bind(endpoint: string, topic = ''): Promise<EventTap> {
    const tap = new EventTap(topic);
    await tap.#sub.bind(endpoint);
    return tap;
  }

  /** Resolves once a publisher is connected and has had time to receive the subscription. */
  async ready(): Promise<void> {
    await this.#handshake;
    await new Promise((r) => setTimeout(r, 200));
  }

  /** Every event of every batch received, in order. */
  events(): unknown[][] {
    return this.received.flatMap((m) => (m.batch as [number, unknown[][]])[1]);
  }

  /** The events tagged `tag`. */
  tagged(tag: string): unknown[][] {
    return this.events().filter((e) => e[0] === tag);
  }

  async close(): Promise<void> {
    this.#sub.close();
    await this.#loop;
  }
}

async function post(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

interface Usage {
  prompt_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

/** A chat prompt long enough for several full blocks. */
function chat(topic: string): Record<string, unknown> {
  const rules = Array.from({ length: 40 }, (_, i) => `${topic} rule number ${i} is to be followed`).join(
    '. ',
  );
  return {
    messages: [
      { role: 'system', content: rules },
      { role: 'user', content: `What is the ${topic} rule?` },
    ],
  };
}

/** The hashes of the `BlockStored` events, in order, as the bytes or integers on the wire. */
function storedHashes(tap: EventTap): unknown[] {
  return tap.tagged('BlockStored').flatMap((e) => e[1] as unknown[]);
}

describe('engine-sim KV cache events', () => {
  const cleanup: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  async function engine(options: StartEngineSimOptions): Promise<EngineSimHandle> {
    const sim = await startEngineSim({
      speed: 50,
      enablePrefixCaching: true,
      enablePromptTokensDetails: true,
      prefixCachingHashAlgo: 'sha256_cbor',
      ...options,
    });
    cleanup.push(() => sim.close());
    return sim;
  }

  async function tap(endpoint: string, topic?: string): Promise<EventTap> {
    const t = await EventTap.connect(endpoint, topic);
    cleanup.push(() => t.close());
    return t;
  }

  it("publishes BlockStored for a prompt's full blocks in vLLM's wire format, hashed as sha256_cbor over /tokenize's ids", async () => {
    const sim = await engine({
      env: { PYTHONHASHSEED: SEED, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: '0' },
      kvEventsConfig: { enable_kv_cache_events: true, endpoint: 'tcp://127.0.0.1:*', topic: 'kv' },
    });
    expect(sim.kvEvents?.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const events = await tap(sim.kvEvents!.endpoint, 'kv');
    const body = chat('apple');

    const tokenized = await post(`${sim.url}/tokenize`, body);
    expect(tokenized.status).toBe(200);
    const ids = tokenized.json.tokens as number[];
    expect(tokenized.json.count).toBe(ids.length);
    const blocks = Math.floor(ids.length / BLOCK);
    expect(blocks).toBeGreaterThanOrEqual(3);

    const first = await post(`${sim.url}/v1/chat/completions`, { ...body, max_tokens: 1 });
    expect((first.json.usage as Usage).prompt_tokens).toBe(ids.length);
    await waitFor(() => storedHashes(events).length >= blocks, 5000, 'BlockStored events');

    const m = events.received[0]!;
    expect([m.frames, m.topic, m.seqBytes, m.seq]).toEqual([3, 'kv', 8, 0n]);
    expect(events.received.map((r) => r.seq)).toEqual(events.received.map((_, i) => BigInt(i)));
    const batch = m.batch as unknown[];
    // KVEventBatch, array_like with the default data_parallel_rank omitted: [ts, events].
    expect(batch).toHaveLength(2);
    expect(typeof batch[0]).toBe('number');
    expect(Math.abs((batch[0] as number) - Date.now() / 1000)).toBeLessThan(60);

    const expected = kvBlockHashes(ids, BLOCK, SEED);
    const stored = events.tagged('BlockStored');
    // One event for the request's new blocks: tag, hashes, parent, token ids, block size, LoRA, medium.
    expect(stored).toHaveLength(1);
    const [tag, hashes, parent, tokenIds, blockSize, loraId, medium] = stored[0]!;
    expect(stored[0]).toHaveLength(7);
    expect(tag).toBe('BlockStored');
    const wire = hashes as Uint8Array[];
    for (const h of wire) {
      expect(h).toBeInstanceOf(Uint8Array);
      expect(h.length).toBe(32);
    }
    expect(wire.map((h) => Buffer.from(h).toString('hex'))).toEqual(
      expected.slice(0, blocks).map((h) => h.toString('hex')),
    );
    expect(parent).toBeNull();
    expect(tokenIds).toEqual(ids.slice(0, blocks * BLOCK));
    expect([blockSize, loraId, medium]).toEqual([BLOCK, null, 'GPU']);

    // The same prompt again finds its blocks in the cache.
    const again = await post(`${sim.url}/v1/chat/completions`, { ...body, max_tokens: 1 });
    expect((again.json.usage as Usage).prompt_tokens_details?.cached_tokens).toBeGreaterThan(0);

    // A longer conversation stores only its new blocks, chained to the cached ones.
    const longer = chat('apple');
    (longer.messages as unknown[]).push(
      { role: 'assistant', content: 'The apple rule is to be followed, every one of them, always.' },
      { role: 'user', content: 'And what else should I know about apples and their many rules?' },
    );
    const longerIds = (await post(`${sim.url}/tokenize`, longer)).json.tokens as number[];
    const before = events.tagged('BlockStored').length;
    await post(`${sim.url}/v1/chat/completions`, { ...longer, max_tokens: 1 });
    await waitFor(() => events.tagged('BlockStored').length > before, 5000, 'the longer prompt stored');
    const next = events.tagged('BlockStored')[before]!;
    const longerHashes = kvBlockHashes(longerIds, BLOCK, SEED);
    const firstNew = longerHashes.findIndex((h, i) => !expected[i]?.equals(h));
    expect(firstNew).toBeGreaterThan(0);
    expect(Buffer.from(next[2] as Uint8Array).equals(longerHashes[firstNew - 1]!)).toBe(true);
    expect(Buffer.from((next[1] as Uint8Array[])[0]!).equals(longerHashes[firstNew]!)).toBe(true);
  });

  it('sends block hashes as 64-bit integers by default, as vLLM does, to a subscriber it connects to', async () => {
    const port = await freePort();
    // An endpoint without a wildcard is connected to (vLLM's rule): the subscriber binds it.
    const events = await EventTap.bind(`tcp://127.0.0.1:${port}`);
    cleanup.push(() => events.close());
    const sim = await engine({
      env: { PYTHONHASHSEED: SEED },
      kvEventsConfig: { enable_kv_cache_events: true, endpoint: `tcp://127.0.0.1:${port}` },
    });
    expect(sim.kvEvents).toEqual({ endpoint: `tcp://127.0.0.1:${port}`, topic: '', bound: false });
    await events.ready();
    const body = { prompt: Array.from({ length: 30 }, (_, i) => `word${i} and more`).join(' ') };
    const ids = (await post(`${sim.url}/tokenize`, body)).json.tokens as number[];
    const completion = await post(`${sim.url}/v1/completions`, { ...body, max_tokens: 1 });
    expect((completion.json.usage as Usage).prompt_tokens).toBe(ids.length);
    const blocks = Math.floor(ids.length / BLOCK);
    await waitFor(() => storedHashes(events).length >= blocks, 5000, 'BlockStored events');
    const expected = kvBlockHashes(ids, BLOCK, SEED)
      .slice(0, blocks)
      .map((h) => h.readBigUInt64BE(24));
    expect(storedHashes(events).map((h) => BigInt(h as bigint | number))).toEqual(expected);
    expect(events.received[0]!.topic).toBe('');
  });

  it('publishes BlockRemoved for the blocks it evicts when the KV cache is full', async () => {
    const sim = await engine({
      env: { PYTHONHASHSEED: SEED, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: '0' },
      kvCapacityTokens: 256,
      kvEventsConfig: { enable_kv_cache_events: true, endpoint: 'tcp://127.0.0.1:*' },
    });
    const events = await tap(sim.kvEvents!.endpoint);
    const prompts = ['pear', 'plum', 'fig', 'kiwi'].map((fruit) => ({
      prompt: Array.from({ length: 30 }, (_, i) => `${fruit} ${i}`).join(' '),
    }));
    for (const p of prompts) {
      const r = await post(`${sim.url}/v1/completions`, { ...p, max_tokens: 1 });
      expect(r.status).toBe(200);
    }
    await waitFor(() => events.tagged('BlockRemoved').length > 0, 5000, 'BlockRemoved events');
    const removed = events.tagged('BlockRemoved');
    for (const e of removed) {
      expect(e).toHaveLength(3);
      expect(e[2]).toBe('GPU');
    }
    const removedHex = removed.flatMap((e) =>
      (e[1] as Uint8Array[]).map((h) => Buffer.from(h).toString('hex')),
    );
    const storedHex = storedHashes(events).map((h) => Buffer.from(h as Uint8Array).toString('hex'));
    // Only blocks it stored are evicted, the first prompt's among them (least recently used).
    for (const h of removedHex) expect(storedHex).toContain(h);
    const firstIds = (await post(`${sim.url}/tokenize`, prompts[0])).json.tokens as number[];
    const firstHex = kvBlockHashes(firstIds, BLOCK, SEED).map((h) => h.toString('hex'));
    expect(removedHex.some((h) => firstHex.includes(h))).toBe(true);
  });

  it('hashes with a random seed per process when PYTHONHASHSEED is unset', async () => {
    const body = { prompt: Array.from({ length: 40 }, (_, i) => `same ${i}`).join(' ') };
    const seen: string[] = [];
    for (let i = 0; i < 2; i++) {
      const sim = await engine({
        env: { VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: '0' },
        kvEventsConfig: { enable_kv_cache_events: true, endpoint: 'tcp://127.0.0.1:*' },
      });
      const events = await tap(sim.kvEvents!.endpoint);
      await post(`${sim.url}/v1/completions`, { ...body, max_tokens: 1 });
      await waitFor(() => storedHashes(events).length > 0, 5000, 'BlockStored events');
      seen.push(Buffer.from(storedHashes(events)[0] as Uint8Array).toString('hex'));
    }
    expect(seen[0]).not.toBe(seen[1]);
  });

  it('publishes nothing unless enable_kv_cache_events is set', async () => {
    const sim = await engine({ kvEventsConfig: { endpoint: 'tcp://127.0.0.1:*' } });
    expect(sim.kvEvents).toBeUndefined();
  });

  it('refuses an invalid --kv-events-config and hash setting, naming the field', async () => {
    await expect(
      startEngineSim({ kvEventsConfig: { enable_kv_cache_events: true, endpoint: 'localhost:5557' } }),
    ).rejects.toThrow(/kvEventsConfig\.endpoint/);
    await expect(
      startEngineSim({ kvEventsConfig: { enable_kv_cache_events: true, publisher: 'kafka' } as never }),
    ).rejects.toThrow(/kvEventsConfig\.publisher/);
    await expect(
      startEngineSim({ kvEventsConfig: { enable_kv_cache_events: true, hwm: -1 } }),
    ).rejects.toBeInstanceOf(ConfigError);
    await expect(
      startEngineSim({ kvEventsConfig: { enable_kv_cache_events: true, endpoit: 'x' } as never }),
    ).rejects.toThrow(/endpoit/);
    await expect(
      startEngineSim({
        env: { VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: 'yes' },
        kvEventsConfig: { enable_kv_cache_events: true, endpoint: 'tcp://127.0.0.1:*' },
      }),
    ).rejects.toThrow(/VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES/);
    await expect(
      runEngineSimCommand(['--port', '0', '--log-level', 'silent', '--kv-events-config', '{nope'], {
        handleSignals: false,
      }),
    ).rejects.toThrow(/must be JSON/);
    await expect(
      runEngineSimCommand(['--port', '0', '--log-level', 'silent', '--prefix-caching-hash-algo', 'md5'], {
        handleSignals: false,
      }),
    ).rejects.toThrow(/sha256_cbor/);
  });

  it('takes vLLM’s --prefix-caching-hash-algo and --kv-events-config flags and frees the endpoint on close', async () => {
    const port = await freePort();
    const argv = [
      '--port',
      '0',
      '--speed',
      '50',
      '--log-level',
      'silent',
      '--enable-prefix-caching',
      '--prefix-caching-hash-algo',
      'sha256_cbor',
      '--kv-events-config',
      JSON.stringify({
        enable_kv_cache_events: true,
        publisher: 'zmq',
        endpoint: `tcp://127.0.0.1:${port}*`,
      }),
    ];
    await expect(runEngineSimCommand(argv, { handleSignals: false })).rejects.toThrow(/endpoint/);
    argv[argv.length - 1] = JSON.stringify({ enable_kv_cache_events: true, endpoint: `tcp://*:${port}` });
    const env = { PYTHONHASHSEED: SEED, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: '0' };
    const sim = await runEngineSimCommand(argv, { handleSignals: false, env });
    let closed = false;
    try {
      expect(sim.kvEvents).toEqual({ endpoint: `tcp://0.0.0.0:${port}`, topic: '', bound: true });
      const events = await tap(`tcp://127.0.0.1:${port}`);
      const body = { prompt: Array.from({ length: 20 }, (_, i) => `flag ${i}`).join(' ') };
      const ids = (await post(`${sim.url}/tokenize`, body)).json.tokens as number[];
      await post(`${sim.url}/v1/completions`, { ...body, max_tokens: 1 });
      await waitFor(() => storedHashes(events).length > 0, 5000, 'BlockStored events');
      expect(
        Buffer.from(storedHashes(events)[0] as Uint8Array).equals(kvBlockHashes(ids, BLOCK, SEED)[0]!),
      ).toBe(true);
      await sim.close();
      closed = true;
      // The endpoint is free again once the engine has closed.
      const again = await runEngineSimCommand(argv, { handleSignals: false, env });
      await again.close();
    } finally {
      if (!closed) await sim.close();
    }
  });
});

describe('engine-sim /tokenize', () => {
  let sim: EngineSimHandle;
  afterEach(async () => {
    await sim.close();
  });

  it('counts the prompt of a chat and of a completion exactly as the request reports prompt_tokens', async () => {
    sim = await startEngineSim({ speed: 50, servedModelName: 'm' });
    const conversation = {
      model: 'm',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Name three rivers, please.' },
        { role: 'assistant', content: 'Nile, Amazon, Yangtze.' },
        { role: 'user', content: 'And three lakes?' },
      ],
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
    };
    const completion = { model: 'm', prompt: 'Once upon a time, in a land far away, there lived a cat.' };
    for (const [route, body] of [
      ['/v1/chat/completions', conversation],
      ['/v1/completions', completion],
      ['/v1/chat/completions', { ...conversation, add_special_tokens: true }],
      ['/v1/completions', { ...completion, add_special_tokens: false }],
    ] as const) {
      const tokenized = await post(`${sim.url}/tokenize`, body);
      expect(tokenized.status).toBe(200);
      const answer = await post(`${sim.url}${route}`, { ...body, max_tokens: 1 });
      expect(tokenized.json.count).toBe((answer.json.usage as Usage).prompt_tokens);
      expect(tokenized.json.tokens).toHaveLength(tokenized.json.count as number);
      expect(tokenized.json.token_strs).toBeNull();
      expect(tokenized.json.max_model_len).toBeGreaterThan(0);
      for (const id of tokenized.json.tokens as number[]) expect(Number.isInteger(id)).toBe(true);
    }
    // `<s>` comes first, and only with add_special_tokens (the completions default).
    const withBos = (await post(`${sim.url}/tokenize`, completion)).json.tokens as number[];
    const without = (await post(`${sim.url}/tokenize`, { ...completion, add_special_tokens: false })).json
      .tokens as number[];
    expect(withBos).toEqual([1, ...without]);
  });

  it('answers errors in vLLM’s shape', async () => {
    sim = await startEngineSim({ speed: 50, servedModelName: 'm' });
    const unknown = await post(`${sim.url}/tokenize`, { model: 'other', prompt: 'hi' });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toMatchObject({ type: 'NotFoundError', code: 404 });
    const bad = await post(`${sim.url}/tokenize`, { prompt: 7 });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ type: 'BadRequestError', code: 400 });
    const both = await post(`${sim.url}/tokenize`, {
      messages: [{ role: 'assistant', content: 'x' }],
      continue_final_message: true,
      add_generation_prompt: true,
    });
    expect(both.status).toBe(400);
  });
});
