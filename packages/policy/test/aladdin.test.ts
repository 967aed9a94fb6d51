import { createRng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { aladdinPlacement } from '../src/aladdin/aladdin-placement.ts';
import { placeBestFit, rankBestFit } from '../src/aladdin/best-fit.ts';
import { capacityNorm } from '../src/aladdin/capacity-norm.ts';
import { rebalance } from '../src/aladdin/rebalance.ts';
import { type PlacedRequest, type ReplicaView, resolveAladdinOptions } from '../src/aladdin/replica-view.ts';
import { fitWorkerCount, replicasForRate } from '../src/aladdin/scaling.ts';
import { checkPlacement, peakKvDemand } from '../src/aladdin/slo-feasibility.ts';
import { chooseTensorParallel, evaluateTp } from '../src/aladdin/worker-config.ts';
import type { PerformanceModel } from '../src/perf-model/performance-model.ts';

const perf: PerformanceModel = {
  model: 'llama-2-7b',
  gpu: 'A100-80GB',
  tp: 1,
  kvCapacityTokens: 100_000,
  maxSeqs: 64,
  kv: { h: 1, j: 0 },
  prefill: { k1: 0.2, c1: 10 },
  decode: { k2: 0.0004, c2: 0.1, c3: 10 },
};

const running = (
  id: string,
  inputTokens: number,
  predictedOutput: number,
  generated: number,
  msPerToken = 15,
) =>
  ({
    id,
    inputTokens,
    predictedOutput,
    generated,
    decodeMs: generated * msPerToken,
    started: true,
    atgtMs: 30,
  }) satisfies PlacedRequest;

const replica = (id: string, requests: PlacedRequest[], over: Partial<ReplicaView> = {}): ReplicaView => ({
  id,
  perf,
  requests,
  ...over,
});

const many = (prefix: string, n: number, make: (id: string) => PlacedRequest) =>
  Array.from({ length: n }, (_, i) => make(`${prefix}${i}`));

describe('placeBestFit', () => {
  const empty = replica('a-empty', []);
  const medium = replica(
    'b-medium',
    many('b', 10, (id) => running(id, 500, 300, 100)),
  );
  const full = replica(
    'c-full',
    many('c', 30, (id) => running(id, 1000, 500, 200)),
  );
  const incoming = { id: 'new', inputTokens: 500, predictedOutput: 300, atgtMs: 30, ttftMs: 2000 };

  it('ranks replicas by capacity norm, fullest first', () => {
    const opts = resolveAladdinOptions();
    const norms = [empty, medium, full].map((r) => capacityNorm(r, opts));
    expect(norms[0]).toBe(0);
    expect(norms[2]).toBeGreaterThan(norms[1] as number);
    expect(norms[1]).toBeGreaterThan(0);
  });

  it('picks the tightest replica on which every SLO still holds', () => {
    const decision = placeBestFit(incoming, [empty, full, medium]);
    expect(decision.kind).toBe('placed');
    if (decision.kind !== 'placed') return;
    expect(decision.replica).toBe('b-medium');
    expect(decision.rejected.map((r) => r.replica)).toEqual(['c-full']);
    // 31 sequences of ~1350 weighted tokens exceed θ·l_d(31) for a 30 ms ATGT.
    expect(decision.rejected[0]?.result.reason).toBe('atgt');
    expect(decision.prediction.iterationMs).toBeCloseTo(0.0004 * 7650 + 0.1 * 11 + 10, 9);
    expect(rankBestFit(incoming, [empty, full, medium])).toEqual(['b-medium', 'a-empty']);
  });

  it('refuses a replica where the new prefill would push a running request past its ATGT', () => {
    // 90 tokens in at 29.5 ms each: a 410 ms prefill stall leaves 10 tokens to catch up, which they cannot.
    const slow = replica('slow', [running('r', 500, 100, 90, 29.5)]);
    const big = { id: 'big', inputTokens: 2000, predictedOutput: 100 };
    const result = checkPlacement(slow, { ...big, generated: 0, started: false }, resolveAladdinOptions());
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.reason).toBe('atgt');
    expect(result.requestId).toBe('r');
    const expectedIter = 0.0004 * (595 + 2050) + 0.1 * 2 + 10;
    expect(result.predicted).toBeCloseTo((90 * 29.5 + 410 + 10 * expectedIter) / 99, 9);
    expect(placeBestFit(big, [slow]).kind).toBe('needs-replica');
    // A short prompt stalls it for 30 ms only, which it absorbs.
    expect(placeBestFit({ id: 'small', inputTokens: 100, predictedOutput: 100 }, [slow]).kind).toBe('placed');
  });

  it('refuses a replica where a waiting request would miss its TTFT because of the larger prefill batch', () => {
    const pending: PlacedRequest = {
      id: 'p',
      inputTokens: 500,
      predictedOutput: 100,
      generated: 0,
      started: false,
      ttftMs: 2000,
      waitedMs: 1900,
    };
    const r = replica('r', [pending]);
    const result = checkPlacement(
      r,
      { id: 'n', inputTokens: 500, predictedOutput: 100, generated: 0, started: false },
      resolveAladdinOptions(),
    );
    expect(result).toMatchObject({ ok: false, reason: 'ttft', requestId: 'p', predicted: 2110, limit: 2000 });
  });

  it('refuses a replica whose KV cache would overflow before its batch drains', () => {
    const small = replica('small', [running('x', 3000, 2000, 1000)], { kvCapacityTokens: 6000 });
    const decision = placeBestFit({ id: 'n', inputTokens: 1000, predictedOutput: 1000 }, [small]);
    expect(decision.kind).toBe('needs-replica');
    if (decision.kind === 'needs-replica') expect(decision.rejected[0]?.result.reason).toBe('kv');
  });
});

describe('peakKvDemand', () => {
  it('finds the peak just before a request finishes', () => {
    const reqs: PlacedRequest[] = [
      { id: 'r1', inputTokens: 100, predictedOutput: 10, generated: 0, started: false },
      { id: 'r2', inputTokens: 50, predictedOutput: 20, generated: 5, started: true },
    ];
    // s = 9: (100 + 9) + (55 + 9) = 173; s = 14: r2 alone at 69.
    expect(peakKvDemand(replica('r', []), reqs)).toBe(173);
    expect(peakKvDemand(replica('r', [], { perf: { ...perf, kv: { h: 1, j: 2 } } }), reqs)).toBe(177);
  });
});

describe('rebalance', () => {
  const pending = (id: string): PlacedRequest => ({
    id,
    inputTokens: 100,
    predictedOutput: 100,
    generated: 0,
    started: false,
  });

  it('moves a not-yet-started request from an under-estimated replica to an over-estimated one', () => {
    const x = {
      ...replica('x', [
        { id: 'long', inputTokens: 100, predictedOutput: 200, generated: 400, started: true },
        pending('p1'),
        pending('p2'),
      ]),
    };
    const y = {
      ...replica('y', [running('ok', 100, 300, 10)]),
      finished: [{ id: 'short', predictedOutput: 500, actualOutput: 100 }],
    };
    const plan = rebalance([x, y]);
    expect(plan.before).toMatchObject([
      { replica: 'x', lengthError: 200, batchError: 1 },
      { replica: 'y', lengthError: -400, batchError: -1 },
    ]);
    expect(plan.moves).toEqual([{ requestId: 'p1', from: 'x', to: 'y' }]);
    const sum = (e: readonly { distance: number }[]) => e.reduce((s, v) => s + v.distance, 0);
    expect(sum(plan.after)).toBeLessThan(sum(plan.before));
  });

  it('proposes nothing when predictions held', () => {
    const plan = rebalance([replica('x', [pending('p1')]), replica('y', [running('r', 100, 300, 10)])]);
    expect(plan.moves).toEqual([]);
  });

  it('never moves a request onto a replica where it would break an SLO', () => {
    const x = replica('x', [
      { id: 'long', inputTokens: 100, predictedOutput: 200, generated: 400, started: true },
      pending('p1'),
    ]);
    const y = {
      ...replica('y', [running('busy', 3000, 2000, 1000)], { kvCapacityTokens: 4100 }),
      finished: [{ id: 'short', predictedOutput: 500, actualOutput: 100 }],
    };
    expect(rebalance([x, y]).moves).toEqual([]);
  });
});

describe('rebalance on random fleets', () => {
  // Seeded random fleets: running requests that outran or undershot their predictions, and
  // pending (placed, not started) ones with TTFT and ATGT targets.
  const fleet = (
    seed: number,
  ): (ReplicaView & { finished: { id: string; predictedOutput: number; actualOutput: number }[] })[] => {
    const rng = createRng(seed);
    return Array.from({ length: 4 }, (_, i) => {
      const requests: PlacedRequest[] = [];
      for (let k = rng.int(0, 6); k > 0; k--) {
        const predicted = rng.int(20, 400);
        requests.push({
          ...running(`r${i}-${k}`, rng.int(50, 2_000), predicted, rng.int(1, 2 * predicted), rng.int(8, 20)),
        });
      }
      for (let k = rng.int(0, 4); k > 0; k--)
        requests.push({
          id: `p${i}-${k}`,
          inputTokens: rng.int(50, 2_000),
          predictedOutput: rng.int(20, 400),
          generated: 0,
          started: false,
          atgtMs: 30,
          ttftMs: 2_000,
          waitedMs: rng.int(0, 500),
        });
      const finished = Array.from({ length: rng.int(0, 3) }, (_, k) => ({
        id: `f${i}-${k}`,
        predictedOutput: 300,
        actualOutput: rng.int(1, 600),
      }));
      return { ...replica(`w${i}`, requests, { kvCapacityTokens: 20_000 }), finished };
    });
  };
  // A request violates when the replica it sits on, without it, could not take it back.
  const violations = (replicas: readonly ReplicaView[]) => {
    let n = 0;
    for (const r of replicas)
      for (const req of r.requests)
        if (
          !checkPlacement(
            { ...r, requests: r.requests.filter((x) => x !== req) },
            req,
            resolveAladdinOptions(),
          ).ok
        )
          n++;
    return n;
  };

  it('moves only requests that have not started, and never adds an SLO violation', () => {
    let moved = 0;
    for (let seed = 1; seed <= 40; seed++) {
      const replicas = fleet(seed);
      const plan = rebalance(replicas);
      const after = replicas.map((r) => ({ ...r, requests: [...r.requests] }));
      for (const m of plan.moves) {
        const from = after.find((r) => r.id === m.from)!;
        const req = from.requests.find((x) => x.id === m.requestId)!;
        expect(req.started).toBe(false);
        from.requests.splice(from.requests.indexOf(req), 1);
        after.find((r) => r.id === m.to)!.requests.push(req);
        moved++;
      }
      // Moves only take requests off a replica (relaxing it) onto one that passes every constraint
      // with them, so the count of violating requests never grows.
      expect(violations(after)).toBeLessThanOrEqual(violations(replicas));
    }
    // The instances are not trivial: re-balancing did move requests in some of them.
    expect(moved).toBeGreaterThan(0);
  });
});

describe('chooseTensorParallel', () => {
  // A constructed 13B-like model on 40 GB GPUs: 26 GB of weights, 0.8 MB of KV per token; compute
  // splits over the GPUs while all-reduce adds a fixed cost that grows with (N − 1)/N (Aladdin Eq. 5).
  const models: PerformanceModel[] = [1, 2, 4, 8].map((n) => ({
    ...perf,
    tp: n,
    maxSeqs: 256,
    kvCapacityTokens: ((n * 40 - 26) * 1e9) / 0.8e6,
    decode: { k2: 0.0004 / n, c2: 0.1 / n, c3: 20 / n + (6 * (n - 1)) / n },
  }));
  const workload = { meanInputTokens: 500, meanOutputTokens: 300 };

  it('picks the degree with the most output tokens per second per GPU under the ATGT', () => {
    const choice = chooseTensorParallel(models, workload, { atgtMs: 30 });
    // Independent computation of Eq. 6 for each degree.
    const perGpu = models.map((m) => {
      const avg = 650;
      const b = Math.min(
        Math.floor(m.kvCapacityTokens / avg),
        Math.floor((30 - m.decode.c3) / (m.decode.k2 * avg + m.decode.c2)),
        256,
      );
      return (b * 1000) / ((m.decode.k2 * avg + m.decode.c2) * b + m.decode.c3) / m.tp;
    });
    const argmax = perGpu.indexOf(Math.max(...perGpu));
    expect(choice.best?.tp).toBe(models[argmax]?.tp);
    expect(choice.best?.tp).toBe(4);
    expect(choice.candidates.map((c) => c.bottleneck)).toEqual(['kv', 'atgt', 'atgt', 'seqs']);
    for (const [i, c] of choice.candidates.entries())
      expect(c.tokensPerSPerGpu).toBeCloseTo(perGpu[i] as number, 6);
  });

  it('reports a degree infeasible when one sequence already decodes slower than the ATGT', () => {
    const tooSlow = evaluateTp(models[0] as PerformanceModel, workload, { atgtMs: 15 });
    expect(tooSlow.feasible).toBe(false);
    expect(tooSlow.reason).toMatch(/ATGT/);
    const choice = chooseTensorParallel(models, workload, { atgtMs: 15 });
    expect(choice.best?.tp).not.toBe(1);
  });

  it('reports a degree infeasible when a mean prompt cannot prefill within the TTFT', () => {
    expect(evaluateTp(perf, workload, { ttftMs: 50 }).feasible).toBe(false);
    expect(evaluateTp(perf, workload, { ttftMs: 500 }).feasible).toBe(true);
  });
});

describe('fitWorkerCount', () => {
  const truth = (r: number) => Math.ceil(0.4 * r + 1.2);
  const points = [
    { rate: 0.5, replicas: 2 },
    { rate: 1, replicas: 2 },
    { rate: 2, replicas: 3 },
    ...Array.from({ length: 10 }, (_, i) => ({ rate: 5 + 5 * i, replicas: truth(5 + 5 * i) })),
  ];

  it('recovers the slope of n = ceil(k·r + c) within 10% above the threshold', () => {
    const model = fitWorkerCount(points, { thresholdRate: 2 });
    expect(Math.abs(model.k - 0.4) / 0.4).toBeLessThan(0.1);
    expect(model.lowRate.map((p) => p.rate)).toEqual([0.5, 1, 2]);
    for (const r of [10, 25, 40])
      expect(Math.abs(replicasForRate(model, r) - truth(r))).toBeLessThanOrEqual(1);
  });

  it('uses the measured minimum at or below the threshold', () => {
    const model = fitWorkerCount(points, { thresholdRate: 2 });
    expect(replicasForRate(model, 0.2)).toBe(2);
    expect(replicasForRate(model, 1.5)).toBe(3);
  });

  it('with an envelope never provisions fewer replicas than measured', () => {
    const model = fitWorkerCount(points, { thresholdRate: 2, envelope: true });
    for (const p of points.filter((q) => q.rate > 2)) {
      expect(replicasForRate(model, p.rate)).toBeGreaterThanOrEqual(p.replicas);
    }
  });

  it('finds a low-rate threshold itself when none is given', () => {
    const noisyLow = [
      { rate: 0.1, replicas: 3 },
      { rate: 0.5, replicas: 1 },
      { rate: 1, replicas: 4 },
      ...points.filter((p) => p.rate >= 5),
    ];
    const model = fitWorkerCount(noisyLow);
    expect(model.thresholdRate).toBe(1);
    expect(Math.abs(model.k - 0.4) / 0.4).toBeLessThan(0.1);
    expect(replicasForRate(model, 0.3)).toBe(3);
    expect(replicasForRate(model, 0.05)).toBe(3);
  });

  it('rejects points with a non-integer replica count, naming the field', () => {
    expect(() =>
      fitWorkerCount([
        { rate: 1, replicas: 1.5 },
        { rate: 2, replicas: 2 },
      ]),
    ).toThrow(/\[0\]\.replicas/);
  });
});

describe('aladdinPlacement', () => {
  const state = (id: string, reservedTokens: number, reservedSeqs: number, stale = false) => ({
    id,
    tokenCapacity: 10_000,
    seqCapacity: 32,
    reservedTokens,
    reservedSeqs,
    running: reservedSeqs,
    waiting: 0,
    kvUsage: reservedTokens / 10_000,
    stale,
  });

  it('orders fresh replicas fullest first by capacity norm and stale ones last', () => {
    const policy = aladdinPlacement();
    const order = policy.order([
      state('empty', 0, 0),
      state('stale-full', 9000, 30, true),
      state('half', 5000, 16),
      state('most', 8000, 20),
    ]);
    expect(order.map((r) => r.id)).toEqual(['most', 'half', 'empty', 'stale-full']);
    expect(policy.forDispatcher('d2')).toBe(policy);
  });
});
