import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordedToday, type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * `POST /v1/responses` with the official `openai` SDK through a real dispatcher in front of
 * engine-sim serving vLLM's Responses API: admitted, queued, limited and settled like chat, with
 * usage from the response (streamed: from `response.completed`).
 */

const MODEL = 'llama-2-7b';
const KEY = 'sk-responses-tenant-001';
const LIMITED = 'sk-responses-limited-01';
const TINY = 'sk-responses-tiny-tpm-01';

describe('POST /v1/responses', () => {
  let s: Stack;
  let url: string;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          { id: 'resp', keys: [{ key: KEY }] },
          { id: 'limited', keys: [{ key: LIMITED }], limits: { rpm: 1 } },
          { id: 'tiny', keys: [{ key: TINY }], limits: { tpm: 60 } },
        ],
        pools: [{ id: 'llama', model: MODEL }],
      },
    });
    url = s.dispatchers[0]!.url;
    client = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  const recorded = (key: string) => recordedToday(s.store, key);

  it('answers a response with output text and the engine’s usage, charged to the key', async () => {
    const before = await recorded(KEY);
    const r = await client.responses.create({
      model: MODEL,
      instructions: 'Be brief.',
      input: 'Write a poem about the ocean and its tides.',
      max_output_tokens: 9,
    });
    expect(r.object).toBe('response');
    expect(r.model).toBe(MODEL);
    expect(r.output_text.length).toBeGreaterThan(0);
    expect(r.usage?.output_tokens).toBe(9);
    expect(r.usage?.input_tokens).toBeGreaterThan(5);
    await waitFor(async () => (await recorded(KEY)).requests === before.requests + 1, 5000, 'usage recorded');
    const after = await recorded(KEY);
    expect(after.inputTokens - before.inputTokens).toBe(r.usage?.input_tokens);
    expect(after.outputTokens - before.outputTokens).toBe(r.usage?.output_tokens);
  });

  it('streams typed events from response.created to response.completed, its usage charged', async () => {
    const before = await recorded(KEY);
    const stream = await client.responses.create({
      model: MODEL,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Tell me about mountains.' }] }],
      max_output_tokens: 11,
      stream: true,
    });
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.output_text.delta') text += e.delta;
      if (e.type === 'response.completed') completed = e.response;
    }
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(types.filter((t) => t === 'response.output_text.delta').length).toBeGreaterThan(1);
    // `output_text` is the SDK's own sum for non-streamed answers: read the message item.
    const item = completed?.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(item.content.map((c) => (c.type === 'output_text' ? c.text : '')).join('')).toBe(text);
    expect(completed?.usage?.output_tokens).toBe(11);
    await waitFor(async () => (await recorded(KEY)).requests === before.requests + 1, 5000, 'usage recorded');
    const after = await recorded(KEY);
    expect(after.inputTokens - before.inputTokens).toBe(completed?.usage?.input_tokens);
    expect(after.outputTokens - before.outputTokens).toBe(11);
  });

  it('refuses what needs stored responses with a 400 naming the field', async () => {
    for (const [field, extra] of [
      ['previous_response_id', { previous_response_id: 'resp_123' }],
      ['store', { store: true }],
    ] as const) {
      const err = await client.responses
        .create({ model: MODEL, input: 'hi', max_output_tokens: 2, ...extra })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      const e = err as InstanceType<typeof OpenAI.BadRequestError>;
      expect(e.status).toBe(400);
      expect(e.param).toBe(field);
      expect(e.message).toMatch(field);
    }
    // store: false is what vLLM does anyway.
    const ok = await client.responses.create({
      model: MODEL,
      input: 'hi',
      max_output_tokens: 2,
      store: false,
    });
    expect(ok.usage?.output_tokens).toBe(2);
  });

  it('refuses bad bodies and unknown models in OpenAI’s shape', async () => {
    const post = async (body: unknown) => {
      const res = await fetch(`${url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return {
        status: res.status,
        body: (await res.json()) as { error: { param: string | null; code: string } },
      };
    };
    const noInput = await post({ model: MODEL });
    expect(noInput.status).toBe(400);
    expect(noInput.body.error.param).toBe('input');
    const unknown = await post({ model: MODEL, input: 'hi', frobnicate: 1 });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.param).toBe('frobnicate');
    const model = await post({ model: 'gpt-nothing', input: 'hi' });
    expect(model.status).toBe(404);
    expect(model.body.error.code).toBe('model_not_found');
  });

  it('reserves its instructions and input plus max_output_tokens against the TPM limit', async () => {
    const tiny = new OpenAI({ apiKey: TINY, baseURL: `${url}/v1`, maxRetries: 0 });
    const refused = async (body: OpenAI.Responses.ResponseCreateParamsNonStreaming) => {
      const err = await tiny.responses.create(body).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('tokens_exceed_limit');
    };
    const long = 'the lighthouse keeper watched the grey sea roll in '.repeat(12);
    await refused({ model: MODEL, instructions: long, input: 'hi', max_output_tokens: 2 });
    await refused({ model: MODEL, input: [{ role: 'user', content: long }], max_output_tokens: 2 });
    await refused({ model: MODEL, input: 'hi', max_output_tokens: 80 });
    const ok = await tiny.responses.create({ model: MODEL, input: 'hi', max_output_tokens: 2 });
    expect(ok.usage?.output_tokens).toBe(2);
  });

  it('counts against the key’s RPM like chat: the next request is a 429', async () => {
    const limited = new OpenAI({ apiKey: LIMITED, baseURL: `${url}/v1`, maxRetries: 0 });
    await limited.responses.create({ model: MODEL, input: 'hi', max_output_tokens: 2 });
    const err = await limited.responses
      .create({ model: MODEL, input: 'hi', max_output_tokens: 2 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    const chat = await limited.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(chat).toBeInstanceOf(OpenAI.RateLimitError);
  });
});

describe('POST /v1/responses when the engine fails mid-stream', () => {
  let cut: Stack;
  beforeAll(async () => {
    cut = await startStack({
      config: { tenants: [{ id: 'resp', keys: [{ key: KEY }] }], pools: [{ id: 'llama', model: MODEL }] },
      engines: [{ faults: { dropRate: 1, dropAfterTokens: 3 } }],
    });
  });
  afterAll(async () => cut?.close());

  it('ends the stream with an error event, never response.completed', async () => {
    const res = await fetch(`${cut.dispatchers[0]!.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'hi', max_output_tokens: 20, stream: true }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(/^event: response\.created$/m);
    expect(text).not.toMatch(/response\.completed/);
    const m = /^event: error\ndata: (.*)$/m.exec(text);
    expect(m).not.toBeNull();
    expect(JSON.parse(m![1]!)).toMatchObject({
      type: 'error',
      code: expect.any(String),
      message: expect.any(String),
    });
  });
});
