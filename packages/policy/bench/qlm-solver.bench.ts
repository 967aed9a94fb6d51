/**
 * Time per decision of QLM's global scheduler (QLM section 8.3, "Scalability and overhead") for
 * 1,000 and 10,000 queued requests. Request grouping keeps the MILP at a few dozen groups however
 * long the queue is. Each row is the median over rounds of fresh random queues (seeded), for three
 * ways to decide:
 * - `full MILP`: every group of every queue in one MILP, stopped by a wall-clock limit;
 * - `rolling horizon`: the MILP decides the first QLM_BENCH_HEAD groups of each queue, the rest
 *   follow in the warm start's order with their lateness priced from the head's end, stopped by a
 *   node limit (deterministic, as the simulator runs it);
 * - `local search`: EDF improved by local search only (the MILP's warm start and fallback).
 *
 * Run with `npm run bench:qlm`; env: QLM_BENCH_REPLICAS (4), QLM_BENCH_TIME_LIMIT_S (2),
 * QLM_BENCH_ROUNDS (3), QLM_BENCH_DELTA (4), QLM_BENCH_HEAD (3), QLM_BENCH_NODES (50).
 */
import { createRng, type Rng } from '@fairway/core';
import { solveGlobalSchedule } from '../src/qlm/global-scheduler.ts';
import { buildPlanInstance } from '../src/qlm/instance-builder.ts';
import { listPlan } from '../src/qlm/list-planner.ts';
import { loadHighsSolver } from '../src/qlm/milp-solver.ts';
import { OutputLengthStats } from '../src/qlm/output-stats.ts';
import { evaluatePlan } from '../src/qlm/plan-instance.ts';
import { improvePlan } from '../src/qlm/plan-search.ts';
import type { QlmState } from '../src/qlm/qlm-state.ts';
import { type GroupKey, groupKeyString } from '../src/qlm/request-group.ts';
import { BENCH_MODELS, randomQlmState } from './qlm-random-state.ts';

const REPLICAS = Number(process.env.QLM_BENCH_REPLICAS ?? 4);
const TIME_LIMIT_S = Number(process.env.QLM_BENCH_TIME_LIMIT_S ?? 2);
const ROUNDS = Number(process.env.QLM_BENCH_ROUNDS ?? 3);
const DELTA = Number(process.env.QLM_BENCH_DELTA ?? 4);
const HEAD = Number(process.env.QLM_BENCH_HEAD ?? 3);
const NODES = Number(process.env.QLM_BENCH_NODES ?? 50);
const BATCH = 64;

const models = BENCH_MODELS;

function makeState(rng: Rng, queued: number): QlmState {
  return randomQlmState(rng, queued, { replicas: REPLICAS, batch: BATCH, delta: DELTA });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

const solver = await loadHighsSolver();
const lengths = new OutputLengthStats({ mean: 250, variance: 200 ** 2 });
const outputStats = (key: GroupKey) => lengths.get(groupKeyString(key));

// Warm the WebAssembly JIT so the first row does not pay for compilation.
solveGlobalSchedule(buildPlanInstance(makeState(createRng(99), 300), { outputStats }), {
  solver,
  budget: { timeLimitS: 2 },
});

type Variant = { name: string; options: Parameters<typeof solveGlobalSchedule>[1] };
const variants: Variant[] = [
  { name: `full MILP (${TIME_LIMIT_S} s limit)`, options: { solver, budget: { timeLimitS: TIME_LIMIT_S } } },
  {
    name: `rolling horizon (head ${HEAD}, ${NODES} nodes)`,
    options: {
      solver,
      budget: {
        timeLimitS: 60,
        maxNodes: NODES,
        ...(process.env.QLM_BENCH_LEAN ? { presolve: false, heuristicEffort: 0 } : {}),
      },
      headPositions: HEAD,
    },
  },
  { name: 'local search only', options: {} },
];

console.log(
  `QLM global scheduler: ${REPLICAS} replicas, ${models.length} models (20 s swaps), group size ${BATCH * DELTA} ` +
    `(δ=${DELTA} × batch ${BATCH}), median of ${ROUNDS} rounds; one decision = estimator + EDF + local search + MILP`,
);
const header = [
  'queued',
  'decider',
  'groups',
  'MILP binaries',
  'estimator ms',
  'decision ms',
  'plan from (per round)',
  'penalty EDF',
  'penalty local search',
  'penalty chosen',
  'swaps EDF',
  'swaps chosen',
];
console.log(header.join(' | '));
for (const queued of [1_000, 10_000]) {
  const states = Array.from({ length: ROUNDS }, (_, round) => makeState(createRng(1000 + round), queued));
  for (const variant of variants) {
    const rows: Record<string, number[]> = {
      est: [],
      total: [],
      pEdf: [],
      pStart: [],
      pQlm: [],
      sEdf: [],
      sQlm: [],
    };
    let groups = 0;
    let binaries = 0;
    const sources: string[] = [];
    for (const state of states) {
      const t0 = performance.now();
      const instance = buildPlanInstance(state, { outputStats });
      const t1 = performance.now();
      const result = solveGlobalSchedule(instance, variant.options);
      const t2 = performance.now();
      groups = instance.groups.length;
      binaries = result.milp?.binaries ?? 0;
      sources.push(`${result.solverStatus ?? '-'}/${result.source}`);
      const edfEval = evaluatePlan(instance, listPlan(instance, 'edf').plan);
      const start = improvePlan(instance, listPlan(instance, 'edf').plan).evaluation;
      rows.est?.push(t1 - t0);
      rows.total?.push(t2 - t0);
      rows.pEdf?.push(edfEval.feasible ? edfEval.penalty : Number.NaN);
      rows.pStart?.push(start.feasible ? start.penalty : Number.NaN);
      rows.pQlm?.push(result.evaluation.penalty);
      rows.sEdf?.push(edfEval.feasible ? edfEval.swaps : Number.NaN);
      rows.sQlm?.push(result.evaluation.swaps);
    }
    const m = (k: string, digits = 0) => median(rows[k] ?? []).toFixed(digits);
    console.log(
      [
        queued,
        variant.name,
        groups,
        binaries,
        m('est', 1),
        m('total', 0),
        sources.join(','),
        m('pEdf', 1),
        m('pStart', 1),
        m('pQlm', 1),
        m('sEdf'),
        m('sQlm'),
      ].join(' | '),
    );
  }
}
