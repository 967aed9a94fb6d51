import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fitEnginePerformance } from '@fairway/perf';
import { decodeIterationMs, prefillMs, toPerformanceModelFile } from '@fairway/policy';
import { purgeStore, RedisStore } from '@fairway/store';
import { redisUrl, startNatsServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { engineMetric } from './support/chat.ts';
import { accessLineOf, streamCompletion, until } from './support/completions.ts';
import { E2E_MODEL, E2E_POOL, poolEngineArgs } from './support/fleet-config.ts';
import {
  type FairwayProcess,
  startEngineSims,
  startServe,
  stopFleet,
  untilEachServed,
} from './support/processes.ts';

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

/** The fleet's config with SLO-aware placement: a performance model of its engines and an ATGT target. */
const CONFIG_D = (
  performanceModel: string,
  atgtS: number,
) => `${CONFIG}  performanceModels: [${JSON.stringify(performanceModel)}]
  slo: { atgtS: ${atgtS} }
`;

/** A prompt of about `n` tokens to the gateway's estimate and the engine's count alike. */
const prompt = (tag: string, n: number) => `${tag}${' abc'.repeat(n - 1)}`;

/** Streams one completion of exactly `output` tokens through a gateway. */
const stream = (url: string, text: string, maxTokens: number, output: number) =>
  streamCompletion(url, { model: E2E_MODEL, prompt: text, maxTokens, output, key: KEY });

/** The replica a dispatcher's access log names for the request that had `completionTokens` tokens. */
const replicaOf = async (d: FairwayProcess, completionTokens: number) =>
  (await accessLineOf(d, completionTokens))?.replica;

/** Two engine-sims, `sim-1` and `sim-2`, at `speed`, registered in the pool over NATS under `prefix`. */
const startPoolEngines = (natsUrl: string, prefix: string, speed: number, more: readonly string[] = []) =>
  startEngineSims(2, ['--speed', String(speed), ...more, ...poolEngineArgs(natsUrl, prefix)]);

/** What a dispatcher (its operator URL) places `replica` by: the requests reported running there and their context. */
async function seen(operator: string, replica: string): Promise<{ sequences: number; tokens: number }> {
  const text = await (await fetch(`${operator}/metrics`)).text();
  const value = (name: string) => {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{replica="${replica}"}`));
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  return {
    sequences: value('fairway_placement_sequences'),
    tokens: value('fairway_placement_context_tokens'),
  };
}

async function untilOperatorSees(
  operator: string,
  replica: string,
  check: (s: { sequences: number; tokens: number }) => boolean,
  what: string,
): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!check(await seen(operator, replica))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} on ${replica}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The replica whose engine runs exactly one request, `sim-1` or `sim-2`, read from the engines
 * themselves (a dispatcher's view may still hold another dispatcher's warm-up request for a report).
 */
async function runningOn(engines: readonly FairwayProcess[]): Promise<string> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const running = await Promise.all(engines.map((e) => engineMetric(e.url, 'vllm:num_requests_running')));
    if (running.filter((n) => n > 0).length === 1 && running.includes(1))
      return `sim-${running.indexOf(1) + 1}`;
    if (Date.now() > deadline) throw new Error('no replica runs a request');
    await new Promise((r) => setTimeout(r, 10));
  }
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

  const untilSeen = (
    d: number,
    replica: string,
    check: (s: { sequences: number; tokens: number }) => boolean,
    what: string,
  ) => untilOperatorSees(operators[d] as string, replica, check, `dispatcher ${'ab'[d]} to see ${what}`);

  beforeAll(async () => {
    nats = await startNatsServer();
    configPath = join(mkdtempSync(join(tmpdir(), 'fairway-aladdin-')), 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    engines.push(
      ...(await startPoolEngines(nats.url, prefix, 5, ['--kv-capacity-tokens', String(KV_TOKENS)])),
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
    await untilEachServed(dispatchers, 1, (d) => stream(d.url, prompt('warm', 8), 1, 1).done);
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

/**
 * Aladdin's constraint (d) on a real fleet: a new request's prefill stalls every sequence decoding
 * on its replica, so it goes there only while each running sequence's ATGT slack — its target
 * times the tokens it has produced, less the time it has taken — covers the stall. Slack is known
 * only from a running request's progress, which the dispatcher running it reports to the others.
 * Two `fairway serve` dispatchers, two engine-sims at a twentieth of an A100's speed (so a report
 * every 200 ms covers a token or two), and a performance model of that engine: the preset's fit with
 * every time ×20. ATGT target 2× a decode step.
 */
describe("Aladdin's decode-slack constraint (d) across two dispatchers", () => {
  const SPEED = 0.05;
  const prefix = uniquePrefix('aladdin-d');
  let nats: TestServer;
  let dir: string;
  const engines: FairwayProcess[] = [];
  const dispatchers: FairwayProcess[] = [];
  const operators: string[] = [];
  const fitted = fitEnginePerformance({ model: E2E_MODEL, gpu: 'A100-80GB', tp: 1 });
  const slow = (x: number) => x / SPEED;
  const model = {
    ...fitted.model,
    prefill: { k1: slow(fitted.model.prefill.k1), c1: slow(fitted.model.prefill.c1) },
    decode: {
      k2: slow(fitted.model.decode.k2),
      c2: slow(fitted.model.decode.c2),
      c3: slow(fitted.model.decode.c3),
    },
  };
  const stepMs = decodeIterationMs(model.decode, 2, 200);
  const atgtS = (2 * stepMs) / 1000;

  beforeAll(async () => {
    nats = await startNatsServer();
    dir = mkdtempSync(join(tmpdir(), 'fairway-aladdin-d-'));
    const perfPath = join(dir, 'perf.json');
    writeFileSync(
      perfPath,
      JSON.stringify(
        toPerformanceModelFile(model, fitted.report, {
          source: 'simulator',
          at: new Date().toISOString(),
          samples: fitted.samples,
        }),
      ),
    );
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, CONFIG_D(perfPath, atgtS));
    engines.push(...(await startPoolEngines(nats.url, prefix, SPEED)));
    for (const id of ['a', 'b']) {
      const d = await startServe(id, { configPath, redisUrl: redisUrl(), natsUrl: nats.url, prefix });
      dispatchers.push(d.proc);
      operators.push(d.operatorUrl);
    }
    await untilEachServed(dispatchers, 1, (d) => stream(d.url, prompt('warm', 8), 1, 1).done);
  }, 90_000);

  afterAll(() => stopFleet([...dispatchers, ...engines], nats, prefix), 60_000);

  it("sends a long prompt away from a replica whose running request's slack it would exceed, and a short one to it", async () => {
    const [a, b] = dispatchers as [FairwayProcess, FairwayProcess];
    // The running request reserves 50 + 4,000 tokens, more than any probe, so its replica stays
    // the fullest: Aladdin tries it first for each probe.
    const running = stream(a.url, prompt('running', 50), 4000, 160);
    await until(() => running.tokens >= 1, 60_000, 'the running request to start');
    const busy = await runningOn(engines);

    // Dispatcher b knows the request only from a's reports: it sees it decoding (context above its
    // 51-token prompt; b's own warm-up request held 9) a report or two after its first token.
    await untilOperatorSees(
      operators[1] as string,
      busy,
      (x) => x.sequences === 1 && x.tokens > 51,
      'dispatcher b to see it decoding',
    );
    // A few tokens in, its slack is about (0.9 × 2 − 1) steps per token: far less than a 3,900-token
    // prefill (about 29 steps) until some 36 tokens, and never more than 0.9 × 2 steps per token.
    expect(running.tokens).toBeLessThan(16);
    expect(prefillMs(model.prefill, 3900)).toBeGreaterThan(0.9 * 2 * stepMs * 16);
    const long = stream(b.url, prompt('long', 3900), 16, 16);
    await long.done;
    // An 8-token prompt's prefill fits the same slack: it joins the running request.
    const short = stream(b.url, prompt('short', 8), 8, 7);
    await short.done;
    expect(running.endedAt).toBeUndefined();
    expect(await replicaOf(b, 16)).not.toBe(busy);
    expect(await replicaOf(b, 7)).toBe(busy);
    await running.done;
    expect(running.tokens).toBe(160);
    expect(await replicaOf(a, 160)).toBe(busy);
  }, 120_000);
});
