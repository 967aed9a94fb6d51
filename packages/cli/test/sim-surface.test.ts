import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

interface SloRow {
  sloClass: string;
  ttftTargetS: number;
  requests: number;
  met: number;
  attainment: number | null;
  ttftP99S: number | null;
}

function scenarioFile(name: string, yaml: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'fairway-sim-')), name);
  writeFileSync(file, yaml);
  return file;
}

async function simJson(...args: string[]) {
  const r = await fairway('sim', ...args, '--json');
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as {
    policy: string;
    slo: SloRow[];
    control?: {
      ticks: number;
      replans: number;
      evictions: number;
      milpSolves: number;
      planSources: Record<string, number>;
    };
    requests: { arrived: number; rejected: number };
    fairserve?: { rejections: Record<string, number>; wastedTokens: number; interactions: { total: number } };
    windowedService: { t: number[]; byTenant: Record<string, number[]> };
  };
}

const ttftOf = (rows: SloRow[], c: string) => rows.find((s) => s.sloClass === c)?.ttftP99S as number;

// One replica whose KV holds the long first request and then one of the two that follow: the
// gateway decides which of those goes next.
const QUEUE_ORDER = `durationS: 60
cluster:
  engines: [{ gpu: A100-80GB, model: llama-2-7b, kvCapacityTokens: 700 }]
streams:
  - { tenant: blocker, sloClass: batch-1, arrival: { process: uniform, rate: 10 }, startS: 0, endS: 0.1, input: 100, output: 500, maxTokens: output }
  - { tenant: docs, sloClass: batch-2, arrival: { process: uniform, rate: 10 }, startS: 0.2, endS: 0.3, input: 300, output: 100, maxTokens: output }
  - { tenant: chat, sloClass: interactive, arrival: { process: uniform, rate: 10 }, startS: 0.4, endS: 0.5, input: 300, output: 100, maxTokens: output }
`;

describe('fairway sim: one surface for every policy', () => {
  it('runs fcfs as one queue: the batch request that arrived first is served first', async () => {
    const file = scenarioFile('order.yaml', QUEUE_ORDER);
    const fcfs = await simJson('--scenario', file, '--policy', 'fcfs');
    expect(fcfs.requests.arrived).toBe(3);
    // docs arrived ~0.16 s before chat and starts first; under SLO bands chat jumps ahead of it.
    expect(ttftOf(fcfs.slo, 'batch-2') + 0.16).toBeLessThan(ttftOf(fcfs.slo, 'interactive'));
    const banded = await simJson('--scenario', file, '--policy', 'vtc');
    expect(ttftOf(banded.slo, 'interactive')).toBeLessThan(ttftOf(banded.slo, 'batch-2'));
  });

  it('runs --policy qlm through the QLM control plane, unlike vtc', { timeout: 120_000 }, async () => {
    const qlm = await simJson('--scenario', 'qlm-mixed', '--policy', 'qlm', '--duration', '30');
    const vtc = await simJson('--scenario', 'qlm-mixed', '--policy', 'vtc', '--duration', '30');
    expect(qlm.control?.ticks).toBe(30);
    expect(qlm.control?.replans).toBeGreaterThan(0);
    // Every replan is a MILP solve (its plan used, beaten by its warm start, or none found) or a
    // replan between two solves, which uses the warm start.
    const sources = qlm.control?.planSources ?? {};
    const solved = (sources.milp ?? 0) + (sources['warm-start'] ?? 0) + (sources['edf-fallback'] ?? 0);
    const between = sources['between-solves'] ?? 0;
    expect(solved).toBe(qlm.control?.milpSolves);
    expect(between).toBeGreaterThan(0);
    expect(solved + between).toBe(qlm.control?.replans);
    // QLM evicts batch work to protect interactive TTFT; VTC has no control and cannot.
    expect(qlm.control?.evictions).toBeGreaterThan(0);
    expect(vtc.control).toBeUndefined();
    expect(ttftOf(qlm.slo, 'interactive')).toBeLessThan(ttftOf(vtc.slo, 'interactive'));
  });

  it('scores attainment against the SLO classes the scenario declares', async () => {
    const file = scenarioFile(
      'classes.yaml',
      `durationS: 30
cluster:
  engines: [{ gpu: A100-80GB, model: llama-2-7b }]
sloClasses:
  - { name: chat, ttftS: 0.001, band: 0 }
  - { name: bulk, ttftS: 600, band: 1, sheddable: true }
streams:
  - { tenant: a, sloClass: chat, arrival: { process: poisson, rate: 2 }, input: 200, output: 50 }
  - { tenant: b, sloClass: bulk, arrival: { process: poisson, rate: 2 }, input: 200, output: 50 }
`,
    );
    const r = await simJson('--scenario', file, '--policy', 'fcfs');
    const byClass = Object.fromEntries(r.slo.map((s) => [s.sloClass, s]));
    expect(Object.keys(byClass).sort()).toEqual(['bulk', 'chat']);
    expect(byClass.chat).toMatchObject({ ttftTargetS: 0.001, attainment: 0 });
    expect(byClass.bulk).toMatchObject({ ttftTargetS: 600, attainment: 1 });
    expect(byClass.chat?.requests).toBeGreaterThan(20);
  });

  it('rejects a stream whose SLO class the scenario does not declare, naming the field', async () => {
    const file = scenarioFile(
      'unknown-class.yaml',
      `durationS: 30
cluster:
  engines: [{ gpu: A100-80GB, model: llama-2-7b }]
sloClasses: [{ name: chat, ttftS: 1, band: 0 }]
streams:
  - { tenant: a, sloClass: chat, arrival: { process: poisson, rate: 1 }, input: 10, output: 10 }
  - { tenant: b, sloClass: bulk, arrival: { process: poisson, rate: 1 }, input: 10, output: 10 }
  - { tenant: c, arrival: { process: poisson, rate: 1 }, input: 10, output: 10 }
`,
    );
    const r = await fairway('sim', '--scenario', file);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /streams\[1\]\.sloClass: unknown SLO class "bulk"; declared in "sloClasses": chat/,
    );
    expect(r.stderr).toMatch(/streams\[2\]\.sloClass: unknown SLO class "interactive" \(the default\)/);
    expect(r.stderr).not.toMatch(/\bat .*\.ts:\d+/);
  });

  it("refuses a prompt over the model's context as vLLM does, and reports it in --json", async () => {
    const file = scenarioFile(
      'context.yaml',
      `durationS: 20
cluster:
  engines: [{ gpu: A100-80GB, model: llama-2-7b }]
streams:
  - { tenant: long, arrival: { process: uniform, rate: 1 }, input: 4000, output: 200, maxTokens: output }
  - { tenant: short, arrival: { process: uniform, rate: 1 }, input: 3000, output: 200, maxTokens: output }
`,
    );
    const r = await simJson('--scenario', file, '--policy', 'fcfs');
    // llama-2-7b's context is 4,096 tokens: 4,000 + 200 does not fit, 3,000 + 200 does.
    expect(r.fairserve?.rejections).toEqual({ context_length_exceeded: 20 });
    expect(r.requests.rejected).toBe(20);
    expect(r.windowedService.byTenant.short?.some((x) => x > 0)).toBe(true);
    expect(r.windowedService.byTenant.long?.every((x) => x === 0)).toBe(true);
  });
});
