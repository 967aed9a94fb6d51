/**
 * Whether QLM's swap threshold (`minSwapWorkFactor`: a replica swaps models only for queued work
 * worth at least that many swap costs — a rule fairway adds, not the paper's) pays on
 * `qlm-multi-model`: QLM with the default factor 10 against QLM with none, over five seeds,
 * median (worst) of batch-1 attainment, swaps and throughput. `npx tsx packages/sim/bench/qlm-swap-rule.ts`;
 * env QLM_SWAP_SEEDS (1,2,3,4,5), QLM_SWAP_DURATION_S (scenario's).
 */
import { loadHighsSolver } from '@fairway/policy';
import { runSloExperiment } from '../src/slo-experiments.ts';

const SEEDS = (process.env.QLM_SWAP_SEEDS ?? '1,2,3,4,5').split(',').map(Number);
const DURATION = process.env.QLM_SWAP_DURATION_S ? Number(process.env.QLM_SWAP_DURATION_S) : undefined;
const solver = await loadHighsSolver();
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? (s[(n - 1) / 2] as number) : ((s[n / 2 - 1] as number) + (s[n / 2] as number)) / 2;
};
console.log(
  `qlm-multi-model${DURATION ? ` (${DURATION} s)` : ''}, seeds ${SEEDS.join(', ')}: median (worst)`,
);
console.log('');
console.log(
  '| QLM swap rule | batch-1 attainment | batch-2 attainment | swaps | completed/s | per seed batch-1 |',
);
console.log('|---|---|---|---|---|---|');
for (const factor of [10, 0]) {
  const b1: number[] = [];
  const b2: number[] = [];
  const swaps: number[] = [];
  const rate: number[] = [];
  for (const seed of SEEDS) {
    const r = await runSloExperiment({
      scenario: 'qlm-multi-model',
      policy: 'qlm',
      seed,
      durationS: DURATION,
      solver,
      minSwapWorkFactor: factor,
    });
    b1.push(r.classes.find((c) => c.sloClass === 'batch-1')?.attainment ?? Number.NaN);
    b2.push(r.classes.find((c) => c.sloClass === 'batch-2')?.attainment ?? Number.NaN);
    swaps.push(r.swaps);
    rate.push(r.throughput.completedPerS);
  }
  const pct = (xs: number[]) => `${(100 * median(xs)).toFixed(1)}% (${(100 * Math.min(...xs)).toFixed(1)}%)`;
  console.log(
    `| ${factor === 0 ? 'none (swap whenever the plan says)' : `minSwapWorkFactor ${factor}`} | ${pct(b1)} | ${pct(b2)} | ${median(swaps)} (${Math.max(...swaps)}) | ${median(rate).toFixed(2)} (${Math.min(...rate).toFixed(2)}) | ${b1.map((x) => `${(100 * x).toFixed(1)}%`).join(', ')} |`,
  );
}
