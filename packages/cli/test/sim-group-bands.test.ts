import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

describe('fairway sim --group-bands', () => {
  it("runs QLM with each class's queue split by prompt bucket, still scoring the scenario's classes", async () => {
    const r = await fairway(
      'sim',
      '--scenario',
      'qlm-mixed',
      '--policy',
      'qlm',
      '--group-bands',
      '--duration',
      '30',
      '--json',
    );
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { slo: { sloClass: string; requests: number }[] };
    expect(report.slo.map((s) => s.sloClass).sort()).toEqual(['batch-1', 'batch-2', 'interactive']);
    expect(report.slo.find((s) => s.sloClass === 'batch-1')?.requests).toBeGreaterThan(0);
  });

  it('is refused without a QLM policy', async () => {
    const r = await fairway('sim', '--scenario', 'qlm-mixed', '--policy', 'vtc', '--group-bands');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--group-bands needs --policy qlm/);
  });
});
