import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { toPerformanceModelFile } from '@fairway/policy';
import { fitEnginePerformance } from '@fairway/sim';
import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

/** A performance-model file of llama-2-7b on two A100s, as if measured and written by `fairway profile`. */
function perfFile(dir: string, edit: (f: Record<string, unknown>) => void = () => {}): string {
  const fit = fitEnginePerformance({ model: 'llama-2-7b', gpu: 'A100-80GB', tp: 2 }, { maxBatch: 64 });
  const file = JSON.parse(
    JSON.stringify(
      toPerformanceModelFile(fit.model, fit.report, {
        source: 'simulator',
        at: '2026-01-02T00:00:00.000Z',
        samples: fit.samples,
      }),
    ),
  );
  edit(file);
  const path = join(dir, 'perf.json');
  writeFileSync(path, JSON.stringify(file));
  return path;
}

const PLAN = [
  'plan',
  '--trace',
  'azure-conv',
  '--slo',
  'ttft=1s,atgt=25ms',
  '--rates',
  '2',
  '--window',
  '20',
];

describe('fairway plan --perf-model', () => {
  it('plans with the file’s model, GPU, TP and coefficients instead of profiling the presets', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-plan-perf-'));
    const path = perfFile(dir);
    const r = await fairway(...PLAN, '--placements', 'aladdin', '--perf-model', path, '--json');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const plan = JSON.parse(r.stdout);
    const given = JSON.parse((await import('node:fs')).readFileSync(path, 'utf8'));
    expect(plan.model).toBe('llama-2-7b');
    expect(plan.tp.chosen).toBe(2);
    expect(plan.tp.candidates.map((c: { tp: number }) => c.tp)).toEqual([2]);
    expect(plan.performance.model.decode).toEqual(given.decode);
    expect(plan.performance.model.prefill).toEqual(given.prefill);
    expect(plan.policies[0].points[0].gpus % 2).toBe(0);
  }, 120_000);

  it('names the bad field of an invalid file, and refuses --model and --tp beside it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-plan-perf-'));
    const path = perfFile(dir, (f) => {
      delete (f.prefill as Record<string, unknown>).k1;
    });
    const r = await fairway(...PLAN, '--perf-model', path, '--model', 'llama-2-7b', '--tp', '1');
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      `error: --perf-model: ${path}: prefill.k1: Invalid input: expected number, received undefined`,
      'error: --model: not with --perf-model (the file names it)',
      'error: --tp: not with --perf-model (the file names it)',
    ]);
    const missing = await fairway(...PLAN, '--perf-model', join(dir, 'nope.json'));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^error: --perf-model: cannot read .*nope\.json as JSON/);
  });
});
