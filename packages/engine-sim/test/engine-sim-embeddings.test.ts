import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

/** engine-sim serving an embedding model, as vLLM's `--task embed` does, read by the openai SDK. */
describe('engine-sim embedding model', () => {
  let embed: EngineSimHandle;
  let generate: EngineSimHandle;
  beforeAll(async () => {
    embed = await startEngineSim({
      servedModelName: 'e5',
      task: 'embed',
      embeddingDimensions: 16,
      maxModelLen: 64,
    });
    generate = await startEngineSim({ servedModelName: 'tiny-llama', kvCapacityTokens: 20_000 });
  });
  afterAll(async () => {
    await embed.close();
    await generate.close();
  });
  const client = (sim: EngineSimHandle) =>
    new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });

  it('answers float and base64 vectors that decode to the same numbers, with prompt usage', async () => {
    const floats = await client(embed).embeddings.create({
      model: 'e5',
      input: 'hello',
      encoding_format: 'float',
    });
    const b64 = await client(embed).embeddings.create({
      model: 'e5',
      input: 'hello',
      encoding_format: 'base64',
    });
    const raw = b64.data[0]!.embedding as unknown as string;
    const bytes = Buffer.from(raw, 'base64');
    const decoded = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    expect(floats.data[0]!.embedding).toHaveLength(16);
    expect(decoded).toEqual(floats.data[0]!.embedding);
    expect(floats.usage).toEqual({ prompt_tokens: 2, total_tokens: 2, completion_tokens: 0 });
  });

  it('refuses dimensions on a model without Matryoshka training, and inputs past max_model_len', async () => {
    const dims = await client(embed)
      .embeddings.create({ model: 'e5', input: 'x', dimensions: 8 })
      .catch((e: unknown) => e);
    expect(dims).toBeInstanceOf(OpenAI.BadRequestError);
    expect((dims as Error).message).toMatch(/matryoshka/);
    const long = await client(embed)
      .embeddings.create({ model: 'e5', input: Array.from({ length: 100 }, (_, i) => i) })
      .catch((e: unknown) => e);
    expect((long as Error).message).toMatch(/maximum context length is 64/);
  });

  it('refuses generation on an embedding model and embeddings on a generative one', async () => {
    const chat = await client(embed)
      .chat.completions.create({ model: 'e5', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect((chat as Error).message).toMatch(/does not support Chat Completions API/);
    const emb = await client(generate)
      .embeddings.create({ model: 'tiny-llama', input: 'hi' })
      .catch((e: unknown) => e);
    expect((emb as Error).message).toMatch(/does not support Embeddings API/);
  });
});
