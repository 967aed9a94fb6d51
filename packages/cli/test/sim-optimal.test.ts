import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

describe('fairway sim --policy optimal', () => {
  it('refuses a scenario over the solver limit with exit 2, naming the limit', async () => {
    const r = await fairway('sim', '--scenario', 'vtc-overload', '--policy', 'optimal');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/policy optimal solves at most 8 requests \(OPTIMAL_LIMITS\.maxRequests\)/);
    expect(r.stderr).not.toMatch(/\bat .*\.ts:\d+/);
  });

  it('schedules a small scenario optimally and reports it like any policy', async () => {
    const r = await fairway(
      'sim',
      '--scenario',
      'vtc-overload',
      '--policy',
      'optimal',
      '--duration',
      '0.3',
      '--json',
    );
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout.trim());
    expect(report.policy).toMatch(/^optimal \(optimal; lower bound [\d.]+ ms\)$/);
    expect(report.scenario).toBe('vtc-overload');
    expect(report.requests.arrived).toBeGreaterThan(0);
    expect(report.requests.completed).toBe(report.requests.arrived);
  }, 120_000);
});
