import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startUp, type UpHandle } from '@fairway/cli';
import { silentLogger } from '@fairway/core';
import { END_OUTCOMES } from '@fairway/dispatcher';
import { freePort } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatOutcome, sendChat } from './support/chat.ts';
import { type PromSample, parseProm, promFamilies, promSum } from './support/prometheus.ts';

/**
 * The operator's metrics of a running `fairway up` fleet (two engine-sims with agents, one
 * dispatcher), scraped from the operator port as Prometheus would: token counters by tenant and
 * model, latency/TTFT/TPOT by model, queue depth by band, replicas as the dispatcher sees them,
 * throttles by reason, Node process metrics — and every admitted request ending in exactly one
 * outcome, also when engines fail, drop streams and refuse requests.
 */
const MODEL = 'llama-2-7b';
const KEYS = { alpha: 'sk-metrics-alpha-0001', beta: 'sk-metrics-beta-0001', capped: 'sk-metrics-capped-01' };
const CONFIG = `
tenants:
  - { id: alpha, weight: 1, keys: [{ key: ${KEYS.alpha} }] }
  - { id: beta, weight: 3, sloClass: batch, keys: [{ key: ${KEYS.beta} }] }
  - { id: capped, limits: { rpm: 3 }, keys: [{ key: ${KEYS.capped} }] }
sloClasses:
  - { name: interactive, ttftS: 30, band: 0 }
  - { name: batch, ttftS: 600, band: 1 }
pools:
  - { id: llama, model: ${MODEL} }
policy:
  ordering: vtc
  placement: least-kv
  queueTimeoutS: 30
`;

async function scrape(up: UpHandle): Promise<{ text: string; samples: PromSample[] }> {
  const text = await (await fetch(`${up.dispatcher.operatorUrl}/metrics`)).text();
  return { text, samples: parseProm(text) };
}

/** Waits until the dispatcher holds no request (every settle has landed). */
async function idle(up: UpHandle): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const { samples } = await scrape(up);
    if (promSum(samples, 'fairway_requests_in_flight') === 0) return;
    if (Date.now() > deadline) throw new Error('requests still in flight after 20 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

const usageOf = (o: ChatOutcome): { prompt_tokens: number; completion_tokens: number } =>
  (JSON.parse(o.text) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;

describe('metrics of a running fleet (operator port)', () => {
  let up: UpHandle;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-metrics-'));
    writeFileSync(join(dir, 'fairway.yaml'), CONFIG);
    up = await startUp({
      configPath: join(dir, 'fairway.yaml'),
      port: 0,
      operatorPort: await freePort(),
      speed: 50,
      env: {},
      logger: silentLogger,
      // Failing replicas come back at once, so the fault run keeps serving.
      settings: { options: { suspectMs: 100 } },
    });
  }, 60_000);
  afterAll(async () => {
    await up?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('counts tokens per tenant and model exactly, and times latency, TTFT and TPOT per model', async () => {
    const before = (await scrape(up)).samples;
    const plain = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        sendChat(up.url, { key: i % 2 ? KEYS.beta : KEYS.alpha, model: MODEL, tokens: 7, stream: false }),
      ),
    );
    const streamed = await Promise.all(
      Array.from({ length: 4 }, () =>
        sendChat(up.url, { key: KEYS.alpha, model: MODEL, tokens: 5, usage: true }),
      ),
    );
    for (const o of [...plain, ...streamed]) expect(o.ok, o.text).toBe(true);
    await idle(up);
    // A client can read its last byte just before the dispatcher records the request.
    let after = (await scrape(up)).samples;
    await expect
      .poll(async () => {
        after = (await scrape(up)).samples;
        return (
          promSum(after, 'fairway_request_duration_seconds_count') -
          promSum(before, 'fairway_request_duration_seconds_count')
        );
      })
      .toBe(10);
    const delta = (name: string, labels: Record<string, string> = {}) =>
      promSum(after, name, labels) - promSum(before, name, labels);

    const promptOf = (os: ChatOutcome[]) => os.reduce((a, o) => a + usageOf(o).prompt_tokens, 0);
    expect(delta('fairway_output_tokens_total', { tenant: 'alpha', model: MODEL })).toBe(3 * 7 + 4 * 5);
    expect(delta('fairway_output_tokens_total', { tenant: 'beta', model: MODEL })).toBe(3 * 7);
    expect(delta('fairway_input_tokens_total', { tenant: 'beta', model: MODEL })).toBe(
      promptOf(plain.filter((_, i) => i % 2 === 1)),
    );
    expect(delta('fairway_input_tokens_total', { tenant: 'alpha', model: MODEL })).toBeGreaterThan(0);

    expect(delta('fairway_request_duration_seconds_count', { model: MODEL })).toBe(10);
    expect(delta('fairway_time_to_first_token_seconds_count', { model: MODEL })).toBe(10);
    // Only streams of two or more tokens have a time per output token.
    expect(delta('fairway_time_per_output_token_seconds_count', { model: MODEL })).toBe(4);
    expect(delta('fairway_slo_requests_total', { slo_class: 'interactive' })).toBe(7);
    expect(delta('fairway_slo_requests_total', { slo_class: 'batch' })).toBe(3);
    expect(promSum(after, 'fairway_time_per_output_token_seconds_sum', { model: MODEL })).toBeGreaterThan(0);
  }, 60_000);

  it('shows queues by band, the replicas with KV, running and state, weights and Node process metrics', async () => {
    const { text, samples } = await scrape(up);
    for (const band of ['0', '1'])
      expect(samples.some((s) => s.name === 'fairway_queue_depth_by_band' && s.labels.band === band)).toBe(
        true,
      );
    const states = samples.filter((s) => s.name === 'fairway_replica_state' && s.value === 1);
    expect(states.map((s) => s.labels.state).sort()).toEqual(['ready', 'ready']);
    const ids = states.map((s) => s.labels.replica as string);
    for (const id of ids) {
      const kv = samples.find((s) => s.name === 'fairway_replica_kv_usage_ratio' && s.labels.replica === id);
      expect(kv?.labels.pool).toBe('llama');
      expect(kv?.value).toBeGreaterThanOrEqual(0);
      expect(
        samples.some((s) => s.name === 'fairway_replica_running_requests' && s.labels.replica === id),
      ).toBe(true);
    }
    expect(promSum(samples, 'fairway_tenant_weight', { tenant: 'beta' })).toBe(3);
    expect(promSum(samples, 'fairway_tenant_weight', { tenant: 'alpha' })).toBe(1);
    const families = promFamilies(text);
    for (const name of [
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
    ])
      expect(families.has(name), name).toBe(true);
  });

  it('counts throttles by tenant and reason as the clients saw them', async () => {
    const before = (await scrape(up)).samples;
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        sendChat(up.url, { key: KEYS.capped, model: MODEL, tokens: 2, stream: false }),
      ),
    );
    const limited = answers.filter((a) => a.status === 429).length;
    expect(limited).toBeGreaterThanOrEqual(5);
    const after = (await scrape(up)).samples;
    expect(
      promSum(after, 'fairway_throttles_total', { tenant: 'capped', reason: 'rpm_limited' }) -
        promSum(before, 'fairway_throttles_total', { tenant: 'capped', reason: 'rpm_limited' }),
    ).toBe(limited);
    expect(
      promSum(after, 'fairway_requests_total', { tenant: 'capped', outcome: 'rate_limited' }) -
        promSum(before, 'fairway_requests_total', { tenant: 'capped', outcome: 'rate_limited' }),
    ).toBe(limited);
  });

  it('ends every admitted request with exactly one outcome when engines fail, drop streams and refuse requests', async () => {
    const setFaults = async (faults: Record<string, number>): Promise<void> => {
      for (const e of up.engines) {
        const res = await fetch(`${e.url}/fairway/faults`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(faults),
        });
        expect(res.status).toBe(200);
      }
    };
    const post = (key: string, body: object, signal?: AbortSignal) =>
      fetch(`${up.url}/v1/chat/completions`, {
        method: 'POST',
        ...(signal ? { signal } : {}),
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, ...body }),
      });
    // The engine refuses these (prompt + max_tokens beyond its context) after admission: the
    // requests the old code counted admitted and never ended.
    const refused = await Promise.all(
      Array.from({ length: 3 }, () =>
        post(KEYS.alpha, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8000 }),
      ),
    );
    for (const r of refused) expect(r.status, await r.text()).toBe(400);
    // Clients that leave mid-stream.
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        const gone = new AbortController();
        const res = await post(
          KEYS.beta,
          {
            messages: [{ role: 'user', content: 'a long answer please' }],
            max_tokens: 400,
            fairway_output_tokens: 400,
            stream: true,
          },
          gone.signal,
        );
        await res.body?.getReader().read();
        gone.abort();
      }),
    );
    // Engines that fail calls and drop streams, under load.
    await setFaults({ errorRate: 0.1, dropRate: 0.2, dropAfterTokens: 2 });
    try {
      // In waves: a burst would find both replicas held out at once and be refused before admission.
      for (let w = 0; w < 10; w++)
        await Promise.all(
          Array.from({ length: 6 }, (_, i) =>
            sendChat(up.url, {
              key: i % 3 ? KEYS.alpha : KEYS.beta,
              model: MODEL,
              tokens: 6,
              stream: i % 2 === 0,
            }),
          ),
        );
    } finally {
      await setFaults({ errorRate: 0, dropRate: 0 });
    }
    await idle(up);
    // Ends are counted as each handler finishes, which may be just after its client saw the answer.
    const outcome = (samples: PromSample[], o: string) =>
      promSum(samples, 'fairway_requests_total', { outcome: o });
    const endSum = (samples: PromSample[]) => END_OUTCOMES.reduce((a, o) => a + outcome(samples, o), 0);
    let samples: PromSample[] = [];
    await expect
      .poll(async () => {
        samples = (await scrape(up)).samples;
        return endSum(samples) - outcome(samples, 'admitted');
      })
      .toBe(0);
    const ends = Object.fromEntries(END_OUTCOMES.map((o) => [o, outcome(samples, o)]));
    const admitted = outcome(samples, 'admitted');
    console.info(`admitted ${admitted}; ends ${JSON.stringify(ends)}`);
    expect(admitted).toBeGreaterThan(20);
    expect(Object.values(ends).reduce((a, b) => a + b, 0)).toBe(admitted);
    expect(ends.engine_rejected).toBe(3);
    expect(ends.cancelled).toBe(4);
    const retried = promSum(samples, 'fairway_engine_retries_total');
    expect((ends.failed ?? 0) + (ends.no_replica ?? 0) + retried).toBeGreaterThan(0);
    expect(ends.completed).toBeGreaterThan(0);
  }, 90_000);
});
