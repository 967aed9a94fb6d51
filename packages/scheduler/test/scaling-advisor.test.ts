import { ManualClock } from '@fairway/core';
import { fitWorkerCount } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { type DesiredReplicasAdvice, GatewayError, ScalingAdvisor } from '../src/index.ts';

// Replicas measured at each rate by `fairway plan`: linear above 2 req/s (n = 0.5·r + 1).
const model = fitWorkerCount(
  [
    { rate: 1, replicas: 2 },
    { rate: 2, replicas: 2 },
    { rate: 4, replicas: 3 },
    { rate: 8, replicas: 5 },
    { rate: 16, replicas: 9 },
  ],
  { thresholdRate: 2 },
);

function advisor(over: Partial<ConstructorParameters<typeof ScalingAdvisor>[0]> = {}) {
  const clock = new ManualClock(0);
  const published: DesiredReplicasAdvice[] = [];
  const gauge: number[] = [];
  const a = new ScalingAdvisor({
    pool: 'llama',
    model,
    clock,
    windowMs: 10_000,
    publish: (x) => published.push(x),
    gauge: (_pool, d) => gauge.push(d),
    ...over,
  });
  return { a, clock, published, gauge };
}

function arrive(a: ScalingAdvisor, clock: ManualClock, perSecond: number, seconds: number) {
  for (let s = 0; s < seconds; s++) {
    for (let i = 0; i < perSecond; i++) {
      clock.set(clock.now() + 1000 / perSecond);
      a.recordArrival();
    }
  }
}

describe('ScalingAdvisor', () => {
  it('advises ceil(k·r + c) replicas for the arrival rate over its window', () => {
    const { a, clock } = advisor();
    arrive(a, clock, 8, 10);
    expect(a.rate()).toBeCloseTo(8, 5);
    expect(a.advise(4)).toMatchObject({ pool: 'llama', desired: 5, current: 4 });
    arrive(a, clock, 16, 10);
    expect(a.advise().desired).toBe(9);
  });

  it('forgets arrivals older than the window, so advice follows the rate down', () => {
    const { a, clock } = advisor();
    arrive(a, clock, 16, 10);
    expect(a.advise().desired).toBe(9);
    clock.set(clock.now() + 20_000);
    expect(a.rate()).toBe(0);
    expect(a.advise().desired).toBe(2);
  });

  it('publishes only when the advice changes, and sets the gauge every time', () => {
    const { a, clock, published, gauge } = advisor();
    arrive(a, clock, 8, 10);
    a.advise();
    a.advise();
    arrive(a, clock, 16, 10);
    a.advise();
    expect(published.map((p) => p.desired)).toEqual([5, 9]);
    expect(gauge).toEqual([5, 5, 9]);
    expect(published[0]?.reason).toMatch(/req\/s over 10 s needs 5/);
  });

  it('clamps the advice to the configured bounds', () => {
    const { a, clock } = advisor({ minReplicas: 3, maxReplicas: 6 });
    expect(a.advise().desired).toBe(3);
    arrive(a, clock, 16, 10);
    expect(a.advise().desired).toBe(6);
  });

  it('rejects bad options naming the field', () => {
    expect(() => advisor({ windowMs: -1 })).toThrow(GatewayError);
    expect(() => advisor({ windowMs: -1 })).toThrow(/windowMs/);
  });
});
