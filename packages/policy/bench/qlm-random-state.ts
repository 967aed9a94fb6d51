/**
 * Seeded random global queues for QLM's benchmarks: requests of two models and QLM's three SLO
 * classes (20% interactive, 40% batch-1, 40% batch-2) that arrived over the last minute, grouped by
 * QLM's Algorithm 1 with a size cap of δ·batch, on idle replicas that hold the models alternately
 * and can load either in 20 s (sleep/wake).
 */
import { DEFAULT_SLO_CLASSES, type Rng } from '@fairway/core';
import { sloClassMap } from '../src/edf.ts';
import type { QlmReplica, QlmState } from '../src/qlm/qlm-state.ts';
import { GroupTable, toQlmRequest } from '../src/qlm/request-group.ts';
import type { RwtProfile } from '../src/qlm/rwt-estimator.ts';

/** The benchmarks' two models. */
export const BENCH_MODELS = ['llama-a', 'llama-b'];

const classes = sloClassMap(DEFAULT_SLO_CLASSES);

/** A Llama-2-7B-like replica: `batch`-sequence batches at 25 ms an iteration, ε = 1.2. */
export function benchProfile(batch: number): RwtProfile {
  return {
    decodeMsPerIteration: 25,
    batchSize: batch,
    inefficiency: 1.2,
    prefillMs: 150,
    maxOutputTokens: 1024,
  };
}

/** A random QLM state of `queued` requests on `replicas` replicas. */
export function randomQlmState(
  rng: Rng,
  queued: number,
  shape: { readonly replicas: number; readonly batch: number; readonly delta: number },
): QlmState {
  const nowMs = 3_600_000;
  const profile = benchProfile(shape.batch);
  // Two prompt-length profiles × three classes × two models: twelve kinds of request.
  const table = new GroupTable({ avgBatchSize: shape.batch, delta: shape.delta, profileBoundaries: [1024] });
  for (let i = 0; i < queued; i++) {
    const u = rng.next();
    const sloClass = u < 0.2 ? 'interactive' : u < 0.6 ? 'batch-1' : 'batch-2';
    const input = Math.min(8000, Math.max(8, Math.round(Math.exp(5.5 + 1.1 * rng.normal()))));
    table.add(
      toQlmRequest(
        {
          id: `r${i}`,
          tenant: 't',
          model: BENCH_MODELS[rng.int(0, BENCH_MODELS.length - 1)] as string,
          sloClass,
          inputTokens: input,
          maxTokens: 1024,
          // Arrived over the last minute, so some interactive deadlines are close.
          arrivalMs: nowMs - rng.int(0, 60_000),
        },
        classes,
      ),
    );
  }
  const replicas: QlmReplica[] = Array.from({ length: shape.replicas }, (_, k) => ({
    id: `r${k}`,
    model: BENCH_MODELS[k % BENCH_MODELS.length],
    loadable: Object.fromEntries(
      BENCH_MODELS.map((m) => [m, { costS: 20, mechanism: 'sleep-wake' as const }]),
    ),
    profiles: Object.fromEntries(BENCH_MODELS.map((m) => [m, profile])),
    running: [],
    freeTokens: 0,
    freeSeqs: 0,
  }));
  return { nowMs, replicas, groups: table.groups(), queues: {} };
}
