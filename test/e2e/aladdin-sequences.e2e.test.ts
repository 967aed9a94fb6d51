import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { purgeStore, RedisStore } from '@fairway/store';
import { redisUrl, startNatsServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { engineMetric } from './support/chat.ts';
import { E2E_MODEL, E2E_POOL } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startServe, untilServed } from './support/processes.ts';

/**
 * Aladdin's KV constraint (e) on a real fleet, time-indexed: two `fairway serve` dispatchers
 * (Redis with a random prefix, a NATS server of this test's own) report the requests they run to
 * each other, and place by every replica's sequences — how far each has grown toward its
 * reservation — rather than by the sum of the reservations. Two `fairway engine-sim` replicas of
 * 5,000 KV tokens (4,950 reservable), at five times a GPU's speed, so the requests overlap for seconds.
 * A request through one dispatcher is placed by what the other dispatcher's requests have become.
 */
const KEY = 'sk-aladdin-alpha-0001';
const KV_TOKENS = 5000;
const RESERVABLE = Math.floor(KV_TOKENS * 0.99);
const CONFIG = `
tenants:
  - { id: alpha, keys: [{ key: ${KEY} }] }
pools:
  - { id: ${E2E_POOL}, model: ${E2E_MODEL} }
policy:
  ordering: fcfs
  placement: aladdin
  queueTimeoutS: 60
`;

/** A prompt of about `n` tokens to the gateway's estimate and the engine's count alike. */
const prompt = (tag: string, n: number) => `${tag}${' abc'.repeat(n - 1)}`;

/** A streamed completion under way: output tokens so far, and when it started and ended. */
interface Stream {
  tokens: number;
  firstTokenAt: number | undefined;
  endedAt: number | undefined;
  readonly done: Promise<void>;
}

/** Streams one completion of exactly `output` tokens (engine-sim's `fairway_output_tokens`). */
function stream(url: string, text: string, maxTokens: number, output: number): Stream {
  const s: Stream = { tokens: 0, firstTokenAt: undefined, endedAt: undefined, done: Promise.resolve() };
  const run = async () => {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: E2E_MODEL,
        prompt: text,
        max_tokens: maxTokens,
        fairway_output_tokens: output,
        stream: true,
      }),
    });
    if (res.status !== 200 || res.body === null)
      throw new Error(`answered ${res.status}: ${await res.text()}`);
    const decoder = new TextDecoder();
    let buffered = '';
    for await (const bytes of res.body) {
      buffered += decoder.decode(bytes as Uint8Array, { stream: true });
      const events = buffered.split('\n\n');
      buffered = events.pop() ?? '';
      for (const e of events) {
        if (!e.startsWith('data: {')) continue;
        const chunk = JSON.parse(e.slice(6)) as { choices?: { text?: string }[] };
        if (chunk.choices?.[0]?.text) {
          s.tokens++;
          s.firstTokenAt ??= Date.now();
        }
      }
    }
    s.endedAt = Date.now();
  };
  return Object.assign(s, { done: run() });
}

async function until(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The replica a dispatcher's access log names for the request that had `completionTokens` tokens
 * (the line is written as the response ends: it may follow the last byte by a moment).
 */
async function replicaOf(d: FairwayProcess, completionTokens: number): Promise<string | undefined> {
  for (const deadline = Date.now() + 5000; Date.now() < deadline; ) {
    for (const line of d.output) {
      if (!line.includes('"msg":"request"') || !line.includes(`"completionTokens":${completionTokens},`))
        continue;
      return (JSON.parse(line) as { replica?: string }).replica;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return undefined;
}

describe("Aladdin's time-indexed KV constraint across two dispatchers", () => {
  const prefix = uniquePrefix('aladdin');
  let nats: TestServer;
  let redis: Redis;
  let store: RedisStore;
  let configPath: string;
  const engines: FairwayProcess[] = [];
  let dispatchers: FairwayProcess[] = [];
  let operators: string[] = [];

  /** What dispatcher `d` sees on `replica`: the requests reported running and the tokens they hold. */
  async function seen(d: number, replica: string): Promise<{ sequences: number; tokens: number }> {
    const text = await (await fetch(`${operators[d]}/metrics`)).text();
    const value = (name: string) => {
      const line = text.split('\n').find((l) => l.startsWith(`${name}{replica="${replica}"}`));
      return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    return {
      sequences: value('fairway_placement_sequences'),
      tokens: value('fairway_placement_context_tokens'),
    };
  }

  async function untilSeen(
    d: number,
    replica: string,
    check: (s: { sequences: number; tokens: number }) => boolean,
    what: string,
  ): Promise<void> {
    const deadline = Date.now() + 30_000;
    while (!check(await seen(d, replica))) {
      if (Date.now() > deadline) throw new Error(`dispatcher ${'ab'[d]} never saw ${what} on ${replica}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  beforeAll(async () => {
    nats = await startNatsServer();
    configPath = join(mkdtempSync(join(tmpdir(), 'fairway-aladdin-')), 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    engines.push(
      ...(await startEngineSims(2, [
        '--speed',
        '5',
        '--kv-capacity-tokens',
        String(KV_TOKENS),
        '--nats-url',
        nats.url,
        '--prefix',
        prefix,
        '--pool',
        E2E_POOL,
        '--log-level',
        'warn',
      ])),
    );
    redis = new Redis(redisUrl());
    store = new RedisStore({ redis, prefix });
  }, 60_000);

  /** Starts dispatchers `a` and `b` (the access log on, as `fairway serve` runs by default). */
  async function startDispatchers(env: Readonly<Record<string, string>> = {}): Promise<void> {
    for (const id of ['a', 'b']) {
      const d = await startServe(id, { configPath, redisUrl: redisUrl(), natsUrl: nats.url, prefix }, env);
      dispatchers.push(d.proc);
      operators.push(d.operatorUrl);
    }
    for (const d of dispatchers)
      await untilServed(d, async () => {
        const s = stream(d.url, prompt('warm', 8), 1, 1);
        return s.done.then(
          () => 200,
          () => 503,
        );
      });
  }

  afterEach(async () => {
    await Promise.all(dispatchers.map((d) => d.stop()));
    dispatchers = [];
    operators = [];
  }, 30_000);

  afterAll(async () => {
    await Promise.all(engines.map((p) => p.stop()));
    await nats?.stop();
    if (redis) {
      await purgeStore(redis, prefix);
      redis.disconnect();
    }
  }, 60_000);

  it('packs a request onto a replica past the sum of its reservations when a running one ends first', async () => {
    await startDispatchers();
    const [a, b] = dispatchers as [FairwayProcess, FairwayProcess];
    // First: 100 + 2,000 tokens reserved. Second, once the first is 1,000 tokens in: 100 + 2,700
    // (4,900 together, within 4,950). Third, 100 + 1,000: the sum (6,000) is past the replica's
    // capacity, but the first ends 700 iterations on, before the second has grown: their demand
    // peaks near 3,200 tokens, so the third fits beside them at every iteration.
    const first = stream(a.url, prompt('first', 100), 2000, 2000);
    await until(() => first.tokens >= 1000, 60_000, 'the first request to stream 1,000 tokens');
    const second = stream(b.url, prompt('second', 100), 2700, 2700);
    await until(() => second.tokens >= 20, 30_000, 'the second request to start');
    const placedOn = await Promise.all(['sim-1', 'sim-2'].map((id) => store.reserved(id)));
    const full = placedOn.findIndex((r) => r.seqs === 2);
    expect(full).toBeGreaterThanOrEqual(0);
    // Dispatcher a has b's report of the second request (sent every 200 ms).
    await untilSeen(0, `sim-${full + 1}`, (x) => x.sequences === 2, 'both requests');
    const third = stream(a.url, prompt('third', 100), 1000, 999);
    await until(() => third.tokens >= 1, 30_000, 'the third request to start');
    const reserved = await store.reserved(`sim-${full + 1}`);
    // The third went to the replica already holding both, before the first ended, and its
    // reservations now pass its capacity — which the sum of reservations would have refused.
    expect(first.endedAt).toBeUndefined();
    expect(reserved.seqs).toBe(3);
    expect(reserved.tokens).toBeGreaterThan(RESERVABLE);
    await Promise.all([first.done, second.done, third.done]);
    expect([first.tokens, second.tokens, third.tokens]).toEqual([2000, 2700, 999]);
    expect(await replicaOf(a, 999)).toBe(`sim-${full + 1}`);
    // The engine never ran out of KV cache: nothing was preempted.
    expect(await engineMetric(engines[full]!.url, 'vllm:num_preemptions_total')).toBe(0);
  }, 120_000);

  it('refuses a replica the sum of reservations would admit when a running request outgrew its reservation', async () => {
    // Reservations hold predicted outputs (Aladdin section 2.3); this flow's history predicts 20.
    await startDispatchers({ FAIRWAY_RESERVE: 'predicted' });
    const [a, b] = dispatchers as [FairwayProcess, FairwayProcess];
    for (let i = 0; i < 5; i++) await stream(a.url, prompt(`short${i}`, 20), 20, 20).done;
    await new Promise((r) => setTimeout(r, 1200));
    // Reserved as 100 + 20, the long one streams 3,000 tokens: once 2,300 in, its cache holds
    // about 2,400 tokens while the store counts 120.
    const long = stream(a.url, prompt('long', 100), 3000, 3000);
    await until(() => long.tokens >= 2300, 90_000, 'the long request to stream 2,300 tokens');
    const on = (await Promise.all(['sim-1', 'sim-2'].map((id) => store.reserved(id)))).map((r) => r.tokens);
    const busy = on.findIndex((t) => t > 0);
    expect(busy).toBeGreaterThanOrEqual(0);
    // Dispatcher b has a's report of the long request well past its reservation.
    await untilSeen(1, `sim-${busy + 1}`, (x) => x.tokens >= 2300, 'the long request grown');
    // A 2,900-token prompt through the other dispatcher reserves 2,920: beside the 120 reserved,
    // within the replica's capacity by the sum — but not beside the 2,400 its cache holds (nor
    // would the engine start it there before the long one ends).
    const big = stream(b.url, prompt('big', 2900), 20, 20);
    await big.done;
    expect(long.endedAt).toBeUndefined();
    const bigReserved = 2900 + 20;
    expect((on[busy] ?? 0) + bigReserved).toBeLessThanOrEqual(RESERVABLE);
    // It went to the idle replica, and was answered while the long one still ran.
    expect(await replicaOf(b, 20)).toBe(`sim-${2 - busy}`);
    await long.done;
    expect(long.tokens).toBe(3000);
    expect(await engineMetric(engines[busy]!.url, 'vllm:num_preemptions_total')).toBe(0);
  }, 150_000);
});
