import { GPUS, MODELS } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { costCoefficients, costModelPreset } from '../src/cost-models.ts';
import type { BatchShape } from '../src/engine-api.ts';
import { PerfError } from '../src/errors.ts';
import { kvCapacityBreakdown, kvCapacityTokens } from '../src/kv-capacity.ts';

const decode = (b: number, ctx: number): BatchShape => ({
  decodeSeqs: b,
  prefillTokens: 0,
  prefillChunkSq: 0,
  kvTokensRead: b * ctx,
});
const prefill = (tokens: number): BatchShape => ({
  decodeSeqs: 0,
  prefillTokens: tokens,
  prefillChunkSq: tokens * tokens,
  kvTokensRead: 0,
});

describe('kvCapacityTokens', () => {
  // DESIGN.md "Calibration": KV tokens at 0.9 memory utilisation.
  const table = [
    ['llama-2-7b', 'A100-80GB', 1, 118_000],
    ['llama-2-7b', 'A100-40GB', 1, 45_000],
    ['llama-2-7b', 'V100-32GB', 1, 31_000],
    ['llama-2-7b', 'A10G-24GB', 1, 13_000],
    ['llama-2-13b', 'A100-80GB', 1, 60_000],
    ['llama-2-13b', 'V100-32GB', 1, 3_700],
    ['llama-2-70b', 'A100-80GB', 4, 486_000],
  ] as const;
  for (const [model, gpu, tp, want] of table) {
    it(`matches the design table for ${model} on ${gpu} × ${tp} (≈ ${want} tokens, ±10%)`, () => {
      const got = kvCapacityTokens({ model, gpu, tp });
      expect(got).toBeGreaterThan(want * 0.9);
      expect(got).toBeLessThan(want * 1.1);
      expect(got % 16).toBe(0);
    });
  }

  it('has a positive capacity for every model that fits its GPU, and grows with memory and TP', () => {
    for (const model of Object.keys(MODELS))
      for (const gpu of Object.keys(GPUS)) {
        const b = kvCapacityBreakdown({ model, gpu });
        expect(b.tokens).toBeGreaterThanOrEqual(0);
        if (b.weightsGiB + b.reserveGiB < b.budgetGiB) expect(b.tokens).toBeGreaterThan(0);
      }
    expect(kvCapacityTokens({ model: 'llama-2-7b', gpu: 'A100-80GB' })).toBeGreaterThan(
      kvCapacityTokens({ model: 'llama-2-7b', gpu: 'A100-40GB' }),
    );
    expect(kvCapacityTokens({ model: 'llama-2-13b', gpu: 'A100-40GB', tp: 2 })).toBeGreaterThan(
      2 * kvCapacityTokens({ model: 'llama-2-13b', gpu: 'A100-40GB', tp: 1 }),
    );
    expect(
      kvCapacityTokens({ model: 'llama-2-7b', gpu: 'A100-80GB', gpuMemoryUtilization: 0.5 }),
    ).toBeLessThan(kvCapacityTokens({ model: 'llama-2-7b', gpu: 'A100-80GB' }));
  });

  it('names the unknown model or GPU', () => {
    expect(() => kvCapacityTokens({ model: 'gpt-5', gpu: 'A100-80GB' })).toThrow(PerfError);
    expect(() => kvCapacityTokens({ model: 'gpt-5', gpu: 'A100-80GB' })).toThrow(/"gpt-5"/);
  });
});

describe('costModelPreset', () => {
  it('reproduces the A100-80GB Llama-2-7B fit: max(9.3, 2.2 + 0.064·n) + 0.00036·K + 1.7e-6·Σchunk²', () => {
    const m = costModelPreset('llama-2-7b', 'A100-80GB');
    expect(m.stepMs(decode(32, 1000))).toBeCloseTo(9.3 + 0.00036 * 32_000, 9);
    expect(m.stepMs(prefill(2048))).toBeCloseTo(2.2 + 0.064 * 2048 + 1.7e-6 * 2048 * 2048, 9);
    expect(m.stepMs({ decodeSeqs: 0, prefillTokens: 0, prefillChunkSq: 0, kvTokensRead: 0 })).toBe(0);
  });

  it('reproduces the VTC authors’ A10G decode fit 16.3 + 0.245·b + 0.002·K and ≈ 0.22 ms per prefill token', () => {
    const m = costModelPreset('llama-2-7b', 'A10G-24GB');
    expect(m.stepMs(decode(20, 400))).toBeCloseTo(16.3 + 0.245 * 20 + 0.002 * 8000, 9);
    // A prefill step of twenty 256-token prompts, as in VTC's full-pool profile.
    const shape = { decodeSeqs: 0, prefillTokens: 5120, prefillChunkSq: 20 * 256 * 256, kvTokensRead: 0 };
    const perToken = m.stepMs(shape) / 5120;
    expect(perToken).toBeGreaterThan(0.22);
    expect(perToken).toBeLessThan(0.22 * 1.05);
  });

  it('gives Llama-2-70B TP4 on A100 the non-attention 18.4 + 0.156·n plus 3–10 ms of all-reduce', () => {
    const { coefficients: c } = costCoefficients('llama-2-70b', 'A100-80GB', 4);
    expect(c.baseMs).toBe(18.4);
    expect(c.perDecodeSeqMs).toBe(0.156);
    for (const b of [1, 64, 256]) {
      const allReduce = c.allReduceBaseMs + c.allReducePerTokenMs * b;
      expect(allReduce).toBeGreaterThanOrEqual(3);
      expect(allReduce).toBeLessThanOrEqual(10);
    }
  });

  it('derives missing combinations by hardware and model scaling', () => {
    const step = (model: string, gpu: string, tp = 1) =>
      costModelPreset(model, gpu, tp).stepMs(decode(64, 800));
    // Faster memory, faster decode.
    expect(step('llama-2-7b', 'H100-80GB')).toBeLessThan(step('llama-2-7b', 'A100-80GB'));
    expect(step('llama-2-7b', 'A100-80GB')).toBeLessThan(step('llama-2-7b', 'A100-40GB'));
    expect(step('llama-2-7b', 'A100-40GB')).toBeLessThan(step('llama-2-7b', 'V100-32GB'));
    // Bigger models are slower; TP splits the work but adds all-reduce.
    expect(step('llama-2-13b', 'A100-80GB')).toBeGreaterThan(step('llama-2-7b', 'A100-80GB'));
    expect(step('llama-2-13b', 'A100-80GB', 2)).toBeLessThan(step('llama-2-13b', 'A100-80GB'));
    const tp2 = costCoefficients('llama-2-13b', 'A100-80GB', 2).coefficients;
    expect(tp2.allReduceBaseMs).toBeGreaterThan(0);
    // The derived A100-40GB floor is the A100-80GB one scaled by bandwidth (2039 / 1555 GB/s).
    const a40 = costCoefficients('llama-2-7b', 'A100-40GB').coefficients;
    expect(a40.floorMs).toBeCloseTo(9.3 * (2039 / 1555), 9);
    // A 13B model on A10G scales the measured A10G fit by weight bytes.
    const a10g13 = costCoefficients('llama-2-13b', 'A10G-24GB').coefficients;
    expect(a10g13.floorMs).toBeCloseTo(16.3 * (13.0 / 6.74), 9);
    // Scaling a fit to another TP degree: TP 8 halves the TP 4 matmul terms.
    const tp8 = costCoefficients('llama-2-70b', 'A100-80GB', 8).coefficients;
    expect(tp8.perDecodeSeqMs).toBeCloseTo(0.078, 9);
  });

  it('makes TP > 1 cost more GPU time per token for a 7B model on PCIe, and less so on NVLink', () => {
    // GPU-milliseconds per decoded token: the step time times the GPUs it occupies, over the batch.
    const gpuMsPerToken = (tp: number, interconnect: 'nvlink' | 'pcie', b: number) =>
      (costModelPreset('llama-2-7b', 'A100-80GB', tp, interconnect).stepMs(decode(b, 1200)) * tp) / b;
    for (const b of [16, 64, 128]) {
      expect(gpuMsPerToken(2, 'pcie', b)).toBeGreaterThan(gpuMsPerToken(1, 'pcie', b));
      expect(gpuMsPerToken(4, 'pcie', b)).toBeGreaterThan(gpuMsPerToken(2, 'pcie', b));
      // The all-reduce is what makes the difference: NVLink moves the same bytes 11× faster.
      expect(gpuMsPerToken(2, 'nvlink', b)).toBeLessThan(gpuMsPerToken(2, 'pcie', b));
    }
    // A 2,000-token prefill over PCIe at TP 2 takes more than half the TP 1 time: the ring
    // traffic grows with the prompt (2 all-reduces per layer of 2,000 × 4,096 fp16 activations).
    const pre = (tp: number) => costModelPreset('llama-2-7b', 'A100-80GB', tp, 'pcie').stepMs(prefill(2000));
    expect(pre(2)).toBeGreaterThan(pre(1) / 2);
    expect(costCoefficients('llama-2-7b', 'A100-80GB', 2, 'pcie').derivation).toMatch(/PCIe at 20 GB\/s/);
    expect(costCoefficients('llama-2-7b', 'A100-80GB', 2).derivation).toMatch(/NVLink at 230 GB\/s/);
  });

  it('says where every preset’s numbers come from', () => {
    for (const model of Object.keys(MODELS))
      for (const gpu of Object.keys(GPUS))
        for (const tp of [1, 2, 4]) {
          const m = costModelPreset(model, gpu, tp);
          expect(m.derivation.length).toBeGreaterThan(10);
          expect(m.stepMs(decode(1, 100))).toBeGreaterThan(0);
        }
  });

  it('names what it has no preset for', () => {
    expect(() => costModelPreset('llama-2-7b', 'MI300X')).toThrow(/"MI300X"/);
    expect(() => costModelPreset('llama-2-7b', 'A100-80GB', 0)).toThrow(/tp/);
  });
});
