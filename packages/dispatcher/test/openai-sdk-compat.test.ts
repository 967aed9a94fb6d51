import { DEFAULT_SLO_CLASSES, type SloClass } from '@fairway/core';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Principal } from '../src/auth.ts';
import type { ChatCompletionBody } from '../src/openai-schemas.ts';
import { describeRequest } from '../src/request-descriptor.ts';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * What the official `openai` SDK sends today, through a real dispatcher in front of engine-sim:
 * the fields it adds are accepted (and those vLLM has no use for are not forwarded), `n` choices
 * are served and reserved for, and what a vLLM fleet cannot do is refused naming the field.
 */

const MODEL = 'llama-2-7b';
const KEY = 'sk-sdk-fields-0001';
const TPM_KEY = 'sk-sdk-fields-tpm1';

describe('OpenAI SDK request fields', () => {
  let s: Stack;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          { id: 'alpha', keys: [{ key: KEY }] },
          { id: 'metered', keys: [{ key: TPM_KEY }], limits: { tpm: 100 } },
        ],
        pools: [{ id: 'llama', model: MODEL, maxChoices: 4 }],
      },
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  it('accepts prompt_cache_key, safety_identifier, verbosity and web_search_options and forwards none of them', async () => {
    const body = {
      model: MODEL,
      messages: [{ role: 'user' as const, content: 'Hello there' }],
      max_tokens: 4,
      prompt_cache_key: 'conversation-42',
      safety_identifier: 'user-hash-1',
      verbosity: 'low' as const,
      web_search_options: {},
      fairway_output_tokens: 4,
    };
    const res = await client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(res.choices[0]?.message.content?.length).toBeGreaterThan(0);
    expect(res.usage?.completion_tokens).toBe(4);
    // Streamed too, as the SDK sends it.
    const stream = await client.chat.completions.create({ ...body, stream: true } as never);
    let text = '';
    for await (const c of stream as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>)
      text += c.choices[0]?.delta.content ?? '';
    expect(text.length).toBeGreaterThan(0);
    // The legacy completions endpoint takes the two identifiers as well.
    const legacy = await client.completions.create({
      model: MODEL,
      prompt: 'Once upon a time',
      max_tokens: 3,
      prompt_cache_key: 'k',
      safety_identifier: 'u',
    } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(legacy.choices[0]?.text.length).toBeGreaterThan(0);
  });

  it('refuses a malformed verbosity with a 400 naming the field', async () => {
    const err = await client.chat.completions
      .create({
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        verbosity: 'shouty',
      } as never)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('verbosity');
  });

  it('refuses audio output with a 400 that names the field and says why', async () => {
    const err = await client.chat.completions
      .create({
        model: MODEL,
        messages: [{ role: 'user', content: 'say hi' }],
        modalities: ['text', 'audio'],
        audio: { voice: 'alloy', format: 'wav' },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const e = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(e.param).toBe('audio');
    expect(e.message).toMatch(/text only/);
  });

  it('serves n choices, each its own answer, with usage counting every choice', async () => {
    const res = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Give me two ideas' }],
      n: 2,
      max_tokens: 6,
      fairway_output_tokens: 5,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(res.choices.map((c) => c.index)).toEqual([0, 1]);
    for (const c of res.choices) {
      expect(c.message.content?.length).toBeGreaterThan(0);
      expect(c.finish_reason).toBe('stop');
    }
    expect(res.usage?.completion_tokens).toBe(10);

    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Give me three ideas' }],
      n: 3,
      max_tokens: 6,
      fairway_output_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    } as OpenAI.ChatCompletionCreateParamsStreaming);
    const texts = ['', '', ''];
    let completion = 0;
    for await (const c of stream) {
      for (const ch of c.choices) texts[ch.index] += ch.delta.content ?? '';
      if (c.usage) completion = c.usage.completion_tokens;
    }
    expect(texts.every((t) => t.length > 0)).toBe(true);
    expect(completion).toBe(12);
    await waitFor(async () => (await s.store.reserved('sim-1')).seqs === 0, 3000, 'settle');
  });

  it("refuses n above the pool's maxChoices, naming n", async () => {
    const err = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], n: 5, max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const e = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(e.param).toBe('n');
    expect(e.message).toMatch(/at most 4 choices/);
  });

  it('admits n choices against token limits as n times the output cap', async () => {
    const metered = new OpenAI({ apiKey: TPM_KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
    const ask = (n: number) =>
      metered.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        n,
        max_tokens: 40,
        fairway_output_tokens: 1,
      } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    // 3 × 40 output tokens can never fit a 100-token-per-minute limit, whatever the window holds.
    const err = await ask(3).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
    expect((err as InstanceType<typeof OpenAI.APIError>).message).toMatch(/1\d\d tokens/);
    // One choice of 40 fits.
    const ok = await ask(1);
    expect(ok.choices).toHaveLength(1);
  });
});

describe('describeRequest with the fields OpenAI SDKs send', () => {
  const principal: Principal = { tenant: 't', weight: 1, app: undefined, sloClass: undefined };
  const described = (body: Record<string, unknown>) =>
    describeRequest({
      id: 'r1',
      endpoint: 'chat',
      body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...body } as ChatCompletionBody,
      principal,
      headers: { app: undefined, user: undefined, sloClass: undefined, interaction: undefined },
      arrivalMs: 0,
      sloClasses: new Map<string, SloClass>(DEFAULT_SLO_CLASSES.map((c) => [c.name, c])),
      defaultSloClass: 'interactive',
      defaultMaxTokens: 16,
      maxChoices: 8,
    });

  it('forwards none of the fields only OpenAI reads, and every other one as sent', () => {
    const d = described({
      prompt_cache_key: 'k',
      safety_identifier: 'u',
      verbosity: 'high',
      web_search_options: { search_context_size: 'low' },
      temperature: 0.3,
      max_tokens: 5,
    });
    expect(d.forwardBody).toEqual({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      temperature: 0.3,
      max_tokens: 5,
    });
  });

  it('reserves the output cap of every choice, and tells the engine the cap of one', () => {
    const d = described({ n: 3, max_completion_tokens: 10 });
    expect(d.descriptor.maxTokens).toBe(30);
    expect(d.forwardBody.max_completion_tokens).toBe(10);
    const injected = described({ n: 2 });
    expect(injected.descriptor.maxTokens).toBe(32);
    expect(injected.forwardBody.max_tokens).toBe(16);
  });
});

describe('GET /v1/models/{id}', () => {
  let s: Stack;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
        pools: [
          { id: 'llama', model: MODEL },
          { id: 'meta', model: 'meta-llama/Llama-3.1-8B-Instruct' },
        ],
      },
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  it('answers OpenAI’s model object for a model the fleet serves, ids with "/" included', async () => {
    const m = await client.models.retrieve(MODEL);
    expect(m).toEqual({ id: MODEL, object: 'model', created: 0, owned_by: 'fairway' });
    const slashed = await client.models.retrieve('meta-llama/Llama-3.1-8B-Instruct');
    expect(slashed.id).toBe('meta-llama/Llama-3.1-8B-Instruct');
    const plain = await fetch(`${s.dispatchers[0]!.url}/v1/models/meta-llama/Llama-3.1-8B-Instruct`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(plain.status).toBe(200);
    expect(((await plain.json()) as { id: string }).id).toBe('meta-llama/Llama-3.1-8B-Instruct');
  });

  it('answers 404 model_not_found in OpenAI’s error shape for an unknown id', async () => {
    const err = await client.models.retrieve('gpt-5').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const e = err as InstanceType<typeof OpenAI.NotFoundError>;
    expect(e.code).toBe('model_not_found');
    expect(e.param).toBe('model');
    expect(e.message).toMatch(/gpt-5/);
  });

  it('asks for the API key like every route', async () => {
    const res = await fetch(`${s.dispatchers[0]!.url}/v1/models/${MODEL}`);
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('missing_api_key');
  });
});
