import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fitEngineProfile, profileEngineMetrics } from '@fairway/engine';
import { startEngineSim } from '@fairway/engine-sim';
import { decodeIterationMs } from '@fairway/policy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-3-8b';
const GPU = 'A100-80GB';
const KEY = 'sk-test-aladdin-0001';
const REQUESTS = 60;
// 1,000 short words: about 1,000 prompt tokens to the gateway's estimate and to the engine alike.
const PROMPT_WORDS = 1000;
const OUTPUT = 300;
const ATGT_S = 0.015;

/** A performance-model file measured by `fairway profile` on an engine-sim of the same preset. */
let perfPath: string;
let decode: { k2: number; c2: number; c3: number };
let kvCapacity: number;

beforeAll(async () => {
  const sim = await startEngineSim({ model: MODEL, gpu: GPU, speed: 25 });
  try {
    const fitted = fitEngineProfile(await profileEngineMetrics({ url: sim.url }), { gpu: GPU, tp: 1 });
    decode = fitted.model.decode;
    kvCapacity = fitted.model.kvCapacityTokens;
    perfPath = join(mkdtempSync(join(tmpdir(), 'fairway-aladdin-')), 'perf.json');
    writeFileSync(perfPath, JSON.stringify(fitted.file));
  } finally {
    await sim.close();
  }
}, 120_000);

function config(policy: Record<string, unknown>) {
  return {
    tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
    pools: [{ id: 'llama', model: MODEL }],
    policy: { ordering: 'fcfs', placement: 'aladdin', ...policy },
  };
}

/** Sends the burst through the dispatcher; returns the most sequences the store held on the replica. */
async function burst(s: Stack): Promise<{ peak: number; ok: number }> {
  const url = `${s.dispatchers[0]!.url}/v1/completions`;
  let peak = 0;
  let done = false;
  const sampler = (async () => {
    while (!done) {
      peak = Math.max(peak, (await s.store.reserved(s.replicas[0]!)).seqs);
      await new Promise((r) => setTimeout(r, 2));
    }
  })();
  const results = await Promise.all(
    Array.from({ length: REQUESTS }, (_, i) =>
      fetch(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          prompt: `${i}${' abc'.repeat(PROMPT_WORDS)}`,
          max_tokens: OUTPUT,
          fairway_output_tokens: OUTPUT,
        }),
      }).then((r) => r.status),
    ),
  );
  done = true;
  await sampler;
  await waitFor(async () => (await s.store.reserved(s.replicas[0]!)).seqs === 0, 5000, 'settle');
  return { peak, ok: results.filter((c) => c === 200).length };
}

describe('aladdin placement with performance models and an ATGT target (dispatcher + engine-sim)', () => {
  const stacks: Stack[] = [];
  afterAll(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });

  it('places fewer concurrent sequences on a replica than its KV cache allows, as the decode budget bounds', async () => {
    const s = await startStack({
      config: config({ performanceModels: [perfPath], slo: { atgtS: ATGT_S } }),
      engines: [{ model: MODEL, gpu: GPU }],
    });
    stacks.push(s);
    const { peak, ok } = await burst(s);
    expect(ok).toBe(REQUESTS);
    // Every request reserves its prompt and max_tokens, about 1,300 tokens: the KV cache holds
    // hundreds, but the ATGT context limit l_d (Aladdin Eq. 4) at θ = 0.9 holds a few dozen.
    const perRequest = 1000 + OUTPUT;
    expect(REQUESTS * perRequest).toBeLessThan(kvCapacity);
    const contextLimit = (0.9 * (ATGT_S * 1000 - decode.c3 - decode.c2 * peak)) / decode.k2;
    expect(peak).toBeGreaterThan(1);
    expect(peak).toBeLessThan(REQUESTS);
    expect(peak).toBeLessThanOrEqual(Math.ceil(contextLimit / perRequest) + 1);
    // The batch it allowed decodes within the target (by the fitted model).
    expect(decodeIterationMs(decode, peak, peak * perRequest)).toBeLessThan(ATGT_S * 1000);
  }, 60_000);

  it('without an SLO target, places the whole burst at once (KV and sequence capacity only)', async () => {
    const s = await startStack({
      config: config({ performanceModels: [perfPath] }),
      // Slow enough that the first request is still running when the last arrives.
      engines: [{ model: MODEL, gpu: GPU, speed: 5 }],
    });
    stacks.push(s);
    const { peak, ok } = await burst(s);
    expect(ok).toBe(REQUESTS);
    expect(peak).toBe(REQUESTS);
  }, 60_000);

  it('keeps today’s behaviour for a replica whose GPU has no performance model', async () => {
    const s = await startStack({
      config: config({ performanceModels: [perfPath], slo: { atgtS: ATGT_S } }),
      engines: [{ model: MODEL, gpu: 'H100-80GB', speed: 5 }],
    });
    stacks.push(s);
    const { peak } = await burst(s);
    expect(peak).toBe(REQUESTS);
  }, 60_000);
});
