import { describe, expect, it } from 'vitest';
import { PolicyInputError } from '../src/errors.ts';
import { fitPerformanceModel } from '../src/perf-model/performance-model.ts';
import {
  parsePerformanceModelFile,
  toPerformanceModelFile,
} from '../src/perf-model/performance-model-file.ts';

const fitted = fitPerformanceModel({
  model: 'llama-3-8b',
  gpu: 'A100-80GB',
  tp: 1,
  kvCapacityTokens: 400_000,
  maxSeqs: 256,
  prefill: [
    { inputTokens: 100, ms: 10 },
    { inputTokens: 1000, ms: 82 },
    { inputTokens: 2000, ms: 165 },
  ],
  decode: [
    { batchSize: 1, contextTokens: 100, ms: 11 },
    { batchSize: 8, contextTokens: 8000, ms: 12 },
    { batchSize: 32, contextTokens: 60000, ms: 17 },
    { batchSize: 64, contextTokens: 130000, ms: 23.5 },
  ],
});
const measured = {
  source: 'engine' as const,
  url: 'http://10.0.0.5:8000',
  at: '2026-01-02T03:04:05.000Z',
  samples: { prefill: 3, decode: 4, kv: 0 },
};

describe('performance-model file', () => {
  it('reads back the model it was written from', () => {
    const file = toPerformanceModelFile(fitted.model, fitted.report, measured);
    const { model } = parsePerformanceModelFile(JSON.parse(JSON.stringify(file)));
    expect(model).toEqual(fitted.model);
  });

  it('refuses a file with a missing coefficient, naming the field', () => {
    const file = JSON.parse(JSON.stringify(toPerformanceModelFile(fitted.model, fitted.report, measured)));
    delete file.decode.k2;
    expect(() => parsePerformanceModelFile(file)).toThrow(PolicyInputError);
    expect(() => parsePerformanceModelFile(file)).toThrow(/decode\.k2/);
  });

  it('refuses an unknown version and a timestamp that is not ISO 8601', () => {
    const file = JSON.parse(JSON.stringify(toPerformanceModelFile(fitted.model, fitted.report, measured)));
    expect(() => parsePerformanceModelFile({ ...file, version: 2 })).toThrow(/version/);
    expect(() =>
      parsePerformanceModelFile({ ...file, measured: { ...file.measured, at: 'yesterday' } }),
    ).toThrow(/measured\.at/);
  });
});
