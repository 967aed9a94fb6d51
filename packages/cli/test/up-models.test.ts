import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '@fairway/core';
import { smallestFittingTp } from '@fairway/engine-sim';
import { afterAll, describe, expect, it } from 'vitest';
import { startUp, type UpHandle } from '../src/index.ts';

/**
 * `fairway up` simulates its pool's model as it would be served: a model too large for one GPU runs
 * its simulated engines over as many as it needs, and they register that split.
 */
describe('fairway up with a model larger than one GPU', () => {
  let up: UpHandle | undefined;
  afterAll(async () => {
    await up?.close();
  });

  it('picks the smallest tensor-parallel degree whose weights leave a KV cache', () => {
    expect(smallestFittingTp('llama-2-7b')).toBe(1);
    // 140 GB of Llama-2-70B weights: two A100-80GB; on 24-GB A10Gs, eight.
    expect(smallestFittingTp('llama-2-70b')).toBe(2);
    expect(smallestFittingTp('llama-2-13b', 'A10G-24GB')).toBe(2);
    expect(smallestFittingTp('llama-2-70b', 'A10G-24GB')).toBe(8);
  });

  it('serves a llama-2-70b pool on simulated engines of 2 × A100-80GB', async () => {
    const configPath = join(mkdtempSync(join(tmpdir(), 'fairway-up-70b-')), 'fairway.yaml');
    writeFileSync(
      configPath,
      `
tenants:
  - { id: acme, keys: [{ key: sk-up-70b-acme-0001 }] }
pools:
  - { id: llama-70b, model: llama-2-70b }
`,
    );
    up = await startUp({
      configPath,
      port: 0,
      operatorPort: 0,
      engines: 1,
      speed: 20,
      // The embedded default, whatever REDIS_URL / NATS_URL the environment exports.
      env: { REDIS_URL: '', NATS_URL: '' },
      logger: silentLogger,
    });
    const res = await fetch(`${up.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-up-70b-acme-0001', 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'llama-2-70b',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 4,
      }),
    });
    expect(up.engines.map((e) => [e.gpu, e.tp])).toEqual([['A100-80GB', 2]]);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(4);
  });
});
