import { describe, expect, it } from 'vitest';
import { aladdinPlacement, sloAwarePlacement, timeIndexedKvRoom } from '../src/aladdin/aladdin-placement.ts';
import { futureKvPeak, type KvCourse } from '../src/aladdin/slo-feasibility.ts';
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
    // Without a performance model or sequence reports, a replica offers its own capacity.
    const plain = replica({ id: 'a', reservedTokens: 10_000, reservedSeqs: 5 });
    expect(placementByName('aladdin').capacity?.(plain)).toEqual({
      tokenCapacity: plain.tokenCapacity,
      seqCapacity: plain.seqCapacity,
    });
    expect(placementByName('aladdin', undefined, { aladdin: { perfOf: () => perf } }).capacity).toBeDefined();
  });
});

describe('Aladdin Algorithm 1 (place)', () => {
  // TTFT 300 ms: a prompt of (300 − 0.3) / 0.068 ≈ 4,407 tokens fills it on an idle replica.
  const alg1 = aladdinPlacement({ perfOf: () => perf, atgtMs: 20, ttftMs: 300, theta: 1, gamma: 1 });
  const place = (replicas: ReplicaState[], waitedMs = 0) =>
    (alg1.place?.(replicas, { waitedMs }) ?? []).map((c) => ({
      id: c.replica.id,
      room: c.tokenCapacity - c.replica.reservedTokens,
    }));
  // Running sequences well ahead of their ATGT (1.5 s of slack: constraint d binds far later).
  const ahead = seq({ generated: 100, decodeMs: 500 });
  // A fuller replica whose queue holds a 3,000-token prompt not yet prefilled.
  const busy = replica({
    id: 'busy',
    reservedTokens: 3_700,
    reservedSeqs: 2,
    running: 2,
    sequences: [ahead, seq({ inputTokens: 3_000, generated: 0, decodeMs: 0, prefilled: false })],
  });
  const idle = replica({ id: 'idle', reservedTokens: 700, reservedSeqs: 1, running: 1, sequences: [ahead] });

  it("refuses a replica where the new request's TTFT would miss (constraint c)", () => {
    const [first, second] = place([idle, busy]);
    // Best fit tries the fullest replica first…
    expect(first?.id).toBe('busy');
    expect(second?.id).toBe('idle');
    // …but there a prompt must be prefilled with the pending 3,000 tokens: only (300 − 0.3) / 0.068
    // − 3,000 ≈ 1,407 tokens (plus the predicted output) keep its first token within 300 ms.
    const ttftRoom = Math.floor((300 - 0.3) / 0.068 - 3_000);
    expect(first?.room).toBeLessThanOrEqual(ttftRoom + 1);
    expect(first?.room).toBeGreaterThan(ttftRoom - 50);
    // The idle replica takes a prompt up to the whole TTFT budget.
    expect(second?.room).toBeGreaterThan(ttftRoom + 2_500);
    // A prompt that waited 200 ms has 100 ms left: the busy replica can take nothing.
    expect(place([idle, busy], 200)[0]).toEqual({ id: 'busy', room: 0 });
  });

  it('waives (c) on the replica where a prompt would finish soonest when none can meet it', () => {
    // 400 ms of waiting: the TTFT is lost everywhere; the request is placed where it ends soonest
    // (the idle replica, bounded by its other constraints) rather than held.
    const late = place([idle, busy], 400);
    expect(late.find((c) => c.id === 'busy')?.room).toBe(0);
    expect(late.find((c) => c.id === 'idle')?.room).toBeGreaterThan(1_000);
  });

  it('never offers more than the KV capacity (constraint e) nor the replica’s own room', () => {
    const roomy = aladdinPlacement({ perfOf: () => perf, atgtMs: 1_000, ttftMs: 60_000, theta: 1, gamma: 1 });
    for (const reserved of [0, 50_000, 98_000, 99_000]) {
      const r = replica({ id: 'r', reservedTokens: reserved, reservedSeqs: 10, tokenCapacity: 99_000 });
      for (const c of roomy.place?.([r], {}) ?? []) {
        expect(c.tokenCapacity).toBeLessThanOrEqual(Math.min(99_000, perf.kvCapacityTokens));
        expect(c.seqCapacity).toBeLessThanOrEqual(256);
      }
    }
  });

  it('gives a baseline the same room as Aladdin and keeps its own order', () => {
    const jsq = sloAwarePlacement(placementByName('jsq'), {
      perfOf: () => perf,
      atgtMs: 20,
      ttftMs: 300,
      theta: 1,
      gamma: 1,
    });
    const base = place([idle, busy]);
    const same = (jsq.place?.([idle, busy], {}) ?? []).map((c) => ({
      id: c.replica.id,
      room: c.tokenCapacity - c.replica.reservedTokens,
    }));
    // JSQ tries the shorter queue first; each replica's room is Aladdin's.
    expect(same.map((c) => c.id)).toEqual(['idle', 'busy']);
    expect([...same].sort((a, b) => a.id.localeCompare(b.id))).toEqual(
      [...base].sort((a, b) => a.id.localeCompare(b.id)),
    );
    expect(jsq.name).toBe('jsq');
  });
});

/** A running sequence: `input` prompt tokens, `generated` so far, `reserved` KV tokens held in the store. */
const reservedSeq = (input: number, generated: number, reserved: number): SequenceProgress => ({
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
      tokenCapacity: 4000,
      reservedTokens: 3500,
      reservedSeqs: 2,
      sequences: [reservedSeq(100, 700, 1500), reservedSeq(100, 0, 2000)],
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
    const r = replica({
      tokenCapacity: 4000,
      reservedTokens: 120,
      reservedSeqs: 1,
      sequences: [reservedSeq(100, 1500, 120)],
    });
    const [c] = aladdinPlacement().place?.([r], {}) ?? [];
    expect(c?.tokenCapacity).toBe(120 + 4000 - 1600);
    const reservation = 3000;
    expect(r.reservedTokens + reservation).toBeLessThanOrEqual(r.tokenCapacity);
    expect(r.reservedTokens + reservation).toBeGreaterThan(c!.tokenCapacity);
  });

  it('holds reservations no report covers yet in full', () => {
    // Dispatched since the last report: 1,000 tokens reserved that no sequence accounts for.
    const r = replica({
      tokenCapacity: 4000,
      reservedTokens: 1500,
      reservedSeqs: 2,
      sequences: [reservedSeq(100, 100, 500)],
    });
    // The reported sequence peaks at 499 (its last iteration); the unreported 1,000 are held.
    expect(timeIndexedKvRoom(r, 4000)).toBe(1500 + 4000 - 499 - 1000);
  });

  it("gives the room the reports show when this dispatcher's view of the reservations lags them", () => {
    // Two sequences reported (1,500 + 2,000 reserved), while this dispatcher's view still counts
    // only its own 1,500: the store holds 3,500, and the room is the same as with a fresh view.
    const reported = [reservedSeq(100, 700, 1500), reservedSeq(100, 0, 2000)];
    const fresh = replica({
      tokenCapacity: 4000,
      reservedTokens: 3500,
      reservedSeqs: 2,
      sequences: reported,
    });
    const lagging = replica({
      tokenCapacity: 4000,
      reservedTokens: 1500,
      reservedSeqs: 1,
      sequences: reported,
    });
    expect(timeIndexedKvRoom(lagging, 4000)).toBe(timeIndexedKvRoom(fresh, 4000));
    expect(timeIndexedKvRoom(lagging, 4000)).toBe(3500 + 4000 - 2298);
  });

  it('keeps the sum of reservations where sequences are not reported with their reservations', () => {
    const bare = replica({ tokenCapacity: 4000, reservedTokens: 1000, reservedSeqs: 1 });
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
    expect(timeIndexedKvRoom(replica({ tokenCapacity: 4000, sequences: [] }), 4000)).toBe(4000);
  });
});
