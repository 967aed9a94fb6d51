import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, parseConfig } from '@fairway/core';
import { fitPerformanceModel, toPerformanceModelFile } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { loadPerformanceModels, performanceModelOf } from '../src/performance-models.ts';
import { schedulingFromConfig } from '../src/scheduling-config.ts';

function issues(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err.issues.map((i) => `${i.path}: ${i.message}`);
    throw err;
  }
  throw new Error('expected a ConfigError');
}

function writeModel(dir: string, name: string, gpu: string, tp = 1): string {
  const fit = fitPerformanceModel({
    model: 'llama-3-8b',
    gpu,
    tp,
    kvCapacityTokens: 400_000,
    maxSeqs: 256,
    prefill: [
      { inputTokens: 100, ms: 10 },
      { inputTokens: 1000, ms: 82 },
      { inputTokens: 2000, ms: 165 },
    ],
    decode: [
      { batchSize: 1, contextTokens: 100, ms: 11 },
      { batchSize: 8, contextTokens: 8000, ms: 11.8 },
      { batchSize: 32, contextTokens: 60000, ms: 16.5 },
      { batchSize: 64, contextTokens: 130000, ms: 23 },
    ],
  });
  const path = join(dir, name);
  const file = toPerformanceModelFile(fit.model, fit.report, {
    source: 'engine',
    at: '2026-01-02T00:00:00.000Z',
    samples: { prefill: 3, decode: 4, kv: 0 },
  });
  writeFileSync(path, JSON.stringify(file));
  return path;
}

describe('performance models in the dispatcher config', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fairway-perf-models-'));
  const a100 = writeModel(dir, 'a100.json', 'A100-80GB');
  const h100 = writeModel(dir, 'h100.json', 'H100-80GB');

  it('matches a replica by model, GPU and TP — from its registration, else its engines entry', () => {
    const config = parseConfig({
      pools: [{ id: 'p', model: 'llama-3-8b' }],
      engines: [{ id: 'static-1', url: 'http://10.0.0.1:8000', pool: 'p', gpu: 'H100-80GB' }],
    });
    const registered: Record<string, { model: string; gpu?: string; tp: number }> = {
      'r-a100': { model: 'llama-3-8b', gpu: 'A100-80GB', tp: 1 },
      'r-tp2': { model: 'llama-3-8b', gpu: 'A100-80GB', tp: 2 },
      'r-nogpu': { model: 'llama-3-8b', tp: 1 },
    };
    const perfOf = performanceModelOf(loadPerformanceModels([a100, h100]), config, (id) => registered[id]);
    expect(perfOf('r-a100')?.gpu).toBe('A100-80GB');
    expect(perfOf('static-1')?.gpu).toBe('H100-80GB');
    expect(perfOf('r-tp2')).toBeUndefined();
    expect(perfOf('r-nogpu')).toBeUndefined();
    expect(perfOf('unknown')).toBeUndefined();
  });

  it('refuses at start-up, naming the entry: unreadable or invalid files, duplicates, and settings aladdin does not use', () => {
    const build = (policy: Record<string, unknown>) => () =>
      schedulingFromConfig(parseConfig({ policy }), 'd');
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ version: 1, model: 'm' }));
    expect(issues(build({ placement: 'aladdin', performanceModels: [join(dir, 'none.json')] }))[0]).toMatch(
      /^policy\.performanceModels\.0: cannot read .*none\.json as JSON/,
    );
    expect(issues(build({ placement: 'aladdin', performanceModels: [a100, bad] }))[0]).toMatch(
      /^policy\.performanceModels\.1: .*bad\.json: gpu: /,
    );
    expect(issues(build({ placement: 'aladdin', performanceModels: [a100, a100] }))[0]).toMatch(
      /^policy\.performanceModels\.1: .* both describe llama-3-8b on A100-80GB × 1$/,
    );
    expect(issues(build({ placement: 'least-kv', performanceModels: [a100] }))).toEqual([
      'policy.performanceModels: performance models are used by placement aladdin only',
    ]);
    expect(issues(build({ placement: 'aladdin', slo: { atgtS: 0.02 } }))).toEqual([
      'policy.slo: aladdin needs policy.performanceModels to place for SLO targets',
    ]);
    const ok = build({ placement: 'aladdin', performanceModels: [a100], slo: { atgtS: 0.02 } })();
    expect(ok.placement.name).toBe('aladdin');
    expect(ok.placement.capacity).toBeDefined();
  });
});
