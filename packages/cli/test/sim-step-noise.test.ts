import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

/** `fairway sim --json` on a short vtc-overload run, without the wall-clock field. */
async function simJson(...extra: string[]): Promise<Record<string, unknown>> {
  const r = await fairway('sim', '--scenario', 'vtc-overload', '--duration', '30', '--json', ...extra);
  expect(r.code, r.stderr).toBe(0);
  const { wallMs: _wall, ...report } = JSON.parse(r.stdout) as Record<string, unknown>;
  return report;
}

describe('fairway sim --step-noise', () => {
  it('jitters engine steps reproducibly from the seed, replacing the scenario setting', async () => {
    const plain = await simJson('--seed', '3', '--step-noise', 'none');
    const noisy = await simJson('--seed', '3', '--step-noise', 'lognormal', '--step-noise-cv', '0.3');
    expect(await simJson('--seed', '3', '--step-noise', 'lognormal', '--step-noise-cv', '0.3')).toEqual(
      noisy,
    );
    expect(noisy.latency).not.toEqual(plain.latency);
    // The VTC suites declare lognormal jitter at vLLM's measured CV: the default run is that one.
    const asDeclared = await simJson('--seed', '3');
    expect(await simJson('--seed', '3', '--step-noise', 'lognormal', '--step-noise-cv', '0.1')).toEqual(
      asDeclared,
    );
    expect(asDeclared.latency).not.toEqual(plain.latency);
  });

  it('rejects an unknown distribution and a CV without a distribution', async () => {
    const bad = await fairway('sim', '--scenario', 'vtc-overload', '--step-noise', 'pareto');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--step-noise.*pareto/);
    const cvOnly = await fairway('sim', '--scenario', 'vtc-overload', '--step-noise-cv', '0.2');
    expect(cvOnly.code).toBe(2);
    expect(cvOnly.stderr).toMatch(/--step-noise-cv needs --step-noise/);
  });
});
