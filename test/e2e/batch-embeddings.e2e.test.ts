import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startUp, type UpHandle } from '@fairway/cli';
import { silentLogger } from '@fairway/core';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { startRedisServer, type TestServer } from '@fairway/testkit';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * Embeddings in the Batch API, as a user of the official `openai` client runs them: `fairway up`
 * on a throw-away Redis in front of a generative engine-sim and an embedding one (each its own
 * pool); a batch of `/v1/embeddings` lines is answered line by line with the vectors.
 */

const KEY = 'sk-batch-embed-0001';
const EMBED = 'bge-small-en';

describe('a Batch API batch of embeddings', () => {
  let redis: TestServer;
  let sims: EngineSimHandle[];
  let up: UpHandle;
  let dir: string;
  let client: OpenAI;
  beforeAll(async () => {
    redis = await startRedisServer();
    sims = [
      await startEngineSim({ servedModelName: 'llama-2-7b', speed: 20 }),
      await startEngineSim({ servedModelName: EMBED, task: 'embed', embeddingDimensions: 32 }),
    ];
    dir = mkdtempSync(join(tmpdir(), 'fairway-batch-embed-'));
    const configPath = join(dir, 'fairway.json');
    writeFileSync(
      configPath,
      JSON.stringify({
        tenants: [{ id: 'search', keys: [{ key: KEY }] }],
        pools: [
          { id: 'llama', model: 'llama-2-7b' },
          { id: 'bge', model: EMBED },
        ],
        engines: [
          { id: 'gen-1', url: sims[0]!.url, pool: 'llama' },
          { id: 'emb-1', url: sims[1]!.url, pool: 'bge' },
        ],
      }),
    );
    up = await startUp({
      configPath,
      redisUrl: redis.url,
      port: 0,
      operatorPort: 0,
      env: {},
      logger: silentLogger,
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${up.url}/v1`, maxRetries: 0 });
  }, 60_000);
  afterAll(async () => {
    await up?.close();
    for (const s of sims ?? []) await s.close();
    await redis?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('answers every line with its vectors and usage', async () => {
    const lines = Array.from({ length: 6 }, (_, i) =>
      JSON.stringify({
        custom_id: `e-${i}`,
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: EMBED, input: [`document ${i}`, `title ${i}`], encoding_format: 'float' },
      }),
    ).join('\n');
    const file = await client.files.create({
      file: await toFile(Buffer.from(lines), 'in.jsonl'),
      purpose: 'batch',
    });
    const batch = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    const deadline = Date.now() + 60_000;
    let done = await client.batches.retrieve(batch.id);
    while (!['completed', 'failed', 'cancelled', 'expired'].includes(done.status) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      done = await client.batches.retrieve(batch.id);
    }
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
    const out = (await (await client.files.content(done.output_file_id!)).text())
      .trim()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as {
            custom_id: string;
            response: { status_code: number; body: OpenAI.CreateEmbeddingResponse };
          },
      );
    expect(out.map((l) => l.custom_id).sort()).toEqual(['e-0', 'e-1', 'e-2', 'e-3', 'e-4', 'e-5']);
    for (const l of out) {
      expect(l.response.status_code).toBe(200);
      expect(l.response.body.data).toHaveLength(2);
      expect(l.response.body.data[0]!.embedding).toHaveLength(32);
      expect(l.response.body.usage.prompt_tokens).toBeGreaterThan(0);
    }
  }, 90_000);
});
