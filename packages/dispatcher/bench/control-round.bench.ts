/**
 * What the live QLM control plane costs, off the request path: building one estimator profile
 * (once per (model, gpu, tp) when a dispatcher becomes the leader), one leader round (merging the
 * reports into the global queue and running the shared QlmControl's planning tick) for N queued
 * requests, and the size of a dispatcher's control report. CPU time (`process.cpuUsage`), so the
 * numbers hold on a busy machine better than wall time.
 *
 *   npm run bench:control
 */
import type { ControlReport } from '@fairway/bus';
import { DEFAULT_SLO_CLASSES, parseConfig } from '@fairway/core';
import { type ControlReplica, QlmControl } from '@fairway/scheduler';
import { MemoryStore } from '@fairway/store';
import { ControlFeed } from '../src/control-feed.ts';
import { liveProfiles } from '../src/control-profiles.ts';

const control = parseConfig({}).policy.control;
const cpuMs = (f: () => unknown): number => {
  const t0 = process.cpuUsage();
  f();
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / 1000;
};
const cpuMsAsync = async (f: () => Promise<unknown>): Promise<number> => {
  const t0 = process.cpuUsage();
  await f();
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / 1000;
};

const shape = { kvCapacityTokens: 200_000, maxNumSeqs: 256 };
const profileOf = liveProfiles(control, () => shape);
const profileMs = cpuMs(() => profileOf('llama-2-7b', 'A100-80GB', 1));
console.log(
  `estimator profile (llama-2-7b, A100-80GB, tp 1): ${profileMs.toFixed(1)} ms CPU, once per shape`,
);

const REPLICAS = 4;
const RUNNING = 16;
const ROUNDS = 10;
console.log(
  `\nleader round: ${REPLICAS} replicas × ${RUNNING} running, reports from 2 dispatchers, ${ROUNDS} rounds`,
);
console.log('queued | CPU ms per round (mean) | report bytes per dispatcher');
for (const queuedN of [100, 1000, 5000]) {
  const store = new MemoryStore({ validate: false });
  const qlm = new QlmControl(
    {
      sloClasses: DEFAULT_SLO_CLASSES,
      planner: 'qlm',
      intervalMs: control.intervalMs,
      profileOf,
      outputPrior: { mean: control.outputMean, variance: control.outputStd ** 2 },
    },
    profileOf('llama-2-7b', 'A100-80GB', 1).batchSize,
  );
  const feed = new ControlFeed(qlm, new Set(DEFAULT_SLO_CLASSES.map((c) => c.name)));
  const replicas = (): ControlReplica[] => {
    const running = feed.running();
    return Array.from({ length: REPLICAS }, (_, i) => ({
      id: `r${i}`,
      model: 'llama-2-7b',
      gpu: 'A100-80GB',
      tp: 1,
      ...shape,
      swapping: false,
      running: running.get(`r${i}`) ?? [],
    }));
  };
  qlm.start({ store, replicas });
  const classes = ['interactive', 'batch-1', 'batch-2'];
  let next = 0;
  const entry = (now: number) => {
    const i = next++;
    return {
      requestId: `q${i}`,
      model: 'llama-2-7b',
      sloClass: classes[i % 3] as string,
      inputTokens: 200 + (i % 7) * 300,
      maxTokens: 512,
      arrivalMs: now - (i % 50) * 100,
      generated: 0,
    };
  };
  let queued = Array.from({ length: queuedN }, () => entry(0));
  const running = Array.from({ length: REPLICAS * RUNNING }, (_, i) => ({
    ...entry(0),
    replicaId: `r${i % REPLICAS}`,
    generated: 50,
  }));
  let bytes = 0;
  let total = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const now = round * control.intervalMs;
    // Churn: a tenth of the queue leaves and as many arrive each interval.
    queued = queued
      .slice(Math.floor(queuedN / 10))
      .concat(Array.from({ length: Math.floor(queuedN / 10) }, () => entry(now)));
    const half = Math.floor(queued.length / 2);
    const reports: ControlReport[] = [
      {
        dispatcherId: 'd1',
        seq: round,
        queued: queued.slice(0, half),
        running: running.slice(0, 32),
        finished: [],
        at: now,
      },
      {
        dispatcherId: 'd2',
        seq: round,
        queued: queued.slice(half),
        running: running.slice(32),
        finished: [],
        at: now,
      },
    ];
    bytes = JSON.stringify(reports[0]).length;
    total += await cpuMsAsync(async () => {
      feed.apply(reports);
      await qlm.tick(now);
    });
  }
  console.log(`${String(queuedN).padStart(6)} | ${(total / ROUNDS).toFixed(1).padStart(23)} | ${bytes}`);
}
