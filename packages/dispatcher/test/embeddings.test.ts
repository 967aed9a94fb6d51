import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * `POST /v1/embeddings` with the official `openai` SDK through a real dispatcher in front of an
 * engine-sim serving an embedding model: every input form, both encodings, Matryoshka dimensions,
 * and the request admitted, limited and settled by its input tokens like any other.
 */

const MODEL = 'bge-small-en';
const KEY = 'sk-embed-tenant-0001';
const METERED = 'sk-embed-metered-001';
const DIMS = 384;

const norm = (v: readonly number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

describe('POST /v1/embeddings', () => {
  let s: Stack;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      redis: true,
      config: {
        tenants: [
          { id: 'search', keys: [{ key: KEY }] },
          { id: 'metered', keys: [{ key: METERED }], limits: { tpm: 60 } },
        ],
        pools: [{ id: 'embed', model: MODEL }],
      },
      engines: [{ task: 'embed', embeddingDimensions: DIMS, matryoshka: true }],
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  it('embeds a text into a unit vector of the model’s size, the same text always the same', async () => {
    // The SDK asks for base64 and decodes it to floats.
    const a = await client.embeddings.create({ model: MODEL, input: 'the quick brown fox' });
    expect(a.object).toBe('list');
    expect(a.model).toBe(MODEL);
    expect(a.data).toHaveLength(1);
    const v = a.data[0]!.embedding;
    expect(v).toHaveLength(DIMS);
    expect(norm(v)).toBeCloseTo(1, 5);
    expect(a.usage.prompt_tokens).toBeGreaterThan(1);
    expect(a.usage.total_tokens).toBe(a.usage.prompt_tokens);
    const again = await client.embeddings.create({
      model: MODEL,
      input: 'the quick brown fox',
      encoding_format: 'float',
    });
    expect(again.data[0]!.embedding).toEqual(v);
  });

  it('embeds arrays of texts and of token ids, one vector per input in order', async () => {
    const texts = await client.embeddings.create({ model: MODEL, input: ['alpha', 'beta', 'alpha'] });
    expect(texts.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(texts.data[0]!.embedding).toEqual(texts.data[2]!.embedding);
    expect(texts.data[0]!.embedding).not.toEqual(texts.data[1]!.embedding);
    const ids = await client.embeddings.create({ model: MODEL, input: [1, 2, 3, 4] });
    expect(ids.data).toHaveLength(1);
    expect(ids.usage.prompt_tokens).toBe(4);
    const lists = await client.embeddings.create({
      model: MODEL,
      input: [
        [5, 6],
        [7, 8, 9],
      ],
    });
    expect(lists.data).toHaveLength(2);
    expect(lists.usage.prompt_tokens).toBe(5);
  });

  it('returns fewer dimensions when the model allows it', async () => {
    const r = await client.embeddings.create({ model: MODEL, input: 'short', dimensions: 64 });
    expect(r.data[0]!.embedding).toHaveLength(64);
    expect(norm(r.data[0]!.embedding)).toBeCloseTo(1, 5);
  });

  it('refuses malformed input and unknown fields with a 400 naming them', async () => {
    const empty = await client.embeddings
      .create({ model: MODEL, input: [] as string[] })
      .catch((e: unknown) => e);
    expect(empty).toBeInstanceOf(OpenAI.BadRequestError);
    expect((empty as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('input');
    const odd = await client.embeddings
      .create({ model: MODEL, input: 'x', encoding_format: 'int8' } as never)
      .catch((e: unknown) => e);
    expect((odd as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('encoding_format');
    const unknown = await client.embeddings
      .create({ model: MODEL, input: 'x', pooling: 'mean' } as never)
      .catch((e: unknown) => e);
    expect((unknown as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('pooling');
  });

  it('passes on the engine’s refusal of generation by an embedding model', async () => {
    const err = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as Error).message).toMatch(/does not support Chat Completions/);
  });

  it('counts input tokens against token limits and says so in the rate-limit headers', async () => {
    const metered = new OpenAI({ apiKey: METERED, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
    const input = 'one two three four five six seven eight nine ten eleven twelve thirteen';
    const first = await metered.embeddings.create({ model: MODEL, input }).withResponse();
    expect(first.response.headers.get('x-ratelimit-limit-tokens')).toBe('60');
    const used = first.data.usage.prompt_tokens;
    // Settled at the engine's count: the window holds what the input really was.
    await waitFor(async () => (await s.store.reserved('sim-1')).seqs === 0, 3000, 'settle');
    let refused: unknown;
    for (let i = 0; i < 10 && refused === undefined; i++)
      await metered.embeddings.create({ model: MODEL, input }).catch((e: unknown) => {
        refused = e;
      });
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const e = refused as InstanceType<typeof OpenAI.RateLimitError>;
    // What is left cannot hold another input like it (estimated before the engine counts it).
    const left = Number(e.headers?.get('x-ratelimit-remaining-tokens'));
    expect(left).toBeGreaterThanOrEqual(0);
    expect(left).toBeLessThan(60 - used);
    expect(e.headers?.get('x-ratelimit-reset-tokens')).toMatch(/s$/);
    // An input larger than the whole limit can never be admitted: 400, not 429.
    const huge = await metered.embeddings
      .create({ model: MODEL, input: 'word '.repeat(200) })
      .catch((x: unknown) => x);
    expect(huge).toBeInstanceOf(OpenAI.BadRequestError);
  });
});
