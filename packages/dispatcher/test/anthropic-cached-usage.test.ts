import { describe, expect, it } from 'vitest';
import { AnthropicAnswer } from '../src/anthropic-messages.ts';

const chatBody = (usage: Record<string, unknown>) =>
  JSON.stringify({
    id: 'chatcmpl-1',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
    usage,
  });

describe("the Messages API's usage of a cached prompt", () => {
  it('splits the prompt into input_tokens prefilled and cache_read_input_tokens the cache served', () => {
    const out = JSON.parse(
      new AnthropicAnswer('m', undefined).whole(
        chatBody({ prompt_tokens: 500, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 480 } }),
      ),
    );
    expect(out.usage).toEqual({ input_tokens: 20, output_tokens: 3, cache_read_input_tokens: 480 });
  });

  it('reports the whole prompt as input_tokens when the engine reports no cached tokens', () => {
    const out = JSON.parse(
      new AnthropicAnswer('m', undefined).whole(chatBody({ prompt_tokens: 500, completion_tokens: 3 })),
    );
    expect(out.usage).toEqual({ input_tokens: 500, output_tokens: 3 });
  });

  it('carries the split in the final message_delta of a stream', () => {
    const a = new AnthropicAnswer('m', undefined);
    let out = a.chunk('data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n');
    out += a.chunk(
      'data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":500,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":496}}}\n\ndata: [DONE]\n\n',
    );
    const delta = out
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)) as { type: string; usage?: unknown })
      .find((e) => e.type === 'message_delta');
    expect(delta?.usage).toEqual({ input_tokens: 4, output_tokens: 1, cache_read_input_tokens: 496 });
  });
});
