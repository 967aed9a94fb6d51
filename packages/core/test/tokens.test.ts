import { describe, expect, it } from 'vitest';
import {
  countPromptTokens,
  estimateChatPromptTokens,
  estimateTextTokens,
  MEDIA_PART_TOKENS,
  renderChatPrompt,
  TOKENS_PER_MESSAGE,
  TOKENS_PER_TOOL,
} from '../src/tokens.ts';

const question = { role: 'user', content: 'What is the weather in Paris today?' };
const base = estimateChatPromptTokens({ messages: [question] });

describe('countPromptTokens (admission, TPM limits and reservations)', () => {
  it('counts message text and the template: 4 characters per token, 4 tokens per message and for the answer', () => {
    expect(base).toBe(estimateTextTokens(question.content) + 2 * TOKENS_PER_MESSAGE);
    expect(countPromptTokens('completions', { prompt: 'abcdefgh' })).toBe(2);
    expect(countPromptTokens('completions', { prompt: [''] })).toBe(1);
  });

  it('counts the tools the chat template renders, by their JSON', () => {
    const tool = {
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
      },
    };
    const tools = Array.from({ length: 100 }, () => tool);
    const n = estimateChatPromptTokens({ messages: [question], tools });
    expect(n - base).toBe(100 * (Math.ceil(JSON.stringify(tool).length / 2) + TOKENS_PER_TOOL));
    // Legacy `functions` and structured-output schemas count the same way.
    expect(estimateChatPromptTokens({ messages: [question], functions: [tool.function] })).toBeGreaterThan(
      base,
    );
    const schema = { type: 'object', properties: { answer: { type: 'string' } } };
    for (const extra of [
      { response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } },
      { guided_json: schema },
      { structured_outputs: { json: schema } },
    ])
      expect(estimateChatPromptTokens({ messages: [question], ...extra })).toBeGreaterThan(base);
  });

  it("counts an assistant's tool calls and the tool's answer", () => {
    const args = JSON.stringify({ city: 'Paris', unit: 'celsius' });
    const n = estimateChatPromptTokens({
      messages: [
        question,
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: args } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: '{"temperature": 21}' },
      ],
    });
    const call = estimateTextTokens('get_weather') + Math.ceil(args.length / 2) + TOKENS_PER_TOOL;
    const tool = estimateTextTokens('c1') + estimateTextTokens('{"temperature": 21}');
    expect(n - base).toBe(2 * TOKENS_PER_MESSAGE + call + tool);
  });

  it('counts an image part at its fixed cost, however long its data URL', () => {
    const image = (bytes: number) => ({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: question.content },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(bytes)}` } },
          ],
        },
      ],
    });
    expect(estimateChatPromptTokens(image(10))).toBe(base + MEDIA_PART_TOKENS.get('image_url')!);
    expect(estimateChatPromptTokens(image(3_000_000))).toBe(base + MEDIA_PART_TOKENS.get('image_url')!);
  });

  it('counts a part whose type names an Object property by its JSON, never as NaN', () => {
    for (const type of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      const n = estimateChatPromptTokens({ messages: [{ role: 'user', content: [{ type, text: 1 }] }] });
      expect(Number.isInteger(n)).toBe(true);
      expect(n).toBeGreaterThan(2 * TOKENS_PER_MESSAGE);
    }
  });

  it('counts with a tokenizer over the rendered template when one is given', () => {
    const words = { count: (text: string) => text.split(/\s+/).filter(Boolean).length };
    const body = { messages: [question], tools: [{ type: 'function', function: { name: 'f' } }] };
    const rendered = renderChatPrompt(body);
    expect(rendered.text).toContain('What is the weather in Paris today?');
    expect(rendered.text).toContain('"name": "f"');
    expect(countPromptTokens('chat', body, words)).toBe(words.count(rendered.text));
  });
});
