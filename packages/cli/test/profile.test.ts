import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEngineSim } from '@fairway/engine-sim';
import { parsePerformanceModelFile } from '@fairway/policy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

describe('fairway profile (in process)', () => {
  let sim: Awaited<ReturnType<typeof startEngineSim>>;
  beforeAll(async () => {
    sim = await startEngineSim({ model: 'llama-2-7b', gpu: 'A100-80GB', speed: 25 });
  });
  afterAll(async () => {
    await sim?.close();
  });

  it('explains every bad option on its own line with exit code 2', async () => {
    const r = await fairway('profile', '--engine', 'ftp://x', '--tp', '0', '--max-seqs', 'many');
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      'error: --engine: must be an http(s) URL (got "ftp://x")',
      'error: --tp: must be an integer ≥ 1 (got "0")',
      'error: --max-seqs: must be an integer ≥ 1 (got "many")',
    ]);
    expect((await fairway('profile')).stderr).toMatch(/^error: --engine is required/);
  });

  it('says in one line, without a stack, that an engine cannot be reached', async () => {
    const r = await fairway('profile', '--engine', 'http://127.0.0.1:1');
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^error: .*unreachable/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('prints the coefficients and fit errors and writes a valid performance-model file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-profile-'));
    const out = join(dir, 'perf.json');
    const r = await fairway('profile', '--engine', sim.url, '--gpu', 'A100-80GB', '--out', out);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^llama-2-7b on A100-80GB × 1 at http/);
    expect(r.stdout).toMatch(/^prefill ms = .* MAPE \d+\.\d%/m);
    expect(r.stdout).toMatch(/^decode iteration ms = .* MAPE \d+\.\d%/m);
    expect(r.stdout).toMatch(/^KV tokens per sequence = .* MAPE \d+\.\d%/m);
    const { model, file } = parsePerformanceModelFile(JSON.parse(readFileSync(out, 'utf8')));
    expect(model).toMatchObject({ model: 'llama-2-7b', gpu: 'A100-80GB', tp: 1, maxSeqs: 256 });
    expect(file.measured.source).toBe('engine');
    expect(file.fit.worstMape).toBeLessThan(0.1);
  }, 120_000);
});
