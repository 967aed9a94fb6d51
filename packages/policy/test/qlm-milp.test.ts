import { createRng, type Rng } from '@fairway/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { solveGlobalSchedule } from '../src/qlm/global-scheduler.ts';
import { listPlan } from '../src/qlm/list-planner.ts';
import { buildMilp } from '../src/qlm/milp-model.ts';
import { loadHighsSolver, type MilpSolver } from '../src/qlm/milp-solver.ts';
import { evaluatePlan, type PlanGroup, type PlanInstance, type QueuePlan } from '../src/qlm/plan-instance.ts';
import { improvePlan } from '../src/qlm/plan-search.ts';

let solver: MilpSolver;
beforeAll(async () => {
  solver = await loadHighsSolver();
});

function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((x, i) =>
    permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((p) => [x, ...p]),
  );
}

/** Exhaustive search over every assignment of groups to queues and every order on each queue. */
function bruteForce(instance: PlanInstance): { objective: number; plan: QueuePlan } {
  const { groups, queues } = instance;
  let best: { objective: number; plan: QueuePlan } | undefined;
  const total = queues.length ** groups.length;
  for (let code = 0; code < total; code++) {
    const buckets: string[][] = queues.map(() => []);
    let c = code;
    for (const g of groups) {
      (buckets[c % queues.length] as string[]).push(g.id);
      c = Math.floor(c / queues.length);
    }
    const orders = buckets.map((b) => permutations(b));
    const pick = (q: number, acc: string[][]): void => {
      if (q === queues.length) {
        const plan = Object.fromEntries(queues.map((qq, k) => [qq.id, acc[k] as string[]]));
        const e = evaluatePlan(instance, plan);
        if (e.feasible && (!best || e.objective < best.objective)) best = { objective: e.objective, plan };
        return;
      }
      for (const o of orders[q] as string[][]) pick(q + 1, [...acc, o]);
    };
    pick(0, []);
  }
  if (!best) throw new Error('no feasible plan');
  return best;
}

function randomInstance(rng: Rng, nGroups: number, nQueues: number): PlanInstance {
  const models = ['m0', 'm1'];
  const groups: PlanGroup[] = Array.from({ length: nGroups }, (_, i) => {
    const band = rng.int(0, 1);
    const size = rng.int(1, 8);
    return {
      id: `g${i}`,
      model: models[rng.int(0, 1)] as string,
      size,
      weight: size * (band === 0 ? 1 : 0.1),
      deadlineS: rng.int(5, 60),
      arrivalS: -rng.int(0, 30),
    };
  });
  const queues = Array.from({ length: nQueues }, (_, q) => ({
    id: `r${q}`,
    currentModel: models[q % 2],
    readyS: rng.int(0, 10),
    swapS: { m0: q % 2 === 0 ? 0 : 8, m1: q % 2 === 1 ? 0 : 8 },
    drainS: 3,
    firstDrainS: 2,
  }));
  const serviceS = groups.map(() => queues.map((_, q) => rng.int(2, 15) * (q === 0 ? 1 : 1.5)));
  // Lateness offset: prefill plus in-group wait minus the deadline.
  const lateOffsetS = groups.map((g, i) =>
    queues.map((_, q) => 0.5 * ((serviceS[i] as number[])[q] as number) - g.deadlineS),
  );
  return { groups, queues, serviceS, lateOffsetS, waitWeight: 0.01 };
}

describe('solveGlobalSchedule', () => {
  it('finds the optimum of small instances, checked against exhaustive search', () => {
    const rng = createRng(7);
    for (let trial = 0; trial < 8; trial++) {
      const instance = randomInstance(rng, trial < 5 ? 4 : 5, 2);
      const brute = bruteForce(instance);
      const result = solveGlobalSchedule(instance, {
        solver,
        budget: { timeLimitS: 30, relativeGap: 1e-9 },
        maxPositions: instance.groups.length,
      });
      expect(result.source).toBe('milp');
      expect(result.solverStatus).toBe('optimal');
      expect(result.evaluation.objective).toBeCloseTo(brute.objective, 6);
    }
  });

  it('groups requests of one model to avoid repeated swaps when deadlines allow', () => {
    // Alternating models in EDF order would swap three times; the optimum swaps once.
    const groups: PlanGroup[] = ['m1', 'm0', 'm1', 'm0'].map((model, i) => ({
      id: `g${i}`,
      model,
      size: 4,
      weight: 4,
      deadlineS: 1000 + i,
      arrivalS: -i,
    }));
    const instance: PlanInstance = {
      groups,
      queues: [
        { id: 'r0', currentModel: 'm0', readyS: 0, swapS: { m0: 20, m1: 20 }, drainS: 5, firstDrainS: 0 },
      ],
      serviceS: groups.map(() => [10]),
      lateOffsetS: groups.map((g) => [1 - g.deadlineS]),
      waitWeight: 0.01,
    };
    const edf = evaluatePlan(instance, listPlan(instance, 'edf').plan);
    const result = solveGlobalSchedule(instance, { solver, budget: { timeLimitS: 10 } });
    expect(edf.feasible && edf.swaps).toBe(4);
    expect(result.evaluation.swaps).toBe(1);
    expect(result.plan.r0).toEqual(['g1', 'g3', 'g0', 'g2']);
  });

  it('puts an urgent group before a running lower-band group, which is eviction', () => {
    const instance: PlanInstance = {
      groups: [
        {
          id: 'running',
          model: 'm',
          size: 10,
          weight: 0,
          deadlineS: 1e6,
          arrivalS: -100,
          pinnedQueue: 'r0',
          running: true,
        },
        { id: 'urgent', model: 'm', size: 2, weight: 2, deadlineS: 5, arrivalS: 0 },
      ],
      queues: [{ id: 'r0', currentModel: 'm', readyS: 0, swapS: { m: 0 }, drainS: 0, firstDrainS: 0 }],
      serviceS: [[60], [4]],
      lateOffsetS: [[-1e6], [1 - 5]],
      waitWeight: 0.001,
    };
    const result = solveGlobalSchedule(instance, { solver });
    expect(result.plan.r0).toEqual(['urgent', 'running']);
    expect(result.evaluation.penalty).toBe(0);
    // The EDF fallback never evicts.
    expect(listPlan(instance, 'edf').plan.r0).toEqual(['running', 'urgent']);
  });

  it('keeps groups of one kind in their FCFS order, even where swapping them would pay', () => {
    // g2 is heavier and more urgent than g0/g1, but all three are one kind (a split cluster).
    const groups: PlanGroup[] = [0, 1, 2].map((i) => ({
      id: `g${i}`,
      model: 'm',
      size: i === 2 ? 8 : 1,
      weight: i === 2 ? 8 : 1,
      deadlineS: i === 2 ? 5 : 100,
      arrivalS: -10 + i,
      orderKey: 'm|batch-1|0',
    }));
    const instance: PlanInstance = {
      groups,
      queues: [{ id: 'r0', currentModel: 'm', readyS: 0, swapS: { m: 0 }, drainS: 0, firstDrainS: 0 }],
      serviceS: [[10], [10], [10]],
      lateOffsetS: groups.map((g) => [-g.deadlineS]),
      waitWeight: 0.01,
    };
    const result = solveGlobalSchedule(instance, { solver, budget: { timeLimitS: 10 } });
    expect(result.plan.r0).toEqual(['g0', 'g1', 'g2']);
    expect(improvePlan(instance, { r0: ['g2', 'g1', 'g0'] }).plan.r0).toEqual(['g0', 'g1', 'g2']);
  });

  it('falls back to EDF when the solver finds no plan within its time budget', () => {
    const instance = randomInstance(createRng(3), 5, 2);
    const result = solveGlobalSchedule(instance, { solver, budget: { timeLimitS: 0 }, warmStart: false });
    expect(result.source).toBe('edf-fallback');
    expect(result.solverStatus).toBe('no-solution');
    expect(result.fallbackReason).toMatch(/no-solution/);
    expect(result.plan).toEqual(listPlan(instance, 'edf').plan);
  });

  it('never returns a plan worse than its local-search start, whatever the budget', () => {
    const instance = randomInstance(createRng(4), 6, 2);
    const start = improvePlan(instance, listPlan(instance, 'edf').plan).evaluation;
    for (const timeLimitS of [0, 0.05, 5]) {
      const result = solveGlobalSchedule(instance, { solver, budget: { timeLimitS } });
      expect(start.feasible && result.evaluation.objective).toBeLessThanOrEqual(
        (start.feasible ? start.objective : 0) + 1e-9,
      );
      expect(result.evaluation.objective).toBeLessThanOrEqual(result.edfObjective + 1e-9);
    }
  });

  it("solves Eqs. 6–13 cold to a plan that satisfies the model's constraints and never loses to the heuristic", () => {
    const rng = createRng(11);
    for (let trial = 0; trial < 6; trial++) {
      const base = randomInstance(rng, 5, 2);
      // Two kinds per model (as groups split from one request kind by the size cap).
      const instance = {
        ...base,
        groups: base.groups.map((g, i) => ({ ...g, orderKey: `${g.model}|${i % 2}` })),
      };
      // The MILP on its own, no incumbent handed to it, solved to optimality.
      const model = buildMilp(instance, { maxPositions: instance.groups.length });
      const result = solver.solve(model.lp, { timeLimitS: 30, relativeGap: 1e-9 });
      expect(result.status).toBe('optimal');
      if (result.status !== 'optimal') continue;
      const plan = model.decode(result.value);
      expect(plan).toBeDefined();
      const e = evaluatePlan(instance, plan as QueuePlan);
      // Eq. 6: every group at exactly one position of one queue, each position at most one group.
      const placed = Object.values(plan as QueuePlan).flat();
      expect(placed.sort()).toEqual(instance.groups.map((g) => g.id).sort());
      // Eqs. 9–12 linearised: the solver's objective is the plan's own cost, swaps and waits included.
      expect(e.feasible).toBe(true);
      if (!e.feasible) continue;
      expect(result.objective).toBeCloseTo(e.objective, 4);
      // Groups of one kind keep their FCFS order on a shared queue.
      for (const ids of Object.values(plan as QueuePlan)) {
        const kinds = ids.map((id) => instance.groups.find((g) => g.id === id)?.orderKey);
        for (const k of new Set(kinds.filter((x) => x !== undefined))) {
          const mine = ids.filter((_, i) => kinds[i] === k);
          expect(mine).toEqual([...mine].sort((a, b) => Number(a.slice(1)) - Number(b.slice(1))));
        }
      }
      const heuristic = improvePlan(instance, listPlan(instance, 'edf').plan).evaluation;
      expect(heuristic.feasible && e.objective).toBeLessThanOrEqual(
        (heuristic.feasible ? heuristic.objective : 0) + 1e-6,
      );
    }
  });

  it('falls back to EDF when no solver is configured, and reports groups nobody can serve', () => {
    const instance: PlanInstance = {
      groups: [
        { id: 'a', model: 'm', size: 1, weight: 1, deadlineS: 10, arrivalS: 0 },
        { id: 'b', model: 'other', size: 1, weight: 1, deadlineS: 10, arrivalS: 0 },
      ],
      queues: [{ id: 'r0', currentModel: 'm', readyS: 0, swapS: { m: 0 }, drainS: 0, firstDrainS: 0 }],
      serviceS: [[1], [1]],
      lateOffsetS: [[-9], [-9]],
      waitWeight: 0,
    };
    const result = solveGlobalSchedule(instance);
    expect(result.source).toBe('edf-fallback');
    expect(result.unplaced).toEqual(['b']);
    expect(result.plan.r0).toEqual(['a']);
  });

  it('writes a model whose size grows with groups, not requests', () => {
    const instance = randomInstance(createRng(5), 8, 3);
    const model = buildMilp(instance);
    // 8 groups × 3 queues × ceil(16/3)+1 = 7 positions.
    expect(model.binaries).toBe(8 * 3 * 7);
    expect(model.lp).toMatch(/^Minimize/);
  });
});
