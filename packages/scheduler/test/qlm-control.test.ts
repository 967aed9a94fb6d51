import { DEFAULT_SLO_CLASSES, type RequestDescriptor } from '@fairway/core';
import type { RwtProfile } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type ControlReplica, QlmControl } from '../src/index.ts';

// Θ = 32 / 50 ms = 640 tokens/s.
const profile: RwtProfile = {
  decodeMsPerIteration: 50,
  batchSize: 32,
  inefficiency: 1,
  prefillMs: 200,
  maxOutputTokens: 1024,
};

const request = (id: string, sloClass: string, arrivalMs: number, inputTokens = 100): RequestDescriptor => ({
  id,
  tenant: 't',
  model: 'm',
  sloClass,
  inputTokens,
  maxTokens: 1024,
  arrivalMs,
});

describe('QlmControl', () => {
  it('runs the global scheduler when a violation appears, not again while the same one persists', async () => {
    // 32 batch requests with ~900 tokens left each hold the replica's whole KV for ~45 s.
    const replica: ControlReplica = {
      id: 'r0',
      model: 'm',
      gpu: 'A100-80GB',
      tp: 1,
      kvCapacityTokens: 0,
      maxNumSeqs: 32,
      swapping: false,
      running: Array.from({ length: 32 }, (_, i) => ({
        req: request(`b${i}`, 'batch-2', 0),
        generated: 100,
      })),
    };
    const control = new QlmControl(
      {
        sloClasses: DEFAULT_SLO_CLASSES,
        profileOf: () => profile,
        outputPrior: { mean: 1000, variance: 100 ** 2 },
      },
      32,
    );
    control.start({ store: new MemoryStore(), replicas: () => [replica] });
    const t0 = 100_000;
    for (let i = 0; i < 4; i++) control.onArrival(request(`i${i}`, 'interactive', t0));
    // Interactive TTFT is 20 s: the group is predicted late, and the scheduler runs.
    await control.tick(t0);
    expect(control.stats().replans).toBe(1);
    // Half a second on, nothing has changed: the violation is the one the last plan weighed.
    await control.tick(t0 + 500);
    expect(control.stats().replans).toBe(1);
    // Longer prompts form a new group, late too: the scheduler runs again.
    for (let i = 0; i < 4; i++) control.onArrival(request(`j${i}`, 'interactive', t0 + 600, 2000));
    await control.tick(t0 + 1000);
    expect(control.stats()).toMatchObject({ ticks: 3, replans: 2 });
  });
});
