import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

/** A scenario small enough for the exact solver: a few short requests on one small engine. */
function smallScenario(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'fairway-optimal-')), 'small.yaml');
  writeFileSync(
    file,
    [
      'name: tiny',
      'durationS: 0.1',
      'seed: 3',
      'cluster:',
      '  engines:',
      '    - gpu: A100-80GB',
      '      model: llama-2-7b',
      '      kvCapacityTokens: 48',
      '      options: { blockSize: 4, maxNumPrefillTokens: 32 }',
      'streams:',
      '  - tenant: a',
      '    arrival: { process: uniform, rate: 30 }',
      '    input: 12',
      '    output: 3',
      '',
    ].join('\n'),
  );
  return file;
}

describe('fairway sim --policy optimal', () => {
  it('refuses a scenario over the solver limit with exit 2, naming the limit', async () => {
    const r = await fairway('sim', '--scenario', 'vtc-overload', '--policy', 'optimal');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/policy optimal solves at most 8 requests \(OPTIMAL_LIMITS\.maxRequests\)/);
    expect(r.stderr).not.toMatch(/\bat .*\.ts:\d+/);
    // One request, but 512 output tokens need 512 batches.
    const long = await fairway(
      'sim',
      '--scenario',
      'vtc-overload',
      '--policy',
      'optimal',
      '--duration',
      '0.3',
    );
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(/at most 60 \(OPTIMAL_LIMITS\.maxBatches\)/);
  });

  it('schedules a small scenario optimally and reports it like any policy', async () => {
    const r = await fairway('sim', '--scenario', smallScenario(), '--policy', 'optimal', '--json');
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout.trim());
    expect(report.policy).toMatch(/^optimal \(optimal; lower bound [\d.]+ ms\)$/);
    expect(report.requests.arrived).toBe(3);
    expect(report.requests.completed).toBe(3);
  }, 120_000);
});
