import { ConfigError, createRng } from '@fairway/core';
import {
  type BatchShape,
  type EngineConfig,
  EngineModel,
  type StepCostModel,
  VLLM_STEP_JITTER_CV,
} from '@fairway/perf';
import { describe, expect, it } from 'vitest';
import { buildRunInput, parseScenario } from '../src/scenario.ts';

/** Every decode step costs 20 ms, every prefill 100 ms: the noise factor is duration / modelled time. */
const FLAT: StepCostModel = {
  name: 'flat',
  stepMs: (shape: BatchShape) => (shape.prefillTokens > 0 ? 100 : 20),
};

/** Runs 200 one-token-prompt sequences of 50 outputs and returns every decode step's factor. */
function factors(config: Partial<EngineConfig>, seed: number): number[] {
  const engine = new EngineModel(
    { gpu: 'A100-80GB', model: 'llama-2-7b', costModel: FLAT, ...config },
    'test',
    { rng: createRng(seed) },
  );
  for (let i = 0; i < 200; i++) engine.add({ id: `r${i}`, inputTokens: 1, outputTokens: 50, maxTokens: 50 });
  const out: number[] = [];
  while (engine.hasWork()) {
    const r = engine.step();
    if (r.shape.prefillTokens === 0 && r.shape.decodeSeqs > 0) out.push(r.durationMs / 20);
  }
  return out;
}

function meanAndCv(xs: readonly number[]): { mean: number; cv: number } {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const sd = Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (xs.length - 1));
  return { mean, cv: sd / mean };
}

describe('engine step-time noise', () => {
  it('is off by default: every step takes exactly its cost model time', () => {
    const f = factors({}, 1);
    expect(f.length).toBeGreaterThan(40);
    expect(new Set(f)).toEqual(new Set([1]));
  });

  for (const distribution of ['lognormal', 'normal'] as const) {
    it(`multiplies each step by a ${distribution} factor of mean 1 and the configured CV`, () => {
      const all: number[] = [];
      for (let seed = 1; seed <= 20; seed++)
        all.push(...factors({ stepNoise: { distribution, cv: 0.2 } }, seed));
      const { mean, cv } = meanAndCv(all);
      expect(all.length).toBeGreaterThan(900);
      expect(Math.abs(mean - 1)).toBeLessThan(0.02);
      expect(Math.abs(cv - 0.2)).toBeLessThan(0.02);
      expect(Math.min(...all)).toBeGreaterThan(0);
    });
  }

  it("defaults the CV to vLLM's measured decode-step jitter (0.10)", () => {
    const all: number[] = [];
    for (let seed = 1; seed <= 20; seed++)
      all.push(...factors({ stepNoise: { distribution: 'lognormal' } }, seed));
    expect(VLLM_STEP_JITTER_CV).toBe(0.1);
    expect(Math.abs(meanAndCv(all).cv - VLLM_STEP_JITTER_CV)).toBeLessThan(0.01);
  });

  it('replays the same durations for the same RNG seed and different ones for another', () => {
    const noise = { stepNoise: { distribution: 'lognormal' as const } };
    expect(factors(noise, 5)).toEqual(factors(noise, 5));
    expect(factors(noise, 5)).not.toEqual(factors(noise, 6));
  });

  it('rejects an unknown distribution or a negative CV, naming the field', () => {
    const bad = (stepNoise: unknown) => () =>
      new EngineModel({ gpu: 'A100-80GB', model: 'llama-2-7b', stepNoise } as unknown as EngineConfig, 'e');
    expect(bad({ distribution: 'pareto' })).toThrow(/stepNoise\.distribution/);
    expect(bad({ distribution: 'normal', cv: -1 })).toThrow(/stepNoise\.cv/);
  });

  it('is set per engine group in a scenario file and overridden for all engines at run time', () => {
    const scenario = parseScenario({
      durationS: 10,
      cluster: {
        engines: [
          {
            gpu: 'A10G-24GB',
            model: 'llama-2-7b',
            options: { stepNoise: { distribution: 'normal', cv: 0.3 } },
          },
          { gpu: 'A10G-24GB', model: 'llama-2-7b' },
        ],
      },
      streams: [{ tenant: 'a', arrival: { process: 'poisson', rate: 1 }, input: 10, output: 10 }],
    });
    const loaded = { name: 's', scenario, baseDir: '.' };
    expect(buildRunInput(loaded).engines.map((e) => e.config.stepNoise)).toEqual([
      { distribution: 'normal', cv: 0.3 },
      undefined,
    ]);
    const off = buildRunInput(loaded, { stepNoise: { distribution: 'none' } });
    expect(off.engines.map((e) => e.config.stepNoise)).toEqual([
      { distribution: 'none' },
      { distribution: 'none' },
    ]);
    expect(() =>
      parseScenario({
        durationS: 10,
        cluster: {
          engines: [{ gpu: 'A10G-24GB', model: 'llama-2-7b', options: { stepNoise: { kind: 'x' } } }],
        },
        streams: [{ tenant: 'a', arrival: { process: 'poisson', rate: 1 }, input: 10, output: 10 }],
      }),
    ).toThrow(ConfigError);
  });
});
