import { VllmClient } from '@fairway/engine';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

/** engine-sim's `POST /v1/responses`, as vLLM serves it without a response store. */
describe('engine-sim Responses API', () => {
  let sim: EngineSimHandle;
  let client: OpenAI;
  beforeAll(async () => {
    sim = await startEngineSim({ servedModelName: 'tiny-llama', speed: 50 });
    client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(async () => sim.close());

  it('answers a response object with a message item and usage, incomplete at the output cap', async () => {
    const r = await client.responses.create({
      model: 'tiny-llama',
      input: 'Tell me a story.',
      max_output_tokens: 6,
    });
    expect(r.id).toMatch(/^resp_/);
    expect(r.status).toBe('incomplete');
    expect(r.incomplete_details?.reason).toBe('max_output_tokens');
    expect(r.output[0]?.type).toBe('message');
    expect(r.output_text.length).toBeGreaterThan(0);
    expect(r.usage?.output_tokens).toBe(6);
    expect(r.usage?.total_tokens).toBe((r.usage?.input_tokens ?? 0) + 6);
    const natural = await client.responses.create({
      model: 'tiny-llama',
      input: 'hi',
      max_output_tokens: 50,
      // engine-sim's test hook: the answer's natural length.
      fairway_output_tokens: 4,
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(natural.status).toBe('completed');
    expect(natural.usage?.output_tokens).toBe(4);
  });

  it('streams typed events with event: lines, one text delta per token, usage in response.completed', async () => {
    const res = await fetch(`${sim.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-llama', input: 'hi', max_output_tokens: 5, stream: true }),
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    const events = [...text.matchAll(/^event: (\S+)\ndata: (.*)$/gm)].map((m) => {
      const data = JSON.parse(m[2]!) as { type: string; sequence_number: number };
      expect(data.type).toBe(m[1]);
      return data;
    });
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events[0]?.type).toBe('response.created');
    expect(events.filter((e) => e.type === 'response.output_text.delta')).toHaveLength(5);
    const last = events.at(-1) as unknown as { type: string; response: { usage: { output_tokens: number } } };
    expect(last.type).toBe('response.completed');
    expect(last.response.usage.output_tokens).toBe(5);
    expect(text).not.toMatch(/\[DONE\]/);
  });

  it('is read by the engine client: usage from the body, and from response.completed when streamed', async () => {
    const engine = new VllmClient({ url: sim.url });
    try {
      const whole = await engine.respond({ model: 'tiny-llama', input: 'hi', max_output_tokens: 3 });
      expect(whole.usage.completionTokens).toBe(3);
      const stream = await engine.streamResponse({ model: 'tiny-llama', input: 'hi', max_output_tokens: 4 });
      let bytes = 0;
      for await (const chunk of stream) bytes += chunk.length;
      expect(bytes).toBeGreaterThan(0);
      expect(stream.done).toBe(true);
      expect(stream.usage?.completionTokens).toBe(4);
      expect(stream.usage?.promptTokens).toBe(whole.usage.promptTokens);
    } finally {
      await engine.close();
    }
  });

  it('refuses previous_response_id: there is no response store', async () => {
    const err = await client.responses
      .create({ model: 'tiny-llama', input: 'hi', previous_response_id: 'resp_x' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  });
});
