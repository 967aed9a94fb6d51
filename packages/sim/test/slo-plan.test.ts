import {
  fitEnginePerformance,
  heldOutError,
  modelSwapSeconds,
  profileEngine,
  qlmProfile,
} from '@fairway/perf';
import { describe, expect, it } from 'vitest';
import { bucketedOutputPredictor, fewestPassing, planFleet } from '../src/plan.ts';

describe('performance models fitted from profiling runs', () => {
  it.each([
    ['llama-2-7b', 'A100-80GB', 1],
    ['llama-2-7b', 'A100-80GB', 2],
    ['llama-2-13b', 'A100-80GB', 1],
    ['llama-2-70b', 'A100-80GB', 4],
    ['llama-2-7b', 'A10G-24GB', 1],
  ] as const)('fit %s on %s × %i within 10%% (Aladdin section 6.2)', (model, gpu, tp) => {
    const p = fitEnginePerformance({ model, gpu, tp }, { maxBatch: 64 });
    expect(p.report.prefill.mape).toBeLessThan(0.1);
    expect(p.report.decode.mape).toBeLessThan(0.1);
    expect(p.report.kv?.mape).toBeLessThan(0.1);
    expect(p.samples.decode).toBeGreaterThan(20);
    // The fitted coefficients mean what they say: more context and more sequences cost more.
    expect(p.model.decode.k2).toBeGreaterThan(0);
    expect(p.model.prefill.k1).toBeGreaterThan(0);
    expect(p.model.kv.h).toBeCloseTo(1, 1);
  });

  it('measures prefill independently of how many prompts carry the tokens, and decode per batch', () => {
    const s = profileEngine({ model: 'llama-2-7b', gpu: 'A100-80GB' }, { maxBatch: 16 });
    const at1024 = s.prefill.filter((x) => x.inputTokens === 1024).map((x) => x.ms);
    expect(at1024.length).toBe(3);
    expect(Math.max(...at1024) / Math.min(...at1024)).toBeLessThan(1.1);
    expect(new Set(s.decode.map((d) => d.batchSize)).size).toBeGreaterThan(4);
  });

  it('gives QLM an estimator profile with an inefficiency factor of at least 1', () => {
    const perf = fitEnginePerformance({ model: 'llama-2-7b', gpu: 'A100-80GB' }).model;
    const lengths = { inputTokens: Array(300).fill(300), outputTokens: Array(300).fill(200) };
    const p = qlmProfile(perf, { model: 'llama-2-7b', gpu: 'A100-80GB' }, lengths);
    expect(p.inefficiency).toBeGreaterThanOrEqual(1);
    expect(p.batchSize).toBeGreaterThan(50);
    expect(p.maxOutputTokens).toBe(200);
  });
});

describe('model swap cost', () => {
  it('copies the weight shard over the host link, and reloads from disk much slower', () => {
    const wake = modelSwapSeconds('llama-2-13b', 'A100-80GB', 1, 'sleep-wake');
    expect(wake).toBeCloseTo(26 / 25 + 1.5, 3);
    expect(modelSwapSeconds('llama-2-13b', 'A100-80GB', 2, 'sleep-wake')).toBeLessThan(wake);
    expect(modelSwapSeconds('llama-2-13b', 'A100-80GB', 1, 'reload')).toBeGreaterThan(10 * wake);
    expect(modelSwapSeconds('llama-2-7b', 'A100-80GB', 1, 'lora')).toBeLessThan(0.5);
  });
});

describe('fairway plan', () => {
  it('predicts output by prompt-length bucket with a low quantile for short requests', () => {
    const rows = [
      ...Array.from({ length: 40 }, (_, i) => ({ inputTokens: 100, outputTokens: 10 + i })),
      ...Array.from({ length: 40 }, (_, i) => ({ inputTokens: 3000, outputTokens: 500 + i })),
    ];
    const p = bucketedOutputPredictor(rows, 0);
    expect(p.predict(110)).toBeCloseTo(29.5, 5);
    expect(p.predict(2500)).toBeCloseTo(519.5, 5);
    expect(p.short(2500)).toBe(500);
    expect(p.min).toBeCloseTo(29.5, 5);
  });

  it('gives JSQ the same information as Aladdin and needs at least as many GPUs at a high rate', async () => {
    const plan = await planFleet({
      trace: 'azure-conv',
      model: 'llama-2-7b',
      gpu: 'A100-80GB',
      slo: { ttftS: 1, atgtS: 0.025 },
      rateScales: [4],
      windowS: 60,
      placements: ['jsq', 'aladdin'],
      tps: [1],
      maxReplicas: 16,
    });
    expect(plan.tp.chosen).toBe(1);
    expect(plan.performance.fit.worstMape).toBeLessThan(0.1);
    const gpus = (name: string) => plan.policies.find((p) => p.placement === name)?.points[0]?.gpus;
    const jsq = gpus('jsq');
    const aladdin = gpus('aladdin');
    expect(jsq).toBeDefined();
    expect(aladdin).toBeDefined();
    // Best fit packs at least as tightly as the shortest queue under the same SLO-aware room.
    expect(aladdin as number).toBeLessThanOrEqual(jsq as number);
    expect(plan.aladdinSavingsVsBest[0]).toEqual({
      rateScale: 4,
      best: 'jsq',
      saving: 1 - (aladdin as number) / (jsq as number),
    });
    // Every fleet below the answer was simulated and missed (no size was skipped by a bisection).
    const point = plan.policies.find((p) => p.placement === 'aladdin')?.points[0];
    expect(point?.probes.filter((p) => !p.met).map((p) => p.replicas)).toEqual(
      Array.from({ length: (point?.replicas as number) - 1 }, (_, i) => i + 1),
    );
  });

  it('finds the fewest passing fleet when pass/fail is not monotone in the fleet size', async () => {
    // Passes with 3, misses with 4 and 5 (one unlucky request), passes from 6 on. Doubling then
    // bisection probes 1, 2, 4, 8, then 6, 5 and answers 6; the scan answers 3.
    const passing = (n: number) => n === 3 || n >= 6;
    const probed: number[] = [];
    const found = await fewestPassing(async (n) => {
      probed.push(n);
      return passing(n);
    }, 64);
    expect(found).toBe(3);
    expect(probed).toEqual([1, 2, 3]);
    expect(await fewestPassing(async () => false, 5)).toBeUndefined();
    expect(await fewestPassing(async (n) => n >= 7, 10, 2)).toBe(7);
  });

  it('chooses TP 1 for Llama-2-7B on A100s linked by PCIe, as Aladdin’s Table 3', async () => {
    const plan = await planFleet({
      trace: 'azure-conv',
      model: 'llama-2-7b',
      gpu: 'A100-80GB',
      slo: { ttftS: 1, atgtS: 0.025 },
      rateScales: [1],
      windowS: 10,
      tps: [1, 2],
      interconnect: 'pcie',
      placements: [],
    });
    expect(plan.tp.chosen).toBe(1);
    const perGpu = (tp: number) => plan.tp.candidates.find((c) => c.tp === tp)?.tokensPerSPerGpu ?? 0;
    expect(perGpu(2)).toBeLessThan(perGpu(1));
  });

  it('reports fit error against held-out shapes measured with step-time jitter', () => {
    const config = { model: 'llama-2-7b', gpu: 'A100-80GB', tp: 1 };
    const { model } = fitEnginePerformance(config, { maxBatch: 68 });
    const still = heldOutError(model, config, { sigma: 0, seed: 1, maxBatch: 68 });
    const noisy = heldOutError(model, config, { sigma: 0.05, seed: 1, maxBatch: 68 });
    expect(still.samples.decode).toBeGreaterThan(10);
    expect(still.decodeMape).toBeLessThan(0.1);
    // Jitter shows in the error: the held-out check is not the fit's own data.
    expect(noisy.decodeMape).toBeGreaterThan(still.decodeMape);
    expect(noisy.decodeMape).toBeLessThan(0.15);
  });
});
