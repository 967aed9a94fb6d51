import type { RequestDescriptor } from '@fairway/core';
import { fitEnginePerformance } from '@fairway/perf';
import { aladdinPlacement, fcfsPolicy } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { runSimulation } from '../src/runner.ts';

const config = { model: 'llama-2-7b', gpu: 'A100-80GB', tp: 1 };
const perf = fitEnginePerformance(config).model;

const request = (id: string, arrivalMs: number, inputTokens: number): RequestDescriptor => ({
  id,
  tenant: 't',
  model: 'llama-2-7b',
  sloClass: 'interactive',
  inputTokens,
  maxTokens: 20,
  outputTokens: 20,
  arrivalMs,
});

/** Two replicas; a 3,000-token prompt at 0 ms, a 2,000-token one 1 ms later; where each ran and its TTFT. */
async function run(ttftMs: number | undefined) {
  const result = await runSimulation({
    scenario: 'aladdin-ttft',
    seed: 1,
    durationS: 5,
    engines: [
      { id: 'replica-0', config },
      { id: 'replica-1', config },
    ],
    arrivals: [request('long', 0, 3_000), request('next', 1, 2_000)],
    ordering: fcfsPolicy(),
    placement: aladdinPlacement({
      perfOf: () => perf,
      atgtMs: 1_000,
      ...(ttftMs === undefined ? {} : { ttftMs }),
      predictOutput: () => 20,
    }),
    reportSequences: true,
  });
  const of = (id: string) => result.records.find((r) => r.req.id === id);
  return {
    replica: (id: string) => of(id)?.replica,
    ttftMs: (id: string) => ((of(id)?.firstTokenS ?? Number.NaN) - (of(id)?.arrivalS ?? 0)) * 1000,
  };
}

describe('Aladdin Algorithm 1 in the simulated gateway', () => {
  it('sends a request away from the fullest replica when its prefill would wait past its TTFT there (constraint c)', async () => {
    // The two prefills take ≈ 200 and 130 ms; together on one replica the second's first token
    // comes after ≈ 330 ms.
    const packed = await run(undefined);
    expect(packed.replica('next')).toBe(packed.replica('long'));
    expect(packed.ttftMs('next')).toBeGreaterThan(300);

    const spread = await run(300);
    expect(spread.replica('long')).toBe('replica-0');
    expect(spread.replica('next')).toBe('replica-1');
    expect(spread.ttftMs('next')).toBeLessThan(300);
  });

  it('still places a request that no replica can serve within its TTFT, where it comes soonest', async () => {
    // 100 ms: even alone the 2,000-token prefill misses; it is placed, not held.
    const late = await run(100);
    expect(late.replica('next')).toBe('replica-1');
    expect(Number.isFinite(late.ttftMs('next'))).toBe(true);
  });
});
