import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadTrace, parseTraceCsv, splitTenants, tracesDir, traceWorkload } from '../src/trace.ts';

describe('loadTrace', () => {
  it('loads the Azure 2023 conversation and code traces with all their requests', () => {
    const conv = loadTrace('azure-conv');
    const code = loadTrace('azure-code');
    expect(conv.length).toBe(19_366);
    expect(code.length).toBe(8_819);
    expect(conv[0]).toEqual({ arrivalS: 0, inputTokens: 374, outputTokens: 44 });
    const meanIn = conv.reduce((a, r) => a + r.inputTokens, 0) / conv.length;
    expect(Math.round(meanIn)).toBeGreaterThan(1100);
    expect(Math.round(meanIn)).toBeLessThan(1200);
  });

  it('rejects a malformed CSV naming the line', () => {
    expect(() => parseTraceCsv('a,b\n1,2', 'x.csv')).toThrow(/arrived_at/);
    expect(() =>
      parseTraceCsv('arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,12,3\n1.0,abc,2', 'x.csv'),
    ).toThrow(/line 3/);
  });

  it('reads the built-in traces from the repository, with their licence and attribution beside them', () => {
    expect(tracesDir()).toBe(resolve(import.meta.dirname, '..', 'traces'));
    const readme = readFileSync(resolve(tracesDir(), 'README.md'), 'utf8');
    expect(readme).toMatch(/CC BY 4\.0/);
    expect(readme).toMatch(/Azure\/AzurePublicDataset/);
    expect(readme).toMatch(/Splitwise/);
  });

  it("loads the VTC artifact's real-workload trace with its clients, licence and provenance", () => {
    const rows = loadTrace('vtc-artifact-real');
    expect(rows.length).toBe(1500);
    expect(rows[0]).toEqual({ arrivalS: 0, inputTokens: 13, outputTokens: 199, tenant: 'client13' });
    expect(rows.at(-1)!.arrivalS).toBe(600);
    expect(new Set(rows.map((r) => r.tenant)).size).toBe(27);
    const readme = readFileSync(resolve(tracesDir(), 'README.md'), 'utf8');
    expect(readme).toMatch(/Ying1123\/VTC-artifact/);
    expect(readme).toMatch(/192c2e2014c69c8c6c699d7113c3822e4db632e6/);
    expect(readFileSync(resolve(tracesDir(), 'LICENSE-vtc-artifact'), 'utf8')).toMatch(/Apache License/);
  });

  it('reads an optional tenant column and rejects an empty tenant', () => {
    const head = 'arrived_at,num_prefill_tokens,num_decode_tokens,tenant';
    expect(parseTraceCsv(`${head}\n1.5,4,2,a\n0.5,3,1,b`)).toEqual([
      { arrivalS: 0.5, inputTokens: 3, outputTokens: 1, tenant: 'b' },
      { arrivalS: 1.5, inputTokens: 4, outputTokens: 2, tenant: 'a' },
    ]);
    expect(() => parseTraceCsv(`${head}\n1.5,4,2,`, 'x.csv')).toThrow(/line 2/);
  });

  it('names a missing file', () => {
    expect(() => loadTrace('/nonexistent/trace.csv')).toThrow(/not found/);
  });
});

describe('splitTenants', () => {
  it('is reproducible for a seed and changes with the seed', () => {
    const a = splitTenants(5000, { tenants: 8, zipfS: 1 }, 42);
    expect(splitTenants(5000, { tenants: 8, zipfS: 1 }, 42)).toEqual(a);
    expect(splitTenants(5000, { tenants: 8, zipfS: 1 }, 43)).not.toEqual(a);
  });

  it('gives tenant k a share proportional to k^-s', () => {
    const ids = splitTenants(40_000, { tenants: 4, zipfS: 1 }, 1);
    const share = (id: string) => ids.filter((x) => x === id).length / ids.length;
    const h = 1 + 1 / 2 + 1 / 3 + 1 / 4;
    expect(share('t01')).toBeCloseTo(1 / h, 2);
    expect(share('t04')).toBeCloseTo(1 / 4 / h, 2);
  });

  it('splits evenly with exponent 0', () => {
    const ids = splitTenants(20_000, { tenants: 2, zipfS: 0 }, 1);
    expect(ids.filter((x) => x === 't01').length / ids.length).toBeCloseTo(0.5, 1);
  });
});

describe('traceWorkload', () => {
  it("takes tenants from the trace's own column when no split is given, max_tokens exact on request", () => {
    const reqs = traceWorkload({
      trace: 'vtc-artifact-real',
      seed: 1,
      model: 'llama-2-7b',
      maxTokensExact: true,
    });
    expect(reqs.length).toBe(1500);
    expect(reqs[0]).toMatchObject({ tenant: 'client13', inputTokens: 13, outputTokens: 199, maxTokens: 199 });
    expect(reqs.every((r) => r.maxTokens === r.outputTokens)).toBe(true);
    expect(() => traceWorkload({ trace: 'azure-code', seed: 1, model: 'llama-2-7b' })).toThrow(
      /tenant split/,
    );
  });

  it('keeps the whole trace, sorted, with true output lengths', () => {
    const reqs = traceWorkload({ trace: 'azure-code', split: { tenants: 5 }, seed: 1, model: 'llama-2-7b' });
    expect(reqs.length).toBe(8_819);
    expect(new Set(reqs.map((r) => r.tenant)).size).toBe(5);
    expect(reqs.every((r) => r.maxTokens >= r.outputTokens!)).toBe(true);
  });

  it('scales the arrival rate and cuts a window', () => {
    const full = traceWorkload({ trace: 'azure-conv', split: { tenants: 3 }, seed: 1, model: 'm' });
    const fast = traceWorkload({
      trace: 'azure-conv',
      split: { tenants: 3 },
      seed: 1,
      model: 'm',
      rateScale: 2,
      startS: 600,
      durationS: 300,
    });
    // 300 simulated seconds at 2x cover trace seconds [600, 1200).
    const inTrace = loadTrace('azure-conv').filter((r) => r.arrivalS >= 600 && r.arrivalS < 1200).length;
    expect(fast.length).toBe(inTrace);
    expect(fast.at(-1)!.arrivalMs).toBeLessThan(300_000);
    // The same request keeps its tenant whatever the window.
    const byId = new Map(full.map((r) => [r.id, r.tenant]));
    expect(fast.every((r) => byId.get(r.id) === r.tenant)).toBe(true);
  });
});
