import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type Stack, startStack } from './support/stack.ts';

/**
 * The Vercel AI SDK and LangChain.js as applications use them, against a real dispatcher in front
 * of engine-sim: plain, streamed and tool-calling chat, each charged to its key exactly what the
 * client was told it used.
 */

const MODEL = 'llama-2-7b';
const VERCEL = 'sk-sdk-vercel-ai-0001';
const LANGCHAIN = 'sk-sdk-langchain-0001';

/** Tokens a client saw, summed over its calls. */
interface Seen {
  input: number;
  output: number;
}

describe('application SDKs', () => {
  let s: Stack;
  let baseURL: string;
  const seen: Record<string, Seen> = { vercel: { input: 0, output: 0 }, langchain: { input: 0, output: 0 } };
  const saw = (tenant: string, input: number | undefined, output: number | undefined) => {
    const t = seen[tenant] as Seen;
    t.input += input ?? Number.NaN;
    t.output += output ?? Number.NaN;
  };

  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          { id: 'vercel', keys: [{ key: VERCEL }] },
          { id: 'langchain', keys: [{ key: LANGCHAIN }] },
        ],
      },
    });
    baseURL = `${s.dispatchers[0]!.url}/v1`;
  });
  afterAll(async () => s?.close());

  it('serves the Vercel AI SDK: generateText, streamText and a tool call', async () => {
    const provider = createOpenAI({ baseURL, apiKey: VERCEL });
    // `.chat`: the chat completions API (the provider's default model speaks the Responses API).
    const model = provider.chat(MODEL);

    const plain = await generateText({ model, prompt: 'Say hello.', maxOutputTokens: 12, maxRetries: 0 });
    expect(plain.text.length).toBeGreaterThan(0);
    expect(plain.usage.outputTokens).toBeGreaterThan(0);
    expect(plain.usage.outputTokens).toBeLessThanOrEqual(12);
    saw('vercel', plain.usage.inputTokens, plain.usage.outputTokens);

    const streamed = streamText({ model, prompt: 'Count to five.', maxOutputTokens: 10, maxRetries: 0 });
    let text = '';
    for await (const part of streamed.textStream) text += part;
    const usage = await streamed.usage;
    expect(text.length).toBeGreaterThan(0);
    expect(usage.outputTokens).toBeGreaterThan(0);
    saw('vercel', usage.inputTokens, usage.outputTokens);

    const called = await generateText({
      model,
      prompt: 'What is the weather in Paris?',
      maxOutputTokens: 64,
      maxRetries: 0,
      toolChoice: 'required',
      tools: {
        weather: tool({
          description: 'the weather in a city',
          inputSchema: z.object({ city: z.string() }),
        }),
      },
    });
    expect(called.toolCalls.map((c) => c.toolName)).toEqual(['weather']);
    const args = called.toolCalls[0]?.input as { city?: unknown } | undefined;
    expect(typeof args?.city).toBe('string');
    expect(called.finishReason).toBe('tool-calls');
    saw('vercel', called.usage.inputTokens, called.usage.outputTokens);
  });

  it('serves LangChain.js: invoke and stream', async () => {
    const chat = new ChatOpenAI({
      model: MODEL,
      apiKey: LANGCHAIN,
      configuration: { baseURL },
      maxTokens: 12,
      maxRetries: 0,
      streamUsage: true,
    });
    const reply = await chat.invoke('Say hello.');
    expect(String(reply.content).length).toBeGreaterThan(0);
    expect(reply.usage_metadata?.output_tokens).toBeGreaterThan(0);
    saw('langchain', reply.usage_metadata?.input_tokens, reply.usage_metadata?.output_tokens);

    let text = '';
    let input: number | undefined;
    let output: number | undefined;
    for await (const chunk of await chat.stream('Count to five.')) {
      text += String(chunk.content);
      if (chunk.usage_metadata !== undefined) {
        input = chunk.usage_metadata.input_tokens;
        output = chunk.usage_metadata.output_tokens;
      }
    }
    expect(text.length).toBeGreaterThan(0);
    expect(output).toBeGreaterThan(0);
    saw('langchain', input, output);
  });

  it('charges each key what its client was told it used', async () => {
    const day = new Date().toISOString().slice(0, 10);
    for (const tenant of ['vercel', 'langchain']) {
      const rows = await s.store.usage!({ days: [day], tenant });
      const charged = rows.reduce(
        (a, r) => ({ input: a.input + r.inputTokens, output: a.output + r.outputTokens }),
        { input: 0, output: 0 },
      );
      expect(charged, tenant).toEqual(seen[tenant]);
    }
  });
});
