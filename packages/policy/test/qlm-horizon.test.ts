import { createRng, type Rng } from '@fairway/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { solveGlobalSchedule } from '../src/qlm/global-scheduler.ts';
import { listPlan } from '../src/qlm/list-planner.ts';
import { loadHighsSolver, type MilpSolver } from '../src/qlm/milp-solver.ts';
import { evaluatePlan, type PlanGroup, type PlanInstance, type QueuePlan } from '../src/qlm/plan-instance.ts';
import { improvePlan } from '../src/qlm/plan-search.ts';

let solver: MilpSolver;
beforeAll(async () => {
  solver = await loadHighsSolver();
});

function instanceOf(rng: Rng, nGroups: number): PlanInstance {
  const models = ['m0', 'm1'];
  const groups: PlanGroup[] = Array.from({ length: nGroups }, (_, i) => {
    const size = rng.int(1, 8);
    return {
      id: `g${i}`,
      model: models[rng.int(0, 1)] as string,
      size,
      weight: size * (rng.int(0, 1) === 0 ? 1 : 0.1),
      deadlineS: rng.int(5, 60),
      arrivalS: -rng.int(0, 30),
    };
  });
  const queues = [0, 1].map((q) => ({
    id: `r${q}`,
    currentModel: models[q],
    readyS: rng.int(0, 10),
    swapS: { m0: q === 0 ? 0 : 8, m1: q === 1 ? 0 : 8 },
    drainS: 3,
    firstDrainS: 3,
  }));
  const serviceS = groups.map(() => queues.map((_, q) => rng.int(2, 15) * (q === 0 ? 1 : 1.5)));
  const lateOffsetS = groups.map((g, i) =>
    queues.map((_, q) => 0.5 * ((serviceS[i] as number[])[q] as number) - g.deadlineS),
  );
  return { groups, queues, serviceS, lateOffsetS, waitWeight: 0.01 };
}

function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((x, i) =>
    permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((p) => [x, ...p]),
  );
}

/** Best plan that keeps each queue's tail (after `head` groups of `start`) fixed, by exhaustion. */
function bestWithFixedTails(instance: PlanInstance, start: QueuePlan, head: number): number {
  const heads = instance.queues.flatMap((q) => (start[q.id] ?? []).slice(0, head));
  const tails = Object.fromEntries(instance.queues.map((q) => [q.id, (start[q.id] ?? []).slice(head)]));
  let best = Number.POSITIVE_INFINITY;
  const Q = instance.queues.length;
  for (let code = 0; code < Q ** heads.length; code++) {
    const buckets: string[][] = instance.queues.map(() => []);
    let c = code;
    for (const id of heads) {
      (buckets[c % Q] as string[]).push(id);
      c = Math.floor(c / Q);
    }
    if (buckets.some((b) => b.length > head + 1)) continue;
    const walk = (q: number, acc: string[][]): void => {
      if (q === Q) {
        const plan = Object.fromEntries(
          instance.queues.map((qq, k) => [qq.id, [...(acc[k] as string[]), ...(tails[qq.id] ?? [])]]),
        );
        const e = evaluatePlan(instance, plan);
        if (e.feasible) best = Math.min(best, e.objective);
        return;
      }
      for (const o of permutations(buckets[q] as string[])) walk(q + 1, [...acc, o]);
    };
    walk(0, []);
  }
  return best;
}

describe('rolling-horizon global scheduler (headPositions)', () => {
  it('decides the heads optimally with the tails priced from the heads’ end', () => {
    const rng = createRng(11);
    for (let trial = 0; trial < 6; trial++) {
      const instance = instanceOf(rng, 7);
      const start = improvePlan(instance, listPlan(instance, 'edf').plan);
      const result = solveGlobalSchedule(instance, {
        solver,
        budget: { timeLimitS: 30, relativeGap: 1e-9 },
        headPositions: 2,
      });
      const brute = bestWithFixedTails(instance, start.plan, 2);
      expect(result.evaluation.objective).toBeLessThanOrEqual(
        (start.evaluation.feasible ? start.evaluation.objective : Infinity) + 1e-9,
      );
      expect(result.evaluation.objective).toBeCloseTo(brute, 6);
      // The tails stay in their starting order on their queues.
      for (const q of instance.queues) {
        const tail = (start.plan[q.id] ?? []).slice(2);
        expect(result.plan[q.id]?.slice(-tail.length || Number.POSITIVE_INFINITY)).toEqual(tail);
      }
    }
  });

  it('keeps the MILP small however long the queues are', () => {
    const rng = createRng(3);
    const big = instanceOf(rng, 40);
    const result = solveGlobalSchedule(big, {
      solver,
      budget: { timeLimitS: 30, maxNodes: 50 },
      headPositions: 2,
    });
    expect(result.milp?.binaries).toBeLessThanOrEqual(4 * 2 * 3);
    expect(result.evaluation.feasible).toBe(true);
  });
});
