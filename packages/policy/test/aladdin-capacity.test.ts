import { describe, expect, it } from 'vitest';
import { aladdinPlacement } from '../src/aladdin/aladdin-placement.ts';
import { decodeIterationMs } from '../src/perf-model/decode-model.ts';
import type { PerformanceModel } from '../src/perf-model/performance-model.ts';
import type { ReplicaState, SequenceProgress } from '../src/placement/placement-policy.ts';
import { placementByName } from '../src/placement/placement-registry.ts';

// A Llama-2-7B-on-A100-like replica: decode 9.3 ms + 0.00036 ms per context token, prefill 0.068 ms/token.
const perf: PerformanceModel = {
  model: 'm',
  gpu: 'g',
  tp: 1,
  kvCapacityTokens: 100_000,
  maxSeqs: 256,
  kv: { h: 1, j: 0 },
  prefill: { k1: 0.068, c1: 0.3 },
  decode: { k2: 0.00036, c2: 0, c3: 9.3 },
};

function replica(over: Partial<ReplicaState> = {}): ReplicaState {
  return {
    id: 'r1',
    tokenCapacity: 99_000,
    seqCapacity: 256,
    reservedTokens: 0,
    reservedSeqs: 0,
    running: 0,
    waiting: 0,
    kvUsage: 0,
    stale: false,
    ...over,
  };
}

const seq = (over: Partial<SequenceProgress> = {}): SequenceProgress => ({
  inputTokens: 500,
  generated: 10,
  decodeMs: 100,
  prefilled: true,
  ...over,
});

describe('Aladdin placement capacity', () => {
  const policy = aladdinPlacement({ perfOf: () => perf, atgtMs: 20, theta: 1, gamma: 1 });
  const cap = (r: ReplicaState) => policy.capacity?.(r) as { tokenCapacity: number; seqCapacity: number };

  it('turns the ATGT target into the batch context the store may reserve (Aladdin Eq. 4)', () => {
    // (20 − 9.3) / 0.00036 ≈ 29,722 context tokens keep an iteration within 20 ms.
    const c = cap(replica());
    expect(c.tokenCapacity).toBe(Math.floor((20 - 9.3) / 0.00036));
    expect(decodeIterationMs(perf.decode, 1, c.tokenCapacity)).toBeLessThanOrEqual(20);
    // KV is the tighter bound under a looser target.
    const loose = aladdinPlacement({ perfOf: () => perf, atgtMs: 100, theta: 1, gamma: 1 });
    expect(loose.capacity?.(replica()).tokenCapacity).toBe(99_000);
  });

  it('bounds the next prompt by the least ATGT slack of the running sequences (constraint d)', () => {
    // A sequence 10 tokens in, predicted to stop at 11: its remaining headroom is small.
    const young = aladdinPlacement({
      perfOf: () => perf,
      atgtMs: 20,
      theta: 1,
      gamma: 1,
      predictOutput: () => 11,
      minPredictedOutput: 11,
    });
    const base = replica({ reservedTokens: 600, reservedSeqs: 1 });
    const room = (s: SequenceProgress) =>
      (young.capacity?.({ ...base, sequences: [s] }).tokenCapacity ?? 0) - base.reservedTokens;
    // 20·10 − 100 − 1·iteration ≈ 90 ms of slack: a prompt of about (90 − 0.3) / 0.068 tokens.
    const iteration = decodeIterationMs(perf.decode, 2, 510 + 0);
    const slack = 20 * 10 - 100 - 1 * iteration;
    expect(room(seq())).toBeCloseTo((slack - 0.3) / 0.068 + 11, -1);
    // A sequence that used most of its headroom lets only a short prompt in; one past its
    // target is lost and no longer holds the replica back.
    expect(room(seq({ decodeMs: 188 }))).toBeLessThan(100);
    expect(room(seq({ decodeMs: 400 }))).toBeGreaterThan(10_000);
  });

  it('counts prompts already dispatched but not yet prefilled against the stall budget', () => {
    const p = aladdinPlacement({
      perfOf: () => perf,
      atgtMs: 20,
      theta: 1,
      gamma: 1,
      predictOutput: () => 11,
    });
    const alone = p.capacity?.(replica({ reservedTokens: 511, reservedSeqs: 1, sequences: [seq()] }));
    const withPending = p.capacity?.(
      replica({
        reservedTokens: 811,
        reservedSeqs: 2,
        sequences: [seq(), seq({ inputTokens: 300, generated: 0, decodeMs: 0, prefilled: false })],
      }),
    );
    expect((withPending?.tokenCapacity ?? 0) - 811).toBeLessThan((alone?.tokenCapacity ?? 0) - 511 - 250);
  });

  it('orders replicas fullest first, stale ones last, and is built by name', () => {
    const order = policy.order([
      replica({ id: 'a', reservedTokens: 10_000, reservedSeqs: 5 }),
      replica({ id: 'b', reservedTokens: 50_000, reservedSeqs: 20 }),
      replica({ id: 'c', stale: true, reservedTokens: 90_000, reservedSeqs: 90 }),
    ]);
    expect(order.map((r) => r.id)).toEqual(['b', 'a', 'c']);
    expect(placementByName('aladdin').name).toBe('aladdin');
    expect(placementByName('aladdin').capacity).toBeUndefined();
    expect(placementByName('aladdin', undefined, { aladdin: { perfOf: () => perf } }).capacity).toBeDefined();
  });
});
