import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { startUp, type UpHandle } from '@fairway/cli';
import { silentLogger } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import OpenAI from 'openai';
import type {
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming,
} from 'openai/resources';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFairway } from './support/processes.ts';

/** engine-sim's test hook: the exact number of tokens to generate. */
type WithLength<T> = T & { fairway_output_tokens?: number };

// engine-sim's count: 5 words and a full stop in Llama-2's `<s>[INST] … [/INST]` (9 tokens).
const PROMPT = 'Write a haiku about queues.';
const PROMPT_TOKENS = 15;

async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('fairway up with the example config, through the official openai client', () => {
  let up: UpHandle;
  let client: OpenAI;
  beforeAll(async () => {
    up = await startUp({ port: 0, operatorPort: 0, speed: 20, env: {}, logger: silentLogger });
    client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: up.keys[0]!.key, maxRetries: 0 });
  });
  afterAll(async () => {
    await up?.close();
  });

  it('lists the model and serves a non-streamed chat completion with exact usage', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([up.model]);
    const body: WithLength<ChatCompletionCreateParamsNonStreaming> = {
      model: up.model,
      messages: [{ role: 'user', content: PROMPT }],
      max_tokens: 24,
      fairway_output_tokens: 17,
    };
    const res = await client.chat.completions.create(body);
    expect(res.usage).toMatchObject({
      prompt_tokens: PROMPT_TOKENS,
      completion_tokens: 17,
      total_tokens: PROMPT_TOKENS + 17,
    });
    expect(res.choices[0]?.finish_reason).toBe('stop');
    expect(res.choices[0]?.message.content?.length).toBeGreaterThan(0);
  });

  it('streams a chat completion token by token, with usage only when asked for', async () => {
    const body: WithLength<ChatCompletionCreateParamsStreaming> = {
      model: up.model,
      messages: [{ role: 'user', content: PROMPT }],
      max_tokens: 10,
      fairway_output_tokens: 10,
      stream: true,
    };
    let content = 0;
    let usage: unknown;
    for await (const chunk of await client.chat.completions.create(body)) {
      if (chunk.choices[0]?.delta?.content) content++;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(content).toBe(10);
    expect(usage).toBeUndefined();

    const withUsage = await client.chat.completions.create({
      ...body,
      stream_options: { include_usage: true },
    });
    let last: OpenAI.Chat.Completions.ChatCompletionChunk | undefined;
    for await (const chunk of withUsage) last = chunk;
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toMatchObject({
      prompt_tokens: PROMPT_TOKENS,
      completion_tokens: 10,
      total_tokens: PROMPT_TOKENS + 10,
    });
  });

  it('serves the Responses API and Anthropic’s Messages API, streamed and not, with the engine’s usage', async () => {
    const r = await client.responses.create({ model: up.model, input: PROMPT, max_output_tokens: 6 });
    expect(r.usage?.output_tokens).toBe(6);
    expect(r.output_text.length).toBeGreaterThan(0);
    const events: string[] = [];
    for await (const e of await client.responses.create({
      model: up.model,
      input: PROMPT,
      max_output_tokens: 4,
      stream: true,
    }))
      events.push(e.type);
    expect(events[0]).toBe('response.created');
    expect(events.at(-1)).toBe('response.completed');
    const anthropic = new Anthropic({ apiKey: up.keys[0]!.key, baseURL: up.url, maxRetries: 0 });
    const m = await anthropic.messages.create({
      model: up.model,
      max_tokens: 5,
      messages: [{ role: 'user', content: PROMPT }],
    });
    expect(m.usage).toEqual({ input_tokens: PROMPT_TOKENS, output_tokens: 5 });
    const streamed = await anthropic.messages
      .stream({ model: up.model, max_tokens: 5, messages: [{ role: 'user', content: PROMPT }] })
      .finalMessage();
    expect(streamed.usage).toMatchObject({ input_tokens: PROMPT_TOKENS, output_tokens: 5 });
    expect(streamed.stop_reason).toBe('max_tokens');
  });

  it('serves text completions, streamed and not', async () => {
    const res = await client.completions.create({ model: up.model, prompt: 'abcdefgh', max_tokens: 6 });
    expect(res.usage?.prompt_tokens).toBe(2);
    expect(res.usage?.completion_tokens).toBeLessThanOrEqual(6);
    let chunks = 0;
    for await (const c of await client.completions.create({
      model: up.model,
      prompt: 'abcdefgh',
      max_tokens: 4,
      stream: true,
    }))
      if (c.choices[0]?.text) chunks++;
    expect(chunks).toBeGreaterThan(0);
    expect(chunks).toBeLessThanOrEqual(4);
  });

  it('maps errors to the SDK error classes a client handles', async () => {
    const bad = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'sk-not-a-real-key', maxRetries: 0 });
    const msg = [{ role: 'user' as const, content: 'hi' }];
    await expect(bad.chat.completions.create({ model: up.model, messages: msg })).rejects.toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
    await expect(
      client.chat.completions.create({ model: 'no-such-model', messages: msg }),
    ).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(
      client.chat.completions.create({ model: up.model, messages: msg, temperature: 7 }),
    ).rejects.toMatchObject({ status: 400, param: 'temperature' });
    const appKey = up.keys.find((k) => k.app === 'chat')!.key;
    const appClient = new OpenAI({
      baseURL: `${up.url}/v1`,
      apiKey: appKey,
      maxRetries: 0,
      defaultHeaders: { 'x-fairway-app': 'search' },
    });
    await expect(
      appClient.chat.completions.create({ model: up.model, messages: msg }),
    ).rejects.toBeInstanceOf(OpenAI.PermissionDeniedError);
    const huge = [{ role: 'user' as const, content: 'x'.repeat(5 * 1024 * 1024) }];
    await expect(client.chat.completions.create({ model: up.model, messages: huge })).rejects.toMatchObject({
      status: 413,
    });
  });

  it('frees the engine slot and the reservation when the client aborts a stream', async () => {
    const body: WithLength<ChatCompletionCreateParamsStreaming> = {
      model: up.model,
      messages: [{ role: 'user', content: PROMPT }],
      max_tokens: 3000,
      fairway_output_tokens: 3000,
      stream: true,
    };
    const stream = await client.chat.completions.create(body);
    let n = 0;
    for await (const _ of stream) if (++n === 3) break; // breaking out aborts the HTTP request
    const store = up.dispatcher.infrastructure.store;
    const engines = up.engines.map((e) => new VllmClient({ url: e.url }));
    try {
      await waitFor(
        async () => {
          for (const a of up.agents) if ((await store.reserved(a.agent.replicaId)).seqs !== 0) return false;
          for (const e of engines) if ((await e.metrics()).running !== 0) return false;
          return true;
        },
        3000,
        'reservations and engine slots to be freed',
      );
    } finally {
      for (const e of engines) await e.close();
    }
  });
});

describe('fairway up limits and availability', () => {
  let up: UpHandle;
  let client: OpenAI;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-up-'));
    const path = join(dir, 'fairway.yaml');
    writeFileSync(
      path,
      [
        'tenants:',
        '  - id: capped',
        '    limits: { rpm: 3 }',
        '    keys: [{ key: sk-capped-0001 }]',
        'pools:',
        '  - { id: llama, model: llama-2-7b }',
        '  - { id: mistral, model: mistral-7b }',
        '',
      ].join('\n'),
    );
    up = await startUp({
      configPath: path,
      port: 0,
      operatorPort: 0,
      speed: 20,
      engines: 1,
      env: {},
      logger: silentLogger,
    });
    client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'sk-capped-0001', maxRetries: 0 });
  });
  afterAll(async () => {
    await up?.close();
  });

  it('rejects over-limit requests with RateLimitError and Retry-After, and unserved models with 503', async () => {
    const msg = [{ role: 'user' as const, content: 'hi' }];
    const unserved = await client.chat.completions
      .create({ model: 'mistral-7b', messages: msg, max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(unserved).toBeInstanceOf(OpenAI.InternalServerError);
    expect((unserved as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    for (let i = 0; i < 3; i++)
      await client.chat.completions.create({ model: 'llama-2-7b', messages: msg, max_tokens: 2 });
    const limited = await client.chat.completions
      .create({ model: 'llama-2-7b', messages: msg, max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    const retryAfter = Number((limited as InstanceType<typeof OpenAI.APIError>).headers?.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    // A window's entries count until the end of their 1 s bucket: at most a minute and a second.
    expect(retryAfter).toBeLessThanOrEqual(61);
  });
});

describe('npx fairway up (the README command)', () => {
  it('starts the embedded stack and prints a URL, keys and a curl line that work', async () => {
    const p = await startFairway(
      ['up', '--port', '0', '--operator-port', '0', '--speed', '20', '--log-level', 'error'],
      /^fairway is up: (http:\/\/\S+)/,
      { REDIS_URL: '', NATS_URL: '' },
    );
    try {
      await new Promise((r) => setTimeout(r, 200)); // the rest of the banner
      const banner = p.output.join('\n');
      const key = /Bearer (sk-[A-Za-z0-9-]+)/.exec(banner)?.[1];
      expect(key).toBeDefined();
      expect(banner).toContain(`baseURL: '${p.url}/v1'`);
      const data = /-d '(\{.*\})'/.exec(banner)?.[1];
      const res = await fetch(`${p.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: data,
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens).toBe(11);
    } finally {
      await p.stop();
    }
  });
});
