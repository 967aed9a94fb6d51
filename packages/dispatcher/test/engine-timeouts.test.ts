import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, type StackOptions, startStack } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-timeouts-alpha-0001';
const TIMEOUTS = { firstByteMs: 1000, streamIdleMs: 1000, answerMs: 1500 };

interface Answer {
  readonly status: number;
  readonly body: string;
  /** ms from sending to the end of the answer. */
  readonly ms: number;
}

/**
 * A hung engine — one that accepted a request and then said nothing — never holds a client for
 * longer than its pool's `engineTimeouts`: a request that had sent nothing to its client is
 * retried on another replica, a stream already under way ends with an SSE error, and the hung
 * replica is held out of placement. Real engine-sims over HTTP, real Redis, in this process.
 */
describe('engine timeouts', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });
  async function stack(o: Partial<StackOptions>): Promise<Stack> {
    const s = await startStack({
      config: {
        tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL, engineTimeouts: TIMEOUTS }],
        policy: { ordering: 'vtc', placement: 'least-kv' },
      },
      redis: true,
      ...o,
    });
    stacks.push(s);
    return s;
  }
  async function send(s: Stack, stream: boolean): Promise<Answer> {
    const t0 = performance.now();
    const res = await fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'x'.repeat(36) }],
        max_tokens: 6,
        fairway_output_tokens: 6,
        ...(stream ? { stream: true } : {}),
      }),
      signal: AbortSignal.timeout(30_000),
    });
    const body = await res.text();
    return { status: res.status, body, ms: performance.now() - t0 };
  }

  async function promptTokens(s: Stack, sim: number): Promise<number> {
    const text = await (await fetch(`${s.sims[sim]!.url}/metrics`)).text();
    const m = /^vllm:prompt_tokens_total\{[^}]*\} (\S+)$/m.exec(text);
    return Number(m?.[1] ?? Number.NaN);
  }

  it('retries on another replica a request whose engine went silent before its first token', async () => {
    const s = await stack({ engines: [{ faults: { hangRate: 1, hangAfterTokens: 0 } }, {}] });
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => send(s, i % 2 === 0)));
    for (const a of answers) expect(a, a.body).toMatchObject({ status: 200 });
    for (const a of answers.filter((_, i) => i % 2 === 0)) expect(a.body).toContain('data: [DONE]');
    const retries = (await s.dispatchers[0]!.dispatcher.metrics.engineRetries.get()).values[0]?.value ?? 0;
    expect(retries).toBeGreaterThan(0);
    // Held out: the next requests all go to the healthy replica; the hung one sees none of them.
    const before = await promptTokens(s, 0);
    expect(before).toBeGreaterThan(0); // the hung replica did take requests before it was held out
    const after = await Promise.all(Array.from({ length: 4 }, () => send(s, true)));
    for (const a of after) expect(a.status).toBe(200);
    expect(await promptTokens(s, 0)).toBe(before);
  });

  it('retries a non-streamed request whose engine never answers within answerMs', async () => {
    const s = await stack({ engines: [{ faults: { headersDelayMs: 60_000 } }, {}] });
    const answers = await Promise.all(Array.from({ length: 4 }, () => send(s, false)));
    for (const a of answers) expect(a, a.body).toMatchObject({ status: 200 });
  });

  it('moves a non-streamed request off an engine that answers but makes no progress, long before answerMs', async () => {
    // A stuck engine core: the engine serves /health and /metrics (its agent's heartbeats go on)
    // while its loop takes no step. Its calls would wait for answerMs (60 s).
    const s = await stack({
      config: {
        tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
        pools: [
          {
            id: 'llama',
            model: MODEL,
            engineTimeouts: { firstByteMs: 1000, streamIdleMs: 1000, answerMs: 60_000 },
          },
        ],
        policy: { ordering: 'vtc', placement: 'least-kv' },
      },
      engines: [{ faults: { stalled: true } }, {}],
    });
    const answers = await Promise.all(Array.from({ length: 4 }, () => send(s, false)));
    for (const a of answers) expect(a, a.body).toMatchObject({ status: 200 });
    const retries = (await s.dispatchers[0]!.dispatcher.metrics.engineRetries.get()).values[0]?.value ?? 0;
    expect(retries).toBeGreaterThan(0);
    expect(s.dispatchers[0]!.dispatcher.runtime.isSuspect(s.replicas[0]!)).toBe(true);
    // Held out while it makes no progress: what follows goes to the other replica.
    const after = await Promise.all(Array.from({ length: 4 }, () => send(s, false)));
    for (const a of after) expect(a, a.body).toMatchObject({ status: 200 });
    expect(await promptTokens(s, 0)).toBe(0);
  });

  it('ends a stream that went silent mid-answer with an SSE error instead of waiting for ever', async () => {
    const s = await stack({ engines: [{ faults: { hangRate: 1, hangAfterTokens: 2 } }] });
    const a = await send(s, true);
    expect(a.status).toBe(200);
    expect(a.body).toContain('"error"');
    expect(a.body).toContain('engine_timeout');
    // Bounded by the idle timeout (plus undici's one-second granularity), not by the client.
    expect(a.ms).toBeLessThan(10_000);
  });
});
