import { DEFAULT_CACHED_TOKEN_WEIGHT, parseConfig, type RequestDescriptor } from '@fairway/core';
import { cachedTokenWeightFor } from '@fairway/perf';
import { afterEach, describe, expect, it } from 'vitest';
import { cachedTokenWeightFromConfig } from '../src/scheduling-config.ts';
import { type Stack, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-test-alpha-0001';
const WEIGHT = 0.1;
// A long system prompt every turn of the conversation starts with: the engine's cache holds it
// after the first turn.
const SYSTEM = Array.from({ length: 400 }, (_, i) => `rule${i}`).join(' ');

const config = {
  tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
  pools: [{ id: 'llama', model: MODEL }],
  policy: { ordering: 'vtc', cachedTokenWeight: WEIGHT },
};

const turn = (user: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: user },
  ],
  max_tokens: 4,
  fairway_output_tokens: 4,
  ...extra,
});

const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens: number } | null;
}

describe('charging a cached turn (live: dispatcher and engine-sim with prefix caching)', () => {
  let s: Stack | undefined;
  afterEach(async () => {
    await s?.close();
    s = undefined;
  });

  const counter = async (stack: Stack): Promise<number> =>
    (await stack.store.snapshot('llama', 0)).counters.alpha ?? 0;
  const settled = (stack: Stack) =>
    waitFor(async () => (await stack.store.reserved('sim-1')).seqs === 0, 5000, 'settle');

  it("charges the prompt tokens the engine's cache served at the cached-token weight, and reports the full prompt to the client", async () => {
    s = await startStack({
      config,
      engines: [{ gpu: 'A100-80GB', enablePrefixCaching: true, enablePromptTokensDetails: true }],
    });
    const stack = s;
    const url = `${stack.dispatchers[0]!.url}/v1/chat/completions`;

    // Turn 1: nothing cached, the counter grows by prompt + 2·output.
    const first = await fetch(url, { method: 'POST', headers, body: JSON.stringify(turn('first question')) });
    expect(first.status).toBe(200);
    const u1 = ((await first.json()) as { usage: ChatUsage }).usage;
    await settled(stack);
    const c1 = await counter(stack);
    expect(u1.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);
    expect(c1).toBeCloseTo(u1.prompt_tokens + 2 * u1.completion_tokens, 6);

    // Turn 2, non-streamed: the system prompt comes from the cache.
    const second = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify(turn('second question')),
    });
    const u2 = ((await second.json()) as { usage: ChatUsage }).usage;
    await settled(stack);
    const c2 = await counter(stack);
    const cached2 = u2.prompt_tokens_details?.cached_tokens ?? 0;
    expect(cached2).toBeGreaterThan(300);
    // The client still sees every prompt token.
    expect(u2.prompt_tokens).toBe(u1.prompt_tokens);
    const full2 = u2.prompt_tokens + 2 * u2.completion_tokens;
    expect(c2 - c1).toBeCloseTo(full2 - (1 - WEIGHT) * cached2, 6);

    // Turn 3, streamed: the cached count comes from the final usage chunk.
    const third = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify(turn('third question', { stream: true, stream_options: { include_usage: true } })),
    });
    const text = await third.text();
    const last = text
      .split('\n')
      .filter((l) => l.startsWith('data: {') && l.includes('"usage"'))
      .map((l) => JSON.parse(l.slice(6)) as { usage: ChatUsage | null })
      .findLast((c) => c.usage !== null);
    const u3 = last!.usage!;
    await settled(stack);
    const c3 = await counter(stack);
    const cached3 = u3.prompt_tokens_details?.cached_tokens ?? 0;
    expect(cached3).toBeGreaterThan(300);
    expect(c3 - c2).toBeCloseTo(u3.prompt_tokens + 2 * u3.completion_tokens - (1 - WEIGHT) * cached3, 6);
  });

  it('charges every prompt token in full when the engine does not report cached tokens', async () => {
    s = await startStack({ config, engines: [{ gpu: 'A100-80GB', enablePrefixCaching: true }] });
    const stack = s;
    const url = `${stack.dispatchers[0]!.url}/v1/chat/completions`;
    await fetch(url, { method: 'POST', headers, body: JSON.stringify(turn('first question')) });
    await settled(stack);
    const c1 = await counter(stack);
    const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(turn('second question')) });
    const u2 = ((await res.json()) as { usage: ChatUsage }).usage;
    await settled(stack);
    expect(u2.prompt_tokens_details ?? undefined).toBeUndefined();
    expect((await counter(stack)) - c1).toBeCloseTo(u2.prompt_tokens + 2 * u2.completion_tokens, 6);
  });

  it('refuses a client that sends its own usage (a cache hit it claims), charging nothing', async () => {
    s = await startStack({
      config,
      engines: [{ gpu: 'A100-80GB', enablePrefixCaching: true, enablePromptTokensDetails: true }],
    });
    const stack = s;
    const url = `${stack.dispatchers[0]!.url}/v1/chat/completions`;
    const res = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify(turn('question', { usage: { prompt_tokens_details: { cached_tokens: 10_000 } } })),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('usage');
    expect(await counter(stack)).toBe(0);
  });
});

describe('cachedTokenWeightFromConfig', () => {
  const req = (model: string): RequestDescriptor => ({
    id: 'r',
    tenant: 't',
    model,
    sloClass: 'interactive',
    inputTokens: 10,
    maxTokens: 10,
    arrivalMs: 0,
  });
  const base = {
    tenants: [{ id: 't', keys: [{ key: 'sk-test-cached-0001' }] }],
    pools: [
      { id: 'small', model: 'llama-2-7b' },
      { id: 'other', model: 'my-finetune' },
    ],
    engines: [
      { id: 'e1', url: 'http://10.0.0.1:8000', pool: 'small', gpu: 'A100-80GB' },
      { id: 'e2', url: 'http://10.0.0.2:8000', pool: 'small', gpu: 'H100-80GB' },
      { id: 'e3', url: 'http://10.0.0.3:8000', pool: 'other', gpu: 'A100-80GB' },
    ],
  };

  it("derives each pool's weight from its engines' performance presets, the largest when they differ", () => {
    const w = cachedTokenWeightFromConfig(parseConfig(base, 'test')) as (r: RequestDescriptor) => number;
    expect(w(req('llama-2-7b'))).toBe(cachedTokenWeightFor('llama-2-7b', 'H100-80GB'));
    // A model without a preset, or a request for no configured pool: the documented constant.
    expect(w(req('my-finetune'))).toBe(DEFAULT_CACHED_TOKEN_WEIGHT);
    expect(w(req('unknown'))).toBe(DEFAULT_CACHED_TOKEN_WEIGHT);
  });

  it('uses policy.cachedTokenWeight for every pool when set, and refuses one outside [0, 1]', () => {
    expect(
      cachedTokenWeightFromConfig(parseConfig({ ...base, policy: { cachedTokenWeight: 0.3 } }, 'test')),
    ).toBe(0.3);
    expect(() => parseConfig({ ...base, policy: { cachedTokenWeight: 2 } }, 'test')).toThrow(
      /cachedTokenWeight/,
    );
  });
});
