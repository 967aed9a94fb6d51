import { EngineProfileError, fitEngineProfile, profileEngineMetrics } from '@fairway/engine';
import { costModelPreset } from '@fairway/perf';
import { decodeIterationMs, fitQuality, parsePerformanceModelFile, prefillMs } from '@fairway/policy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineSimHandle, startEngineSim } from '../src/index.ts';

const MODEL = 'llama-3-8b';
const GPU = 'A100-80GB';
const preset = costModelPreset(MODEL, GPU);

/** The preset's own prefill of one prompt, ms. */
function presetPrefillMs(tokens: number): number {
  return preset.stepMs({
    decodeSeqs: 0,
    prefillTokens: tokens,
    prefillChunkSq: tokens * tokens,
    kvTokensRead: 0,
  });
}

/** The preset's own decode iteration of `b` sequences of `context` tokens each, ms. */
function presetDecodeMs(b: number, context: number): number {
  return preset.stepMs({ decodeSeqs: b, prefillTokens: 0, prefillChunkSq: 0, kvTokensRead: b * context });
}

describe('fairway profile against engine-sim (a known preset)', () => {
  let sim: EngineSimHandle;
  let fitted: ReturnType<typeof fitEngineProfile>;

  beforeAll(async () => {
    // 25 times faster than the GPU: engine-sim reports model time, so no scaling is needed (and
    // the shared test machine keeps up with this speed factor).
    sim = await startEngineSim({ model: MODEL, gpu: GPU, speed: 25, servedModelName: 'served-8b' });
    const samples = await profileEngineMetrics({ url: sim.url, seed: 3 });
    fitted = fitEngineProfile(
      samples,
      { model: MODEL, gpu: GPU, tp: 1 },
      { now: () => Date.UTC(2026, 0, 2) },
    );
  }, 120_000);
  afterAll(async () => {
    await sim?.close();
  });

  it('derives prefill, decode and KV samples from /metrics alone', () => {
    const s = fitted.samples;
    expect(s.servedModel).toBe('served-8b');
    expect(s.prefill.length).toBeGreaterThanOrEqual(10);
    expect(s.decode.length).toBeGreaterThanOrEqual(20);
    expect(s.kv.length).toBe(4 * s.decode.length);
    expect(s.kvCapacityTokens).toBeGreaterThan(100_000);
  });

  it('predicts the preset’s own prefill and decode times within 10% over a held-out grid', () => {
    const { model } = fitted;
    // Shapes the profile did not measure, inside the range it did.
    const prompts = [192, 384, 768, 1536, 2560, 3584];
    const prefill = fitQuality(
      prompts.map((n) => prefillMs(model.prefill, n)),
      prompts.map(presetPrefillMs),
    );
    const shapes: [number, number][] = [];
    for (const b of [3, 6, 12, 24, 48]) for (const c of [256, 768, 1536]) shapes.push([b, c]);
    const decode = fitQuality(
      shapes.map(([b, c]) => decodeIterationMs(model.decode, b, b * c)),
      shapes.map(([b, c]) => presetDecodeMs(b, c)),
    );
    // Printed for the report: the held-out errors, next to the fit's own.
    console.log(
      `held-out MAPE: prefill ${(prefill.mape * 100).toFixed(1)}%, decode ${(decode.mape * 100).toFixed(1)}%; ` +
        `fit MAPE: prefill ${(fitted.report.prefill.mape * 100).toFixed(1)}%, decode ${(fitted.report.decode.mape * 100).toFixed(1)}%, KV ${((fitted.report.kv?.mape ?? 0) * 100).toFixed(1)}%`,
    );
    expect(prefill.mape).toBeLessThan(0.1);
    expect(decode.mape).toBeLessThan(0.1);
  });

  it('fits one KV token per context token plus block rounding', () => {
    expect(fitted.model.kv.h).toBeGreaterThan(0.97);
    expect(fitted.model.kv.h).toBeLessThan(1.03);
    expect(fitted.model.kv.j).toBeGreaterThanOrEqual(0);
    expect(fitted.model.kv.j).toBeLessThan(32);
  });

  it('writes a file that validates and reads back as the same model', () => {
    const round = parsePerformanceModelFile(JSON.parse(JSON.stringify(fitted.file)));
    expect(round.model).toEqual(fitted.model);
    expect(round.file.measured).toMatchObject({
      source: 'engine',
      url: sim.url,
      at: '2026-01-02T00:00:00.000Z',
    });
  });

  it('refuses a model the engine does not serve, naming what it serves', async () => {
    await expect(profileEngineMetrics({ url: sim.url, model: 'nope' })).rejects.toThrow(EngineProfileError);
    await expect(profileEngineMetrics({ url: sim.url, model: 'nope' })).rejects.toThrow(/serves served-8b/);
  });
});
