/**
 * Held-out validation of fitted performance models (Aladdin section 6.2 validates its prefill,
 * decode and KV models against measurements they were not fitted to). A fit to the noiseless
 * simulator's own profiling grid recovers its linear model almost exactly, which proves nothing;
 * here the model is checked against other shapes, measured on an engine whose step times carry
 * seeded multiplicative noise — the jitter a real replica shows from step to step.
 */
import { createRng, type Rng } from '@fairway/core';
import { decodeIterationMs, kvTokens, type PerformanceModel, prefillMs } from '@fairway/policy';
import type { BatchShape, EngineConfig, StepCostModel } from './engine-api.ts';
import { resolveEngineConfig } from './engine-config.ts';
import { type ProfilingGrid, profileEngine } from './profiling.ts';

/**
 * A step-cost model whose every step takes `base` × a lognormal factor with median 1 and log-space
 * standard deviation `sigma`, drawn from `rng` (seeded, so a run replays). Used only to validate
 * fits; the engine's own step-time noise option, where present, serves the simulations.
 */
export function jitteredCostModel(base: StepCostModel, sigma: number, rng: Rng): StepCostModel {
  return {
    name: `${base.name}~${sigma}`,
    stepMs: (shape: BatchShape) => base.stepMs(shape) * Math.exp(sigma * rng.normal()),
  };
}

/**
 * Shapes the default profiling grid does not measure: prompt lengths and decode batches between
 * its powers of two, and other contexts.
 */
export const HELD_OUT_GRID: Required<Omit<ProfilingGrid, 'maxBatch'>> = {
  prefillTokens: [200, 700, 1500, 3000],
  batchSizes: [3, 6, 12, 20, 28, 40],
  contexts: [300, 800, 1500],
};

/** Mean absolute percentage error of each part of a model on held-out measurements. */
export interface HeldOutError {
  readonly prefillMape: number;
  readonly decodeMape: number;
  readonly kvMape: number;
  readonly samples: { readonly prefill: number; readonly decode: number; readonly kv: number };
}

/**
 * Measures `config` at the held-out shapes (decode batches up to `maxBatch`) with step-time noise
 * `sigma` seeded by `seed`, and reports how far `model`'s predictions are from the measurements.
 */
export function heldOutError(
  model: PerformanceModel,
  config: EngineConfig,
  options: { readonly sigma: number; readonly seed: number; readonly maxBatch?: number | undefined },
): HeldOutError {
  const base = resolveEngineConfig(config).costModel;
  const noisy: EngineConfig = {
    ...config,
    costModel: jitteredCostModel(base, options.sigma, createRng(options.seed).fork('step-jitter')),
  };
  const grid: ProfilingGrid = {
    ...HELD_OUT_GRID,
    batchSizes: HELD_OUT_GRID.batchSizes.filter((b) => b <= (options.maxBatch ?? Number.POSITIVE_INFINITY)),
    ...(options.maxBatch !== undefined ? { maxBatch: options.maxBatch } : {}),
  };
  const samples = profileEngine(noisy, grid);
  const mape = (pairs: readonly [number, number][]) =>
    pairs.length === 0 ? 0 : pairs.reduce((s, [p, m]) => s + Math.abs(p - m) / m, 0) / pairs.length;
  return {
    prefillMape: mape(samples.prefill.map((s) => [prefillMs(model.prefill, s.inputTokens), s.ms])),
    decodeMape: mape(
      samples.decode.map((s) => [decodeIterationMs(model.decode, s.batchSize, s.contextTokens), s.ms]),
    ),
    kvMape: mape(samples.kv.map((s) => [kvTokens(model.kv, s.contextTokens), s.kvTokens])),
    samples: { prefill: samples.prefill.length, decode: samples.decode.length, kv: samples.kv.length },
  };
}
