import { VllmClient } from '@fairway/engine';
import { type EngineConfig, EngineModel, type EngineSeqInput } from '@fairway/perf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

// A10G-class engine: decode steps of ~20 ms, prefill ~0.22 ms per token (the VTC authors'
// measurements), so timer jitter of a millisecond stays well inside the tolerance.
const CONFIG: EngineConfig = { gpu: 'A10G-24GB', model: 'llama-2-7b' };
const STREAMS = 8;
// engine-sim counts one user message as `<s>[INST] … [/INST]` (9 tokens) around its text, and a
// run of letters as one token per eight (its word-piece stand-in for a tokenizer).
const TEMPLATE_TOKENS = 9;
const charsFor = (tokens: number): number => 8 * (tokens - TEMPLATE_TOKENS);
const PROMPT_CHARS = charsFor(100);
const OUTPUT = 60;
const GATE_PROMPT = 2000;
const GATE_PROMPT_CHARS = charsFor(GATE_PROMPT);

interface Arrival {
  readonly at: number;
  readonly seq: EngineSeqInput;
}

/** Token times the engine model predicts, by replaying the arrivals in virtual time (ms). */
function predictTokenTimes(arrivals: readonly Arrival[]): Map<string, number[]> {
  const model = new EngineModel(CONFIG);
  const times = new Map<string, number[]>(arrivals.map((a) => [a.seq.id, []]));
  let t = 0;
  let next = 0;
  while (next < arrivals.length || model.hasWork()) {
    while (next < arrivals.length && arrivals[next]!.at <= t) model.add(arrivals[next++]!.seq);
    if (!model.hasWork()) {
      t = arrivals[next]!.at;
      continue;
    }
    const step = model.step();
    t += step.durationMs;
    for (const ev of step.events) if (ev.kind === 'token') times.get(ev.id)!.push(t);
  }
  return times;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function gaps(times: readonly number[]): number[] {
  return times.slice(1).map((t, i) => t - times[i]!);
}

describe('engine-sim timing', () => {
  let sim: EngineSimHandle;
  let client: VllmClient;

  beforeAll(async () => {
    sim = await startEngineSim({ ...CONFIG, speed: 1 });
    client = new VllmClient({ url: sim.url });
    // Open the pooled connections first so that sending a request is a write, not a handshake.
    await Promise.all(
      Array.from({ length: STREAMS }, () =>
        client.complete('completions', { prompt: 'x', max_tokens: 1, fairway_output_tokens: 1 }),
      ),
    );
  });
  afterAll(async () => {
    await client.close();
    await sim.close();
  });

  it('streams with the TTFT and inter-token latency the engine model predicts at speed 1 (±10%)', async () => {
    const sent: number[] = [];
    const received: number[][] = [];
    const run = async (i: number, promptChars: number) => {
      const times: number[] = [];
      received[i] = times;
      sent[i] = performance.now();
      const s = await client.stream(
        'chat',
        {
          messages: [{ role: 'user', content: 'x'.repeat(promptChars) }],
          max_tokens: 500,
          fairway_output_tokens: OUTPUT,
        },
        { onLine: (l) => l.hasContent && times.push(performance.now()) },
      );
      for await (const _chunk of s);
    };
    // A gate request with a long prompt keeps the engine in one ~450 ms prefill step while the
    // measured streams arrive, so they are batched together both here and in the replay, whatever
    // the few milliseconds between their sends.
    const gate = run(0, GATE_PROMPT_CHARS);
    await new Promise((r) => setTimeout(r, 100));
    await Promise.all([gate, ...Array.from({ length: STREAMS }, (_, i) => run(i + 1, PROMPT_CHARS))]);

    const t0 = Math.min(...sent);
    const arrivals = sent
      .map((at, i) => ({
        at: at - t0,
        seq: {
          id: String(i),
          inputTokens: i === 0 ? GATE_PROMPT : 100,
          outputTokens: OUTPUT,
          maxTokens: 500,
        },
      }))
      .sort((a, b) => a.at - b.at);
    const predicted = predictTokenTimes(arrivals);

    const measured = received.slice(1);
    const measuredTtft = measured.map((times, i) => times[0]! - sent[i + 1]!);
    const predictedTtft = measured.map((_, i) => predicted.get(String(i + 1))![0]! - (sent[i + 1]! - t0));
    const measuredItl = measured.flatMap(gaps);
    const predictedItl = measured.flatMap((_, i) => gaps(predicted.get(String(i + 1))!));

    for (const times of received) expect(times).toHaveLength(OUTPUT);
    const ttft = median(measuredTtft) / median(predictedTtft);
    const itl = median(measuredItl) / median(predictedItl);
    // The engine model's own numbers are tens of ms, so this is a check of the simulated timing.
    expect(median(predictedItl)).toBeGreaterThan(15);
    expect(median(predictedTtft)).toBeGreaterThan(200);
    expect(
      ttft,
      `TTFT measured ${median(measuredTtft)} ms vs predicted ${median(predictedTtft)} ms`,
    ).toBeGreaterThan(0.9);
    expect(ttft).toBeLessThan(1.1);
    expect(
      itl,
      `ITL measured ${median(measuredItl)} ms vs predicted ${median(predictedItl)} ms`,
    ).toBeGreaterThan(0.9);
    expect(itl).toBeLessThan(1.1);
  });
});
