import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

const exec = promisify(execFile);
const BIN = resolve(import.meta.dirname, '..', 'bin', 'fairway.js');

describe('fairway sim (in process)', () => {
  it('lists the built-in scenarios', async () => {
    const r = await fairway('sim', '--list');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^vtc-overload\s+VTC Figure 3/m);
    expect(r.stdout).toMatch(/^azure-code\s/m);
  });

  it('rejects an unknown scenario, policy and placement with one line each and exit code 2', async () => {
    const r = await fairway('sim', '--scenario', 'vtc-overload', '--policy', 'nope', '--placement', 'bogus');
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      'error: unknown policy "nope"; known: fcfs, rpm, lcf, vtc, vtc-weighted, vtc-predict, vtc-oracle, vtc-noisy-oracle, wsc, wsc-oit, edf, qlm, qlm-no-pull, qlm-no-evict, qlm-no-lb, qlm-no-swap',
      'error: unknown placement "bogus"; known: least-kv, round-robin, jsq, power-of-two, aladdin',
    ]);
    const s = await fairway('sim', '--scenario', 'vtc-nope');
    expect(s.code).toBe(2);
    expect(s.stderr).toMatch(/^error: scenario: unknown scenario "vtc-nope"; built-in: vtc-overload/);
    expect(s.stderr).not.toMatch(/\bat .*\.ts:\d+/);
  });

  it('explains a bad scenario file field by field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-cli-'));
    const file = join(dir, 'bad.yaml');
    writeFileSync(
      file,
      'durationS: -5\ncluster:\n  engines:\n    - gpu: B200\n      model: llama-2-7b\nstreams:\n  - tenant: a\n    arrival: { process: poisson, rate: 1 }\n    input: 10\n    output: 10\n',
    );
    const r = await fairway('sim', '--scenario', file);
    expect(r.code).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toBe(`error: ${file}: durationS: Too small: expected number to be >0`);
    expect(lines[1]).toMatch(/^error: .*bad\.yaml: cluster\.engines\[0\]\.gpu: must be one of/);
  });

  it('asks for --rpm when the policy is rpm', async () => {
    const r = await fairway('sim', '--scenario', 'vtc-overload', '--policy', 'rpm');
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe('error: policy rpm needs --rpm <n> (requests per minute per tenant, > 0)');
  });

  it('rejects a missing scenario and a malformed seed with exit code 2', async () => {
    expect((await fairway('sim')).code).toBe(2);
    const r = await fairway('sim', '--scenario', 'vtc-overload', '--seed', 'abc');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--seed.*must be an integer/);
  });

  it('runs a short scenario and prints exactly one JSON object', async () => {
    const out = mkdtempSync(join(tmpdir(), 'fairway-out-'));
    const r = await fairway('sim', '--scenario', 'vtc-overload', '--duration', '60', '--json', '--out', out);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const report = JSON.parse(lines[0]!);
    expect(report).toMatchObject({ scenario: 'vtc-overload', policy: 'fcfs', simulatedS: 60 });
    expect(Object.keys(report)).toEqual(
      expect.arrayContaining(['requests', 'throughput', 'fairness', 'latency', 'tenants', 'wallMs']),
    );
    expect(readdirSync(out).sort()).toEqual([
      'accumulated-service-diff.svg',
      'accumulated-service.svg',
      'report.json',
      'service-rate.svg',
      'ttft.svg',
    ]);
    expect(JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')).scenario).toBe('vtc-overload');
  });
});

describe('fairway sim (as a process)', () => {
  it('vtc-overload under FCFS: about 890 tokens/s and twice the service for the 3 req/s tenant', async () => {
    const { stdout } = await exec(process.execPath, [BIN, 'sim', '--scenario', 'vtc-overload', '--json']);
    const report = JSON.parse(stdout);
    expect(report.throughput.tokensPerS).toBeGreaterThan(890 * 0.85);
    expect(report.throughput.tokensPerS).toBeLessThan(890 * 1.15);
    const service = Object.fromEntries(
      report.tenants.map((t: { id: string; service: number }) => [t.id, t.service]),
    );
    const ratio = service.client2 / service.client1;
    expect(ratio).toBeGreaterThan(1.8);
    expect(ratio).toBeLessThan(2.2);
  });

  it('gives byte-identical JSON for the same scenario and seed, apart from wallMs', async () => {
    // Four replicas, ten trace tenants, least-KV placement: every tie must break the same way.
    const args = (seed: string) => [
      BIN,
      'sim',
      '--scenario',
      'azure-conv',
      '--duration',
      '300',
      '--seed',
      seed,
      '--json',
    ];
    const [a, b] = await Promise.all([exec(process.execPath, args('3')), exec(process.execPath, args('3'))]);
    const strip = (s: string) => s.replace(/"wallMs":\d+,/, '');
    expect(strip(a.stdout)).toBe(strip(b.stdout));
    expect(a.stdout.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(a.stdout).requests.arrived).toBeGreaterThan(1000);
    const other = await exec(process.execPath, args('4'));
    expect(strip(other.stdout)).not.toBe(strip(a.stdout));
  });

  it('prints --help and exits 0', async () => {
    const { stdout } = await exec(process.execPath, [BIN, 'sim', '--help']);
    expect(stdout).toMatch(/--scenario <name\|file>/);
    expect(stdout).toMatch(/--policy <name>/);
  });

  it('exits 2 without a stack trace on bad input', async () => {
    const err = await exec(process.execPath, [BIN, 'sim', '--scenario', 'nope']).catch((e) => e);
    expect(err.code).toBe(2);
    expect(err.stderr).toMatch(/^error: scenario: unknown scenario "nope"/);
    expect(err.stderr).not.toMatch(/\n\s+at /);
  });
});

/** A plan small enough for a test: one rate, a 30-s window. */
const SMALL_PLAN = [
  'plan',
  '--trace',
  'azure-conv',
  '--model',
  'llama-2-7b',
  '--gpu',
  'A100-80GB',
  '--slo',
  'ttft=1s,atgt=25ms',
  '--rates',
  '2',
  '--window',
  '30',
];

describe('fairway plan (in process)', () => {
  it('explains every missing or bad option on its own line with exit code 2', async () => {
    const r = await fairway('plan', '--trace', 'azure-conv', '--model', 'gpt-9', '--slo', 'ttft=fast,foo=1');
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      'error: --model: unknown model "gpt-9"; known: llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b',
      'error: --gpu is required',
      'error: --slo: ttft: must be a duration like 1.5, 1.5s or 400ms',
      'error: --slo: atgt is required (e.g. --slo ttft=1s,atgt=25ms)',
      'error: --slo: unknown key "foo" (known: ttft, atgt)',
    ]);
  });

  it('prints one JSON plan: GPUs per placement, the TP degree and the fit error', async () => {
    const r = await fairway(...SMALL_PLAN, '--placements', 'jsq,aladdin', '--tp', '1', '--json');
    expect(r.code).toBe(0);
    const plan = JSON.parse(r.stdout);
    expect(plan.tp.chosen).toBe(1);
    expect(plan.performance.fit.worstMape).toBeLessThan(0.1);
    expect(plan.policies.map((p: { placement: string }) => p.placement)).toEqual(['jsq', 'aladdin']);
    for (const p of plan.policies) expect(p.points[0].gpus).toBeGreaterThan(0);
  });

  it('runs Aladdin on an elastic fleet with --elastic and prints the GPUs its bins held', async () => {
    const bad = await fairway(...SMALL_PLAN, '--elastic', 'soon');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('error: --elastic: "soon" is not a number of seconds ≥ 0');
    const r = await fairway(...SMALL_PLAN, '--placements', 'aladdin', '--tp', '1', '--elastic', '10');
    expect(r.code).toBe(0);
    const line = r.stdout.split('\n').find((l) => l.startsWith('Aladdin, elastic'));
    const m = line?.match(/peak (\d+), mean ([\d.]+) GPUs, (meets|misses) P100/);
    expect(m).not.toBeNull();
    // Bins open only as requests need them: never more on average than at peak.
    expect(Number(m?.[2])).toBeLessThanOrEqual(Number(m?.[1]));
    expect(Number(m?.[1])).toBeGreaterThan(0);
  });
});
