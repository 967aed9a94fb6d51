import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  EngineAbortedError,
  EngineBadResponseError,
  EngineConnectionLostError,
  EngineHttpError,
  EngineTimeoutError,
  EngineUnreachableError,
  SseScanner,
  VllmClient,
} from '@fairway/engine';
import { freePort } from '@fairway/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { FaultConfig } from '../src/index.ts';
import { type EngineSimHandle, startEngineSim } from '../src/index.ts';

const MODEL = 'llama-2-7b';
const chat = (outputTokens: number, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'tell me a story' }],
  max_tokens: 4000,
  fairway_output_tokens: outputTokens,
  ...extra,
});

async function setFaults(url: string, patch: Partial<FaultConfig>): Promise<void> {
  const res = await fetch(`${url}/fairway/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(patch),
  });
  expect(res.status).toBe(200);
}

async function drain(stream: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const b of stream) parts.push(b);
  return Buffer.concat(parts);
}

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 5_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('VllmClient against engine-sim', () => {
  let sim: EngineSimHandle;
  let client: VllmClient;

  beforeAll(async () => {
    sim = await startEngineSim({ speed: 20, kvCapacityTokens: 60_000 });
    client = new VllmClient({ url: sim.url, modelName: MODEL });
  });
  afterEach(() =>
    setFaults(sim.url, { errorRate: 0, dropRate: 0, hangRate: 0, headersDelayMs: 0, stalled: false }),
  );
  afterAll(async () => {
    await client.close();
    await sim.close();
  });

  it('completes chat and text requests with the engine usage', async () => {
    const r = await client.complete('chat', chat(9));
    // 'tell me a story' in Llama-2's template: 4 words + 9 tokens of `<s>[INST] … [/INST]`.
    expect(r.usage).toEqual({ promptTokens: 13, completionTokens: 9, totalTokens: 22 });
    expect(r.finishReason).toBe('stop');
    expect(JSON.parse(Buffer.from(r.bytes).toString())).toEqual(r.body);
    const t = await client.complete('completions', {
      model: MODEL,
      prompt: 'abcd',
      max_tokens: 4,
      ignore_eos: true,
    });
    expect(t.usage.completionTokens).toBe(4);
    expect(t.finishReason).toBe('length');
  });

  it('streams raw SSE bytes while counting tokens, injecting usage options the caller did not ask for', async () => {
    const lines: boolean[] = [];
    const s = await client.stream('chat', chat(25), { onLine: (l) => lines.push(l.hasContent) });
    expect(s.status).toBe(200);
    const bytes = await drain(s);
    expect(s.done).toBe(true);
    expect(s.usage).toEqual({ promptTokens: 13, completionTokens: 25, totalTokens: 38 });
    expect(s.completionTokens).toBe(25);
    expect(s.finishReason).toBe('stop');
    expect(lines.filter(Boolean)).toHaveLength(25);
    // The forwarded bytes are exactly vLLM's stream: re-scanning them gives the same counts.
    const again = new SseScanner();
    again.push(bytes);
    expect([again.contentChunks, again.done, again.usage?.completionTokens]).toEqual([25, true, 25]);
    // Continuous usage stats were requested: every token chunk carries usage.
    expect(bytes.toString().match(/"usage":/g)?.length).toBe(25 + 2);
  });

  it('lists models, reports health and parses metrics', async () => {
    expect((await client.models()).map((m) => m.id)).toEqual([MODEL]);
    await expect(client.health()).resolves.toBeUndefined();
    const m = await client.metrics();
    expect(m).toMatchObject({ blockSize: 16, numGpuBlocks: 60_000 / 16, kvCapacityTokens: 60_000 });
    expect(m.generationTokensTotal).toBeGreaterThan(0);
  });

  it('fails with EngineUnreachableError when nothing listens', async () => {
    const port = await freePort();
    const dead = new VllmClient({ url: `http://127.0.0.1:${port}` });
    await expect(dead.health()).rejects.toBeInstanceOf(EngineUnreachableError);
    await expect(dead.stream('chat', chat(1))).rejects.toBeInstanceOf(EngineUnreachableError);
    await dead.close();
  });

  it('keeps the engine error body on a non-2xx status', async () => {
    const err = await client.complete('chat', { ...chat(1), model: 'missing' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineHttpError);
    const e = err as EngineHttpError;
    expect([e.status, e.engineType, e.engineMessage]).toEqual([
      404,
      'NotFoundError',
      'The model `missing` does not exist.',
    ]);
    expect(e.message).toContain('POST /v1/chat/completions');
  });

  it('times out waiting for headers', async () => {
    // undici checks its headers and body timers about once a second: leave it the margin.
    await setFaults(sim.url, { headersDelayMs: 2_000 });
    const err = await client.stream('chat', chat(2), { headersTimeoutMs: 200 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineTimeoutError);
    expect((err as EngineTimeoutError).phase).toBe('headers');
  });

  it('answers 500 for the injected error fraction', async () => {
    await setFaults(sim.url, { errorRate: 1 });
    const err = await client.stream('chat', chat(2)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineHttpError);
    expect((err as EngineHttpError).status).toBe(500);
  });

  it('reports a dropped connection mid-stream after the tokens that were sent', async () => {
    await setFaults(sim.url, { dropRate: 1, dropAfterTokens: 3 });
    const s = await client.stream('chat', chat(50));
    const err = await drain(s).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineConnectionLostError);
    expect(s.completionTokens).toBe(3);
    expect(s.done).toBe(false);
  });

  it('times out a hanging stream on the body idle timeout', async () => {
    await setFaults(sim.url, { hangRate: 1, hangAfterTokens: 2 });
    const s = await client.stream('chat', chat(50), { bodyTimeoutMs: 300 });
    const err = await drain(s).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineTimeoutError);
    expect((err as EngineTimeoutError).phase).toBe('body');
    expect(s.completionTokens).toBe(2);
  });

  it('stalled, answers health and metrics but takes no step; goes on once it is not', async () => {
    const s = await client.stream('chat', chat(40));
    const it = s[Symbol.asyncIterator]();
    while (s.completionTokens < 2) await it.next();
    await setFaults(sim.url, { stalled: true });
    const at = (await client.metrics()).generationTokensTotal;
    await new Promise((r) => setTimeout(r, 300));
    await client.health();
    const still = await client.metrics();
    expect(still.generationTokensTotal).toBe(at);
    expect(still.running).toBe(1);
    await setFaults(sim.url, { stalled: false });
    await drain({ [Symbol.asyncIterator]: () => it });
    expect(s.done).toBe(true);
    expect(s.completionTokens).toBe(40);
  });

  it('aborting a stream closes the connection and the engine frees the KV blocks', async () => {
    const controller = new AbortController();
    const s = await client.stream('chat', chat(3000), { signal: controller.signal });
    const it = s[Symbol.asyncIterator]();
    while (s.completionTokens < 5) await it.next();
    const busy = await client.metrics();
    expect(busy.running).toBe(1);
    expect(busy.kvCacheUsage).toBeGreaterThan(0);
    controller.abort();
    await expect(it.next()).rejects.toBeInstanceOf(EngineAbortedError);
    const idle = await until(
      () => client.metrics(),
      (m) => m.running === 0 && m.kvCacheUsage === 0,
    );
    expect([idle.running, idle.kvCacheUsage]).toEqual([0, 0]);
  });

  it('aborts before the headers with EngineAbortedError', async () => {
    await setFaults(sim.url, { headersDelayMs: 200 });
    const controller = new AbortController();
    const pending = client.stream('chat', chat(2), { signal: controller.signal });
    setTimeout(() => controller.abort(), 20);
    await expect(pending).rejects.toBeInstanceOf(EngineAbortedError);
  });

  it('sleeps (refusing generation, dropping running requests) and wakes up', async () => {
    const running = await client.stream('chat', chat(3000));
    const draining = drain(running).catch((e: unknown) => e);
    await until(
      () => client.metrics(),
      (m) => m.running === 1,
    );
    await client.sleep(1);
    expect(await client.isSleeping()).toBe(true);
    expect(await draining).toBeInstanceOf(EngineConnectionLostError);
    const refused = await client.complete('chat', chat(1)).catch((e: unknown) => e);
    expect((refused as EngineHttpError).status).toBe(503);
    const m = await client.metrics();
    expect([m.running, m.kvCacheUsage]).toEqual([0, 0]);
    await client.wakeUp();
    expect(await client.isSleeping()).toBe(false);
    expect((await client.complete('chat', chat(2))).usage.completionTokens).toBe(2);
  });

  it('loads and unloads LoRA adapters, serving them by name; sleep level 2 drops them', async () => {
    await client.loadLoraAdapter('sql', '/adapters/sql');
    const cards = await client.models();
    expect(cards.find((c) => c.id === 'sql')).toMatchObject({ root: '/adapters/sql', parent: MODEL });
    const r = await client.complete('chat', { ...chat(3), model: 'sql' });
    expect(r.body.model).toBe('sql');
    const dup = await client.loadLoraAdapter('sql', '/adapters/sql').catch((e: unknown) => e);
    expect((dup as EngineHttpError).status).toBe(400);
    await client.unloadLoraAdapter('sql');
    expect((await client.models()).map((c) => c.id)).toEqual([MODEL]);
    const gone = await client.unloadLoraAdapter('sql').catch((e: unknown) => e);
    expect((gone as EngineHttpError).status).toBe(404);
    const unknown = await client.complete('chat', { ...chat(1), model: 'sql' }).catch((e: unknown) => e);
    expect((unknown as EngineHttpError).status).toBe(404);

    await client.loadLoraAdapter('chat-lora', '/adapters/chat');
    await client.sleep(2);
    await client.wakeUp();
    expect((await client.models()).map((c) => c.id)).toEqual([MODEL]);
  });
});

describe('engine-sim engine behaviour through the client', () => {
  it('preempts under KV pressure and still completes every request with its true usage', async () => {
    // 6 requests × (8 prompt + 300 output) tokens need ~1,900 tokens; the cache holds 1,024.
    const sim = await startEngineSim({ speed: 50, kvCapacityTokens: 1024 });
    const client = new VllmClient({ url: sim.url });
    try {
      const results = await Promise.all(
        Array.from({ length: 6 }, () => client.complete('chat', chat(300, { max_tokens: 400 }))),
      );
      for (const r of results) expect(r.usage.completionTokens).toBe(300);
      const m = await client.metrics();
      expect(m.preemptionsTotal).toBeGreaterThan(0);
      expect(m.requestSuccessTotal).toBe(6);
    } finally {
      await client.close();
      await sim.close();
    }
  });

  it('runs lower priority values first under --scheduling-policy priority', async () => {
    const sim = await startEngineSim({ speed: 20, maxNumSeqs: 1, schedulingPolicy: 'priority' });
    const client = new VllmClient({ url: sim.url });
    try {
      const order: string[] = [];
      const blocker = client.complete('chat', chat(100));
      await until(
        () => client.metrics(),
        (m) => m.running === 1,
      );
      const low = client.complete('chat', chat(5, { priority: 10 })).then(() => order.push('low'));
      await until(
        () => client.metrics(),
        (m) => m.waiting === 1,
      );
      const high = client.complete('chat', chat(5, { priority: -1 })).then(() => order.push('high'));
      await Promise.all([blocker, low, high]);
      expect(order).toEqual(['high', 'low']);
    } finally {
      await client.close();
      await sim.close();
    }
  });

  it('refuses priority under the default FCFS policy, as vLLM does', async () => {
    const sim = await startEngineSim({ speed: 20 });
    const client = new VllmClient({ url: sim.url });
    try {
      const err = await client.complete('chat', chat(1, { priority: 3 })).catch((e: unknown) => e);
      expect((err as EngineHttpError).status).toBe(400);
    } finally {
      await client.close();
      await sim.close();
    }
  });

  it('coalesces chunks into periodic writes under --stream-flush-ms, still one token per chunk', async () => {
    const sim = await startEngineSim({ speed: 10, streamFlushMs: 50 });
    const client = new VllmClient({ url: sim.url });
    try {
      const s = await client.stream('chat', chat(60));
      let reads = 0;
      for await (const _bytes of s) reads++;
      expect(s.completionTokens).toBe(60);
      expect(s.usage?.completionTokens).toBe(60);
      // ~1 ms steps at speed 10: 60 tokens take ~60 ms, so a 50 ms flush leaves few writes.
      expect(reads).toBeLessThan(20);
    } finally {
      await client.close();
      await sim.close();
    }
  });

  it('is unhealthy during a slow start, then healthy', async () => {
    const sim = await startEngineSim({ faults: { slowStartMs: 300 } });
    const client = new VllmClient({ url: sim.url });
    try {
      const early = await client.health().catch((e: unknown) => e);
      expect((early as EngineHttpError).status).toBe(503);
      const refused = await client.complete('chat', chat(1)).catch((e: unknown) => e);
      expect((refused as EngineHttpError).status).toBe(503);
      await new Promise((r) => setTimeout(r, 350));
      await expect(client.health()).resolves.toBeUndefined();
    } finally {
      await client.close();
      await sim.close();
    }
  });

  it('draws the same output lengths for the same seed', async () => {
    const lengths = async (seed: number) => {
      const sim = await startEngineSim({
        speed: 50,
        seed,
        outputTokens: { kind: 'uniform', min: 1, max: 40 },
      });
      const client = new VllmClient({ url: sim.url });
      const out: number[] = [];
      for (let i = 0; i < 5; i++) {
        out.push(
          (await client.complete('chat', { model: MODEL, messages: [{ role: 'user', content: 'x' }] })).usage
            .completionTokens,
        );
      }
      await client.close();
      await sim.close();
      return out;
    };
    const a = await lengths(7);
    expect(await lengths(7)).toEqual(a);
    expect(new Set(a).size).toBeGreaterThan(1);
  });
});

describe('VllmClient against an engine answering malformed completions', () => {
  let server: Server;
  let url: string;
  /** The body the engine answers the next completion with. */
  let body: unknown;
  beforeAll(async () => {
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  it('names the field the engine left out or got wrong, and reads a well-formed body', async () => {
    const client = new VllmClient({ url });
    const ok = { id: 'x', choices: [{ index: 0, finish_reason: 'length' }] };
    const cases: [unknown, string][] = [
      [[], 'fields'],
      [{ usage: { prompt_tokens: 1, completion_tokens: 1 } }, 'choices'],
      [{ ...ok }, 'usage'],
      [{ ...ok, usage: { prompt_tokens: 1.5, completion_tokens: 1 } }, 'usage.prompt_tokens'],
      [{ ...ok, usage: { prompt_tokens: 1, completion_tokens: -1 } }, 'usage.completion_tokens'],
      [{ ...ok, usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: '2' } }, 'usage.total_tokens'],
      [
        { choices: [{ finish_reason: 3 }], usage: { prompt_tokens: 1, completion_tokens: 1 } },
        'choices.0.finish_reason',
      ],
    ];
    try {
      for (const [answer, field] of cases) {
        body = answer;
        const err = await client.complete('chat', chat(1)).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(EngineBadResponseError);
        expect((err as Error).message).toContain(`body lacks ${field}`);
      }
      body = { ...ok, usage: { prompt_tokens: 3, completion_tokens: 2 } };
      const r = await client.complete('chat', chat(1));
      expect(r.usage).toEqual({ promptTokens: 3, completionTokens: 2, totalTokens: 5 });
      expect(r.finishReason).toBe('length');
    } finally {
      await client.close();
    }
  });
});
