import { describe, expect, it } from 'vitest';
import { aladdinPlacement, timeIndexedKvRoom } from '../src/aladdin/aladdin-placement.ts';
import { futureKvPeak, type KvCourse } from '../src/aladdin/slo-feasibility.ts';
import type { ReplicaState, SequenceProgress } from '../src/placement/placement-policy.ts';

function replica(over: Partial<ReplicaState> = {}): ReplicaState {
  return {
    id: 'r1',
    tokenCapacity: 4000,
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

/** A running sequence: `input` prompt tokens, `generated` so far, `reserved` KV tokens held in the store. */
const seq = (input: number, generated: number, reserved: number): SequenceProgress => ({
  inputTokens: input,
  generated,
  decodeMs: generated * 10,
  prefilled: generated > 0,
  reservedTokens: reserved,
});

/** The same peak by stepping every iteration: what futureKvPeak computes in O(n log n). */
function steppedPeak(courses: readonly KvCourse[]): number {
  let peak = 0;
  const longest = Math.max(0, ...courses.map((c) => c.remaining));
  for (let s = 0; s < longest; s++) {
    let demand = 0;
    for (const c of courses) if (s < c.remaining) demand += c.context + s;
    peak = Math.max(peak, demand);
  }
  return peak;
}

describe("Aladdin's time-indexed KV constraint (e)", () => {
  it('finds the highest future KV demand of a batch, as stepping through its iterations does', () => {
    let state = 12345;
    const rnd = (n: number) => {
      state = (state * 1103515245 + 12345) % 2147483648;
      return state % n;
    };
    for (let trial = 0; trial < 200; trial++) {
      const courses = Array.from({ length: 1 + rnd(8) }, () => ({
        context: 1 + rnd(500),
        remaining: 1 + rnd(300),
      }));
      expect(futureKvPeak(courses)).toBe(steppedPeak(courses));
    }
    expect(futureKvPeak([])).toBe(0);
  });

  it('gives room past the sum of reservations when a sequence finishes before the others grow', () => {
    // 4,000 tokens of KV. One sequence at 800 of its 1,500 (700 iterations left), one at 100 of its
    // 2,000: together they reserve 3,500, so the sum leaves 500. Their demand peaks at 2,298 (just
    // before the first one ends), so a new reservation of up to 1,702 fits at every iteration.
    const r = replica({
      reservedTokens: 3500,
      reservedSeqs: 2,
      sequences: [seq(100, 700, 1500), seq(100, 0, 2000)],
    });
    const room = timeIndexedKvRoom(r, 4000);
    expect(room).toBe(3500 + 4000 - 2298);
    const [c] = aladdinPlacement().place?.([r], {}) ?? [];
    expect(c?.timeIndexedKv).toBe(true);
    expect(c?.tokenCapacity).toBe(3500 + 1702);
    expect(c!.tokenCapacity).toBeGreaterThan(r.tokenCapacity);
  });

  it('refuses a request the sum of reservations admits when a sequence has outgrown its reservation', () => {
    // Reserved for a predicted 20-token output, the sequence has streamed 1,500: its cache holds
    // 1,600 tokens while the store counts 120. The sum leaves 3,880; its cache leaves 2,400.
    const r = replica({ reservedTokens: 120, reservedSeqs: 1, sequences: [seq(100, 1500, 120)] });
    const [c] = aladdinPlacement().place?.([r], {}) ?? [];
    expect(c?.tokenCapacity).toBe(120 + 4000 - 1600);
    const reservation = 3000;
    expect(r.reservedTokens + reservation).toBeLessThanOrEqual(r.tokenCapacity);
    expect(r.reservedTokens + reservation).toBeGreaterThan(c!.tokenCapacity);
  });

  it('holds reservations no report covers yet in full', () => {
    // Dispatched since the last report: 1,000 tokens reserved that no sequence accounts for.
    const r = replica({ reservedTokens: 1500, reservedSeqs: 2, sequences: [seq(100, 100, 500)] });
    // The reported sequence peaks at 499 (its last iteration); the unreported 1,000 are held.
    expect(timeIndexedKvRoom(r, 4000)).toBe(1500 + 4000 - 499 - 1000);
  });

  it('keeps the sum of reservations where sequences are not reported with their reservations', () => {
    const bare = replica({ reservedTokens: 1000, reservedSeqs: 1 });
    expect(timeIndexedKvRoom(bare, 4000)).toBeUndefined();
    const unreserved = replica({
      reservedTokens: 1000,
      reservedSeqs: 1,
      sequences: [{ inputTokens: 100, generated: 5, decodeMs: 50, prefilled: true }],
    });
    expect(timeIndexedKvRoom(unreserved, 4000)).toBeUndefined();
    const [c] = aladdinPlacement().place?.([bare], {}) ?? [];
    expect(c?.timeIndexedKv).toBe(false);
    expect(c?.tokenCapacity).toBe(bare.tokenCapacity);
    // An idle replica that reports no sequences offers its capacity either way.
    expect(timeIndexedKvRoom(replica({ sequences: [] }), 4000)).toBe(4000);
  });
});
