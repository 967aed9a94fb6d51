import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordedToday, type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * `POST /v1/messages` with Anthropic's own SDK through a real dispatcher in front of engine-sim:
 * the request runs the chat path (admitted, queued, limited and settled like chat) and comes back
 * as Anthropic's message or server-sent events; errors in Anthropic's shape.
 */

const MODEL = 'llama-2-7b';
const KEY = 'sk-anthropic-tenant-0001';
const LIMITED = 'sk-anthropic-limited-01';
const ONCE = 'sk-anthropic-once-0001';

describe('POST /v1/messages', () => {
  let s: Stack;
  let url: string;
  let client: Anthropic;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          { id: 'claude-fans', keys: [{ key: KEY }] },
          { id: 'limited', keys: [{ key: LIMITED }], limits: { rpm: 2 } },
          { id: 'once', keys: [{ key: ONCE }], limits: { rpm: 1 } },
        ],
        // A pool with no replica: what an overloaded fleet answers.
        pools: [
          { id: 'llama', model: MODEL },
          { id: 'idle', model: 'mistral-7b' },
        ],
      },
      engines: [{ servedModelName: MODEL }],
    });
    url = s.dispatchers[0]!.url;
    client = new Anthropic({ apiKey: KEY, baseURL: url, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  const recorded = (key: string) => recordedToday(s.store, key);

  it('answers an overloaded fleet with 529 overloaded_error, as Anthropic does', async () => {
    const err = await client.messages
      .create({ model: 'mistral-7b', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.APIError);
    expect((err as InstanceType<typeof Anthropic.APIError>).status).toBe(529);
    expect((err as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
      type: 'error',
      error: { type: 'overloaded_error' },
    });
    expect((err as InstanceType<typeof Anthropic.APIError>).headers?.get('retry-after')).toBe('1');
  });

  it('answers a message with text, a stop reason and the engine’s usage, recorded for the key', async () => {
    const before = await recorded(KEY);
    const m = await client.messages.create({
      model: MODEL,
      max_tokens: 8,
      system: 'You are terse.',
      messages: [{ role: 'user', content: 'Tell me a long story about a lighthouse keeper and the sea.' }],
    });
    expect(m.type).toBe('message');
    expect(m.role).toBe('assistant');
    expect(m.model).toBe(MODEL);
    expect(m.id).toMatch(/^msg_/);
    expect(m._request_id).toBeTruthy();
    expect(m.content).toHaveLength(1);
    expect(m.content[0]!.type).toBe('text');
    expect((m.content[0] as Anthropic.TextBlock).text.length).toBeGreaterThan(0);
    expect(m.stop_reason).toBe('max_tokens');
    expect(m.stop_sequence).toBeNull();
    expect(m.usage.output_tokens).toBe(8);
    expect(m.usage.input_tokens).toBeGreaterThan(10);
    await waitFor(async () => (await recorded(KEY)).requests === before.requests + 1, 5000, 'usage recorded');
    const after = await recorded(KEY);
    expect(after.inputTokens - before.inputTokens).toBe(m.usage.input_tokens);
    expect(after.outputTokens - before.outputTokens).toBe(m.usage.output_tokens);
  });

  it('streams Anthropic’s events in order and the SDK assembles the same message, usage recorded', async () => {
    const before = await recorded(KEY);
    const events: string[] = [];
    const deltas: string[] = [];
    const stream = client.messages.stream({
      model: MODEL,
      max_tokens: 12,
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Describe the weather on a mountain.' }] },
        { role: 'assistant', content: 'Cold.' },
        { role: 'user', content: 'More, please.' },
      ],
    });
    for await (const e of stream) {
      events.push(e.type);
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') deltas.push(e.delta.text);
    }
    const m = await stream.finalMessage();
    expect(events[0]).toBe('message_start');
    expect(events[1]).toBe('content_block_start');
    expect(events.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect(deltas.length).toBeGreaterThan(1);
    expect((m.content[0] as Anthropic.TextBlock).text).toBe(deltas.join(''));
    expect(m.stop_reason).toBe('max_tokens');
    expect(m.usage.output_tokens).toBe(12);
    expect(m.usage.input_tokens).toBeGreaterThan(5);
    await waitFor(async () => (await recorded(KEY)).requests === before.requests + 1, 5000, 'usage recorded');
    const after = await recorded(KEY);
    expect(after.inputTokens - before.inputTokens).toBe(m.usage.input_tokens);
    expect(after.outputTokens - before.outputTokens).toBe(m.usage.output_tokens);
  });

  it('sends `event:` lines and a ping as Anthropic does', async () => {
    const res = await fetch(`${url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 3,
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    const names = [...text.matchAll(/^event: (\w+)\ndata: (.*)$/gm)].map((m) => {
      expect(JSON.parse(m[2]!).type).toBe(m[1]);
      return m[1];
    });
    expect(names).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      ...names.slice(3, -3).map(() => 'content_block_delta'),
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(text).not.toMatch(/\[DONE\]|chat\.completion/);
    // message_start already carries the engine's prompt count; message_delta the final usage.
    const data = (name: string) =>
      JSON.parse(new RegExp(`^event: ${name}\ndata: (.*)$`, 'm').exec(text)![1]!) as {
        message?: { usage: { input_tokens: number } };
        usage?: { input_tokens: number; output_tokens: number };
      };
    const start = data('message_start').message!.usage.input_tokens;
    expect(start).toBeGreaterThan(0);
    expect(data('message_delta').usage).toEqual({ input_tokens: start, output_tokens: 3 });
  });

  it('ends at a stop sequence and names it', async () => {
    // engine-sim's text is deterministic: take a word from a first answer as the stop sequence.
    const first = await client.messages.create({
      model: MODEL,
      max_tokens: 30,
      messages: [{ role: 'user', content: 'Count sheep.' }],
    });
    const said = (first.content[0] as Anthropic.TextBlock).text;
    const word = said.trim().split(/\s+/)[3]!;
    const m = await client.messages.create({
      model: MODEL,
      max_tokens: 30,
      stop_sequences: [word],
      messages: [{ role: 'user', content: 'Count sheep.' }],
    });
    expect(m.stop_reason).toBe('stop_sequence');
    expect(m.stop_sequence).toBe(word);
    expect((m.content[0] as Anthropic.TextBlock).text).not.toContain(word);
  });

  it('calls a tool: a tool_use block with input valid for its schema, stop_reason tool_use, streamed too', async () => {
    const params = {
      model: MODEL,
      max_tokens: 200,
      tools: [
        {
          name: 'get_weather',
          description: 'The weather in a city',
          input_schema: {
            type: 'object' as const,
            properties: { city: { type: 'string' } },
            required: ['city'],
          },
        },
      ],
      tool_choice: { type: 'tool' as const, name: 'get_weather' },
      messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
    };
    const m = await client.messages.create(params);
    expect(m.stop_reason).toBe('tool_use');
    const use = m.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(use.name).toBe('get_weather');
    expect(typeof (use.input as { city: unknown }).city).toBe('string');
    const streamed = await client.messages.stream(params).finalMessage();
    expect(streamed.stop_reason).toBe('tool_use');
    const su = streamed.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(su.name).toBe('get_weather');
    expect(typeof (su.input as { city: unknown }).city).toBe('string');
    // The result goes back as a tool_result block.
    const next = await client.messages.create({
      ...params,
      tool_choice: { type: 'none' },
      messages: [
        ...params.messages,
        { role: 'assistant', content: [use] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 °C' }] },
      ],
    });
    expect(next.content[0]!.type).toBe('text');
  });

  it('takes images as content blocks, counted in the input', async () => {
    // A 1x1 PNG.
    const png =
      'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
    const plain = await client.messages.create({
      model: MODEL,
      max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }] }],
    });
    const seen = await client.messages.create({
      model: MODEL,
      max_tokens: 2,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
            { type: 'text', text: 'What is this?' },
          ],
        },
      ],
    });
    expect(seen.usage.input_tokens).toBeGreaterThan(plain.usage.input_tokens);
  });

  it('counts a prompt’s tokens as admission does: near what the engine counts, no limit spent', async () => {
    const params = {
      model: MODEL,
      system: 'You are terse.',
      messages: [{ role: 'user' as const, content: 'Tell me about the tides of the northern sea.' }],
    };
    const counted = await client.messages.countTokens(params);
    const m = await client.messages.create({ ...params, max_tokens: 2 });
    expect(counted.input_tokens).toBeGreaterThan(0);
    expect(Math.abs(counted.input_tokens - m.usage.input_tokens)).toBeLessThanOrEqual(
      m.usage.input_tokens * 0.5,
    );
    const longer = await client.messages.countTokens({
      ...params,
      messages: [{ role: 'user', content: 'Tell me about the tides of the northern sea. '.repeat(10) }],
    });
    expect(longer.input_tokens).toBeGreaterThan(counted.input_tokens * 3);
    // No request is spent: after counting, a key allowed one request a minute still has it.
    const once = new Anthropic({ apiKey: ONCE, baseURL: url, maxRetries: 0 });
    for (let i = 0; i < 3; i++)
      expect((await once.messages.countTokens(params)).input_tokens).toBe(counted.input_tokens);
    await once.messages.create({ ...params, max_tokens: 1 });
    const over = await once.messages.create({ ...params, max_tokens: 1 }).catch((e: unknown) => e);
    expect(over).toBeInstanceOf(Anthropic.RateLimitError);
    const unknown = await client.messages
      .countTokens({ ...params, model: 'nothing' })
      .catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it('accepts the key as Authorization: Bearer too', async () => {
    const bearer = new Anthropic({ authToken: KEY, apiKey: null, baseURL: url, maxRetries: 0 });
    const m = await bearer.messages.create({
      model: MODEL,
      max_tokens: 2,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(m.usage.output_tokens).toBe(2);
  });

  it('refuses a missing or wrong key with authentication_error (401)', async () => {
    const wrong = new Anthropic({ apiKey: 'sk-not-a-key', baseURL: url, maxRetries: 0 });
    const err = await wrong.messages
      .create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    const res = await fetch(`${url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('request-id')).toBe(res.headers.get('x-request-id'));
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe('error');
    expect(body.error.type).toBe('authentication_error');
    expect(body.error.message).toMatch(/x-api-key/);
  });

  it('refuses bad requests with invalid_request_error (400) naming the field, and unknown models with not_found_error (404)', async () => {
    const post = async (body: unknown) => {
      const res = await fetch(`${url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      return {
        status: res.status,
        body: (await res.json()) as { type: string; error: { type: string; message: string } },
      };
    };
    const noMax = await post({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    expect(noMax.status).toBe(400);
    expect(noMax.body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(noMax.body.error.message).toMatch(/max_tokens/);
    const badRole = await post({
      model: MODEL,
      max_tokens: 2,
      messages: [{ role: 'system', content: 'hi' }],
    });
    expect(badRole.status).toBe(400);
    expect(badRole.body.error.message).toMatch(/messages/);
    const unknown = await post({
      model: MODEL,
      max_tokens: 2,
      messages: [{ role: 'user', content: 'hi' }],
      n: 2,
    });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.message).toMatch(/"n"/);
    const json = await post('{"model":');
    expect(json.status).toBe(400);
    expect(json.body.error.type).toBe('invalid_request_error');
    const model = await post({
      model: 'claude-nothing',
      max_tokens: 2,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(model.status).toBe(404);
    expect(model.body.error.type).toBe('not_found_error');
    expect(JSON.stringify([noMax, badRole, unknown, json, model])).not.toMatch(/ at .*\.ts|stack/);
    // Malformed shapes: every one a 400 in Anthropic's shape, never a 5xx.
    for (const body of [
      null,
      [],
      42,
      { model: MODEL, max_tokens: 2, messages: 'hi' },
      { model: MODEL, max_tokens: 2, messages: [] },
      { model: MODEL, max_tokens: 0, messages: [{ role: 'user', content: 'hi' }] },
      { model: MODEL, max_tokens: 2.5, messages: [{ role: 'user', content: 'hi' }] },
      { model: MODEL, max_tokens: 2, temperature: 3, messages: [{ role: 'user', content: 'hi' }] },
      { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'audio', data: 'x' }] }] },
      {
        model: MODEL,
        max_tokens: 2,
        messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file' } }] }],
      },
      { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 7 }] },
      { model: MODEL, max_tokens: 2, system: 5, messages: [{ role: 'user', content: 'hi' }] },
      {
        model: MODEL,
        max_tokens: 2,
        tool_choice: { type: 'tool' },
        messages: [{ role: 'user', content: 'hi' }],
      },
      { model: MODEL, max_tokens: 2, stop_sequences: [''], messages: [{ role: 'user', content: 'hi' }] },
      {
        model: MODEL,
        max_tokens: 2,
        messages: [
          {
            role: 'user',
            content: [
              {
                type: 'tool_result',
                tool_use_id: 't1',
                content: [{ type: 'image', source: { type: 'url', url: 'https://x.example/a.png' } }],
              },
            ],
          },
        ],
      },
    ]) {
      const r = await post(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    }
  });

  it('limits requests per minute like chat: over the RPM it is a rate_limit_error (429) with Retry-After', async () => {
    const limited = new Anthropic({ apiKey: LIMITED, baseURL: url, maxRetries: 0 });
    const ask = () =>
      limited.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    await ask();
    await ask();
    const err = await ask().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    const e = err as InstanceType<typeof Anthropic.RateLimitError>;
    expect(e.status).toBe(429);
    expect((e.error as { error: { type: string } }).error.type).toBe('rate_limit_error');
    expect(Number(e.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});

describe('POST /v1/messages when the engine fails mid-stream', () => {
  let cut: Stack;
  beforeAll(async () => {
    cut = await startStack({
      config: {
        tenants: [{ id: 'claude-fans', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL }],
      },
      engines: [{ faults: { dropRate: 1, dropAfterTokens: 3 } }],
    });
  });
  afterAll(async () => cut?.close());

  it('ends a stream the engine cut short with an Anthropic error event', async () => {
    const res = await fetch(`${cut.dispatchers[0]!.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 20,
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(/^event: message_start$/m);
    expect(text).not.toMatch(/message_stop/);
    const m = /^event: error\ndata: (.*)$/m.exec(text);
    expect(m).not.toBeNull();
    expect(JSON.parse(m![1]!)).toMatchObject({
      type: 'error',
      error: { type: expect.any(String), message: expect.any(String) },
    });
    expect(text).not.toMatch(/"code":/);
  });
});
