/**
 * QLM's global scheduler as the paper formulates it (section 7: the MILP over request groups and
 * virtual queues, Eqs. 6–13, solved with HiGHS) against the heuristic fairway falls back to (EDF
 * improved by local search), on the same instances: seeded random global queues of two models and
 * three SLO classes on four replicas. Per instance size, median (worst) over the seeds of:
 * objective (Σ weight·lateness + wait term, what the MILP minimises), predicted SLO attainment
 * (requests in groups the estimator expects on time) and decision time. The MILP runs twice: cold
 * (its own search from nothing) and warm (the heuristic's plan as its first incumbent).
 *
 * `npm run report:qlm-solver`; env QLM_TABLE_SEEDS (1,2,3,4,5), QLM_TABLE_SIZES (300,1000),
 * QLM_TABLE_TIME_LIMIT_S (5).
 */
import { createRng, type Rng } from '@fairway/core';
import { buildPlanInstance } from '../src/qlm/instance-builder.ts';
import { listPlan } from '../src/qlm/list-planner.ts';
import { buildMilp } from '../src/qlm/milp-model.ts';
import { loadHighsSolver } from '../src/qlm/milp-solver.ts';
import { OutputLengthStats } from '../src/qlm/output-stats.ts';
import {
  evaluatePlan,
  type PlanEvaluation,
  type PlanInstance,
  type QueuePlan,
} from '../src/qlm/plan-instance.ts';
import { improvePlan } from '../src/qlm/plan-search.ts';
import type { QlmState } from '../src/qlm/qlm-state.ts';
import { type GroupKey, groupKeyString } from '../src/qlm/request-group.ts';
import { BENCH_MODELS, randomQlmState } from './qlm-random-state.ts';

const SEEDS = (process.env.QLM_TABLE_SEEDS ?? '1,2,3,4,5').split(',').map(Number);
const SIZES = (process.env.QLM_TABLE_SIZES ?? '300,1000').split(',').map(Number);
const TIME_LIMIT_S = Number(process.env.QLM_TABLE_TIME_LIMIT_S ?? 5);
const BATCH = 16;
const REPLICAS = 4;

const models = BENCH_MODELS;

function makeState(rng: Rng, queued: number): QlmState {
  return randomQlmState(rng, queued, { replicas: REPLICAS, batch: BATCH, delta: 2 });
}

const lengths = new OutputLengthStats({ mean: 250, variance: 200 ** 2 });
const outputStats = (key: GroupKey) => lengths.get(groupKeyString(key));
const solver = await loadHighsSolver();

interface Cell {
  objective: number;
  attainment: number;
  ms: number;
  status: string;
}

function attainment(instance: PlanInstance, e: PlanEvaluation): number {
  if (!e.feasible) return Number.NaN;
  let on = 0;
  let all = 0;
  for (const g of instance.groups) {
    all += g.size;
    if ((e.groups[g.id]?.latenessS ?? 1) === 0) on += g.size;
  }
  return on / all;
}

function cell(instance: PlanInstance, plan: QueuePlan | undefined, ms: number, status: string): Cell {
  const e = plan ? evaluatePlan(instance, plan) : undefined;
  if (!e?.feasible) return { objective: Number.NaN, attainment: Number.NaN, ms, status };
  return { objective: e.objective, attainment: attainment(instance, e), ms, status };
}

function milp(instance: PlanInstance, start: QueuePlan | undefined): Cell {
  const t0 = performance.now();
  const model = buildMilp(instance, { maxPositions: instance.groups.length });
  const result = solver.solve(model.lp, { timeLimitS: TIME_LIMIT_S }, start ? model.start(start) : undefined);
  const plan =
    result.status === 'optimal' || result.status === 'feasible' ? model.decode(result.value) : undefined;
  return cell(instance, plan, performance.now() - t0, result.status);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? (s[(n - 1) / 2] as number) : ((s[n / 2 - 1] as number) + (s[n / 2] as number)) / 2;
};

// Warm the WebAssembly JIT.
milp(buildPlanInstance(makeState(createRng(99), 60), { outputStats }), undefined);

console.log(
  `QLM global scheduler, ${REPLICAS} replicas × ${models.length} models (20 s swaps), groups ≤ ${2 * BATCH} requests, ` +
    `MILP time limit ${TIME_LIMIT_S} s, seeds ${SEEDS.join(', ')}: median (worst)`,
);
console.log('');
console.log(
  '| queued | groups | decider | objective | predicted attainment | decision ms | MILP status per seed |',
);
console.log('|---|---|---|---|---|---|---|');
for (const size of SIZES) {
  const rows = new Map<string, Cell[]>();
  const groups: number[] = [];
  const never: string[] = [];
  for (const seed of SEEDS) {
    const instance = buildPlanInstance(makeState(createRng(seed), size), { outputStats });
    groups.push(instance.groups.length);
    let t0 = performance.now();
    const edf = listPlan(instance, 'edf').plan;
    const edfCell = cell(instance, edf, performance.now() - t0, '-');
    t0 = performance.now();
    const heuristic = improvePlan(instance, listPlan(instance, 'edf').plan).plan;
    const hCell = cell(instance, heuristic, performance.now() - t0, '-');
    const cold = milp(instance, undefined);
    const warm = milp(instance, heuristic);
    for (const [k, c] of [
      ['EDF', edfCell],
      ['heuristic: EDF + local search', hCell],
      ['MILP Eqs. 6–13, cold', cold],
      ['MILP Eqs. 6–13, heuristic as incumbent', warm],
    ] as const)
      rows.set(k, [...(rows.get(k) ?? []), c]);
    // The claim tested: a MILP plan is never worse than the heuristic's on its instance.
    if (warm.objective > hCell.objective + 1e-6 * Math.max(1, hCell.objective)) never.push(`seed ${seed}`);
  }
  for (const [name, cells] of rows) {
    const obj = cells.map((c) => c.objective);
    const att = cells.map((c) => c.attainment);
    const ms = cells.map((c) => c.ms);
    const finite = (xs: number[]) => xs.filter(Number.isFinite);
    const o = finite(obj);
    const a = finite(att);
    console.log(
      `| ${size} | ${median(groups)} | ${name} | ${o.length ? `${median(o).toFixed(1)} (${Math.max(...o).toFixed(1)})` : '–'}${
        o.length < obj.length ? ` [${obj.length - o.length} without a plan]` : ''
      } | ${a.length ? `${(100 * median(a)).toFixed(1)}% (${(100 * Math.min(...a)).toFixed(1)}%)` : '–'} | ${median(ms).toFixed(0)} (${Math.max(...ms).toFixed(0)}) | ${cells.map((c) => c.status).join(', ')} |`,
    );
  }
  if (never.length > 0) console.log(`\nwarm MILP worse than the heuristic at ${size}: ${never.join(', ')}`);
}
