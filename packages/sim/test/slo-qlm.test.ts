import { describe, expect, it } from 'vitest';
import { parseScenario } from '../src/scenario.ts';
import { EVIDENCE_SEEDS, summarizeSeeds } from '../src/seed-summary.ts';
import { runSloExperiment, type SloExperimentResult } from '../src/slo-experiments.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

const attainment = (r: SloExperimentResult, cls: string) =>
  r.classes.find((c) => c.sloClass === cls)?.attainment ?? 0;

describe('QLM on the mixed interactive + batch scenario (shortened)', () => {
  // 150 simulated seconds: the batch-2 document dump fills both KV caches while batch-1 jobs
  // and bursty chat traffic keep arriving.
  // Judged over seeds 1–5 (arrivals re-drawn): what holds under every seed is asserted on the
  // worst seed, what holds only in the median on the median. Measured interactive attainment,
  // seeds 1–5, with QLM's request groups served in arrival order inside a class:
  // QLM 1.000 under all; QLM without eviction 1.000, 1.000, 1.000, 0.910, 1.000 — eviction now
  // matters under one seed of five (before, with VTC order inside a class, under three).
  const run = (policy: Parameters<typeof runSloExperiment>[0]['policy'], seed: number) =>
    runSloExperiment({ scenario: 'qlm-mixed', policy, durationS: 150, seed });

  it(
    'meets interactive SLOs where FCFS and EDF do not, and each operation it drops costs attainment',
    async () => {
      const per: Record<'fcfs' | 'edf' | 'qlm' | 'noPull' | 'noEvict', number>[] = [];
      for (const seed of EVIDENCE_SEEDS) {
        const [fcfs, edf, qlm, noPull, noEvict] = await Promise.all([
          run('fcfs', seed),
          run('edf', seed),
          run('qlm', seed),
          run('qlm-no-pull', seed),
          run('qlm-no-evict', seed),
        ]);
        expect(qlm.evictions, `seed ${seed}`).toBeGreaterThan(0);
        expect(noEvict.evictions, `seed ${seed}`).toBe(0);
        per.push({
          fcfs: attainment(fcfs, 'interactive'),
          edf: attainment(edf, 'interactive'),
          qlm: attainment(qlm, 'interactive'),
          noPull: attainment(noPull, 'interactive'),
          noEvict: attainment(noEvict, 'interactive'),
        });
      }
      const fcfs = summarizeSeeds(per.map((p) => p.fcfs));
      expect(fcfs.worst, `FCFS: ${showSeeds(fcfs)}`).toBeLessThan(0.6);
      const qlm = summarizeSeeds(
        per.map((p) => p.qlm),
        'lower',
      );
      expect(qlm.worst, `QLM: ${showSeeds(qlm)}`).toBeGreaterThanOrEqual(0.9);
      // Without pulling, everything is pushed to the engines and their FCFS queues decide: every seed.
      const pullGain = summarizeSeeds(
        per.map((p) => p.qlm - p.noPull),
        'lower',
      );
      expect(pullGain.worst, `QLM − no pull: ${showSeeds(pullGain)}`).toBeGreaterThan(0.3);
      // Above EDF in the median (EDF ties QLM at 1.0 under some seeds).
      const overEdf = summarizeSeeds(per.map((p) => p.qlm - p.edf));
      expect(overEdf.median, `QLM − EDF: ${showSeeds(overEdf)}`).toBeGreaterThan(0);
      // Eviction never costs interactive attainment, and gains it where a burst would otherwise
      // wait behind documents holding the KV cache — under some seed, not in the median.
      const evictGain = summarizeSeeds(
        per.map((p) => p.qlm - p.noEvict),
        'lower',
      );
      expect(evictGain.worst, `QLM − no eviction: ${showSeeds(evictGain)}`).toBeGreaterThanOrEqual(0);
      expect(evictGain.best, `QLM − no eviction: ${showSeeds(evictGain)}`).toBeGreaterThan(0);
    },
    SEEDED_TIMEOUT_MS,
  );
});

describe('QLM model swapping in a multi-model pool', () => {
  // Two replicas; model B's demand starts after 60 s and overloads its single replica, while
  // model A's demand stops: serving B well needs the A replica to swap.
  const scenario = {
    name: 'swap-test',
    scenario: parseScenario({
      durationS: 240,
      seed: 3,
      cluster: {
        engines: [
          { gpu: 'A100-80GB', model: 'llama-2-7b', count: 1 },
          { gpu: 'A100-80GB', model: 'llama-3-8b', count: 1 },
        ],
      },
      streams: [
        {
          tenant: 'a',
          sloClass: 'batch-1',
          model: 'llama-2-7b',
          arrival: { process: 'poisson', rate: 4 },
          input: 200,
          output: 150,
          maxTokens: 'output',
          endS: 60,
        },
        {
          tenant: 'b',
          sloClass: 'batch-1',
          model: 'llama-3-8b',
          arrival: { process: 'poisson', rate: 40 },
          input: 200,
          output: 300,
          maxTokens: 'output',
          startS: 60,
        },
      ],
    }),
    baseDir: process.cwd(),
  };

  it('swaps an idle replica to the model in demand and serves more than without swapping', async () => {
    const [qlm, noSwap] = await Promise.all([
      runSloExperiment({ scenario, policy: 'qlm' }),
      runSloExperiment({ scenario, policy: 'qlm-no-swap' }),
    ]);
    expect(qlm.swaps).toBeGreaterThanOrEqual(1);
    expect(noSwap.swaps).toBe(0);
    expect(qlm.throughput.completedPerS).toBeGreaterThan(noSwap.throughput.completedPerS * 1.2);
    expect(attainment(qlm, 'batch-1')).toBeGreaterThan(attainment(noSwap, 'batch-1'));
  });

  it('swaps less than EDF over single requests, which swaps whenever its queue head changes model', async () => {
    const [qlm, edf] = await Promise.all([
      runSloExperiment({ scenario, policy: 'qlm' }),
      runSloExperiment({ scenario, policy: 'edf' }),
    ]);
    expect(qlm.swaps).toBeLessThanOrEqual(edf.swaps);
  });
});
