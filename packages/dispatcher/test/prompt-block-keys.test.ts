import { createServer, type Server } from 'node:net';
import { kvBlockKeys, silentLogger } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PromptBlockKeys } from '../src/prompt-block-keys.ts';

const SEED = '77';
const config = { hashSeed: SEED, tokenizeTimeoutMs: 250, maxBlocks: 2048 };
const messages = [
  { role: 'system', content: `Rules. ${'Answer briefly and precisely. '.repeat(20)}` },
  { role: 'user', content: 'What is a KV block?' },
];

describe('a prompt’s KV block keys, from an engine’s tokenizer', () => {
  let sim: EngineSimHandle;
  let silent: Server;
  let silentUrl: string;
  beforeAll(async () => {
    sim = await startEngineSim({
      servedModelName: 'llama-2-7b',
      enablePrefixCaching: true,
      prefixCachingHashAlgo: 'sha256_cbor',
      env: { PYTHONHASHSEED: SEED },
    });
    // An engine that accepts connections and never answers.
    silent = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    silentUrl = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    await sim?.close();
    silent?.close();
  });

  it('hashes the ids the engine prefills for the chat, as the engine hashes its blocks', async () => {
    const engine = new VllmClient({ url: sim.url });
    const keys = await new PromptBlockKeys(() => [{ engine, blockSize: 16 }], silentLogger).of(
      'p',
      config,
      'chat',
      { model: 'llama-2-7b', messages } as never,
    );
    const res = await fetch(`${sim.url}/tokenize`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages }),
    });
    const { tokens } = (await res.json()) as { tokens: number[] };
    expect(keys).toEqual(kvBlockKeys(tokens, 16, SEED));
    expect(keys?.length).toBe(Math.floor(tokens.length / 16));
    // A completion given as token ids is hashed without asking the engine.
    const direct = await new PromptBlockKeys(() => [{ engine, blockSize: 16 }], silentLogger).of(
      'p',
      config,
      'completions',
      { model: 'llama-2-7b', prompt: tokens } as never,
    );
    expect(direct).toEqual(keys);
  });

  it('gives up within the pool’s timeout when the engine does not answer, and without a replica', async () => {
    const engine = new VllmClient({ url: silentUrl });
    const started = Date.now();
    const keys = await new PromptBlockKeys(() => [{ engine, blockSize: 16 }], silentLogger).of(
      'p',
      { ...config, tokenizeTimeoutMs: 100 },
      'chat',
      { model: 'llama-2-7b', messages } as never,
    );
    expect(keys).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(5000);
    expect(
      await new PromptBlockKeys(() => [], silentLogger).of('p', config, 'chat', {
        model: 'llama-2-7b',
        messages,
      } as never),
    ).toBeUndefined();
  });
});
