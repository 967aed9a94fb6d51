import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Stack, startStack } from './support/stack.ts';

/**
 * Sampling fields an application relies on — `stop`, `logprobs`, `tools` with `tool_choice`,
 * `response_format` — through a real dispatcher to engine-sim, which honours them as a model
 * served by vLLM would, read with the official `openai` SDK, streamed and not.
 */

const MODEL = 'llama-2-7b';
const KEY = 'sk-sampling-fields-01';

const weather: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The forecast for a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        days: { type: 'integer', minimum: 1 },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'days', 'unit'],
    },
  },
};

describe('stop, logprobs, tools and response_format end to end', () => {
  let s: Stack;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      config: { tenants: [{ id: 'app', keys: [{ key: KEY }] }], pools: [{ id: 'llama', model: MODEL }] },
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  const ask = { model: MODEL, messages: [{ role: 'user' as const, content: 'tell me' }] };

  it('stops at the stop string, without it, with finish_reason stop', async () => {
    // engine-sim's text begins " the of and to in a is".
    const body = { ...ask, max_tokens: 20, stop: [' and', 'never'], fairway_output_tokens: 10 };
    const r = await client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(r.choices[0]?.message.content).toBe(' the of');
    expect(r.choices[0]?.finish_reason).toBe('stop');
    expect(r.usage?.completion_tokens).toBe(3);
    const stream = await client.chat.completions.create({ ...body, stream: true } as never);
    let text = '';
    let finish: string | null = null;
    for await (const c of stream as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) {
      text += c.choices[0]?.delta.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(' the of');
    expect(finish).toBe('stop');
    // Legacy completions too.
    const legacy = await client.completions.create({
      model: MODEL,
      prompt: 'once',
      max_tokens: 20,
      stop: ' to',
      fairway_output_tokens: 10,
    } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(legacy.choices[0]?.text).toBe(' the of and');
  });

  it('answers logprobs for every token, with the asked number of alternatives', async () => {
    const r = await client.chat.completions.create({
      ...ask,
      max_tokens: 5,
      logprobs: true,
      top_logprobs: 3,
    });
    const lp = r.choices[0]?.logprobs?.content ?? [];
    expect(lp).toHaveLength(r.usage?.completion_tokens ?? -1);
    expect(lp.map((t) => t.token).join('')).toBe(r.choices[0]?.message.content);
    for (const t of lp) {
      expect(t.logprob).toBeLessThan(0);
      expect(t.top_logprobs).toHaveLength(3);
      expect(t.top_logprobs[0]?.token).toBe(t.token);
    }
    const stream = await client.chat.completions.create({
      ...ask,
      max_tokens: 4,
      logprobs: true,
      top_logprobs: 1,
      stream: true,
    });
    let tokens = 0;
    for await (const c of stream) tokens += c.choices[0]?.logprobs?.content?.length ?? 0;
    expect(tokens).toBe(4);
    const legacy = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 4, logprobs: 2 });
    expect(legacy.choices[0]?.logprobs?.tokens).toHaveLength(4);
    expect(Object.keys(legacy.choices[0]?.logprobs?.top_logprobs?.[0] ?? {})).toHaveLength(2);
  });

  it('calls the chosen tool with arguments valid for its parameters', async () => {
    const r = await client.chat.completions.create({
      ...ask,
      max_tokens: 200,
      tools: [weather],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const choice = r.choices[0];
    expect(choice?.finish_reason).toBe('tool_calls');
    const call = choice?.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('get_weather');
    const args = JSON.parse(call.function.arguments) as { city: unknown; days: unknown; unit: unknown };
    expect(typeof args.city).toBe('string');
    expect(Number.isInteger(args.days) && (args.days as number) >= 1).toBe(true);
    expect(['celsius', 'fahrenheit']).toContain(args.unit);
    // Streamed, the SDK's helper puts the call together from its deltas.
    const runner = client.chat.completions.stream({
      ...ask,
      max_tokens: 200,
      tools: [weather],
      tool_choice: 'required',
    });
    const done = await runner.finalChatCompletion();
    const streamed = done.choices[0]?.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(streamed.function.name).toBe('get_weather');
    expect(JSON.parse(streamed.function.arguments)).toEqual(args);
    expect(done.choices[0]?.finish_reason).toBe('tool_calls');
    // tool_choice "none": a plain answer.
    const none = await client.chat.completions.create({
      ...ask,
      max_tokens: 3,
      tools: [weather],
      tool_choice: 'none',
    });
    expect(none.choices[0]?.message.tool_calls ?? []).toHaveLength(0);
    expect(none.choices[0]?.message.content?.length).toBeGreaterThan(0);
  });

  it('answers JSON valid for a json_schema response_format, and an object for json_object', async () => {
    const schema = {
      type: 'object',
      properties: {
        title: { type: 'string', minLength: 3 },
        tags: { type: 'array', items: { type: 'string' }, minItems: 2 },
        rating: { type: 'number', minimum: 0 },
        kind: { enum: ['book', 'film'] },
        meta: { type: 'object', properties: { draft: { type: 'boolean' } }, required: ['draft'] },
      },
      required: ['title', 'tags', 'rating', 'kind', 'meta'],
      additionalProperties: false,
    };
    const r = await client.chat.completions.create({
      ...ask,
      max_tokens: 300,
      response_format: { type: 'json_schema', json_schema: { name: 'review', schema, strict: true } },
    });
    expect(r.choices[0]?.finish_reason).toBe('stop');
    const v = JSON.parse(r.choices[0]?.message.content ?? '') as Record<string, unknown>;
    expect(Object.keys(v).sort()).toEqual(['kind', 'meta', 'rating', 'tags', 'title']);
    expect((v.title as string).length).toBeGreaterThanOrEqual(3);
    expect((v.tags as unknown[]).length).toBeGreaterThanOrEqual(2);
    expect(typeof v.rating).toBe('number');
    expect(['book', 'film']).toContain(v.kind);
    expect(v.meta).toEqual({ draft: true });
    // Streamed, the pieces join into the same JSON.
    const stream = await client.chat.completions.create({
      ...ask,
      max_tokens: 300,
      stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'review', schema } },
    });
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta.content ?? '';
    expect(JSON.parse(text)).toEqual(v);
    const obj = await client.chat.completions.create({
      ...ask,
      max_tokens: 50,
      response_format: { type: 'json_object' },
    });
    expect(JSON.parse(obj.choices[0]?.message.content ?? '')).toEqual({});
    // Cut by max_tokens, the answer says so.
    const cut = await client.chat.completions.create({
      ...ask,
      max_tokens: 3,
      response_format: { type: 'json_schema', json_schema: { name: 'review', schema } },
    });
    expect(cut.choices[0]?.finish_reason).toBe('length');
  });
});

describe('non-streamed answers under an SLO-class control plane (read from the engine’s stream)', () => {
  let s: Stack;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [{ id: 'app', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL }],
        policy: { ordering: 'qlm' },
      },
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  const ask = { model: MODEL, messages: [{ role: 'user' as const, content: 'tell me' }] };

  it('keeps tool calls, logprobs and every choice', async () => {
    const tool = await client.chat.completions.create({
      ...ask,
      max_tokens: 200,
      tools: [weather],
      tool_choice: 'required',
    });
    expect(tool.choices[0]?.finish_reason).toBe('tool_calls');
    const call = tool.choices[0]?.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.id).toMatch(/^chatcmpl-tool-/);
    expect(call.type).toBe('function');
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toMatchObject({ unit: 'celsius' });
    const lp = await client.chat.completions.create({
      ...ask,
      max_tokens: 4,
      logprobs: true,
      top_logprobs: 2,
    });
    expect(lp.choices[0]?.logprobs?.content).toHaveLength(4);
    expect(lp.choices[0]?.logprobs?.content?.[0]?.top_logprobs).toHaveLength(2);
    const legacy = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 3, logprobs: 1 });
    expect(legacy.choices[0]?.logprobs?.tokens).toHaveLength(3);
    const two = await client.chat.completions.create({
      ...ask,
      max_tokens: 5,
      n: 2,
      fairway_output_tokens: 3,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(two.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(two.usage?.completion_tokens).toBe(6);
  });
});
