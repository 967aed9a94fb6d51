import { type HistogramTotals, VLLM_METRIC, VllmClient, type VllmMetrics } from '@fairway/engine';
import { costModelPreset } from '@fairway/perf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

const MODEL = 'llama-3-8b';
const GPU = 'A100-80GB';
// Forty times faster than the GPU: a millisecond of timer overshoot would be 40 model ms, so
// these checks fail unless latencies are taken on the engine's step schedule.
const SPEED = 40;
const cost = costModelPreset(MODEL, GPU);

function prefillStepMs(tokens: number): number {
  return cost.stepMs({
    decodeSeqs: 0,
    prefillTokens: tokens,
    prefillChunkSq: tokens * tokens,
    kvTokensRead: 0,
  });
}

function decodeStepMs(seqs: number, kvTokensRead: number): number {
  return cost.stepMs({ decodeSeqs: seqs, prefillTokens: 0, prefillChunkSq: 0, kvTokensRead });
}

function delta(after: VllmMetrics, before: VllmMetrics, name: string): HistogramTotals {
  const a = after.histograms.get(name);
  const b = before.histograms.get(name);
  if (!a || !b) throw new Error(`no ${name} on the metrics page`);
  return { sum: a.sum - b.sum, count: a.count - b.count };
}

function tokens(n: number): number[] {
  return Array.from({ length: n }, (_, i) => 1000 + ((i * 7919) % 30000));
}

describe('engine-sim /metrics (vLLM request phases)', () => {
  let sim: EngineSimHandle;
  let client: VllmClient;

  beforeAll(async () => {
    // A busy machine may stall the event loop for tens of ms; a long lag allowance keeps every
    // step on the model's schedule, so these checks see the model's latencies and not the stall.
    sim = await startEngineSim({ model: MODEL, gpu: GPU, speed: SPEED, maxLagMs: 60_000 });
    client = new VllmClient({ url: sim.url });
  });
  afterAll(async () => {
    await client.close();
    await sim.close();
  });

  it('exports the phase histograms vLLM does, with their vLLM names', async () => {
    const m = await client.metrics();
    for (const name of [
      VLLM_METRIC.timeToFirstToken,
      VLLM_METRIC.interTokenLatency,
      VLLM_METRIC.timePerOutputToken,
      VLLM_METRIC.queueTime,
      VLLM_METRIC.prefillTime,
      VLLM_METRIC.decodeTime,
      VLLM_METRIC.inferenceTime,
      VLLM_METRIC.e2eLatency,
      VLLM_METRIC.iterationTokens,
      'vllm:request_time_per_output_token_seconds',
    ]) {
      expect(m.histograms.has(name), name).toBe(true);
    }
  });

  it('reports a lone prompt’s prefill as the GPU’s prefill step, queue time excluded, at any speed', async () => {
    const before = await client.metrics();
    for (const n of [512, 2048]) {
      await client.complete('completions', { model: MODEL, prompt: tokens(n), max_tokens: 1 });
    }
    const after = await client.metrics();
    const prefill = delta(after, before, VLLM_METRIC.prefillTime);
    const ttft = delta(after, before, VLLM_METRIC.timeToFirstToken);
    const queue = delta(after, before, VLLM_METRIC.queueTime);
    expect(prefill.count).toBe(2);
    const expected = (prefillStepMs(512) + prefillStepMs(2048)) / 1000;
    expect(prefill.sum).toBeGreaterThan(expected * 0.98);
    expect(prefill.sum).toBeLessThan(expected * 1.02);
    // An idle engine schedules an arrival at once: TTFT is queue time plus prefill. The queue time
    // is the real time from the request's arrival to its step's start (× the speed): no wait for
    // a step boundary, only the event loop's own delay, which a busy machine stretches to tens of ms.
    expect(queue.sum).toBeLessThan(0.05 * SPEED);
    expect(ttft.sum).toBeCloseTo(queue.sum + prefill.sum, 6);
    const steps = delta(after, before, VLLM_METRIC.iterationTokens);
    expect(steps.count).toBe(2);
    expect(steps.sum).toBe(512 + 1 + 2048 + 1);
  });

  it('reports inter-token latency as the decode step time of the running batch', async () => {
    const before = await client.metrics();
    const prompt = 1000;
    const outputs = 40;
    await Promise.all(
      Array.from({ length: 4 }, () =>
        client.complete('completions', {
          model: MODEL,
          prompt: tokens(prompt),
          max_tokens: outputs,
          ignore_eos: true,
        }),
      ),
    );
    const after = await client.metrics();
    const itl = delta(after, before, VLLM_METRIC.interTokenLatency);
    const decode = delta(after, before, VLLM_METRIC.decodeTime);
    expect(itl.count).toBe(4 * (outputs - 1));
    // Each gap is one step of the running batch: never shorter than one sequence's decode step,
    // never longer than the four sequences' longest, except that a later arrival's prefill, run in
    // the step, lengthens one gap of each sequence already decoding (at most 3 + 2 + 1 gaps). When
    // the four arrive is up to the HTTP clients, so the bounds hold for any arrival order.
    const shortest = decodeStepMs(1, prompt) / 1000;
    const longest = decodeStepMs(4, 4 * (prompt + outputs)) / 1000;
    expect(itl.sum / itl.count).toBeGreaterThan(shortest * 0.98);
    expect(itl.sum).toBeLessThan((itl.count * longest + (6 * prefillStepMs(prompt)) / 1000) * 1.02);
    expect(decode.sum).toBeCloseTo(itl.sum, 6);
    expect(delta(after, before, VLLM_METRIC.timePerOutputToken).sum).toBeCloseTo(itl.sum, 6);
  });
});
