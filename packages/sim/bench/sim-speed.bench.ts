/**
 * Simulator speed: the one-hour Azure 2023 conversation trace (19,366 requests; CC-BY 4.0, Azure
 * Public Dataset via microsoft/vidur) on 4 × A100-80GB Llama-2-7B replicas, FCFS ordering, least-KV
 * placement, tenants split over 10 tenants by a seeded Zipf(1) rule. Target: under 10 s of wall time.
 *
 * Usage: npm run bench:sim [-- --dispatchers N --placement NAME --repeat K]
 */
import { parseArgs } from 'node:util';
import { fcfsPolicy, placementByName } from '@fairway/policy';
import { runSimulation } from '../src/runner.ts';
import { traceWorkload } from '../src/trace.ts';

const { values } = parseArgs({
  options: {
    dispatchers: { type: 'string', default: '1' },
    placement: { type: 'string', default: 'least-kv' },
    repeat: { type: 'string', default: '3' },
  },
});
const dispatchers = Number(values.dispatchers);
const repeat = Number(values.repeat);

const t0 = performance.now();
const arrivals = traceWorkload({
  trace: 'azure-conv',
  split: { tenants: 10, zipfS: 1 },
  seed: 1,
  model: 'llama-2-7b',
});
const loadMs = performance.now() - t0;
const durationS = 3600;
const engines = Array.from({ length: 4 }, (_, i) => ({
  id: `replica-${i}`,
  config: { gpu: 'A100-80GB', model: 'llama-2-7b' },
}));

console.log(
  `azure-conv: ${arrivals.length} requests over ${durationS} s on 4 × A100-80GB llama-2-7b, ` +
    `${dispatchers} dispatcher(s), ${values.placement} placement (trace loaded in ${loadMs.toFixed(0)} ms)`,
);
for (let i = 0; i < repeat; i++) {
  const start = performance.now();
  const run = await runSimulation({
    scenario: 'azure-conv',
    seed: 1,
    durationS,
    engines,
    arrivals,
    ordering: fcfsPolicy(),
    placement: placementByName(values.placement),
    dispatchers,
  });
  const wallS = (performance.now() - start) / 1000;
  const done = run.records.filter((r) => r.finishS !== undefined).length;
  console.log(
    `run ${i + 1}: wall ${wallS.toFixed(2)} s | ${(durationS / wallS).toFixed(0)} simulated s per wall s | ` +
      `${run.engineSteps} engine steps, ${(run.engineSteps / wallS / 1000).toFixed(0)}k steps/s | ` +
      `${done} completed, ${run.preemptions} preemptions`,
  );
}
