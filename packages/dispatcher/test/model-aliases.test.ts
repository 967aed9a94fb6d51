import Anthropic from '@anthropic-ai/sdk';
import { hashApiKey, parseConfig } from '@fairway/core';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { utcDay } from '../src/quotas.ts';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * Model aliases (`models.aliases`): a request for an alias or a `*` pattern is served by its
 * model's pool — one RPM window, one usage record — and answered with the name it asked for.
 */

const MODEL = 'llama-2-7b';
const KEY = 'sk-alias-tenant-000001';
const LIMITED = 'sk-alias-limited-00001';

describe('model aliases', () => {
  let s: Stack;
  let url: string;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          { id: 'aliased', keys: [{ key: KEY }] },
          { id: 'limited', keys: [{ key: LIMITED }], limits: { rpm: 2 } },
        ],
        pools: [{ id: 'llama', model: MODEL }],
        models: {
          aliases: { 'gpt-4o-mini': MODEL, 'gpt-*': MODEL, 'claude-*': MODEL, 'llama-*': 'nothing' },
        },
      },
    });
    url = s.dispatchers[0]!.url;
    client = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  it('serves an alias by its model and answers with the name asked, streamed and not', async () => {
    const whole = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
    });
    expect(whole.model).toBe('gpt-4o-mini');
    expect(whole.usage?.completion_tokens).toBe(4);
    const stream = await client.chat.completions.create({
      model: 'gpt-4.1-nano',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 5,
      stream: true,
    });
    const models = new Set<string>();
    let chunks = 0;
    for await (const c of stream) {
      models.add(c.model);
      chunks++;
    }
    expect(chunks).toBeGreaterThan(5);
    expect([...models]).toEqual(['gpt-4.1-nano']);
    const text = await client.completions.create({
      model: 'gpt-3.5-turbo-instruct',
      prompt: 'hi',
      max_tokens: 2,
    });
    expect(text.model).toBe('gpt-3.5-turbo-instruct');
  });

  it('answers the Responses and Messages APIs with the name asked', async () => {
    const r = await client.responses.create({ model: 'gpt-5', input: 'hi', max_output_tokens: 3 });
    expect(r.model).toBe('gpt-5');
    const stream = await client.responses.create({
      model: 'gpt-5',
      input: 'hi',
      max_output_tokens: 3,
      stream: true,
    });
    for await (const e of stream)
      if (e.type === 'response.created' || e.type === 'response.completed')
        expect(e.response.model).toBe('gpt-5');
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: url, maxRetries: 0 });
    const m = await anthropic.messages.create({
      model: 'claude-3-5-haiku-latest',
      max_tokens: 3,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(m.model).toBe('claude-3-5-haiku-latest');
  });

  it('never reads a served model as an alias, and an alias of nothing served is a 404 naming what was asked', async () => {
    // `llama-*` matches the served model's own name: the served model wins.
    const real = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });
    expect(real.model).toBe(MODEL);
    const err = await client.chat.completions
      .create({ model: 'llama-3-70b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as Error).message).toMatch(/llama-3-70b/);
    const none = await client.chat.completions
      .create({ model: 'mistral-7b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(none).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('limits and records an alias’s requests as its model’s: one RPM window, one usage row', async () => {
    const limited = new OpenAI({ apiKey: LIMITED, baseURL: `${url}/v1`, maxRetries: 0 });
    const ask = (model: string) =>
      limited.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    const a = await ask('gpt-4o-mini');
    const b = await ask(MODEL);
    const third = await ask('gpt-4o').catch((e: unknown) => e);
    expect(third).toBeInstanceOf(OpenAI.RateLimitError);
    const day = utcDay(Date.now());
    await waitFor(
      async () => (await s.store.usage!({ days: [day], key: hashApiKey(LIMITED) }))[0]?.requests === 2,
      5000,
      'usage recorded',
    );
    const rows = await s.store.usage!({ days: [day], key: hashApiKey(LIMITED) });
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      model: MODEL,
      requests: 2,
      outputTokens: (a.usage?.completion_tokens ?? 0) + (b.usage?.completion_tokens ?? 0),
    });
  });

  it('lists exact aliases of served models in /v1/models, and finds any alias by id', async () => {
    const list = await client.models.list();
    const ids = list.data.map((m) => m.id);
    expect(ids).toContain(MODEL);
    expect(ids).toContain('gpt-4o-mini');
    expect(ids.some((id) => id.includes('*'))).toBe(false);
    expect((await client.models.retrieve('gpt-4-turbo')).id).toBe('gpt-4-turbo');
    const err = await client.models.retrieve('llama-3-70b').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('refuses a config whose alias is a served model or names another alias', () => {
    const base = { pools: [{ id: 'llama', model: MODEL }] };
    expect(() => parseConfig({ ...base, models: { aliases: { [MODEL]: 'other' } } }, 'test')).toThrow(
      /models\.aliases.*llama-2-7b.*a model a pool serves/s,
    );
    expect(() => parseConfig({ ...base, models: { aliases: { a: 'b', b: MODEL } } }, 'test')).toThrow(
      /"b" is an alias itself/,
    );
  });
});

describe('model aliases of an embedding model', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [{ id: 'search', keys: [{ key: KEY }] }],
        pools: [{ id: 'embed', model: 'bge-small-en' }],
        models: { aliases: { 'text-embedding-*': 'bge-small-en' } },
      },
      engines: [{ task: 'embed', embeddingDimensions: 8 }],
    });
  });
  afterAll(async () => s?.close());

  it('embeds with the model an alias stands for and names the alias in the answer', async () => {
    const client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
    const e = await client.embeddings.create({
      model: 'text-embedding-3-small',
      input: 'hello',
      encoding_format: 'float',
    });
    expect(e.model).toBe('text-embedding-3-small');
    expect(e.data[0]!.embedding).toHaveLength(8);
  });
});
