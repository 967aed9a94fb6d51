import { createRng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import type { EngineEvent } from '../src/engine-api.ts';
import { EngineModel } from '../src/engine-model.ts';

const A10G = { gpu: 'A10G-24GB', model: 'llama-2-7b', blockSize: 1 } as const;

/**
 * Steps until idle and past `feedSteps` (before each step `each` may add requests); per step:
 * whether it admitted, whether it decoded, KV in use.
 */
function trace(engine: EngineModel, each?: (step: number) => void, feedSteps = 0) {
  const steps: { admitted: number; decoded: boolean; kvUsed: number; running: number }[] = [];
  const events: EngineEvent[] = [];
  for (;;) {
    each?.(steps.length);
    if (!engine.hasWork() && steps.length >= feedSteps) break;
    const r = engine.step();
    events.push(...r.events);
    steps.push({
      admitted: r.events.filter((e) => e.kind === 'scheduled').length,
      decoded: r.shape.decodeSeqs > 0,
      kvUsed: engine.stats().kvUsedTokens,
      running: engine.stats().running,
    });
    if (steps.length > 200_000) throw new Error('engine does not terminate');
  }
  return { steps, events };
}

describe('EngineModel with S-LoRA admission cadence (admitEverySteps)', () => {
  it('admits into a running batch only after k decode steps since the last admission', () => {
    for (const k of [1, 5, 10]) {
      const engine = new EngineModel({ ...A10G, kvCapacityTokens: 100_000, admitEverySteps: k });
      let n = 0;
      // A new request arrives before every step: vLLM would admit one each step.
      const { steps } = trace(engine, (i) => {
        if (i < 120) engine.add({ id: `r${n++}`, inputTokens: 32, outputTokens: 200, maxTokens: 200 });
      });
      const admits = steps.map((s, i) => ({ ...s, i })).filter((s) => s.admitted > 0);
      expect(admits.length).toBeGreaterThan(3);
      for (let a = 1; a < admits.length; a++) {
        const between = steps.slice(admits[a - 1]!.i + 1, admits[a]!.i);
        expect(between.filter((s) => s.decoded).length, `k=${k}`).toBeGreaterThanOrEqual(k);
        // …and no later than the first step it may: exactly k decode steps in between.
        expect(between.length, `k=${k}`).toBe(k);
      }
      // Everything queued while the batch ran is admitted together.
      expect(Math.max(...admits.slice(1).map((s) => s.admitted))).toBe(k + 1);
    }
  });

  it('admits at once into an idle engine', () => {
    const engine = new EngineModel({ ...A10G, kvCapacityTokens: 10_000, admitEverySteps: 10 });
    engine.add({ id: 'a', inputTokens: 8, outputTokens: 2, maxTokens: 2 });
    const { steps } = trace(engine);
    expect(steps[0]!.admitted).toBe(1);
    engine.add({ id: 'b', inputTokens: 8, outputTokens: 2, maxTokens: 2 });
    expect(engine.step().events.map((e) => e.kind)).toContain('scheduled');
  });

  it('never exceeds the KV pool, never preempts, and finishes every request, at the peak of any batch', () => {
    const rng = createRng(11);
    for (const blockSize of [1, 16]) {
      const capacity = 4000;
      const engine = new EngineModel({ ...A10G, blockSize, kvCapacityTokens: capacity, admitEverySteps: 10 });
      let n = 0;
      const { steps, events } = trace(
        engine,
        (i) => {
          if (i % 3 === 0 && n < 300) {
            const out = rng.int(1, 500);
            const maxTokens = out + rng.int(0, 200);
            engine.add({ id: `r${n++}`, inputTokens: rng.int(1, 600), outputTokens: out, maxTokens });
          }
        },
        900,
      );
      for (const s of steps) expect(s.kvUsed).toBeLessThanOrEqual(capacity);
      expect(engine.stats().preemptionsTotal).toBe(0);
      expect(events.filter((e) => e.kind === 'finished').length).toBe(300);
      expect(events.some((e) => e.kind === 'finished' && e.ignored)).toBe(false);
      expect(engine.stats().kvUsedTokens).toBe(0);
    }
  });

  it("refuses a request whose prompt fits now when the batch's future peak would not", () => {
    const run = (admitEverySteps: number) => {
      const engine = new EngineModel({ ...A10G, kvCapacityTokens: 1000, admitEverySteps });
      engine.add({ id: 'long', inputTokens: 100, outputTokens: 800, maxTokens: 800 });
      engine.step();
      // Free now: 900 tokens; the peak when 'long' finishes: 100 + 799 for it plus 100 + 399 for
      // 'late' grown alongside — 998 tokens + 0 waste, over the 990 the 1% watermark leaves.
      engine.add({ id: 'late', inputTokens: 100, outputTokens: 400, maxTokens: 400 });
      const { events } = trace(engine);
      const finished = events.findIndex((e) => e.kind === 'finished' && e.id === 'long');
      const admitted = events.findIndex((e) => e.kind === 'scheduled' && e.id === 'late');
      return admitted > finished;
    };
    expect(run(1)).toBe(true);
    expect(run(0)).toBe(false);
  });

  it('finishes at once, as ignored, a request whose own peak can never fit', () => {
    const engine = new EngineModel({ ...A10G, kvCapacityTokens: 1000, admitEverySteps: 10 });
    engine.add({ id: 'huge', inputTokens: 100, outputTokens: 950, maxTokens: 950 });
    engine.add({ id: 'ok', inputTokens: 10, outputTokens: 5, maxTokens: 5 });
    const { events } = trace(engine);
    expect(events.find((e) => e.kind === 'finished' && e.id === 'huge')).toMatchObject({ ignored: true });
    expect(events.find((e) => e.kind === 'finished' && e.id === 'ok')).toMatchObject({ generated: 5 });
  });

  it('is off by default: 0 gives the same steps as leaving it out', () => {
    const runOf = (extra: { admitEverySteps?: number }) => {
      const engine = new EngineModel({ ...A10G, kvCapacityTokens: 3000, ...extra });
      const rng = createRng(3);
      for (let i = 0; i < 60; i++) {
        const out = rng.int(1, 300);
        engine.add({ id: `r${i}`, inputTokens: rng.int(1, 400), outputTokens: out, maxTokens: out });
      }
      return trace(engine).events;
    };
    expect(runOf({ admitEverySteps: 0 })).toEqual(runOf({}));
  });
});
