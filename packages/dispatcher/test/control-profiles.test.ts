import type { EngineTiming } from '@fairway/bus';
import { controlConfigSchema } from '@fairway/core';
import { fitEnginePerformance } from '@fairway/perf';
import { decodeIterationMs, prefillMs } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { liveProfiles } from '../src/control-profiles.ts';

const control = controlConfigSchema.parse({ speedup: 4 });
const shape = () => ({ kvCapacityTokens: 40_000, maxNumSeqs: 64 });
/** The model the profiles are fitted from: the preset on the replica's registered shape. */
const perf = fitEnginePerformance({
  model: 'llama-2-7b',
  gpu: 'A100-80GB',
  tp: 1,
  kvCapacityTokens: 40_000,
  maxNumSeqs: 64,
}).model;

/** A window of an engine that runs `decode`× and `prefill`× the A100 preset's times. */
function timing(decode: number, prefill: number, tokens = 400): EngineTiming {
  const running = 8;
  const context = 1200;
  return {
    decode: {
      interTokenMs: decode * decodeIterationMs(perf.decode, running, running * context),
      tokens,
      meanRunning: running,
      meanContext: context,
    },
    prefill: { prefillMs: prefill * prefillMs(perf.prefill, 700), prefills: 20, meanPromptTokens: 700 },
  };
}

describe("QLM's live estimator profiles", () => {
  const preset = liveProfiles(control, shape)('llama-2-7b', 'A100-80GB', 1);

  it("use the preset, divided by engine-sim's speed-up, until an engine measured itself", () => {
    const profileOf = liveProfiles(control, shape, () => []);
    expect(profileOf('llama-2-7b', 'A100-80GB', 1)).toEqual(preset);
    const atSpeed1 = liveProfiles(controlConfigSchema.parse({}), shape)('llama-2-7b', 'A100-80GB', 1);
    expect(preset.decodeMsPerIteration).toBeCloseTo(atSpeed1.decodeMsPerIteration / 4, 9);
  });

  it('scale decode and prefill times by how much slower the engines measured themselves', () => {
    let windows: EngineTiming[] = [];
    const profileOf = liveProfiles(control, shape, () => windows);
    windows = [timing(3, 2)];
    const slow = profileOf('llama-2-7b', 'A100-80GB', 1);
    expect(slow.decodeMsPerIteration).toBeCloseTo(3 * preset.decodeMsPerIteration, 6);
    expect(slow.prefillMs).toBeCloseTo(2 * preset.prefillMs, 6);
    expect(slow.batchSize).toBe(preset.batchSize);
    // Read on every call: a faster engine later is seen at once.
    windows = [timing(0.5, 1)];
    expect(profileOf('llama-2-7b', 'A100-80GB', 1).decodeMsPerIteration).toBeCloseTo(
      0.5 * preset.decodeMsPerIteration,
      6,
    );
  });

  it("weigh each replica of the shape by the work it measured, and bound a garbled engine's say", () => {
    const two = liveProfiles(control, shape, () => [timing(2, 1, 100), timing(4, 1, 300)]);
    expect(two('llama-2-7b', 'A100-80GB', 1).decodeMsPerIteration).toBeCloseTo(
      3.5 * preset.decodeMsPerIteration,
      6,
    );
    const garbled = liveProfiles(control, shape, () => [timing(1e6, 1e-6)]);
    const g = garbled('llama-2-7b', 'A100-80GB', 1);
    expect(g.decodeMsPerIteration).toBeCloseTo(20 * preset.decodeMsPerIteration, 6);
    expect(g.prefillMs).toBeCloseTo(preset.prefillMs / 20, 6);
  });
});
