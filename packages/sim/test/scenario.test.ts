import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { buildRunInput, listScenarios, loadScenario, parseScenario } from '../src/scenario.ts';

const base = {
  durationS: 60,
  cluster: { engines: [{ gpu: 'A10G-24GB', model: 'llama-2-7b', kvCapacityTokens: 10000 }] },
  tenants: [{ id: 'a' }],
  streams: [{ tenant: 'a', arrival: { process: 'poisson', rate: 1 }, input: 100, output: 100 }],
};

function issues(data: unknown): string[] {
  try {
    parseScenario(data, 'test.yaml');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).code).toBe('FAIRWAY_SCENARIO_INVALID');
    return (e as ConfigError).issues.map((i) => `${i.path}: ${i.message}`);
  }
  throw new Error('expected the scenario to be rejected');
}

describe('scenario validation', () => {
  it('accepts a minimal scenario and applies defaults', () => {
    const s = parseScenario(base);
    expect(s.seed).toBe(1);
    expect(s.cluster.engines[0]!.count).toBe(1);
    expect(s.streams![0]!.input).toEqual({ kind: 'fixed', value: 100 });
  });

  it('names an unknown GPU', () => {
    const bad = { ...base, cluster: { engines: [{ gpu: 'TPU-v9', model: 'llama-2-7b' }] } };
    expect(issues(bad).join('\n')).toMatch(/^cluster\.engines\[0\]\.gpu: must be one of A10G-24GB/m);
  });

  it('names a negative rate and a missing rate', () => {
    const neg = { ...base, streams: [{ ...base.streams[0], arrival: { process: 'poisson', rate: -2 } }] };
    expect(issues(neg).join('\n')).toMatch(/streams\[0\]\.arrival\.rate/);
    const none = { ...base, streams: [{ ...base.streams[0], arrival: { process: 'poisson' } }] };
    expect(issues(none).join('\n')).toMatch(
      /streams\[0\]\.arrival: give exactly one of rate, ramp or phases/,
    );
  });

  it('names a stream of an undeclared tenant', () => {
    const bad = { ...base, streams: [{ ...base.streams[0], tenant: 'ghost' }] };
    expect(issues(bad).join('\n')).toMatch(/streams\[0\]\.tenant: unknown tenant "ghost"/);
  });

  it('names a shared-prefix stream hashed for another block size than the engines’', () => {
    const bad = { ...base, streams: [{ ...base.streams[0], prefix: { sharedTokens: 100, blockSize: 32 } }] };
    expect(issues(bad).join('\n')).toMatch(
      /streams\[0\]\.prefix\.blockSize: is 32, the engines' block size is 16/,
    );
    expect(() =>
      parseScenario({ ...base, streams: [{ ...base.streams[0], prefix: { sharedTokens: 100 } }] }),
    ).not.toThrow();
  });

  it('names unknown keys, bad process names and bad length specs', () => {
    const bad = {
      ...base,
      durationS: 'long',
      streams: [
        {
          ...base.streams[0],
          arrivl: 1,
          arrival: { process: 'burst', rate: 1 },
          input: { kind: 'uniform', min: 9, max: 3 },
        },
      ],
    };
    const text = issues(bad).join('\n');
    expect(text).toMatch(/^durationS:/m);
    expect(text).toMatch(/streams\[0\].*arrivl/);
    expect(text).toMatch(/streams\[0\]\.arrival\.process: must be one of/);
    expect(text).toMatch(/streams\[0\]\.input/);
  });

  it('requires exactly one of streams or trace', () => {
    const both = { ...base, trace: { name: 'azure-conv', split: { tenants: 4 } } };
    expect(issues(both).join('\n')).toMatch(/exactly one of "streams" or "trace"/);
  });

  it('reports a YAML file with the file name and the field', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-scn-'));
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'durationS: 60\ncluster:\n  engines: []\nstreams:\n  - tenant: a\n');
    try {
      loadScenario(file);
      expect.unreachable();
    } catch (e) {
      expect((e as Error).message).toContain(file);
      expect((e as Error).message).toMatch(/cluster\.engines: needs at least one engine/);
      expect((e as Error).message).toMatch(/streams\[0\]\.arrival/);
    }
  });

  it('rejects an unknown scenario name listing the built-ins', () => {
    expect(() => loadScenario('vtc-nope')).toThrow(/unknown scenario "vtc-nope".*vtc-overload/);
  });
});

describe('scenario files', () => {
  it('loads a YAML scenario with trace-resampled lengths, interactions and a ramp', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-scn-'));
    const file = join(dir, 'mixed.yaml');
    writeFileSync(
      file,
      [
        'durationS: 300',
        'seed: 9',
        'cluster:',
        '  engines:',
        '    - { gpu: A100-80GB, model: llama-2-7b, count: 2, options: { maxNumSeqs: 128 } }',
        'tenants:',
        '  - { id: chat, weight: 2, app: assistant }',
        '  - { id: batch }',
        'streams:',
        '  - tenant: chat',
        '    arrival: { process: gamma, rate: 2, cv: 2 }',
        '    input: { kind: trace, trace: azure-conv, column: input }',
        '    output: { kind: trace, trace: azure-conv, column: output }',
        '    interaction: { size: fairserve }',
        '  - tenant: batch',
        '    sloClass: batch-1',
        '    arrival: { process: uniform, ramp: { from: 0.5, to: 3 } }',
        '    input: { kind: lognormal, median: 500, p90: 1500 }',
        '    output: { kind: zipf, max: 400, s: 0.8 }',
        '    startS: 60',
      ].join('\n'),
    );
    const loaded = loadScenario(file);
    expect(loaded.name).toBe('mixed');
    const run = buildRunInput(loaded);
    expect(run.engines.map((e) => e.config.maxNumSeqs)).toEqual([128, 128]);
    expect(run.tenantWeights).toEqual({ chat: 2, batch: 1 });
    const chat = run.arrivals.filter((r) => r.tenant === 'chat');
    expect(chat.every((r) => r.app === 'assistant' && r.interactionId !== undefined)).toBe(true);
    const batch = run.arrivals.filter((r) => r.tenant === 'batch');
    expect(batch.every((r) => r.sloClass === 'batch-1' && r.arrivalMs >= 60_000)).toBe(true);
    // ∫ ramp over [60, 300): 240 · (0.5 + 3) / 2 = 420
    expect(Math.abs(batch.length - 420)).toBeLessThanOrEqual(1);
  });

  it('names a stream whose trace lengths cannot be read', () => {
    const bad = {
      ...base,
      streams: [{ ...base.streams[0], input: { kind: 'trace', trace: '/nope.csv', column: 'input' } }],
    };
    expect(() => buildRunInput({ name: 'x', scenario: parseScenario(bad), baseDir: '/' })).toThrow(
      /streams\[0\]\.input\.trace/,
    );
  });
});

describe('built-in scenarios', () => {
  it('all validate and compile', () => {
    const names = listScenarios().map((s) => s.name);
    expect(names).toEqual(
      expect.arrayContaining([
        'vtc-overload',
        'vtc-proportional',
        'vtc-on-off-less',
        'vtc-on-off-overload',
        'vtc-poisson-short-long',
        'vtc-poisson-short-long-2',
        'vtc-increase',
        'vtc-dist-shift',
        'vtc-real',
        'vtc-real-trace',
        'azure-conv',
        'azure-code',
      ]),
    );
    for (const name of names) {
      const input = buildRunInput(loadScenario(name), {
        durationS: name.startsWith('azure') ? 120 : undefined,
      });
      expect(input.arrivals.length, name).toBeGreaterThan(0);
      expect(input.engines.length, name).toBeGreaterThan(0);
    }
  });

  it("passes S-LoRA's admission cadence from a scenario's engine options to the engines", () => {
    const base = loadScenario('vtc-overload');
    const engines = base.scenario.cluster.engines.map((e) => ({
      ...e,
      options: { ...e.options, admitEverySteps: 10 },
    }));
    const scenario = parseScenario({ ...base.scenario, cluster: { engines } }, 'cadence.yaml');
    const run = buildRunInput({ ...base, name: 'cadence', scenario });
    expect(run.engines[0]!.config).toMatchObject({ admitEverySteps: 10, blockSize: 1 });
    expect(() =>
      parseScenario(
        { ...base.scenario, cluster: { engines: [{ ...engines[0]!, options: { admitEverySteps: -1 } }] } },
        'bad.yaml',
      ),
    ).toThrow(/admitEverySteps/);
  });

  it("vtc-real-trace replays the artifact's trace request for request: its clients, arrivals and lengths", () => {
    const run = buildRunInput(loadScenario('vtc-real-trace'));
    // The last request arrives at exactly 600 s, the cut, and is dropped with everything after it.
    expect(run.arrivals.length).toBe(1499);
    expect(Object.keys(run.tenantWeights ?? {}).length).toBe(27);
    expect(run.arrivals[1]).toMatchObject({
      tenant: 'client2',
      inputTokens: 36,
      outputTokens: 137,
      maxTokens: 137,
    });
    expect(run.arrivals[1]!.arrivalMs).toBeCloseTo(207.938, 3);
  });

  it('vtc-overload has the paper setup: 90 and 180 req/min of 256/256 tokens on one A10G with 10,000 KV tokens', () => {
    const run = buildRunInput(loadScenario('vtc-overload'));
    expect(run.durationS).toBe(600);
    expect(run.engines).toEqual([
      {
        id: 'replica-0',
        config: {
          gpu: 'A10G-24GB',
          model: 'llama-2-7b',
          tp: 1,
          kvCapacityTokens: 10_000,
          blockSize: 1,
          stepNoise: { distribution: 'lognormal' },
        },
      },
    ]);
    const count = (t: string) => run.arrivals.filter((r) => r.tenant === t).length;
    expect(count('client1')).toBe(900);
    expect(count('client2')).toBe(1800);
    expect(run.arrivals.every((r) => r.inputTokens === 256 && r.outputTokens === 256)).toBe(true);
    expect(run.tenantWeights).toEqual({ client1: 1, client2: 1 });
  });

  it('vtc-dist-shift changes rates at 300 s and 600 s', () => {
    const run = buildRunInput(loadScenario('vtc-dist-shift'));
    const n = (t: string, a: number, b: number) =>
      run.arrivals.filter((r) => r.tenant === t && r.arrivalMs >= a * 1000 && r.arrivalMs < b * 1000).length;
    expect(n('client1', 60, 120)).toBe(0); // OFF
    expect(n('client1', 300, 600)).toBe(300);
    expect(n('client2', 600, 900)).toBe(450);
  });

  it('azure-conv replays the whole hour on four A100-80GB replicas', () => {
    const run = buildRunInput(loadScenario('azure-conv'));
    expect(run.arrivals.length).toBe(19_366);
    expect(run.engines.length).toBe(4);
    expect(run.tenants.length).toBe(10);
  });

  it('gives the same arrivals for the same seed and different ones for another', () => {
    const a = buildRunInput(loadScenario('vtc-real'));
    expect(buildRunInput(loadScenario('vtc-real')).arrivals).toEqual(a.arrivals);
    expect(buildRunInput(loadScenario('vtc-real'), { seed: 7 }).arrivals).not.toEqual(a.arrivals);
    expect(a.tenants.length).toBe(27);
  });
});
