import { createRng } from '@fairway/core';
import {
  type EngineConfig,
  EngineModel,
  PerfError,
  type PlannedBatch,
  resolveEngineConfig,
} from '@fairway/perf';
import { describe, expect, it } from 'vitest';
import { SimError } from '../src/errors.ts';
import {
  analyticLowerBound,
  objectiveValue,
  replaySchedule,
  runHeuristic,
  type ScheduleObjective,
  type ScheduleRequest,
  scheduleLowerBound,
  solveOptimalSchedule,
} from '../src/optimal-schedule.ts';

const A100 = { gpu: 'A100-80GB', model: 'llama-2-7b' } as const;

interface ReqState {
  readonly m: number;
  readonly G: number;
  readonly d: boolean;
}

/**
 * Brute force, written from the engine's rules and independent of the MILP: Dijkstra over every
 * state reachable by any batch (any subset of requests, any eviction, any chunk size), the edge
 * cost being the batch time (makespan) or the batch time × requests unfinished before it (total
 * latency, offline). Returns the optimum and one optimal path as engine plans.
 */
function bruteForce(
  requests: readonly ScheduleRequest[],
  engine: EngineConfig,
  objective: ScheduleObjective,
): { value: number; plan: PlannedBatch[] } {
  const cfg = resolveEngineConfig({ ...engine, watermark: 0 });
  const blocks = Math.floor(cfg.kvCapacityTokens / cfg.blockSize);
  const P = Math.min(cfg.maxNumPrefillTokens, cfg.maxNumBatchedTokens);
  const start: ReqState[] = requests.map(() => ({ m: 0, G: 0, d: false }));
  const key = (s: readonly ReqState[]) => s.map((r) => `${r.m},${r.G},${r.d ? 1 : 0}`).join('|');
  const best = new Map<string, number>([[key(start), 0]]);
  const prev = new Map<string, { from: string; batch: PlannedBatch }>();
  const states = new Map<string, ReqState[]>([[key(start), start]]);
  const frontier: [number, string][] = [[0, key(start)]];
  while (frontier.length > 0) {
    frontier.sort((a, b) => a[0] - b[0]);
    const [cost, k] = frontier.shift()!;
    if (cost > best.get(k)!) continue;
    const s = states.get(k)!;
    if (s.every((r, i) => r.G === requests[i]!.outputTokens)) {
      const plan: PlannedBatch[] = [];
      for (let at = k; prev.has(at); at = prev.get(at)!.from) plan.unshift(prev.get(at)!.batch);
      return { value: cost, plan };
    }
    const unfinished = s.filter((r, i) => r.G < requests[i]!.outputTokens).length;
    // Options per request: -1 evict, 0 idle, k > 0 process k tokens.
    const options = s.map((r, i) => {
      const q = requests[i]!;
      if (r.G === q.outputTokens) return [0];
      const out = [0];
      if (r.m > 0) out.push(-1);
      if (r.d) out.push(1);
      else {
        const left = q.inputTokens + r.G - r.m;
        if (cfg.chunkedPrefill) for (let c = 1; c <= left; c++) out.push(c);
        else if (r.m === 0) out.push(left);
      }
      return out;
    });
    const choice = s.map(() => 0);
    const visit = (i: number): void => {
      if (i < s.length) {
        for (const o of options[i]!) {
          choice[i] = o;
          visit(i + 1);
        }
        return;
      }
      if (!choice.some((c) => c > 0)) return;
      let tokens = 0;
      let prefill = 0;
      let used = 0;
      let running = 0;
      const shape = { decodeSeqs: 0, prefillTokens: 0, prefillChunkSq: 0, kvTokensRead: 0 };
      const next: ReqState[] = [];
      const batch: { preempt: string[]; run: { id: string; tokens: number }[] } = { preempt: [], run: [] };
      s.forEach((r, idx) => {
        const q = requests[idx]!;
        const c = choice[idx]!;
        if (r.G === q.outputTokens) {
          next.push(r);
          return;
        }
        if (c === -1) {
          batch.preempt.push(q.id);
          next.push({ m: 0, G: r.G, d: false });
          return;
        }
        let held = 0;
        if (r.d) held = r.m + c;
        else if (r.m > 0 || c > 0) held = q.inputTokens + r.G;
        if (held > 0) {
          used += Math.ceil(held / cfg.blockSize);
          running++;
        }
        if (c === 0) {
          next.push(r);
          return;
        }
        batch.run.push({ id: q.id, tokens: c });
        tokens += c;
        if (r.d) {
          shape.decodeSeqs++;
          shape.kvTokensRead += r.m + 1;
        } else {
          prefill += c;
          shape.prefillTokens += c;
          shape.prefillChunkSq += c * c;
          shape.kvTokensRead += r.m;
        }
        const m = r.m + c;
        if (m === q.inputTokens + r.G) next.push({ m, G: r.G + 1, d: true });
        else next.push({ m, G: r.G, d: r.d });
      });
      if (tokens > cfg.maxNumBatchedTokens || prefill > P || used > blocks || running > cfg.maxNumSeqs)
        return;
      const t = cfg.costModel.stepMs(shape);
      const nk = key(next);
      const nc = cost + (objective === 'makespan' ? t : t * unfinished);
      if (nc < (best.get(nk) ?? Infinity) - 1e-9) {
        best.set(nk, nc);
        states.set(nk, next);
        prev.set(nk, { from: k, batch: { preempt: [...batch.preempt], run: [...batch.run] } });
        frontier.push([nc, nk]);
      }
    };
    visit(0);
  }
  throw new Error('brute force found no schedule');
}

function reqs(spec: readonly (readonly [number, number])[]): ScheduleRequest[] {
  return spec.map(([inputTokens, outputTokens], i) => ({ id: `r${i}`, inputTokens, outputTokens }));
}

const heuristics: Partial<EngineConfig>[] = [
  { batchPolicy: 'prefill-priority', chunkedPrefill: false },
  { batchPolicy: 'prefill-priority', chunkedPrefill: false, preemption: 'eviction-free' },
  { batchPolicy: 'prefill-priority', chunkedPrefill: false, preemptionVictim: 'cheapest-refill' },
  { batchPolicy: 'decode-priority', chunkedPrefill: true },
  { batchPolicy: 'decode-priority', chunkedPrefill: true, preemption: 'eviction-free' },
];

describe('optimal schedules (InferMax section 3.3)', () => {
  it('equals a brute-force optimum on tiny instances, makespan and total latency', async () => {
    const cases: { requests: ScheduleRequest[]; engine: EngineConfig; objective: ScheduleObjective }[] = [
      // KV for one request's peak and a bit: evictions or waiting are forced.
      {
        requests: reqs([
          [3, 3],
          [3, 2],
          [2, 2],
        ]),
        engine: { ...A100, kvCapacityTokens: 6, blockSize: 1, chunkedPrefill: false },
        objective: 'makespan',
      },
      {
        requests: reqs([
          [3, 2],
          [2, 2],
        ]),
        engine: { ...A100, kvCapacityTokens: 4, blockSize: 1, chunkedPrefill: true, maxNumPrefillTokens: 2 },
        objective: 'makespan',
      },
      {
        requests: reqs([
          [3, 2],
          [2, 2],
          [2, 3],
        ]),
        engine: { ...A100, kvCapacityTokens: 6, blockSize: 2, chunkedPrefill: false },
        objective: 'total-latency',
      },
      {
        requests: reqs([
          [2, 2],
          [3, 2],
        ]),
        engine: { ...A100, kvCapacityTokens: 5, blockSize: 1, chunkedPrefill: true, maxNumBatchedTokens: 3 },
        objective: 'total-latency',
      },
    ];
    for (const c of cases) {
      const brute = bruteForce(c.requests, c.engine, c.objective);
      // The brute force's own path is a valid engine schedule with the same value.
      const replayed = replaySchedule(c.requests, { ...c.engine, watermark: 0 }, brute.plan);
      expect(objectiveValue(replayed, c.objective)).toBeCloseTo(brute.value, 6);
      const opt = await solveOptimalSchedule(c.requests, {
        engine: c.engine,
        objective: c.objective,
        timeLimitS: 60,
      });
      expect(opt.status).toBe('optimal');
      expect(opt.exact).toBe(true);
      expect(opt.valueMs).toBeCloseTo(brute.value, 4);
      expect(opt.lowerBoundMs).toBeLessThanOrEqual(brute.value + 1e-6);
    }
  }, 300_000);

  it('is never worse than any heuristic, and every lower bound is below every schedule', async () => {
    for (let seed = 1; seed <= 5; seed++) {
      const rng = createRng(seed);
      const requests = Array.from({ length: 3 }, (_, i) => ({
        id: `r${i}`,
        inputTokens: rng.int(4, 40),
        outputTokens: rng.int(2, 3),
      }));
      const peak = Math.max(...requests.map((r) => r.inputTokens + r.outputTokens));
      const engine: EngineConfig = {
        ...A100,
        kvCapacityTokens: peak + 8,
        blockSize: 4,
        chunkedPrefill: false,
      };
      const opt = await solveOptimalSchedule(requests, { engine, timeLimitS: 60 });
      const analytic = analyticLowerBound(requests, engine);
      const relaxed = await scheduleLowerBound(requests, { engine });
      expect(relaxed.lowerBoundMs).toBeLessThanOrEqual(opt.valueMs + 1e-6);
      expect(analytic).toBeLessThanOrEqual(opt.valueMs + 1e-6);
      expect(opt.lowerBoundMs).toBeLessThanOrEqual(opt.valueMs + 1e-6);
      for (const h of heuristics) {
        const run = runHeuristic(requests, { ...engine, ...h, watermark: 0 });
        expect(opt.valueMs).toBeLessThanOrEqual(run.makespanMs + 1e-6);
        expect(relaxed.lowerBoundMs).toBeLessThanOrEqual(run.makespanMs + 1e-6);
        expect(analytic).toBeLessThanOrEqual(run.makespanMs + 1e-6);
      }
    }
  }, 600_000);

  it('returns a schedule that replays through the engine within KV, C and P at every batch', async () => {
    const requests = reqs([
      [12, 2],
      [8, 3],
      [4, 2],
    ]);
    const engine: EngineConfig = {
      ...A100,
      kvCapacityTokens: 20,
      blockSize: 4,
      chunkedPrefill: true,
      maxNumBatchedTokens: 12,
      maxNumPrefillTokens: 6,
    };
    const opt = await solveOptimalSchedule(requests, { engine, timeLimitS: 60 });
    const model = new EngineModel({ ...engine, watermark: 0 });
    for (const r of requests)
      model.add({
        id: r.id,
        inputTokens: r.inputTokens,
        outputTokens: r.outputTokens,
        maxTokens: r.outputTokens,
      });
    let total = 0;
    for (const b of opt.batches) {
      const r = model.stepPlanned(b);
      total += r.durationMs;
      expect(r.shape.prefillTokens).toBeLessThanOrEqual(6);
      expect(r.shape.prefillTokens + r.shape.decodeSeqs).toBeLessThanOrEqual(12);
      const s = model.stats();
      expect(s.kvUsedTokens).toBeLessThanOrEqual(20);
    }
    expect(model.hasWork()).toBe(false);
    expect(model.stats().requestsFinishedTotal).toBe(3);
    expect(total).toBeCloseTo(opt.makespanMs, 6);
    // The MILP prices its schedule as the engine does (chunk² within its tangent approximation).
    expect(Math.abs(opt.milpValueMs - opt.valueMs)).toBeLessThan(0.01);
  }, 300_000);

  it('rejects an instance over the size limit, naming the limit', async () => {
    const requests = Array.from({ length: 9 }, (_, i) => ({ id: `r${i}`, inputTokens: 4, outputTokens: 2 }));
    const err = await solveOptimalSchedule(requests, { engine: A100 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SimError);
    expect((err as SimError).code).toBe('FAIRWAY_SIM_INSTANCE_TOO_LARGE');
    expect((err as Error).message).toMatch(/at most 8 \(OPTIMAL_LIMITS\.maxRequests\)/);
  });
});

describe('EngineModel.stepPlanned', () => {
  const engine: EngineConfig = {
    ...A100,
    kvCapacityTokens: 32,
    blockSize: 8,
    watermark: 0,
    chunkedPrefill: true,
    maxNumBatchedTokens: 20,
    maxNumPrefillTokens: 10,
  };
  const fresh = () => {
    const m = new EngineModel(engine);
    m.add({ id: 'a', inputTokens: 16, outputTokens: 2, maxTokens: 2 });
    m.add({ id: 'b', inputTokens: 17, outputTokens: 2, maxTokens: 2 });
    return m;
  };

  it('rejects plans over P, over C, over the KV cache or with a partial chunk when not chunked, changing nothing', () => {
    const m = fresh();
    const bad: [PlannedBatch, RegExp][] = [
      [{ run: [{ id: 'a', tokens: 11 }] }, /maxNumPrefillTokens 10/],
      // a's 16-token prompt takes 2 blocks, b's 17 tokens 3: 5 > 4 blocks.
      [
        {
          run: [
            { id: 'a', tokens: 5 },
            { id: 'b', tokens: 5 },
          ],
        },
        /needs 3 KV blocks, 2 are free/,
      ],
      [{ run: [{ id: 'a', tokens: 17 }] }, /16 prompt tokens left/],
      [{ preempt: ['a'], run: [] }, /not running/],
      [{ run: [{ id: 'zz', tokens: 1 }] }, /unknown sequence/],
    ];
    for (const [plan, message] of bad) {
      const err = (() => {
        try {
          m.stepPlanned(plan);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(err).toBeInstanceOf(PerfError);
      expect((err as PerfError).code).toBe('FAIRWAY_SIM_INVALID_BATCH_PLAN');
      expect((err as Error).message).toMatch(message);
      expect(m.stats().kvUsedTokens).toBe(0);
      expect(m.stats().stepsTotal).toBe(0);
    }
    const unchunked = new EngineModel({ ...engine, chunkedPrefill: false, maxNumPrefillTokens: 20 });
    unchunked.add({ id: 'a', inputTokens: 16, outputTokens: 2, maxTokens: 2 });
    expect(() => unchunked.stepPlanned({ run: [{ id: 'a', tokens: 8 }] })).toThrow(/needs chunkedPrefill/);
    const small = new EngineModel({ ...engine, maxNumBatchedTokens: 8 });
    small.add({ id: 'a', inputTokens: 16, outputTokens: 2, maxTokens: 2 });
    expect(() => small.stepPlanned({ run: [{ id: 'a', tokens: 9 }] })).toThrow(/maxNumBatchedTokens 8/);
  });

  it('runs chunks, a decode and a preemption, then a refill of prompt + output so far', () => {
    const m = fresh();
    m.stepPlanned({ run: [{ id: 'a', tokens: 10 }] });
    const r = m.stepPlanned({ run: [{ id: 'a', tokens: 6 }] });
    expect(r.events.some((e) => e.kind === 'first-token' && e.id === 'a')).toBe(true);
    expect(() => m.stepPlanned({ run: [{ id: 'a', tokens: 2 }] })).toThrow(/decoding: it processes 1 token/);
    const p = m.stepPlanned({ preempt: ['a'], run: [{ id: 'b', tokens: 10 }] });
    expect(p.events.filter((e) => e.kind === 'preempted')).toHaveLength(1);
    expect(m.stats().kvUsedTokens).toBe(24);
    m.stepPlanned({ run: [{ id: 'b', tokens: 7 }] });
    // a's refill is its 16 prompt tokens plus the 1 it generated.
    expect(() =>
      m.stepPlanned({
        run: [
          { id: 'a', tokens: 10 },
          { id: 'b', tokens: 1 },
        ],
      }),
    ).toThrow(/KV block/);
  });
});
