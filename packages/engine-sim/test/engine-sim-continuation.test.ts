import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

interface Body {
  choices: { message?: { content: string }; text?: string; finish_reason: string }[];
  usage: { prompt_tokens: number; completion_tokens: number };
  error?: { message: string };
}

describe('engine-sim continuations (vLLM continue_final_message)', () => {
  let sim: EngineSimHandle;
  const post = async (path: string, body: object, headers: Record<string, string> = {}) => {
    const res = await fetch(`${sim.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Body };
  };
  const messages = [{ role: 'user', content: 'tell me a story' }];

  beforeAll(async () => {
    sim = await startEngineSim({ speed: 50, servedModelName: 'm' });
  });
  afterAll(() => sim.close());

  it('continues the partial assistant message where it stopped: both parts join into the whole answer', async () => {
    const whole = await post('/v1/chat/completions', { messages, max_tokens: 50, fairway_output_tokens: 12 });
    const full = whole.body.choices[0]?.message?.content ?? '';
    expect(whole.body.usage.completion_tokens).toBe(12);
    // The first five tokens' text, as a client that was cut off would hold it.
    const part = await post('/v1/chat/completions', { messages, max_tokens: 5, fairway_output_tokens: 12 });
    const partial = part.body.choices[0]?.message?.content ?? '';
    expect(part.body.choices[0]?.finish_reason).toBe('length');

    const rest = await post('/v1/chat/completions', {
      messages: [...messages, { role: 'assistant', content: partial }],
      continue_final_message: true,
      add_generation_prompt: false,
      max_tokens: 45,
      fairway_output_tokens: 12,
    });
    expect(rest.status).toBe(200);
    expect(rest.body.usage.completion_tokens).toBe(7);
    expect(partial + (rest.body.choices[0]?.message?.content ?? '')).toBe(full);
    expect(rest.body.choices[0]?.finish_reason).toBe('stop');
  });

  it('continues a text completion from the token count the caller says it already has', async () => {
    const whole = await post('/v1/completions', { prompt: 'once', max_tokens: 50, fairway_output_tokens: 9 });
    const full = whole.body.choices[0]?.text ?? '';
    const rest = await post(
      '/v1/completions',
      { prompt: 'once', max_tokens: 46, fairway_output_tokens: 9 },
      { 'x-fairway-resumed-tokens': '4' },
    );
    expect(rest.body.usage.completion_tokens).toBe(5);
    expect(full.endsWith(rest.body.choices[0]?.text ?? '-')).toBe(true);
  });

  it('refuses continue_final_message with add_generation_prompt, or after a non-assistant message, as vLLM does', async () => {
    const both = await post('/v1/chat/completions', {
      messages: [...messages, { role: 'assistant', content: ' the' }],
      continue_final_message: true,
      add_generation_prompt: true,
    });
    expect(both.status).toBe(400);
    expect(both.body.error?.message).toMatch(/continue_final_message.*add_generation_prompt/);
    const user = await post('/v1/chat/completions', { messages, continue_final_message: true });
    expect(user.status).toBe(400);
  });
});
