import { createRng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { FitError, PolicyInputError } from '../src/errors.ts';
import {
  decodeIterationMs,
  fitDecodeModel,
  maxDecodeBatch,
  maxDecodeContext,
} from '../src/perf-model/decode-model.ts';
import { fitKvModel, kvTokens } from '../src/perf-model/kv-model.ts';
import { leastSquares } from '../src/perf-model/least-squares.ts';
import { fitPerformanceModel } from '../src/perf-model/performance-model.ts';
import { fitPrefillModel, prefillMs } from '../src/perf-model/prefill-model.ts';
import { samplesFromSteps } from '../src/perf-model/samples.ts';

const rng = createRng(42);
const noisy = (v: number, cv: number) => v * (1 + cv * rng.normal());
const relErr = (got: number, want: number) => Math.abs(got - want) / Math.abs(want);

describe('leastSquares', () => {
  it('recovers exact coefficients from noiseless data with features of very different scale', () => {
    const rows: number[][] = [];
    const ys: number[] = [];
    for (let i = 1; i <= 20; i++) {
      const ctx = 1000 * i + 37 * (i % 3);
      const b = ((i * 7) % 13) + 1;
      rows.push([ctx, b, 1]);
      ys.push(0.0004 * ctx + 0.05 * b + 8);
    }
    const fit = leastSquares(rows, ys, 'test');
    expect(fit.coefficients[0]).toBeCloseTo(0.0004, 10);
    expect(fit.coefficients[1]).toBeCloseTo(0.05, 8);
    expect(fit.coefficients[2]).toBeCloseTo(8, 6);
    expect(fit.quality.r2).toBeCloseTo(1, 10);
    expect(fit.quality.mape).toBeLessThan(1e-9);
  });

  it('refuses samples that cannot separate the coefficients', () => {
    const rows = [
      [10, 20, 1],
      [20, 40, 1],
      [30, 60, 1],
    ];
    expect(() => leastSquares(rows, [1, 2, 3], 'collinear')).toThrow(FitError);
    expect(() => leastSquares([[1, 1]], [1], 'short')).toThrow(/needs at least 2 samples/);
  });
});

describe('fitDecodeModel', () => {
  it('recovers k·l_avg + c per sequence and c0 within 10% from noisy iterations', () => {
    const truth = { k2: 0.00036, c2: 0.064, c3: 9.3 };
    const samples = [];
    for (let i = 0; i < 400; i++) {
      const b = rng.int(1, 200);
      const avg = rng.int(100, 3000);
      const ms = decodeIterationMs(truth, b, b * avg);
      samples.push({ batchSize: b, contextTokens: b * avg, ms: noisy(ms, 0.03) });
    }
    const { model, quality } = fitDecodeModel(samples);
    expect(relErr(model.k2, truth.k2)).toBeLessThan(0.1);
    expect(relErr(model.c2, truth.c2)).toBeLessThan(0.1);
    expect(relErr(model.c3, truth.c3)).toBeLessThan(0.1);
    expect(quality.mape).toBeLessThan(0.05);
    expect(quality.r2).toBeGreaterThan(0.95);
  });

  it('names the offending sample field when input is malformed', () => {
    expect(() => fitDecodeModel([{ batchSize: 0, contextTokens: 10, ms: 1 }])).toThrow(PolicyInputError);
    expect(() => fitDecodeModel([{ batchSize: 2, contextTokens: 10, ms: -1 }])).toThrow(/\[0\]\.ms/);
  });

  it('inverts the model into the context limit and batch limit of an ATGT budget (Eq. 4)', () => {
    const m = { k2: 0.001, c2: 0.1, c3: 10 };
    const ctx = maxDecodeContext(m, 20, 30);
    expect(decodeIterationMs(m, 20, ctx)).toBeCloseTo(30, 9);
    const b = maxDecodeBatch(m, 500, 30);
    expect(decodeIterationMs(m, b, b * 500)).toBeLessThanOrEqual(30);
    expect(decodeIterationMs(m, b + 1, (b + 1) * 500)).toBeGreaterThan(30);
    expect(maxDecodeBatch(m, 500, 5)).toBe(0);
  });
});

describe('fitPrefillModel', () => {
  it('recovers per-token and fixed prefill cost within 10% from noisy batches', () => {
    const truth = { k1: 0.22, c1: 15 };
    const samples = Array.from({ length: 200 }, () => {
      const tokens = rng.int(16, 4096);
      return { inputTokens: tokens, ms: noisy(prefillMs(truth, tokens), 0.03) };
    });
    const { model, quality } = fitPrefillModel(samples);
    expect(relErr(model.k1, truth.k1)).toBeLessThan(0.1);
    expect(relErr(model.c1, truth.c1)).toBeLessThan(0.1);
    expect(quality.mape).toBeLessThan(0.1);
  });
});

describe('fitKvModel', () => {
  it('recovers KV tokens per context token from block-rounded usage', () => {
    const samples = Array.from({ length: 300 }, () => {
      const ctx = rng.int(1, 4000);
      return { contextTokens: ctx, kvTokens: Math.ceil(ctx / 16) * 16 };
    });
    const { model, quality } = fitKvModel(samples);
    expect(relErr(model.h, 1)).toBeLessThan(0.01);
    expect(model.j).toBeGreaterThan(0);
    expect(model.j).toBeLessThan(16);
    expect(kvTokens(model, 1000)).toBeGreaterThanOrEqual(1000);
    expect(quality.r2).toBeGreaterThan(0.999);
  });
});

describe('fitPerformanceModel', () => {
  it('fits both phases from engine steps and reports the worst error', () => {
    const prefillTruth = { k1: 0.1, c1: 20 };
    const decodeTruth = { k2: 0.0002, c2: 0.05, c3: 6 };
    const steps = [];
    for (let i = 0; i < 300; i++) {
      const tokens = rng.int(50, 8000);
      steps.push({
        decodeSeqs: 0,
        prefillTokens: tokens,
        kvTokensRead: tokens,
        durationMs: noisy(prefillMs(prefillTruth, tokens), 0.02),
      });
      const b = rng.int(1, 128);
      const ctx = b * rng.int(200, 2000);
      steps.push({
        decodeSeqs: b,
        prefillTokens: 0,
        kvTokensRead: ctx,
        durationMs: noisy(decodeIterationMs(decodeTruth, b, ctx), 0.02),
      });
    }
    steps.push({ decodeSeqs: 3, prefillTokens: 100, kvTokensRead: 500, durationMs: 30 });
    const split = samplesFromSteps(steps);
    expect(split.mixed).toBe(1);
    expect(split.prefill).toHaveLength(300);
    const { model, report } = fitPerformanceModel({
      model: 'llama-2-7b',
      gpu: 'A100-80GB',
      tp: 1,
      kvCapacityTokens: 118_000,
      maxSeqs: 256,
      prefill: split.prefill,
      decode: split.decode,
    });
    expect(relErr(model.decode.k2, decodeTruth.k2)).toBeLessThan(0.1);
    expect(relErr(model.prefill.k1, prefillTruth.k1)).toBeLessThan(0.1);
    expect(report.worstMape).toBeLessThan(0.1);
    expect(report.kv).toBeUndefined();
    expect(model.kv).toEqual({ h: 1, j: 0 });
  });

  it('rejects an identity with a non-integer tensor-parallel degree', () => {
    expect(() =>
      fitPerformanceModel({
        model: 'm',
        gpu: 'g',
        tp: 1.5,
        kvCapacityTokens: 1000,
        maxSeqs: 8,
        prefill: [],
        decode: [],
      }),
    ).toThrow(/tp/);
  });
});
