import { describe, expect, it } from 'vitest';
import { parseScenario } from '../src/scenario.ts';
import { runSloExperiment, type SloExperimentResult } from '../src/slo-experiments.ts';

const attainment = (r: SloExperimentResult, cls: string) =>
  r.classes.find((c) => c.sloClass === cls)?.attainment ?? 0;

describe('QLM on the mixed interactive + batch scenario (shortened)', () => {
  // 150 simulated seconds: the batch-2 document dump fills both KV caches while batch-1 jobs
  // and bursty chat traffic keep arriving.
  const run = (policy: Parameters<typeof runSloExperiment>[0]['policy']) =>
    runSloExperiment({ scenario: 'qlm-mixed', policy, durationS: 150 });

  it('meets interactive SLOs where FCFS and EDF do not, and each operation it drops costs attainment', async () => {
    const [fcfs, edf, qlm, noPull, noEvict] = await Promise.all([
      run('fcfs'),
      run('edf'),
      run('qlm'),
      run('qlm-no-pull'),
      run('qlm-no-evict'),
    ]);
    expect(attainment(fcfs, 'interactive')).toBeLessThan(0.6);
    expect(attainment(qlm, 'interactive')).toBeGreaterThanOrEqual(0.9);
    expect(attainment(qlm, 'interactive')).toBeGreaterThan(attainment(edf, 'interactive'));
    // Without pulling, everything is pushed to the engines and their FCFS queues decide.
    expect(attainment(noPull, 'interactive')).toBeLessThan(attainment(qlm, 'interactive') - 0.3);
    // Without eviction, interactive bursts wait behind the documents holding the KV cache.
    expect(attainment(noEvict, 'interactive')).toBeLessThan(attainment(qlm, 'interactive'));
    expect(qlm.evictions).toBeGreaterThan(0);
    expect(noEvict.evictions).toBe(0);
  });
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
