import { ConfigError, createRng, type RequestDescriptor } from '@fairway/core';
import {
  fcfsPolicy,
  joinShortestQueuePlacement,
  leastKvPlacement,
  powerOfTwoPlacement,
} from '@fairway/policy';
import { type DispatchInput, type DispatchResult, MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type RunInput, runSimulation } from '../src/runner.ts';

/** A real MemoryStore that also remembers every id it dispatched. */
class RecordingStore extends MemoryStore {
  readonly dispatchedIds: string[] = [];
  override async dispatch(input: DispatchInput): Promise<DispatchResult> {
    const r = await super.dispatch(input);
    if (r.kind === 'dispatched') this.dispatchedIds.push(r.req.id);
    return r;
  }
}

/** Two tenants sending fixed-size requests at fixed rates (VTC's overload workload shape). */
function steady(
  rates: Record<string, number>,
  durationS: number,
  input = 256,
  output = 256,
): RequestDescriptor[] {
  const out: RequestDescriptor[] = [];
  for (const [tenant, rate] of Object.entries(rates))
    for (let t = 0; t < durationS * 1000; t += 1000 / rate)
      out.push({
        id: `${tenant}-${out.length}`,
        tenant,
        model: 'llama-2-7b',
        sloClass: 'interactive',
        inputTokens: input,
        maxTokens: output,
        outputTokens: output,
        arrivalMs: t,
      });
  return out.sort((a, b) => a.arrivalMs - b.arrivalMs || (a.id < b.id ? -1 : 1));
}

/** Poisson arrivals with random lengths; `maxTokens` above the true output, as real clients set it. */
function poisson(
  seed: number,
  ratePerS: number,
  durationS: number,
  model = 'llama-2-7b',
): RequestDescriptor[] {
  const rng = createRng(seed);
  const out: RequestDescriptor[] = [];
  let t = 0;
  for (;;) {
    t += rng.exponential(ratePerS) * 1000;
    if (t >= durationS * 1000) break;
    const output = rng.int(1, 400);
    out.push({
      id: `p${out.length}`,
      tenant: `t${rng.int(0, 3)}`,
      model,
      sloClass: 'interactive',
      inputTokens: rng.int(1, 1500),
      maxTokens: output + rng.int(0, 300),
      outputTokens: output,
      arrivalMs: t,
    });
  }
  return out;
}

const A10G_VTC = { gpu: 'A10G-24GB', model: 'llama-2-7b', kvCapacityTokens: 10_000 } as const;

function base(over: Partial<RunInput>): RunInput {
  return {
    scenario: 'test',
    seed: 1,
    durationS: 60,
    engines: [{ id: 'e0', config: A10G_VTC }],
    tenantWeights: {},
    arrivals: [],
    ordering: fcfsPolicy(),
    placement: joinShortestQueuePlacement(),
    ...over,
  };
}

describe('runSimulation', () => {
  it('holds requests at the gateway so the engine’s own queue stays nearly empty under overload', async () => {
    const run = await runSimulation(
      base({ durationS: 120, arrivals: steady({ a: 1.5, b: 3 }, 120), sampleMs: 1e-9 }),
    );
    const held = run.records.filter((r) => r.dispatchS === undefined && !r.rejected).length;
    expect(held).toBeGreaterThan(200);
    // After a step, only what the step's completions just dispatched can be waiting in the engine.
    expect(Math.max(...run.samples.map((s) => s.waiting))).toBeLessThanOrEqual(2);
    expect(run.preemptions).toBe(0);
  });

  it('reproduces VTC’s overload result with FCFS: ≈ 890 tokens/s, and service in proportion to rates', async () => {
    // VTC section 5.2 / Table 5 setup: A10G, Llama-2-7B, 10,000-token pool, 256/256 tokens, two
    // clients at 1.5 and 3 req/s for 10 minutes. FCFS serves them in arrival order, so the 3 req/s
    // client gets about twice the service.
    const durationS = 600;
    const run = await runSimulation(base({ durationS, arrivals: steady({ slow: 1.5, fast: 3 }, durationS) }));
    let tokens = 0;
    const service: Record<string, number> = {};
    for (const r of run.records) {
      if (r.finishS !== undefined) tokens += r.req.inputTokens + r.generated;
      if (r.dispatchS !== undefined)
        service[r.req.tenant] = (service[r.req.tenant] ?? 0) + r.req.inputTokens + 2 * r.generated;
    }
    expect(tokens / durationS).toBeGreaterThan(890 * 0.85);
    expect(tokens / durationS).toBeLessThan(890 * 1.15);
    expect(service.fast! / service.slow!).toBeGreaterThan(1.8);
    expect(service.fast! / service.slow!).toBeLessThan(2.2);
  });

  it('loses no request, dispatches none twice, and returns every reservation when the load drains', async () => {
    const store = new RecordingStore();
    const arrivals = poisson(5, 4, 60);
    const engines = [
      { id: 'a10g', config: { gpu: 'A10G-24GB', model: 'llama-2-7b' } },
      { id: 'a100', config: { gpu: 'A100-80GB', model: 'llama-2-7b' } },
    ];
    // A long horizon with arrivals only in the first minute: everything finishes.
    const run = await runSimulation(
      base({ durationS: 900, engines, arrivals, store, placement: leastKvPlacement() }),
    );
    expect(run.records.map((r) => r.req.id)).toEqual(arrivals.map((a) => a.id));
    expect(new Set(store.dispatchedIds).size).toBe(store.dispatchedIds.length);
    expect(store.dispatchedIds.length).toBe(arrivals.length);
    for (const r of run.records) {
      expect(r.rejected).toBeUndefined();
      expect(r.finishS).toBeDefined();
      expect(r.generated).toBe(r.req.outputTokens);
      expect(r.firstTokenS!).toBeGreaterThanOrEqual(r.dispatchS!);
      expect(r.dispatchS!).toBeGreaterThanOrEqual(r.arrivalS);
    }
    expect(new Set(run.records.map((r) => r.replica))).toEqual(new Set(['a10g', 'a100']));
    for (const id of ['a10g', 'a100']) expect(await store.reserved(id)).toEqual({ tokens: 0, seqs: 0 });
    const snap = await store.snapshot('llama-2-7b', 0);
    expect(Object.values(snap.queued).reduce((x, y) => x + y, 0)).toBe(0);
  });

  it('conserves requests with several gateways sharing one store, each with its own flush timing', async () => {
    const arrivals = poisson(9, 6, 60);
    const engines = Array.from({ length: 3 }, (_, i) => ({
      id: `e${i}`,
      config: { gpu: 'A100-40GB', model: 'llama-2-7b' },
    }));
    const results = [];
    for (const dispatchers of [1, 3]) {
      const store = new RecordingStore();
      const run = await runSimulation(
        base({
          durationS: 900,
          engines,
          arrivals,
          store,
          dispatchers,
          flushMs: 40,
          placement: powerOfTwoPlacement(createRng(2)),
        }),
      );
      expect(store.dispatchedIds.length).toBe(arrivals.length);
      expect(new Set(store.dispatchedIds).size).toBe(arrivals.length);
      for (const e of engines) expect(await store.reserved(e.id)).toEqual({ tokens: 0, seqs: 0 });
      const served = run.records.reduce((s, r) => s + r.generated, 0);
      results.push(served);
      expect(run.records.every((r) => r.finishS !== undefined)).toBe(true);
    }
    expect(results[1]).toBe(results[0]);
  });

  it('is deterministic: the same input gives the same run', async () => {
    const input = () =>
      base({
        durationS: 45,
        engines: [
          { id: 'e0', config: { gpu: 'A100-80GB', model: 'llama-2-7b', kvCapacityTokens: 8000 } },
          { id: 'e1', config: { gpu: 'V100-32GB', model: 'llama-2-7b', batchPolicy: 'decode-priority' } },
        ],
        arrivals: poisson(3, 8, 45),
        dispatchers: 2,
        placement: powerOfTwoPlacement(createRng(7)),
        reserve: 'predicted',
      });
    const a = await runSimulation(input());
    const b = await runSimulation(input());
    expect(JSON.stringify(b)).toBe(JSON.stringify(a));
    expect(a.engineSteps).toBeGreaterThan(0);
    expect(a.samples.length).toBeGreaterThan(0);
  });

  it('lets its process serve timers and I/O while a long run goes on, with the same result', async () => {
    const input = () =>
      base({
        durationS: 45,
        engines: [{ id: 'e0', config: { gpu: 'A100-80GB', model: 'llama-2-7b', kvCapacityTokens: 8000 } }],
        arrivals: poisson(3, 8, 45),
      });
    let running = true;
    let turns = 0;
    const tick = (): void => {
      if (!running) return;
      turns++;
      setImmediate(tick);
    };
    setImmediate(tick);
    const a = await runSimulation(input());
    running = false;
    // A run that never left the microtask queue would let no turn of the event loop through.
    expect(a.engineSteps).toBeGreaterThan(2_500);
    expect(turns).toBeGreaterThan(1);
    expect(JSON.stringify(await runSimulation(input()))).toBe(JSON.stringify(a));
  });

  it('cuts the run at its duration and reports progress', async () => {
    const seen: number[] = [];
    const run = await runSimulation(
      base({ durationS: 30, arrivals: steady({ a: 2 }, 60), onProgress: (s) => seen.push(s) }),
    );
    expect(run.records.every((r) => r.arrivalS <= 30)).toBe(true);
    expect(run.records.some((r) => r.finishS === undefined)).toBe(true);
    expect(run.records.every((r) => (r.finishS ?? 0) <= 30)).toBe(true);
    expect(seen.at(-1)).toBe(30);
    expect(seen.length).toBeGreaterThan(10);
  });

  it('rejects malformed input, naming the field', async () => {
    const arrivals = steady({ a: 1 }, 3);
    await expect(runSimulation(base({ arrivals: [...arrivals].reverse() }))).rejects.toThrow(ConfigError);
    await expect(runSimulation(base({ arrivals: [...arrivals].reverse() }))).rejects.toThrow(
      /arrivals\[1\]\.arrivalMs/,
    );
    await expect(
      runSimulation(base({ engines: [{ id: 'e0', config: { ...A10G_VTC, maxNumSeqs: -1 } }], arrivals })),
    ).rejects.toThrow(/engines\[0\]\.config.*maxNumSeqs/s);
  });
});
