import { createRng } from '@fairway/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type AdmitInput,
  type DispatchInput,
  type QueuedRequest,
  type QuotaCheck,
  type ReplicaCandidate,
  type SchedulingStore,
  tenantScoped,
  type UsageAccount,
  type WindowLimit,
} from '../src/index.ts';

/** Builds a queued request with sensible defaults for tests. */
export function makeReq(id: string, over: Partial<QueuedRequest> = {}): QueuedRequest {
  return {
    id,
    pool: 'p',
    band: 0,
    flow: 'a',
    score: 0,
    arrivalMs: 0,
    reserveTokens: 10,
    dispatchCost: 10,
    owner: 'd1',
    payload: `payload-${id}`,
    ...over,
  };
}

/** An admission with no limits and VTC lift, for tests. */
export function admitOf(req: QueuedRequest, over: Partial<AdmitInput> = {}): AdmitInput {
  return { req, tenant: 't', nowMs: req.arrivalMs, lift: 'vtc', limits: [], overloaded: false, ...over };
}

const BIG: ReplicaCandidate = { id: 'r1', tokenCapacity: 1_000_000, seqCapacity: 1_000 };

/** A dispatch of pool `p`, band 0, fair ordering, onto one big replica. */
export function dispatchOf(over: Partial<DispatchInput> = {}): DispatchInput {
  return {
    pool: 'p',
    bands: [0],
    ordering: 'fair',
    nowMs: 0,
    picker: 'd1',
    replicas: [BIG],
    fit: 'first',
    ...over,
  };
}

/** A store backend under test and how to dispose of it. */
export interface StoreHarness {
  readonly store: SchedulingStore;
  dispose(): Promise<void>;
}

/**
 * The conformance suite: the observable semantics every {@link SchedulingStore} backend must have.
 * Each backend's test file calls this with a factory; the suite never looks inside a backend.
 */
export function describeStoreConformance(backend: string, create: () => Promise<StoreHarness>): void {
  describe(`SchedulingStore conformance (${backend})`, () => {
    let h: StoreHarness;
    let s: SchedulingStore;
    beforeEach(async () => {
      h = await create();
      s = h.store;
    });
    afterEach(async () => {
      await h.dispose();
    });

    async function dispatchedId(over: Partial<DispatchInput> = {}): Promise<string> {
      const r = await s.dispatch(dispatchOf(over));
      if (r.kind !== 'dispatched') throw new Error(`expected a dispatch, got ${r.kind}`);
      return r.req.id;
    }

    describe('admission and counter lift', () => {
      it('lifts a returning flow to the least backlogged counter', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', dispatchCost: 30 })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', dispatchCost: 30 })));
        await s.admit(admitOf(makeReq('c1', { flow: 'c', dispatchCost: 50 })));
        expect(await dispatchedId()).toBe('a1'); // a=30, c=0
        expect(await dispatchedId()).toBe('c1'); // c=50, c leaves
        await s.admit(admitOf(makeReq('b1', { flow: 'b' })));
        const snap = await s.snapshot('p', 0);
        expect(snap.counters).toEqual({ a: 30, b: 30, c: 50 });
        expect(snap.backlogged).toEqual(['a', 'b']);
      });

      it('lifts to the counter of the last flow to leave when nothing is backlogged', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', dispatchCost: 50 })));
        await dispatchedId();
        await s.charge([{ id: 'a1', amount: 30 }]);
        await s.admit(admitOf(makeReq('b1', { flow: 'b' })));
        expect((await s.snapshot('p', 0)).counters.b).toBe(80);
      });

      it('never lowers a counter that is already above the floor', async () => {
        await s.admit(admitOf(makeReq('b1', { flow: 'b', dispatchCost: 500 })));
        await dispatchedId();
        await s.admit(admitOf(makeReq('a1', { flow: 'a' }), { lift: 'none' }));
        await s.admit(admitOf(makeReq('a2', { flow: 'a' }), { lift: 'none' }));
        await dispatchedId();
        await s.admit(admitOf(makeReq('b2', { flow: 'b' })));
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 10, b: 500 });
      });

      it('does not lift under LCF', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', dispatchCost: 50 })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', dispatchCost: 50 })));
        await dispatchedId();
        await s.admit(admitOf(makeReq('b1', { flow: 'b' }), { lift: 'none' }));
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 50, b: 0 });
      });

      it('keeps counters per (pool, band) queue', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', dispatchCost: 40 })));
        await dispatchedId();
        await s.admit(admitOf(makeReq('a2', { flow: 'a', band: 1 })));
        await s.admit(admitOf(makeReq('a3', { flow: 'a', pool: 'q' })));
        expect((await s.snapshot('p', 1)).counters).toEqual({ a: 0 });
        expect((await s.snapshot('q', 0)).counters).toEqual({ a: 0 });
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 40 });
      });

      it('reports the queue length and rejects duplicate ids', async () => {
        expect(await s.admit(admitOf(makeReq('x1')))).toEqual({ ok: true, queued: 1, windows: [] });
        expect(await s.admit(admitOf(makeReq('x2', { flow: 'b' })))).toEqual({
          ok: true,
          queued: 2,
          windows: [],
        });
        expect(await s.admit(admitOf(makeReq('x1')))).toEqual({
          ok: false,
          code: 'duplicate',
          retryAfterMs: 0,
          key: 'x1',
        });
        await dispatchedId();
        expect((await s.admit(admitOf(makeReq('x1')))).ok).toBe(false);
      });
    });

    describe('ordering', () => {
      it('serves the backlogged flow with the least counter, oldest request first', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1, dispatchCost: 100 })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 2, dispatchCost: 100 })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 3, dispatchCost: 30 })));
        await s.admit(admitOf(makeReq('b2', { flow: 'b', arrivalMs: 4, dispatchCost: 30 })));
        await s.admit(admitOf(makeReq('b3', { flow: 'b', arrivalMs: 5, dispatchCost: 30 })));
        const order: string[] = [];
        for (let i = 0; i < 5; i++) order.push(await dispatchedId());
        // a1 (tie at 0, older head), then b until b passes a's 100, then a2.
        expect(order).toEqual(['a1', 'b1', 'b2', 'b3', 'a2']);
      });

      it('breaks counter ties by oldest head arrival, then by flow id', async () => {
        await s.admit(admitOf(makeReq('c1', { flow: 'c', arrivalMs: 5, dispatchCost: 0 })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 7, dispatchCost: 0 })));
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 7, dispatchCost: 0 })));
        expect(await dispatchedId()).toBe('c1');
        expect(await dispatchedId()).toBe('a1');
        expect(await dispatchedId()).toBe('b1');
      });

      it('orders by least score across flows under score ordering, ties by id', async () => {
        await s.admit(admitOf(makeReq('r3', { flow: 'a', score: 30 })));
        await s.admit(admitOf(makeReq('r1', { flow: 'a', score: 10 })));
        await s.admit(admitOf(makeReq('r2b', { flow: 'b', score: 20 })));
        await s.admit(admitOf(makeReq('r2a', { flow: 'c', score: 20 })));
        const order: string[] = [];
        for (let i = 0; i < 4; i++) order.push(await dispatchedId({ ordering: 'score' }));
        expect(order).toEqual(['r1', 'r2a', 'r2b', 'r3']);
      });

      it('serves interaction continuations first under fair ordering, least counter first', async () => {
        const none = { lift: 'none' } as const;
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 }), none));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 2, dispatchCost: 500 }), none));
        await dispatchedId(); // a1: a=10
        await dispatchedId(); // b1: b=500
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 3 }), none));
        await s.admit(admitOf(makeReq('b2', { flow: 'b', arrivalMs: 4, continuation: true }), none));
        await s.admit(admitOf(makeReq('c1', { flow: 'c', arrivalMs: 5, continuation: true }), none));
        await s.admit(admitOf(makeReq('c2', { flow: 'c', arrivalMs: 6 }), none));
        // Continuations first, least counter first (c=0 < b=500); then a2 (a=10, older) and c2 (c=10).
        const order: string[] = [];
        for (let i = 0; i < 4; i++) order.push(await dispatchedId());
        expect(order).toEqual(['c1', 'b2', 'a2', 'c2']);
      });

      it('takes a call made while its interaction is open as a continuation, unmarked or not', async () => {
        const none = { lift: 'none' } as const;
        const ix = (key: string) => ({ ...none, interaction: { key, ttlMs: 1000 } });
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 }), none));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 2 }), ix('i1')));
        // i1 is open (b1 opened it): b2 continues it; c1 opens i2 and is not a continuation.
        await s.admit(admitOf(makeReq('b2', { flow: 'b', arrivalMs: 3 }), ix('i1')));
        await s.admit(admitOf(makeReq('c1', { flow: 'c', arrivalMs: 4 }), ix('i2')));
        const order: string[] = [];
        for (let i = 0; i < 4; i++) order.push(await dispatchedId());
        // b2 first; then the least counter: a (0), c (0, after a's older head), b (charged for b2).
        expect(order).toEqual(['b2', 'a1', 'c1', 'b1']);
        // After its ttl without calls the interaction is closed: a late call is an ordinary one.
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 10 }), none));
        await s.admit(admitOf(makeReq('b3', { flow: 'b', arrivalMs: 5000 }), ix('i1')));
        expect(await dispatchedId()).toBe('a2');
      });

      it("counts an interaction's calls: each call's stage is the calls admitted before it while it is open", async () => {
        const ix = (key: string, tenant = 't') => ({ tenant, interaction: { key, ttlMs: 1000 } });
        const stage = async (id: string, at: number, over: Partial<AdmitInput>) => {
          const r = await s.admit(admitOf(makeReq(id, { arrivalMs: at }), over));
          return r.ok ? r.interactionStage : `refused ${r.code}`;
        };
        expect(await stage('n1', 1, {})).toBeUndefined();
        expect(await stage('a1', 2, ix('i1'))).toBe(0);
        expect(await stage('a2', 3, ix('i1'))).toBe(1);
        expect(await stage('a3', 900, ix('i1'))).toBe(2);
        // Another interaction, and the same key under another tenant, count on their own.
        expect(await stage('b1', 901, ix('i2'))).toBe(0);
        expect(await stage('c1', 902, ix('i1', 'other'))).toBe(0);
        expect(await stage('a4', 903, ix('i1'))).toBe(3);
        // A call after the period closed (1000 ms after the last call) opens a new one.
        expect(await stage('a5', 2000, ix('i1'))).toBe(0);
        expect(await stage('a6', 2001, ix('i1'))).toBe(1);
      });

      it('ignores continuation marks under score ordering', async () => {
        await s.admit(admitOf(makeReq('x1', { score: 1 })));
        await s.admit(admitOf(makeReq('x2', { score: 2, continuation: true })));
        expect(await dispatchedId({ ordering: 'score' })).toBe('x1');
      });

      it('serves bands in the given priority order and skips empty ones', async () => {
        await s.admit(admitOf(makeReq('low', { band: 2 })));
        await s.admit(admitOf(makeReq('high', { band: 1 })));
        expect(await dispatchedId({ bands: [0, 1, 2] })).toBe('high');
        expect(await dispatchedId({ bands: [0, 1, 2] })).toBe('low');
        expect(await s.dispatch(dispatchOf({ bands: [0, 1, 2] }))).toEqual({ kind: 'empty' });
      });
    });

    describe('reservations', () => {
      const small = (id: string, tokenCapacity: number, seqCapacity = 10): ReplicaCandidate => ({
        id,
        tokenCapacity,
        seqCapacity,
      });

      it('reserves on the first candidate with room under first fit', async () => {
        await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
        const r = await s.dispatch(
          dispatchOf({ replicas: [small('r1', 50), small('r2', 100), small('r3', 60)] }),
        );
        expect(r).toMatchObject({ kind: 'dispatched', replica: 'r2' });
        expect(await s.reserved('r2')).toEqual({ tokens: 60, seqs: 1 });
      });

      it('reserves on the candidate left with the least room under best fit', async () => {
        await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
        const r = await s.dispatch(
          dispatchOf({
            fit: 'best',
            replicas: [small('r1', 50), small('r2', 100), small('r3', 60), small('r4', 60)],
          }),
        );
        expect(r).toMatchObject({ kind: 'dispatched', replica: 'r3' });
      });

      it('tells where each dispatched request runs until it settles, and which ids it holds no record of', async () => {
        await s.admit(admitOf(makeReq('x1', { reserveTokens: 1, arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('x2', { reserveTokens: 1, arrivalMs: 2 })));
        await s.dispatch(dispatchOf({ replicas: [small('r2', 100)] }));
        expect(await s.locate(['x1', 'x2', 'nope'])).toEqual({
          running: new Map([['x1', 'r2']]),
          unknown: ['nope'],
        });
        await s.settle({ id: 'x1', nowMs: 5, finalCost: 1, actualTokens: 1, outputTokens: 0 });
        expect(await s.locate(['x1', 'x2'])).toEqual({ running: new Map(), unknown: ['x1'] });
        expect(await s.cancel('x2', 6)).toBe(true);
        expect(await s.locate(['x2'])).toEqual({ running: new Map(), unknown: ['x2'] });
        expect(await s.locate([])).toEqual({ running: new Map(), unknown: [] });
      });

      it('respects sequence capacity', async () => {
        await s.admit(admitOf(makeReq('x1', { reserveTokens: 1 })));
        await s.admit(admitOf(makeReq('x2', { reserveTokens: 1 })));
        const replicas = [small('r1', 100, 1), small('r2', 100, 1)];
        expect(await s.dispatch(dispatchOf({ replicas }))).toMatchObject({ replica: 'r1' });
        expect(await s.dispatch(dispatchOf({ replicas }))).toMatchObject({ replica: 'r2' });
      });

      it('reports a blocked head and changes nothing', async () => {
        await s.admit(admitOf(makeReq('big', { flow: 'a', reserveTokens: 80, arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('tiny', { flow: 'b', reserveTokens: 1, arrivalMs: 2 })));
        await s.admit(admitOf(makeReq('other', { band: 1, reserveTokens: 1 })));
        const before = await s.snapshot('p', 0);
        const r = await s.dispatch(dispatchOf({ bands: [0, 1], replicas: [small('r1', 50)] }));
        expect(r).toEqual({ kind: 'blocked', id: 'big', reserveTokens: 80 });
        expect(await s.snapshot('p', 0)).toEqual(before);
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
      });

      it('releases the reservation when the request settles', async () => {
        await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
        await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
        await s.admit(admitOf(makeReq('y', { reserveTokens: 60 })));
        expect((await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }))).kind).toBe('blocked');
        expect(await s.settle({ id: 'x', nowMs: 5, finalCost: 10, actualTokens: 60, outputTokens: 0 })).toBe(
          true,
        );
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
        expect((await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }))).kind).toBe('dispatched');
      });

      describe('growth by charge (output past its prediction)', () => {
        const settle = (id: string) =>
          s.settle({ id, nowMs: 5, finalCost: 10, actualTokens: 90, outputTokens: 80 });

        it("grows the running request's reservation with its charge, beyond capacity too", async () => {
          await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
          await s.admit(admitOf(makeReq('y', { reserveTokens: 30, flow: 'b' })));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.charge([{ id: 'x', amount: 3, reserveTokens: 25 }]);
          expect(await s.reserved('r1')).toEqual({ tokens: 85, seqs: 1 });
          // The grown reservation is what the fit sees: y (30) no longer fits beside x.
          expect(await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }))).toMatchObject({
            kind: 'blocked',
            id: 'y',
          });
          // The tokens are in the cache already: growth is not refused at capacity.
          await s.charge([{ id: 'x', amount: 0, reserveTokens: 50 }]);
          expect(await s.reserved('r1')).toEqual({ tokens: 135, seqs: 1 });
          // The amount was still charged as before.
          expect((await s.snapshot('p', 0)).counters.a).toBe(13);
        });

        it('grows through the charges a dispatch applies', async () => {
          await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
          await s.admit(admitOf(makeReq('y', { reserveTokens: 30, flow: 'b' })));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          const r = await s.dispatch(
            dispatchOf({
              replicas: [small('r1', 100)],
              charges: [{ id: 'x', amount: 1, reserveTokens: 20 }],
            }),
          );
          expect(r).toMatchObject({ kind: 'blocked', id: 'y' });
          expect(await s.reserved('r1')).toEqual({ tokens: 80, seqs: 1 });
        });

        it('ignores growth of queued and unknown requests', async () => {
          await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
          await s.charge([
            { id: 'x', amount: 1, reserveTokens: 20 },
            { id: 'nobody', amount: 1, reserveTokens: 20 },
          ]);
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          expect(await s.reserved('r1')).toEqual({ tokens: 60, seqs: 1 });
        });

        it('settle releases exactly what is held, growth included', async () => {
          await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
          await s.admit(admitOf(makeReq('y', { reserveTokens: 10, flow: 'b' })));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.charge([{ id: 'x', amount: 1, reserveTokens: 15 }]);
          await s.charge([{ id: 'x', amount: 1, reserveTokens: 5 }]);
          expect(await s.reserved('r1')).toEqual({ tokens: 90, seqs: 2 });
          expect(await settle('x')).toBe(true);
          expect(await s.reserved('r1')).toEqual({ tokens: 10, seqs: 1 });
          expect(await settle('y')).toBe(true);
          expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
        });

        it('settleAndDispatch releases the growth before its pick', async () => {
          await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.charge([{ id: 'x', amount: 1, reserveTokens: 30 }]);
          await s.admit(admitOf(makeReq('y', { reserveTokens: 95, flow: 'b' })));
          if (!s.settleAndDispatch) throw new Error('backend has no settleAndDispatch');
          const r = await s.settleAndDispatch({
            settle: { id: 'x', nowMs: 5, finalCost: 10, actualTokens: 90, outputTokens: 80 },
            dispatch: dispatchOf({ replicas: [small('r1', 100)] }),
          });
          expect(r).toMatchObject({ settled: true, dispatch: { kind: 'dispatched', replica: 'r1' } });
          expect(r.reserved).toEqual([{ tokens: 95, seqs: 1 }]);
        });

        it('requeue releases the growth and the next dispatch reserves what it was queued with', async () => {
          if (!s.requeue) throw new Error('backend has no requeue');
          await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
          await s.admit(admitOf(makeReq('y', { reserveTokens: 10, flow: 'b' })));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.charge([{ id: 'x', amount: 1, reserveTokens: 25 }]);
          expect(await s.requeue({ id: 'x', nowMs: 3, servedCost: 11 })).toBe(true);
          expect(await s.reserved('r1')).toEqual({ tokens: 10, seqs: 1 });
          expect(await s.dispatch(dispatchOf({ replicas: [small('r2', 100)] }))).toMatchObject({
            kind: 'dispatched',
            replica: 'r2',
          });
          expect(await s.reserved('r2')).toEqual({ tokens: 60, seqs: 1 });
          expect(await settle('x')).toBe(true);
          expect(await settle('y')).toBe(true);
          expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
          expect(await s.reserved('r2')).toEqual({ tokens: 0, seqs: 0 });
        });

        it('reclaim releases a grown reservation of an expired owner', async () => {
          await s.renewOwner('d1', 0, 1000);
          await s.admit(admitOf(makeReq('x', { reserveTokens: 60 })));
          await s.admit(admitOf(makeReq('y', { reserveTokens: 10, flow: 'b', owner: 'd2' })));
          await s.renewOwner('d2', 0, 5000);
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.dispatch(dispatchOf({ replicas: [small('r1', 100)] }));
          await s.charge([{ id: 'x', amount: 1, reserveTokens: 40 }]);
          expect(await s.reserved('r1')).toEqual({ tokens: 110, seqs: 2 });
          expect(await s.reclaim(1000)).toEqual({ dropped: [], released: ['x'] });
          expect(await s.reserved('r1')).toEqual({ tokens: 10, seqs: 1 });
        });

        it('rejects a negative growth', async () => {
          await expect(s.charge([{ id: 'x', amount: 1, reserveTokens: -1 }])).rejects.toThrow(
            /reserveTokens/,
          );
        });
      });
    });

    describe('window limits', () => {
      const rpm = (limit: number, windowMs = 1000): WindowLimit => ({
        key: 'rpm:tenant:a',
        limit,
        amount: 1,
        windowMs,
        code: 'rpm_limited',
      });

      it('reports what each window holds after an admission and when its oldest bucket ends', async () => {
        const tokens: WindowLimit = {
          key: 'tpm:tenant:a',
          limit: 100,
          amount: 30,
          windowMs: 1000,
          code: 'tpm_limited',
          trueUp: true,
        };
        const first = await s.admit(admitOf(makeReq('h1'), { nowMs: 0, limits: [rpm(3), tokens] }));
        // One request and 30 tokens, counted until 1003 (0 + 1000 rounded up to the 17 ms grid).
        expect(first).toMatchObject({
          ok: true,
          windows: [
            { total: 1, resetAtMs: 1003 },
            { total: 30, resetAtMs: 1003 },
          ],
        });
        const second = await s.admit(
          admitOf(makeReq('h2'), { nowMs: 500, limits: [rpm(3), { ...tokens, amount: 50 }] }),
        );
        // The oldest bucket still ends at 1003; h2's own ends at 1513.
        expect(second).toMatchObject({
          ok: true,
          windows: [
            { total: 2, resetAtMs: 1003 },
            { total: 80, resetAtMs: 1003 },
          ],
        });
        // Refused for tokens: the refusal says what the window holds.
        expect(
          await s.admit(admitOf(makeReq('h3'), { nowMs: 600, limits: [rpm(3), { ...tokens, amount: 40 }] })),
        ).toEqual({ ok: false, code: 'tpm_limited', retryAfterMs: 403, key: 'tpm:tenant:a', held: 80 });
        // Once h1's bucket ended, the windows hold h2 alone.
        expect(
          await s.admit(admitOf(makeReq('h4'), { nowMs: 1003, limits: [rpm(3), { ...tokens, amount: 10 }] })),
        ).toMatchObject({
          ok: true,
          windows: [
            { total: 2, resetAtMs: 1513 },
            { total: 60, resetAtMs: 1513 },
          ],
        });
      });

      it('admits at most the limit within any window and says when to retry, to the bucket', async () => {
        for (let i = 0; i < 3; i++) {
          expect((await s.admit(admitOf(makeReq(`x${i}`), { nowMs: 100 * i, limits: [rpm(3)] }))).ok).toBe(
            true,
          );
        }
        // x0 leaves at the end of its bucket: 0 + 1000 ms rounded up to the window's grid of
        // ceil(1000 / 60) = 17 ms, 1003.
        expect(await s.admit(admitOf(makeReq('x3'), { nowMs: 999, limits: [rpm(3)] }))).toEqual({
          ok: false,
          code: 'rpm_limited',
          retryAfterMs: 4,
          key: 'rpm:tenant:a',
          held: 3,
        });
        expect((await s.admit(admitOf(makeReq('x3'), { nowMs: 1002, limits: [rpm(3)] }))).ok).toBe(false);
        expect((await s.admit(admitOf(makeReq('x3'), { nowMs: 1003, limits: [rpm(3)] }))).ok).toBe(true);
        // x1 (100) leaves at 1105.
        expect((await s.admit(admitOf(makeReq('x4'), { nowMs: 1104, limits: [rpm(3)] }))).ok).toBe(false);
        expect((await s.admit(admitOf(makeReq('x4'), { nowMs: 1105, limits: [rpm(3)] }))).ok).toBe(true);
      });

      it('is exact for admissions on the bucket grid', async () => {
        // A 6 s window has 100 ms buckets: an entry admitted on the grid leaves exactly 6 s later.
        const six = rpm(2, 6000);
        expect((await s.admit(admitOf(makeReq('x0'), { nowMs: 100, limits: [six] }))).ok).toBe(true);
        expect((await s.admit(admitOf(makeReq('x1'), { nowMs: 200, limits: [six] }))).ok).toBe(true);
        expect(await s.admit(admitOf(makeReq('x2'), { nowMs: 5000, limits: [six] }))).toMatchObject({
          ok: false,
          retryAfterMs: 1100,
        });
        expect((await s.admit(admitOf(makeReq('x2'), { nowMs: 6099, limits: [six] }))).ok).toBe(false);
        expect((await s.admit(admitOf(makeReq('x2'), { nowMs: 6100, limits: [six] }))).ok).toBe(true);
      });

      it('consumes nothing when any limit or bound rejects', async () => {
        const tight: WindowLimit = { ...rpm(1), key: 'rpm:app:z' };
        await s.admit(admitOf(makeReq('x0'), { limits: [tight] }));
        expect((await s.admit(admitOf(makeReq('x1'), { limits: [rpm(1), tight] }))).ok).toBe(false);
        expect((await s.admit(admitOf(makeReq('x2'), { limits: [rpm(1)] }))).ok).toBe(true);
      });

      it('reserves tokens at admission and trues them up at settle (TPM)', async () => {
        const tpm = (amount: number): WindowLimit => ({
          key: 'tpm:tenant:a',
          limit: 1000,
          amount,
          windowMs: 60_000,
          code: 'tpm_limited',
        });
        await s.admit(admitOf(makeReq('x1'), { nowMs: 0, limits: [tpm(800)] }));
        expect(await s.admit(admitOf(makeReq('x2'), { nowMs: 10, limits: [tpm(300)] }))).toMatchObject({
          ok: false,
          code: 'tpm_limited',
          retryAfterMs: 59_990,
        });
        await dispatchedId();
        await s.settle({ id: 'x1', nowMs: 20, finalCost: 10, actualTokens: 500, outputTokens: 100 });
        expect((await s.admit(admitOf(makeReq('x2'), { nowMs: 30, limits: [tpm(500)] }))).ok).toBe(true);
        expect((await s.admit(admitOf(makeReq('x3'), { nowMs: 40, limits: [tpm(1)] }))).ok).toBe(false);
        expect(await s.cancel('x2', 50)).toBe(true);
        expect((await s.admit(admitOf(makeReq('x3'), { nowMs: 60, limits: [tpm(500)] }))).ok).toBe(true);
      });

      it('rejects an amount larger than the limit with the whole window as retry', async () => {
        expect(
          await s.admit(admitOf(makeReq('x'), { limits: [{ ...rpm(0), windowMs: 5000 }] })),
        ).toMatchObject({
          ok: false,
          retryAfterMs: 5000,
        });
      });

      it('throttles only while overloaded, but counts every admission', async () => {
        const user: WindowLimit = {
          ...rpm(2),
          key: 'oit:user:u',
          code: 'throttled',
          onlyWhenOverloaded: true,
        };
        for (let i = 0; i < 3; i++) {
          expect((await s.admit(admitOf(makeReq(`x${i}`), { nowMs: i, limits: [user] }))).ok).toBe(true);
        }
        expect(
          await s.admit(admitOf(makeReq('x3'), { nowMs: 3, limits: [user], overloaded: true })),
        ).toMatchObject({
          ok: false,
          code: 'throttled',
          // All three share the bucket that ends at 1003.
          retryAfterMs: 1003 - 3,
          key: 'oit:user:u',
        });
      });

      it('counts a throttled arrival in its throttle window, as FairServe counts arrivals', async () => {
        const user: WindowLimit = {
          ...rpm(2),
          key: 'oit:user:u',
          code: 'throttled',
          onlyWhenOverloaded: true,
        };
        const over = { limits: [user], overloaded: true };
        // Buckets of 17 ms: x0 and x1 leave at 1003, x2 at 1020.
        expect((await s.admit(admitOf(makeReq('x0'), { nowMs: 0, ...over }))).ok).toBe(true);
        expect((await s.admit(admitOf(makeReq('x1'), { nowMs: 1, ...over }))).ok).toBe(true);
        expect(await s.admit(admitOf(makeReq('x2'), { nowMs: 20, ...over }))).toMatchObject({
          code: 'throttled',
        });
        // x0 and x1 have left the window; the throttled x2 still counts, so only one more fits.
        expect((await s.admit(admitOf(makeReq('x3'), { nowMs: 1003, ...over }))).ok).toBe(true);
        expect(await s.admit(admitOf(makeReq('x4'), { nowMs: 1004, ...over }))).toMatchObject({
          code: 'throttled',
        });
        // Retrying keeps counting: x4's own throttled arrivals hold it back until they leave (x2
        // left at 1020; x3 and x4's first arrival leave at 2006, its second at 2023).
        expect((await s.admit(admitOf(makeReq('x4'), { nowMs: 1021, ...over }))).ok).toBe(false);
        expect((await s.admit(admitOf(makeReq('x4'), { nowMs: 2006, ...over }))).ok).toBe(true);
      });

      it('never throttles a request that continues an open interaction', async () => {
        const user: WindowLimit = {
          ...rpm(1),
          key: 'oit:user:u',
          code: 'throttled',
          onlyWhenOverloaded: true,
        };
        const interaction = { key: 'i1', ttlMs: 500 };
        const over = { limits: [user], overloaded: true, interaction };
        expect((await s.admit(admitOf(makeReq('x0'), { nowMs: 0, ...over }))).ok).toBe(true);
        expect((await s.admit(admitOf(makeReq('x1'), { nowMs: 100, ...over }))).ok).toBe(true);
        // Another interaction of the same user is not exempt.
        const other = { ...over, interaction: { key: 'i2', ttlMs: 500 } };
        expect(await s.admit(admitOf(makeReq('x2'), { nowMs: 110, ...other }))).toMatchObject({
          code: 'throttled',
        });
        // The interaction closes after its ttl without calls or completions…
        expect((await s.admit(admitOf(makeReq('x2'), { nowMs: 700, ...over }))).ok).toBe(false);
        // …and a completion keeps it open for another ttl.
        // (x1, the continuation, is served first.)
        const id = await dispatchedId();
        expect(await s.settle({ id, nowMs: 550, finalCost: 1, actualTokens: 1, outputTokens: 1 })).toBe(true);
        // (x2's throttled arrival at 700 fills the window, but an open interaction is exempt.)
        expect((await s.admit(admitOf(makeReq('x2'), { nowMs: 1000, ...over }))).ok).toBe(true);
      });

      it('trues up the bucket the request counts in, at settle and at cancel', async () => {
        // A 6 s window has 100 ms buckets: x1 counts in the bucket ending at 6000, x2 in 7000.
        const tpm = (amount: number): WindowLimit => ({
          key: 'tpm:tenant:a',
          limit: 250,
          amount,
          windowMs: 6000,
          code: 'tpm_limited',
        });
        await s.admit(admitOf(makeReq('x1'), { nowMs: 0, limits: [tpm(100)] }));
        await s.admit(admitOf(makeReq('x2'), { nowMs: 1000, limits: [tpm(100)] }));
        expect(await dispatchedId()).toBe('x1');
        await s.settle({ id: 'x1', nowMs: 1500, finalCost: 10, actualTokens: 10, outputTokens: 5 });
        expect((await s.admit(admitOf(makeReq('x3'), { nowMs: 1600, limits: [tpm(140)] }))).ok).toBe(true);
        // 10 + 100 + 140: 50 more fits once x2's bucket (7000) leaves, not x1's (6000, which holds 10).
        expect(await s.admit(admitOf(makeReq('x4'), { nowMs: 1700, limits: [tpm(50)] }))).toMatchObject({
          ok: false,
          retryAfterMs: 7000 - 1700,
        });
        expect(await s.cancel('x2', 1800)).toBe(true);
        expect((await s.admit(admitOf(makeReq('x4'), { nowMs: 1800, limits: [tpm(100)] }))).ok).toBe(true);
        // 10 + 0 + 140 + 100: the first bucket to leave (x1's, 6000) makes room for 10.
        expect(await s.admit(admitOf(makeReq('x5'), { nowMs: 1900, limits: [tpm(10)] }))).toMatchObject({
          ok: false,
          retryAfterMs: 6000 - 1900,
        });
      });

      it('answers a refusal from the buckets as they are after an admission dated into an older one', async () => {
        // A 1 s window has 17 ms buckets. x1 (4 tokens) counts until 2006, x2 (4) until 2108, x3 (2)
        // until 2210: 10 of 10.
        const tpm = (key: string, amount: number): WindowLimit => ({
          key,
          limit: 10,
          amount,
          windowMs: 1000,
          code: 'tpm_limited',
          trueUp: true,
        });
        for (const key of ['tpm:tenant:into-oldest', 'tpm:tenant:before-oldest']) {
          const pool = key;
          const at = (nowMs: number, amount: number) => ({ nowMs, limits: [tpm(key, amount)] });
          for (const [id, nowMs, amount] of [
            ['x1', 1000, 4],
            ['x2', 1100, 4],
            ['x3', 1200, 2],
          ] as const)
            expect((await s.admit(admitOf(makeReq(`${key}${id}`, { pool }), at(nowMs, amount)))).ok).toBe(
              true,
            );
          // 4 more fit once x1's bucket leaves.
          expect(await s.admit(admitOf(makeReq(`${key}r1`, { pool }), at(1300, 4)))).toMatchObject({
            ok: false,
            retryAfterMs: 2006 - 1300,
          });
          // x3 settles with no tokens; then a dispatcher whose clock lags admits 2 tokens dated
          // into x1's bucket, or into one that leaves before it.
          expect(await dispatchedId({ pool, nowMs: 1300 })).toBe(`${key}x1`);
          expect(await dispatchedId({ pool, nowMs: 1300 })).toBe(`${key}x2`);
          expect(await dispatchedId({ pool, nowMs: 1300 })).toBe(`${key}x3`);
          await s.settle({ id: `${key}x3`, nowMs: 1310, finalCost: 1, actualTokens: 0, outputTokens: 1 });
          const lagging = key.endsWith('into-oldest') ? 1000 : 960;
          expect((await s.admit(admitOf(makeReq(`${key}x4`, { pool }), at(lagging, 2)))).ok).toBe(true);
          // 10 of 10 again, 6 of them in the buckets up to 2006: 5 more fit once that one leaves.
          expect(await s.admit(admitOf(makeReq(`${key}r2`, { pool }), at(1320, 5)))).toMatchObject({
            ok: false,
            retryAfterMs: 2006 - 1320,
          });
        }
      });

      /** Limits and pace of one random run against the window model below. */
      interface WindowRun {
        readonly seed: number;
        readonly steps: number;
        /** Each step moves the clock by a whole number of ms in [min, max] (min < 0: lagging clocks). */
        readonly step: readonly [number, number];
        readonly oit: number;
        readonly rpm: number;
        readonly tpm: number;
        /** Largest token amount of an admission (true-ups go up to 1.25× it). */
        readonly tokens: number;
      }

      /**
       * The documented semantics, entry by entry: an amount admitted at t counts until t + W
       * rounded up to a multiple of ceil(W / 60) (or until an admission checked the window at a
       * later time, from a clock ahead of this one); an admission fits if what counts plus its
       * amount is within the limit; a refusal says when the first bucket whose leaving makes room
       * ends. A throttle (while overloaded) counts refused arrivals too, so it floods.
       */
      async function runWindowModel(run: WindowRun): Promise<void> {
        const W = 1000;
        const g = Math.ceil(W / 60);
        type Name = 'oit' | 'rpm' | 'tpm';
        const limits = (tokens: number): (WindowLimit & { name: Name })[] => [
          {
            name: 'oit',
            key: `oit:user:u${run.seed}`,
            limit: run.oit,
            amount: 1,
            windowMs: W,
            code: 'throttled',
            onlyWhenOverloaded: true,
          },
          {
            name: 'rpm',
            key: `rpm:tenant:a${run.seed}`,
            limit: run.rpm,
            amount: 1,
            windowMs: W,
            code: 'rpm_limited',
          },
          {
            name: 'tpm',
            key: `tpm:tenant:a${run.seed}`,
            limit: run.tpm,
            amount: tokens,
            windowMs: W,
            code: 'tpm_limited',
            trueUp: true,
          },
        ];
        type Entry = { id: string; at: number; end: number; amount: number };
        const model: Record<Name, Entry[]> = { oit: [], rpm: [], tpm: [] };
        /** The latest time a call dropped a window's ended buckets at. */
        const purged: Record<Name, number> = { oit: 0, rpm: 0, tpm: 0 };
        const live = (name: Name, now: number): Entry[] => {
          purged[name] = Math.max(purged[name], now);
          return model[name].filter((e) => e.end > purged[name]);
        };
        const retryAfter = (name: Name, amount: number, limit: number, now: number) => {
          const entries = live(name, now);
          const total = entries.reduce((a, e) => a + e.amount, 0);
          if (total + amount <= limit) return undefined;
          if (amount > limit) return W;
          let rem = total;
          for (const end of [...new Set(entries.map((e) => e.end))].sort((a, b) => a - b)) {
            for (const e of entries) if (e.end === end) rem -= e.amount;
            if (rem + amount <= limit) return end - now;
          }
          return W;
        };
        const count = (name: Name, id: string, now: number, amount: number): void => {
          live(name, now);
          model[name].push({ id, at: now, end: Math.ceil((now + W) / g) * g, amount });
        };
        const rng = createRng(run.seed);
        // Runs in one test keep apart: their own pool, keys and ids.
        const pool = `p${run.seed}`;
        const queued: string[] = [];
        const running: string[] = [];
        let now = 0;
        for (let step = 0; step < run.steps; step++) {
          now = Math.max(0, now + rng.int(run.step[0], run.step[1]));
          const roll = rng.next();
          if (roll < 0.6) {
            const id = `s${run.seed}r${step}`;
            const ls = limits(rng.int(0, run.tokens));
            const overloaded = rng.next() < 0.5;
            const r = await s.admit(admitOf(makeReq(id, { pool }), { nowMs: now, limits: ls, overloaded }));
            const refusal = ls.reduce<{ code: string; retryAfterMs: number } | undefined>((found, l) => {
              if (found !== undefined || (l.onlyWhenOverloaded && !overloaded)) return found;
              const retryAfterMs = retryAfter(l.name, l.amount, l.limit, now);
              return retryAfterMs === undefined ? undefined : { code: l.code, retryAfterMs };
            }, undefined);
            if (refusal !== undefined) {
              expect(r).toMatchObject({ ok: false, ...refusal });
              count('oit', `${id}#`, now, 1);
            } else {
              expect(r, JSON.stringify({ step, now })).toMatchObject({ ok: true });
              for (const l of ls) count(l.name, id, now, l.amount);
              queued.push(id);
              // Never more than the limit within any window (the bucket grid only ever counts longer).
              expect(model.rpm.filter((e) => e.at > now - W).length).toBeLessThanOrEqual(run.rpm);
            }
          } else if (roll < 0.8 && queued.length > 0) {
            const id = await dispatchedId({ pool, nowMs: now });
            queued.splice(queued.indexOf(id), 1);
            running.push(id);
          } else if (roll < 0.93 && running.length > 0) {
            const id = running.splice(rng.int(0, running.length - 1), 1)[0] as string;
            const tokens = rng.int(0, Math.round(run.tokens * 1.25));
            await s.settle({ id, nowMs: now, finalCost: 1, actualTokens: tokens, outputTokens: 1 });
            for (const e of model.tpm) if (e.id === id && e.end > now) e.amount = tokens;
          } else if (queued.length > 0) {
            const id = queued.splice(rng.int(0, queued.length - 1), 1)[0] as string;
            expect(await s.cancel(id, now)).toBe(true);
            for (const e of model.tpm) if (e.id === id && e.end > now) e.amount = 0;
          }
        }
      }

      it('matches a model of entries leaving at their bucket end over a long random run', async () => {
        // Mostly forward; now and then a dispatcher whose clock lags a little.
        await runWindowModel({ seed: 7, steps: 400, step: [-8, 40], oit: 8, rpm: 6, tpm: 400, tokens: 120 });
      });

      it('matches the model while floods keep asking, buckets leave and older buckets change', async () => {
        // Arrivals about twice what the limits let through, spread over every bucket of the
        // window: each refusal's answer lies among the older buckets, ahead of the last one's as
        // the flood grows, and moves as buckets leave, settlements true older ones up and lagging
        // clocks admit into them.
        for (const seed of [11, 12, 13])
          await runWindowModel({
            seed,
            steps: 1500,
            step: [-6, 12],
            oit: 60,
            rpm: 100,
            tpm: 900,
            tokens: 40,
          });
      });

      describe('tenant isolation', () => {
        // A window key names a user or an app as the tenant's request gives it (x-fairway-user):
        // the same key sent by two tenants is two windows.
        const user: WindowLimit = { ...rpm(2), key: 'rpm:user:alice' };

        it("keeps one tenant's windows apart from another's with the same key", async () => {
          for (let i = 0; i < 2; i++) {
            const r = await s.admit(admitOf(makeReq(`a${i}`), { tenant: 'alpha', nowMs: i, limits: [user] }));
            expect(r.ok).toBe(true);
          }
          expect(
            await s.admit(admitOf(makeReq('a2'), { tenant: 'alpha', nowMs: 2, limits: [user] })),
          ).toMatchObject({ ok: false, code: 'rpm_limited', key: 'rpm:user:alice' });
          // Beta's alice has her own window, untouched by alpha's flood.
          for (let i = 0; i < 2; i++) {
            const r = await s.admit(
              admitOf(makeReq(`b${i}`), { tenant: 'beta', nowMs: 3 + i, limits: [user] }),
            );
            expect(r.ok).toBe(true);
          }
        });

        it("does not let a tenant name another tenant's own window", async () => {
          // Beta sends no user, so its throttle window is keyed by its own id; alpha names that id.
          const beta: WindowLimit = { ...rpm(1), key: 'oit:user:beta' };
          expect((await s.admit(admitOf(makeReq('a0'), { tenant: 'alpha', limits: [beta] }))).ok).toBe(true);
          expect((await s.admit(admitOf(makeReq('b0'), { tenant: 'beta', limits: [beta] }))).ok).toBe(true);
        });

        it('cannot be crossed by tenant and key names that concatenate alike', async () => {
          const k: WindowLimit = { ...rpm(1), key: 'b:c' };
          const k2: WindowLimit = { ...rpm(1), key: 'c' };
          expect((await s.admit(admitOf(makeReq('x0'), { tenant: 'a', limits: [k] }))).ok).toBe(true);
          expect((await s.admit(admitOf(makeReq('x1'), { tenant: 'a:b', limits: [k2] }))).ok).toBe(true);
        });

        it("does not exempt a request by naming another tenant's open interaction", async () => {
          const throttle: WindowLimit = { ...rpm(0), code: 'throttled', onlyWhenOverloaded: true };
          const interaction = { key: 'ix:shared', ttlMs: 1000 };
          await s.admit(admitOf(makeReq('a0'), { tenant: 'alpha', interaction }));
          const b = await s.admit(
            admitOf(makeReq('b0'), {
              tenant: 'beta',
              nowMs: 10,
              limits: [throttle],
              overloaded: true,
              interaction,
            }),
          );
          expect(b).toMatchObject({ ok: false, code: 'throttled' });
          const a = await s.admit(
            admitOf(makeReq('a1'), {
              tenant: 'alpha',
              nowMs: 10,
              limits: [throttle],
              overloaded: true,
              interaction,
            }),
          );
          expect(a.ok).toBe(true);
        });

        it("keeps one window across tenants for a shared limit (the simulator's FairServe apps)", async () => {
          const app: WindowLimit = { ...rpm(1), key: 'oit:app:qa', shared: true };
          expect((await s.admit(admitOf(makeReq('a0'), { tenant: 'alpha', limits: [app] }))).ok).toBe(true);
          expect(await s.admit(admitOf(makeReq('b0'), { tenant: 'beta', limits: [app] }))).toMatchObject({
            ok: false,
            key: 'oit:app:qa',
          });
          // …and apart from a tenant's own window of the same key.
          expect(
            (await s.admit(admitOf(makeReq('b1'), { tenant: 'beta', limits: [{ ...app, shared: false }] })))
              .ok,
          ).toBe(true);
        });

        it("trues up a tenant's TPM window at settle without touching another's", async () => {
          const t: WindowLimit = {
            key: 'tpm:user:u',
            limit: 1000,
            amount: 0,
            windowMs: 60_000,
            code: 'tpm_limited',
          };
          await s.admit(
            admitOf(makeReq('a0', { reserveTokens: 900 }), {
              tenant: 'alpha',
              limits: [{ ...t, amount: 900 }],
            }),
          );
          await s.admit(
            admitOf(makeReq('b0'), { tenant: 'beta', nowMs: 1, limits: [{ ...t, amount: 900 }] }),
          );
          await dispatchedId();
          await s.settle({ id: 'a0', nowMs: 5, finalCost: 1, actualTokens: 100, outputTokens: 1 });
          // Alpha's window holds 100 now; beta's still holds its 900.
          expect(
            (
              await s.admit(
                admitOf(makeReq('a1'), { tenant: 'alpha', nowMs: 6, limits: [{ ...t, amount: 800 }] }),
              )
            ).ok,
          ).toBe(true);
          expect(
            (
              await s.admit(
                admitOf(makeReq('b1'), { tenant: 'beta', nowMs: 6, limits: [{ ...t, amount: 800 }] }),
              )
            ).ok,
          ).toBe(false);
        });
      });
    });

    describe('queue bounds', () => {
      it('rejects when the flow or the pool has too many queued requests', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a' })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', band: 1 })));
        expect(await s.admit(admitOf(makeReq('a2', { flow: 'a' }), { maxQueuedFlow: 1 }))).toMatchObject({
          ok: false,
          code: 'queue_full',
          key: 'flow:p:0:a',
        });
        expect((await s.admit(admitOf(makeReq('c1', { flow: 'c' }), { maxQueuedFlow: 1 }))).ok).toBe(true);
        expect(await s.admit(admitOf(makeReq('d1', { flow: 'd' }), { maxQueuedPool: 3 }))).toMatchObject({
          ok: false,
          code: 'queue_full',
          key: 'pool:p',
        });
        await dispatchedId();
        expect((await s.admit(admitOf(makeReq('d1', { flow: 'd' }), { maxQueuedPool: 3 }))).ok).toBe(true);
      });
    });

    describe('leases', () => {
      it('reclaims queued and running requests of an owner whose lease expired', async () => {
        await s.renewOwner('d1', 0, 1000);
        await s.renewOwner('d2', 0, 5000);
        await s.admit(admitOf(makeReq('q2', { owner: 'd1', flow: 'b' })));
        await s.admit(admitOf(makeReq('run', { owner: 'd1', reserveTokens: 70, arrivalMs: -1 })));
        await s.admit(admitOf(makeReq('q1', { owner: 'd1', flow: 'c' })));
        await s.admit(admitOf(makeReq('keep', { owner: 'd2', flow: 'k' })));
        expect(await dispatchedId()).toBe('run');
        expect(await s.reclaim(999)).toEqual({ dropped: [], released: [] });
        expect(await s.reclaim(1000)).toEqual({ dropped: ['q1', 'q2'], released: ['run'] });
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
        expect((await s.snapshot('p', 0)).backlogged).toEqual(['k']);
        expect(
          await s.settle({ id: 'run', nowMs: 1001, finalCost: 0, actualTokens: 0, outputTokens: 0 }),
        ).toBe(false);
      });

      it('keeps an owner that renews', async () => {
        await s.renewOwner('d1', 0, 1000);
        await s.admit(admitOf(makeReq('x')));
        await s.renewOwner('d1', 900, 1000);
        expect(await s.reclaim(1500)).toEqual({ dropped: [], released: [] });
        expect(await s.reclaim(1900)).toEqual({ dropped: ['x'], released: [] });
      });

      it('gives an owner that never renewed the default lease', async () => {
        await s.admit(admitOf(makeReq('x', { owner: 'silent' }), { nowMs: 100 }));
        expect((await s.reclaim(100 + 29_999)).dropped).toEqual([]);
        expect((await s.reclaim(100 + 30_000)).dropped).toEqual(['x']);
      });
    });

    describe('charging and settling', () => {
      it('adds streamed charges and corrects the total at settle', async () => {
        await s.admit(admitOf(makeReq('x', { dispatchCost: 100 })));
        await dispatchedId();
        await s.charge([
          { id: 'x', amount: 2 },
          { id: 'unknown', amount: 5 },
          { id: 'x', amount: 4 },
        ]);
        expect((await s.snapshot('p', 0)).counters.a).toBe(106);
        expect(await s.settle({ id: 'x', nowMs: 1, finalCost: 60, actualTokens: 30, outputTokens: 20 })).toBe(
          true,
        );
        expect((await s.snapshot('p', 0)).counters.a).toBe(60);
        expect(await s.settle({ id: 'x', nowMs: 2, finalCost: 60, actualTokens: 30, outputTokens: 20 })).toBe(
          false,
        );
      });

      it('applies charges made together, unawaited, in order and before an operation made after them', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 2 })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 3 })));
        await s.admit(admitOf(makeReq('b2', { flow: 'b', arrivalMs: 4 })));
        expect(await dispatchedId()).toBe('a1'); // a=10, b=0
        expect(await dispatchedId()).toBe('b1'); // b=10
        // Concurrent requests' charges (the Redis backend sends them as one call), then a pick
        // made before any of them answered: it sees a=16, b=12 and picks b.
        const charged = [
          s.charge([{ id: 'a1', amount: 5 }]),
          s.charge([
            { id: 'a1', amount: 1 },
            { id: 'b1', amount: 2 },
          ]),
          s.charge([{ id: 'unknown', amount: 7 }]),
        ];
        const picked = s.dispatch(dispatchOf());
        await Promise.all(charged);
        expect(await picked).toMatchObject({ kind: 'dispatched', req: { id: 'b2' } });
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 16, b: 22 });
        // A bad item fails its own call only, before anything is sent.
        const good = s.charge([{ id: 'a1', amount: 1 }]);
        await expect(s.charge([{ id: 'a1', amount: Number.NaN }])).rejects.toThrow(/amount/);
        await good;
        expect((await s.snapshot('p', 0)).counters.a).toBe(17);
      });

      it('serves dispatches made together, unawaited, one after another in the order made', async () => {
        for (const [i, id] of ['a1', 'a2', 'b1', 'b2'].entries())
          await s.admit(admitOf(makeReq(id, { flow: id[0], arrivalMs: i, reserveTokens: 10 })));
        await s.admit(admitOf(makeReq('q1', { pool: 'q', flow: 'q' })));
        const three = { replicas: [{ id: 'r1', tokenCapacity: 1000, seqCapacity: 3 }] };
        // Five picks onto a replica with room for three, a pick from another pool among them,
        // then one onto a replica with room for one more: the Redis backend sends runs of the
        // same arguments as one call.
        const picks = [
          s.dispatch(dispatchOf(three)),
          s.dispatch(dispatchOf(three)),
          s.dispatch(
            dispatchOf({ pool: 'q', replicas: [{ id: 'r2', tokenCapacity: 1000, seqCapacity: 3 }] }),
          ),
          s.dispatch(dispatchOf(three)),
          s.dispatch(dispatchOf(three)),
          s.dispatch(dispatchOf(three)),
          s.dispatch(dispatchOf({ replicas: [{ id: 'r1', tokenCapacity: 1000, seqCapacity: 5 }] })),
          s.dispatch(dispatchOf({ pool: 'empty' })),
          s.dispatch(dispatchOf({ pool: 'empty' })),
        ];
        const got = (await Promise.all(picks)).map((d) =>
          d.kind === 'dispatched' ? d.req.id : d.kind === 'blocked' ? `blocked ${d.id}` : d.kind,
        );
        expect(got).toEqual(['a1', 'b1', 'q1', 'a2', 'blocked b2', 'blocked b2', 'b2', 'empty', 'empty']);
      });

      it('answers a read made before a change, unawaited, as it was before the change', async () => {
        await s.admit(admitOf(makeReq('x', { reserveTokens: 30 })));
        await dispatchedId();
        const before = s.reserved('r1');
        const settled = s.settle({ id: 'x', nowMs: 1, finalCost: 10, actualTokens: 30, outputTokens: 0 });
        const after = s.reserved('r1');
        expect(await before).toEqual({ tokens: 30, seqs: 1 });
        expect(await settled).toBe(true);
        expect(await after).toEqual({ tokens: 0, seqs: 0 });
      });

      it('serves continuations first among dispatches made together', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('c1', { flow: 'c', arrivalMs: 2, continuation: true })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 3 })));
        await s.admit(admitOf(makeReq('c2', { flow: 'c', arrivalMs: 4, continuation: true })));
        const picks = await Promise.all(Array.from({ length: 6 }, () => s.dispatch(dispatchOf())));
        expect(picks.map((d) => (d.kind === 'dispatched' ? d.req.id : d.kind))).toEqual([
          'c1',
          'c2',
          'a1',
          'a2',
          'empty',
          'empty',
        ]);
        expect(await s.reserved('r1')).toEqual({ tokens: 40, seqs: 4 });
      });

      it('applies charges carried by a dispatch before it picks', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 2 })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 3 })));
        await s.admit(admitOf(makeReq('b2', { flow: 'b', arrivalMs: 4 })));
        expect(await dispatchedId()).toBe('a1'); // a=10, b=0
        expect(await dispatchedId()).toBe('b1'); // b=10
        // a1 streamed 50 more: with the charge in the same call, b is picked, not a.
        expect(await dispatchedId({ charges: [{ id: 'a1', amount: 50 }] })).toBe('b2');
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 60, b: 20 });
      });

      it('ignores charges for requests still queued', async () => {
        await s.admit(admitOf(makeReq('x')));
        await s.charge([{ id: 'x', amount: 7 }]);
        expect((await s.snapshot('p', 0)).counters.a).toBe(0);
        expect(await s.settle({ id: 'x', nowMs: 1, finalCost: 1, actualTokens: 1, outputTokens: 1 })).toBe(
          false,
        );
      });

      it('predicts output as the mean of the flow’s last five outputs', async () => {
        expect(await s.predictedOutput('a')).toBeUndefined();
        const outs = [100, 1, 2, 3, 4, 5];
        for (const [i, out] of outs.entries()) {
          await s.admit(admitOf(makeReq(`x${i}`)));
          await dispatchedId();
          await s.settle({ id: `x${i}`, nowMs: i, finalCost: 0, actualTokens: 0, outputTokens: out });
          if (i === 0) expect(await s.predictedOutput('a')).toBe(100);
        }
        expect(await s.predictedOutput('a')).toBe(3);
        expect(await s.predictedOutput('b')).toBeUndefined();
      });

      it('cancels only queued requests and lets the flow leave the backlog', async () => {
        await s.admit(admitOf(makeReq('x1')));
        await s.admit(admitOf(makeReq('x2')));
        await dispatchedId();
        expect(await s.cancel('x1', 1)).toBe(false);
        expect(await s.cancel('x2', 1)).toBe(true);
        expect(await s.cancel('x2', 1)).toBe(false);
        expect(await s.snapshot('p', 0)).toMatchObject({ backlogged: [], queued: {} });
        expect(await s.dispatch(dispatchOf())).toEqual({ kind: 'empty' });
      });
    });

    describe('re-queue (eviction)', () => {
      const requeue = (id: string, servedCost: number, dispatchCost?: number) => {
        if (!s.requeue) throw new Error('backend has no requeue');
        return s.requeue({
          id,
          nowMs: 10,
          servedCost,
          ...(dispatchCost !== undefined ? { dispatchCost } : {}),
        });
      };

      it('puts a running request back at the head of its flow and frees its reservation', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1, reserveTokens: 40 })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 2, reserveTokens: 40 })));
        expect(await dispatchedId()).toBe('a1');
        expect(await s.reserved('r1')).toEqual({ tokens: 40, seqs: 1 });
        expect(await requeue('a1', 10)).toBe(true);
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
        expect(await s.snapshot('p', 0)).toMatchObject({ backlogged: ['a'], queued: { a: 2 } });
        expect(await dispatchedId()).toBe('a1');
        expect(await dispatchedId()).toBe('a2');
      });

      it('charges only what was served, and settle still corrects to the final cost', async () => {
        await s.admit(admitOf(makeReq('x', { dispatchCost: 100 })));
        await dispatchedId();
        await s.charge([{ id: 'x', amount: 30 }]);
        expect((await s.snapshot('p', 0)).counters.a).toBe(130);
        // 20 more tokens streamed but were never charged: the served cost says what was served.
        expect(await requeue('x', 140)).toBe(true);
        expect((await s.snapshot('p', 0)).counters.a).toBe(140);
        await dispatchedId();
        expect((await s.snapshot('p', 0)).counters.a).toBe(140);
        await s.charge([{ id: 'x', amount: 8 }]);
        expect(await s.settle({ id: 'x', nowMs: 20, finalCost: 150, actualTokens: 1, outputTokens: 1 })).toBe(
          true,
        );
        expect((await s.snapshot('p', 0)).counters.a).toBe(150);
      });

      it('adds the given dispatch cost when the request runs again', async () => {
        await s.admit(admitOf(makeReq('x', { dispatchCost: 100 })));
        await dispatchedId();
        await requeue('x', 100, 7);
        await dispatchedId();
        expect((await s.snapshot('p', 0)).counters.a).toBe(107);
      });

      it('rejoins the backlog without a lift and keeps its place among flows', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1, dispatchCost: 10 })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 2, dispatchCost: 50 })));
        await s.admit(admitOf(makeReq('b2', { flow: 'b', arrivalMs: 3, dispatchCost: 50 })));
        expect(await dispatchedId()).toBe('a1'); // a=10, a leaves the backlog
        expect(await dispatchedId()).toBe('b1'); // b=50
        await requeue('a1', 5);
        const snap = await s.snapshot('p', 0);
        expect(snap.counters).toEqual({ a: 5, b: 50 });
        expect(snap.backlogged).toEqual(['a', 'b']);
        expect(await dispatchedId()).toBe('a1');
      });

      it('keeps its score under score ordering and its continuation mark', async () => {
        await s.admit(admitOf(makeReq('x1', { score: 5 })));
        await s.admit(admitOf(makeReq('x2', { score: 9 })));
        expect(await dispatchedId({ ordering: 'score' })).toBe('x1');
        await s.admit(admitOf(makeReq('x0', { score: 7, flow: 'b' })));
        await requeue('x1', 0);
        expect(await dispatchedId({ ordering: 'score' })).toBe('x1');
        expect(await dispatchedId({ ordering: 'score' })).toBe('x0');
        const none = { lift: 'none' as const };
        await s.admit(admitOf(makeReq('c1', { flow: 'c', continuation: true }), none));
        await s.admit(admitOf(makeReq('d1', { flow: 'd' }), none));
        expect(await dispatchedId()).toBe('c1');
        await requeue('c1', 0);
        expect(await dispatchedId()).toBe('c1');
      });

      it('refuses a request that is not running', async () => {
        await s.admit(admitOf(makeReq('x')));
        expect(await requeue('x', 1)).toBe(false);
        expect(await requeue('nope', 1)).toBe(false);
        await expect(requeue('x', Number.NaN)).rejects.toThrow(/servedCost/);
      });
    });

    describe('prefix affinity', () => {
      const r1: ReplicaCandidate = { id: 'r1', tokenCapacity: 1000, seqCapacity: 10 };
      const r2: ReplicaCandidate = { id: 'r2', tokenCapacity: 1000, seqCapacity: 10 };
      const both = { replicas: [r1, r2] };
      /** Puts `tokens` reserved on `replica` with a request of flow `z` that stays running. */
      const load = async (replica: ReplicaCandidate, tokens: number, id = 'load') => {
        await s.admit(admitOf(makeReq(id, { flow: 'z', reserveTokens: tokens, arrivalMs: -1 })));
        expect(await s.dispatch(dispatchOf({ replicas: [replica] }))).toMatchObject({ replica: replica.id });
      };
      const placed = async (over: Partial<DispatchInput>) => {
        const r = await s.dispatch(dispatchOf({ ...both, ...over }));
        if (r.kind !== 'dispatched') throw new Error(`expected a dispatch, got ${r.kind}`);
        return r.replica;
      };

      it('places a request on its affinity replica when it has room and is under the bound', async () => {
        await s.admit(admitOf(makeReq('x', { affinity: r2 })));
        expect(await placed({ affinityTokens: 0 })).toBe('r2');
        expect(await s.reserved('r2')).toEqual({ tokens: 10, seqs: 1 });
      });

      it('ignores the affinity when the dispatch gives no bound', async () => {
        await s.admit(admitOf(makeReq('x', { affinity: r2 })));
        expect(await placed({})).toBe('r1');
      });

      it('ignores the affinity of a replica above the bound', async () => {
        await load(r2, 50);
        await s.admit(admitOf(makeReq('x', { affinity: r2 })));
        expect(await placed({ affinityTokens: 49 })).toBe('r1');
        await s.admit(admitOf(makeReq('y', { affinity: r2 })));
        expect(await placed({ affinityTokens: 50 })).toBe('r2');
      });

      it('ignores the affinity of a replica without room, judged by the offered candidate', async () => {
        await load(r2, 995);
        await s.admit(admitOf(makeReq('x', { affinity: r2 })));
        expect(await placed({ affinityTokens: 1e9 })).toBe('r1');
        // A candidate offered with no room at all (stale, or left the pool) gets nothing either.
        await s.admit(admitOf(makeReq('y', { affinity: r1 })));
        const r3 = { ...r2, id: 'r3' };
        expect(await placed({ replicas: [{ ...r1, tokenCapacity: 0 }, r3], affinityTokens: 1e9 })).toBe('r3');
      });

      it('honours an affinity replica that is not among the candidates, with its admitted room', async () => {
        await s.admit(admitOf(makeReq('x', { affinity: r2 })));
        expect(await placed({ replicas: [r1], affinityTokens: 0 })).toBe('r2');
        await s.admit(admitOf(makeReq('y', { affinity: { id: 'r2', tokenCapacity: 15, seqCapacity: 10 } })));
        expect(await placed({ replicas: [r1], affinityTokens: 1e9 })).toBe('r1');
      });

      it('leaves the fairness order alone: the pick is the same, only its replica changes', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1, dispatchCost: 100 })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 2, affinity: r2 })));
        const first = await s.dispatch(dispatchOf({ ...both, affinityTokens: 0 }));
        expect(first).toMatchObject({ kind: 'dispatched', replica: 'r1', req: { id: 'a1' } });
        const second = await s.dispatch(dispatchOf({ ...both, affinityTokens: 1e9 }));
        expect(second).toMatchObject({ kind: 'dispatched', replica: 'r2', req: { id: 'b1', affinity: r2 } });
      });

      it('bounds concurrent picks by affinity as picks in a row', async () => {
        await s.admit(admitOf(makeReq('x', { flow: 'a', arrivalMs: 1, affinity: r2 })));
        await s.admit(admitOf(makeReq('y', { flow: 'b', arrivalMs: 2, affinity: r2 })));
        const d = dispatchOf({ ...both, affinityTokens: 0 });
        const rs = await Promise.all([s.dispatch(d), s.dispatch(d)]);
        expect(rs.map((r) => (r.kind === 'dispatched' ? `${r.req.id}@${r.replica}` : r.kind)).sort()).toEqual(
          ['x@r2', 'y@r1'],
        );
        expect(await s.reserved('r2')).toEqual({ tokens: 10, seqs: 1 });
      });

      it('places by affinity in an admission that dispatches at once', async () => {
        if (!s.admitAndDispatch) throw new Error('backend has no admitAndDispatch');
        const r = await s.admitAndDispatch({
          admit: admitOf(makeReq('x', { affinity: r2 })),
          dispatch: dispatchOf({ ...both, affinityTokens: 0 }),
        });
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', replica: 'r2' });
        expect(r.reserved).toEqual([
          { tokens: 0, seqs: 0 },
          { tokens: 10, seqs: 1 },
        ]);
      });

      it('places by affinity in a settlement that dispatches into the freed room', async () => {
        if (!s.settleAndDispatch) throw new Error('backend has no settleAndDispatch');
        await load(r2, 20);
        await s.admit(admitOf(makeReq('x', { affinity: r2 })));
        const r = await s.settleAndDispatch({
          settle: { id: 'load', nowMs: 5, finalCost: 10, actualTokens: 20, outputTokens: 1 },
          dispatch: dispatchOf({ ...both, affinityTokens: 0 }),
        });
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', replica: 'r2' });
        expect(r.reserved).toEqual([
          { tokens: 0, seqs: 0 },
          { tokens: 10, seqs: 1 },
        ]);
      });

      it('drops the affinity of a re-queued request, and an undone dispatch gives its charge back', async () => {
        if (!s.requeue) throw new Error('backend has no requeue');
        await s.admit(admitOf(makeReq('x', { affinity: r2, dispatchCost: 30 })));
        expect(await placed({ affinityTokens: 1e9 })).toBe('r2');
        expect((await s.snapshot('p', 0)).counters.a).toBe(30);
        expect(await s.requeue({ id: 'x', nowMs: 1, servedCost: 999, undispatch: true })).toBe(true);
        expect((await s.snapshot('p', 0)).counters.a).toBe(0);
        expect(await s.reserved('r2')).toEqual({ tokens: 0, seqs: 0 });
        expect(await placed({ affinityTokens: 1e9 })).toBe('r1');
        expect((await s.snapshot('p', 0)).counters.a).toBe(30);
      });

      it('places a request moved out of an engine queue on the replica it moved to, when that has room', async () => {
        if (!s.requeue) throw new Error('backend has no requeue');
        await s.admit(admitOf(makeReq('x', { dispatchCost: 30 })));
        expect(await placed({ affinityTokens: 1e9 })).toBe('r1');
        expect(await s.requeue({ id: 'x', nowMs: 1, servedCost: 0, undispatch: true, moveTo: r2 })).toBe(
          true,
        );
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
        // First-fit would choose r1 again; the move's replica has room.
        expect(await placed({ affinityTokens: 1e9 })).toBe('r2');
        expect((await s.snapshot('p', 0)).counters.a).toBe(30);
        // Moved again, to a replica without room: placed as usual.
        expect(await s.requeue({ id: 'x', nowMs: 2, servedCost: 0, undispatch: true, moveTo: r2 })).toBe(
          true,
        );
        await load(r2, 995);
        expect(await placed({ affinityTokens: 1e9 })).toBe('r1');
      });
    });

    describe('prefix parts held once per replica', () => {
      const r1: ReplicaCandidate = { id: 'r1', tokenCapacity: 1000, seqCapacity: 10 };
      const r2: ReplicaCandidate = { id: 'r2', tokenCapacity: 1000, seqCapacity: 10 };
      /** A system prompt of two parts (64 and 64 tokens), then what each conversation adds. */
      const system = [
        { key: 'sys-128', tokens: 64 },
        { key: 'sys-64', tokens: 64 },
      ];
      const conv = (id: string, over: Partial<QueuedRequest> = {}) =>
        makeReq(id, { flow: id, reserveTokens: 200, prefixParts: system, ...over });
      const run = async (req: QueuedRequest, replicas: ReplicaCandidate[], affinityTokens?: number) => {
        await s.admit(admitOf(req));
        const r = await s.dispatch(
          dispatchOf({ replicas, ...(affinityTokens !== undefined ? { affinityTokens } : {}) }),
        );
        if (r.kind !== 'dispatched') throw new Error(`expected a dispatch, got ${r.kind}`);
        return r;
      };
      const settle = (id: string) =>
        s.settle({ id, nowMs: 1, finalCost: 10, actualTokens: 200, outputTokens: 1 });

      it('reserves a part the replica already holds once, and frees it with its last holder', async () => {
        await run(conv('x'), [r1]);
        expect(await s.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
        // Sharing both parts: 200 − 128.
        const y = await run(conv('y'), [r1]);
        expect(y.req.prefixParts).toEqual(system);
        expect(await s.reserved('r1')).toEqual({ tokens: 272, seqs: 2 });
        // Sharing the shorter part only.
        await run(conv('z', { prefixParts: [{ key: 'other-128', tokens: 64 }, system[1]!] }), [r1]);
        expect(await s.reserved('r1')).toEqual({ tokens: 408, seqs: 3 });
        // The first holder leaves: only its own 72 tokens go, its parts stay held by the others.
        expect(await settle('x')).toBe(true);
        expect(await s.reserved('r1')).toEqual({ tokens: 336, seqs: 2 });
        // The last holder of 'sys-128' leaves: that part goes with its own 72 tokens.
        expect(await settle('y')).toBe(true);
        expect(await s.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
        expect(await settle('z')).toBe(true);
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
        // Nothing is left held: a new request reserves its whole prompt again.
        await run(conv('w'), [r1]);
        expect(await s.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
      });

      it('holds parts per replica: another replica reserves them in full', async () => {
        await run(conv('x'), [r1]);
        await run(conv('y'), [r2]);
        expect(await s.reserved('r2')).toEqual({ tokens: 200, seqs: 1 });
      });

      it('fits a request on its affinity replica at what it reserves there, elsewhere at its whole reservation', async () => {
        const small: ReplicaCandidate = { id: 'r1', tokenCapacity: 300, seqCapacity: 10 };
        await run(conv('x'), [small]);
        // 200 + 200 does not fit r1 as a candidate, with or without an affinity bound; a request whose
        // affinity is r1 fits there at the 72 tokens it adds.
        await s.admit(admitOf(conv('y')));
        expect(await s.dispatch(dispatchOf({ replicas: [small] }))).toMatchObject({
          kind: 'blocked',
          id: 'y',
        });
        expect(await s.dispatch(dispatchOf({ replicas: [small], affinityTokens: 1e9 }))).toMatchObject({
          kind: 'blocked',
          id: 'y',
        });
        await s.cancel('y', 1);
        await s.admit(admitOf(conv('v', { affinity: small })));
        expect(await s.dispatch(dispatchOf({ replicas: [small], affinityTokens: 1e9 }))).toMatchObject({
          kind: 'dispatched',
          replica: 'r1',
        });
        expect(await s.reserved('r1')).toEqual({ tokens: 272, seqs: 2 });
      });

      it('gives the parts back when a request is re-queued or its owner is reclaimed', async () => {
        if (!s.requeue) throw new Error('backend has no requeue');
        await run(conv('x'), [r1]);
        await run(conv('y'), [r1]);
        expect(await s.requeue({ id: 'y', nowMs: 1, servedCost: 5 })).toBe(true);
        expect(await s.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
        await run(conv('y2'), [r1]);
        expect(await s.reserved('r1')).toEqual({ tokens: 272, seqs: 2 });
        await s.dispatch(dispatchOf({ replicas: [r1] }));
        expect(await s.reserved('r1')).toEqual({ tokens: 344, seqs: 3 });
        const { released } = await s.reclaim(1e15);
        expect([...released].sort()).toEqual(['x', 'y', 'y2']);
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
      });

      it('holds the parts of a request placed as it is admitted', async () => {
        if (!s.admitAndDispatch) throw new Error('backend has no admitAndDispatch');
        await run(conv('x'), [r1]);
        const r = await s.admitAndDispatch({
          admit: admitOf(conv('y')),
          dispatch: dispatchOf({ replicas: [r1] }),
        });
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', replica: 'r1' });
        expect(r.reserved).toEqual([{ tokens: 272, seqs: 2 }]);
      });

      it('refuses parts that sum to more than the reservation', async () => {
        await expect(s.admit(admitOf(conv('x', { reserveTokens: 100 })))).rejects.toThrow(/prefix parts/);
      });
    });

    describe('admit and dispatch in one step', () => {
      const fused = (req: QueuedRequest, over: Partial<AdmitInput> = {}, d: Partial<DispatchInput> = {}) => {
        if (!s.admitAndDispatch) throw new Error('backend has no admitAndDispatch');
        return s.admitAndDispatch({ admit: admitOf(req, over), dispatch: dispatchOf(d) });
      };
      const room = (id: string, tokenCapacity: number): ReplicaCandidate => ({
        id,
        tokenCapacity,
        seqCapacity: 10,
      });

      it('admits and dispatches an arriving request at once when a replica has room', async () => {
        const r = await fused(
          makeReq('x', { reserveTokens: 30 }),
          {},
          { replicas: [room('r1', 20), room('r2', 100)] },
        );
        expect(r.admit).toEqual({ ok: true, queued: 1, windows: [] });
        expect(r.dispatch).toMatchObject({
          kind: 'dispatched',
          replica: 'r2',
          req: { id: 'x', payload: 'payload-x' },
        });
        expect(r.poolQueued).toBe(0);
        expect(r.reserved).toEqual([
          { tokens: 0, seqs: 0 },
          { tokens: 30, seqs: 1 },
        ]);
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 10 });
        expect(await s.settle({ id: 'x', nowMs: 1, finalCost: 10, actualTokens: 30, outputTokens: 0 })).toBe(
          true,
        );
      });

      it('into an empty pool, lifts the flow and leaves it as the last to leave, as admit and dispatch would', async () => {
        // a (cost 10 per request) runs twice through an empty pool: a = 20, and a left last.
        await fused(makeReq('a1', { flow: 'a', arrivalMs: 1 }));
        await fused(makeReq('a2', { flow: 'a', arrivalMs: 2 }));
        // b arrives at an empty pool: lifted to the counter of the last flow to leave (a's 20).
        const r = await fused(makeReq('b1', { flow: 'b', arrivalMs: 3, dispatchCost: 5 }));
        expect(r.admit).toEqual({ ok: true, queued: 1, windows: [] });
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', req: { id: 'b1' } });
        expect(r.poolQueued).toBe(0);
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 20, b: 25 });
        // Now b is the last to leave: c is lifted to b's 25, not a's 20.
        await fused(makeReq('c1', { flow: 'c', arrivalMs: 4, dispatchCost: 1 }));
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 20, b: 25, c: 26 });
        // Under LCF nothing is lifted.
        await fused(makeReq('d1', { flow: 'd', arrivalMs: 5 }), { lift: 'none' });
        expect((await s.snapshot('p', 0)).counters).toMatchObject({ d: 10 });
        // Running, recorded as dispatched: it settles, and a re-queue puts it back in the queue.
        if (!s.requeue) throw new Error('backend has no requeue');
        expect(await s.requeue({ id: 'd1', nowMs: 10, servedCost: 10 })).toBe(true);
        expect(await dispatchedId()).toBe('d1');
      });

      it('a continuation into an empty pool runs at once and leaves no continuation queued', async () => {
        const r = await fused(makeReq('c1', { flow: 'c', continuation: true }));
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', req: { id: 'c1' } });
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('b1', { flow: 'b', arrivalMs: 2 })));
        expect(await dispatchedId()).toBe('a1');
        expect((await s.snapshot('p', 0)).backlogged).toEqual(['b']);
      });

      it('serves a request queued ahead first, by the ordering', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 })));
        const r = await fused(makeReq('b1', { flow: 'b', arrivalMs: 2 }));
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', req: { id: 'a1' } });
        expect(r.poolQueued).toBe(1);
        expect(await dispatchedId()).toBe('b1');
      });

      it('leaves the request queued and reports a blocked head when nothing fits', async () => {
        const r = await fused(makeReq('big', { reserveTokens: 80 }), {}, { replicas: [room('r1', 50)] });
        expect(r).toEqual({
          admit: { ok: true, queued: 1, windows: [] },
          dispatch: { kind: 'blocked', id: 'big', reserveTokens: 80 },
          poolQueued: 1,
          reserved: [{ tokens: 0, seqs: 0 }],
        });
        expect((await s.snapshot('p', 0)).queued).toEqual({ a: 1 });
      });

      it('dispatches nothing when the admission is rejected', async () => {
        const rpm: WindowLimit = { key: 'rpm:a', limit: 1, amount: 1, windowMs: 1000, code: 'rpm_limited' };
        await s.admit(admitOf(makeReq('q1', { flow: 'q' })));
        await fused(makeReq('x1'), { limits: [rpm] }, { replicas: [room('r1', 10)] });
        const r = await fused(makeReq('x2'), { limits: [rpm] });
        expect(r.admit).toMatchObject({ ok: false, code: 'rpm_limited' });
        expect(r.dispatch).toBeUndefined();
        expect(r.poolQueued).toBe(1);
        expect(r.reserved).toEqual([{ tokens: 10, seqs: 1 }]);
        expect((await s.snapshot('p', 0)).queued).toEqual({ q: 1 });
      });

      it('applies the charges it carries before it picks', async () => {
        await s.admit(admitOf(makeReq('a1', { flow: 'a', arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('a2', { flow: 'a', arrivalMs: 2 })));
        expect(await dispatchedId()).toBe('a1'); // a=10
        const r = await fused(
          makeReq('b1', { flow: 'b', arrivalMs: 3 }),
          {},
          { charges: [{ id: 'a1', amount: 5 }] },
        );
        // b is lifted to a's 10 at admission, a is charged to 15 before the pick: b1 goes first.
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', req: { id: 'b1' } });
        expect((await s.snapshot('p', 0)).counters).toEqual({ a: 15, b: 20 });
      });

      it('rejects malformed input naming the field', async () => {
        if (!s.admitAndDispatch) throw new Error('backend has no admitAndDispatch');
        await expect(
          s.admitAndDispatch({ admit: admitOf(makeReq('x')), dispatch: dispatchOf({ bands: [0.5] }) }),
        ).rejects.toThrow(/dispatch\.bands\[0\]/);
        expect(await s.snapshot('p', 0)).toEqual({ counters: {}, backlogged: [], queued: {} });
      });
    });

    describe('settle and dispatch in one step', () => {
      const settleOf = (id: string, nowMs = 5) => ({
        id,
        nowMs,
        finalCost: 10,
        actualTokens: 60,
        outputTokens: 7,
      });
      const one = { id: 'r1', tokenCapacity: 100, seqCapacity: 10 };
      const fused = (id: string, d: Partial<DispatchInput> = {}) => {
        if (!s.settleAndDispatch) throw new Error('backend has no settleAndDispatch');
        return s.settleAndDispatch({ settle: settleOf(id), dispatch: dispatchOf({ replicas: [one], ...d }) });
      };

      it('settles a request and dispatches the next one into the room it freed', async () => {
        await s.admit(admitOf(makeReq('x', { reserveTokens: 60, arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('y', { reserveTokens: 60, arrivalMs: 2, flow: 'b' })));
        await s.admit(admitOf(makeReq('z', { reserveTokens: 60, arrivalMs: 3, flow: 'c' })));
        await s.dispatch(dispatchOf({ replicas: [one] }));
        const r = await fused('x');
        expect(r.settled).toBe(true);
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', replica: 'r1', req: { id: 'y' } });
        expect(r.poolQueued).toBe(1);
        expect(r.reserved).toEqual([{ tokens: 60, seqs: 1 }]);
        expect(await s.predictedOutput('a')).toBe(7);
        expect((await s.snapshot('p', 0)).counters.a).toBe(10);
      });

      it('still dispatches when the request was not running, and reports an empty queue', async () => {
        const r = await fused('nope');
        expect(r).toEqual({
          settled: false,
          dispatch: { kind: 'empty' },
          poolQueued: 0,
          reserved: [{ tokens: 0, seqs: 0 }],
        });
      });

      it('reports a blocked head when the freed room is not enough', async () => {
        await s.admit(admitOf(makeReq('x', { reserveTokens: 30, arrivalMs: 1 })));
        await s.admit(admitOf(makeReq('w', { reserveTokens: 30, arrivalMs: 2, flow: 'b' })));
        await s.admit(admitOf(makeReq('big', { reserveTokens: 90, arrivalMs: 3, flow: 'c' })));
        await s.dispatch(dispatchOf({ replicas: [one] }));
        await s.dispatch(dispatchOf({ replicas: [one] }));
        const r = await fused('x');
        expect(r).toMatchObject({ settled: true, dispatch: { kind: 'blocked', id: 'big' }, poolQueued: 1 });
        expect(r.reserved).toEqual([{ tokens: 30, seqs: 1 }]);
      });

      it('rejects malformed input naming the field', async () => {
        if (!s.settleAndDispatch) throw new Error('backend has no settleAndDispatch');
        await expect(
          s.settleAndDispatch({ settle: { ...settleOf('x'), actualTokens: -1 }, dispatch: dispatchOf() }),
        ).rejects.toThrow(/settle\.actualTokens/);
      });
    });

    describe('restore (what a dispatcher holds, put back after a loss)', () => {
      const tpm: WindowLimit = {
        key: 'tpm:a',
        limit: 100,
        amount: 40,
        windowMs: 1000,
        code: 'tpm_limited',
      };

      async function restore(
        requests: Parameters<NonNullable<SchedulingStore['restore']>>[0]['requests'],
        windows: Parameters<NonNullable<SchedulingStore['restore']>>[0]['windows'] = [],
      ) {
        if (!s.restore) throw new Error('backend has no restore');
        return s.restore({ nowMs: 500, lift: 'vtc', windows, requests });
      }

      it('holds the prefix parts of restored running requests once, and frees them with the last', async () => {
        const parts = [{ key: 'sys', tokens: 50 }];
        expect(
          await restore([
            { req: makeReq('a1', { reserveTokens: 80, prefixParts: parts }), replica: 'r1', windows: [] },
            { req: makeReq('a2', { reserveTokens: 80, prefixParts: parts }), replica: 'r1', windows: [] },
          ]),
        ).toMatchObject({ restored: 2 });
        expect(await s.reserved('r1')).toEqual({ tokens: 110, seqs: 2 });
        await s.settle({ id: 'a1', nowMs: 600, finalCost: 10, actualTokens: 80, outputTokens: 1 });
        expect(await s.reserved('r1')).toEqual({ tokens: 80, seqs: 1 });
        await s.settle({ id: 'a2', nowMs: 600, finalCost: 10, actualTokens: 80, outputTokens: 1 });
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
      });

      it('queues held requests again in the given order and serves them in it', async () => {
        expect(
          await restore([
            { req: makeReq('a1', { arrivalMs: 10 }), windows: [] },
            { req: makeReq('a2', { arrivalMs: 20 }), windows: [] },
            { req: makeReq('b1', { flow: 'b', arrivalMs: 15 }), windows: [] },
          ]),
        ).toEqual({ restored: 3, skipped: 0, forgotten: 0 });
        expect((await s.snapshot('p', 0)).queued).toEqual({ a: 2, b: 1 });
        expect(await dispatchedId()).toBe('a1');
        expect(await dispatchedId()).toBe('b1');
        expect(await dispatchedId()).toBe('a2');
        expect(await s.cancel('a2', 600)).toBe(false);
      });

      it('reserves running requests on their replica whatever its room, and settles them exactly', async () => {
        await restore([
          {
            req: makeReq('r1', { reserveTokens: 30, dispatchCost: 12 }),
            replica: 'r9',
            grown: 5,
            windows: [],
          },
          { req: makeReq('r2', { reserveTokens: 30 }), replica: 'r9', windows: [] },
        ]);
        expect(await s.reserved('r9')).toEqual({ tokens: 65, seqs: 2 });
        expect((await s.snapshot('p', 0)).counters.a).toBe(22);
        await s.charge([{ id: 'r1', amount: 3 }]);
        expect(
          await s.settle({ id: 'r1', nowMs: 600, finalCost: 50, actualTokens: 1, outputTokens: 1 }),
        ).toBe(true);
        // r1 was charged 50 in all, r2 its dispatch cost so far.
        expect((await s.snapshot('p', 0)).counters.a).toBe(60);
        expect(await s.reserved('r9')).toEqual({ tokens: 30, seqs: 1 });
      });

      it('puts window entries back once, so limits count what was admitted before the loss', async () => {
        // Window entries and a restored request's windows are named as the store keys them (by tenant).
        const entry = { key: tenantScoped('t', 'tpm:a'), id: 'old', atMs: 400, windowMs: 1000, amount: 40 };
        await restore([], [entry, { ...entry, id: 'old2', atMs: 450, amount: 20 }]);
        await restore([], [entry]);
        expect((await s.admit(admitOf(makeReq('n1'), { nowMs: 500, limits: [tpm] }))).ok).toBe(true);
        expect(await s.admit(admitOf(makeReq('n2'), { nowMs: 500, limits: [tpm] }))).toEqual({
          ok: false,
          code: 'tpm_limited',
          retryAfterMs: 911,
          key: 'tpm:a',
          held: 100,
        });
        // The first entry leaves the window at the end of its bucket: 400 + 1000 ms rounded up to
        // the window's 17 ms grid (ceil(1000 / 60)).
        expect((await s.admit(admitOf(makeReq('n2'), { nowMs: 1410, limits: [tpm] }))).ok).toBe(false);
        expect((await s.admit(admitOf(makeReq('n2'), { nowMs: 1411, limits: [tpm] }))).ok).toBe(true);
      });

      it('trues up the windows of a restored request at settle', async () => {
        await restore(
          [
            {
              req: makeReq('r1'),
              replica: 'r1',
              windows: [
                { key: tenantScoped('t', 'tpm:a'), trueUp: true, atMs: 450, windowMs: 1000, amount: 90 },
              ],
            },
          ],
          [{ key: tenantScoped('t', 'tpm:a'), id: 'r1', atMs: 450, windowMs: 1000, amount: 90 }],
        );
        expect((await s.admit(admitOf(makeReq('n1'), { nowMs: 500, limits: [tpm] }))).ok).toBe(false);
        await s.settle({ id: 'r1', nowMs: 500, finalCost: 1, actualTokens: 10, outputTokens: 5 });
        expect((await s.admit(admitOf(makeReq('n1'), { nowMs: 500, limits: [tpm] }))).ok).toBe(true);
      });

      it('skips requests the store still knows', async () => {
        await s.admit(admitOf(makeReq('x')));
        expect(await restore([{ req: makeReq('x'), windows: [] }])).toEqual({
          restored: 0,
          skipped: 1,
          forgotten: 0,
        });
        expect((await s.snapshot('p', 0)).queued).toEqual({ a: 1 });
      });

      it('forgets what the owner no longer holds: queued ones dropped, running ones released', async () => {
        if (!s.restore) throw new Error('backend has no restore');
        const tpm1: WindowLimit = { ...tpm, amount: 60 };
        await s.admit(admitOf(makeReq('gone-run', { reserveTokens: 7 })));
        await dispatchedId();
        await s.admit(admitOf(makeReq('gone-queued'), { limits: [tpm1] }));
        await s.admit(admitOf(makeReq('kept')));
        await s.admit(admitOf(makeReq('other', { owner: 'd2' })));
        expect(
          await s.restore({
            nowMs: 1,
            lift: 'vtc',
            windows: [],
            requests: [{ req: makeReq('new'), windows: [] }],
            owner: { id: 'd1', holds: ['kept', 'new'] },
          }),
        ).toEqual({ restored: 1, skipped: 0, forgotten: 2 });
        expect(await s.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
        expect((await s.snapshot('p', 0)).queued).toEqual({ a: 3 });
        expect(await s.cancel('gone-queued', 2)).toBe(false);
        // Its TPM amount was given back, as a cancel gives it back.
        expect((await s.admit(admitOf(makeReq('n'), { nowMs: 2, limits: [tpm1] }))).ok).toBe(true);
      });

      it('holds restored requests under their owner’s lease', async () => {
        await restore([{ req: makeReq('q', { owner: 'gone' }), windows: [] }]);
        expect(await s.reclaim(500 + 31_000)).toEqual({ dropped: ['q'], released: [] });
      });
    });

    describe('usage accounting and quotas', () => {
      const account = (over: Partial<UsageAccount> = {}): UsageAccount => ({
        key: 'sha256:k1',
        model: 'm',
        day: '2026-11-24',
        month: '2026-11',
        ...over,
      });
      const quota = (over: Partial<QuotaCheck> = {}): QuotaCheck => ({
        scope: 'tenant',
        window: 'day',
        kind: 'tokens',
        budget: 100,
        amount: 40,
        resetAtMs: 1_000,
        ...over,
      });
      async function run(id: string, over: Partial<AdmitInput>, actual: number, output: number) {
        const r = await s.admit(admitOf(makeReq(id), over));
        if (!r.ok) return r;
        await dispatchedId();
        await s.settle({ id, nowMs: 1, finalCost: 0, actualTokens: actual, outputTokens: output });
        return r;
      }

      it('records requests, input and output tokens and cost per (day, tenant, key, model)', async () => {
        const priced = account({ priceIn: 0.5, priceOut: 1.5 });
        await run('u1', { usage: priced }, 30, 10);
        await run('u2', { usage: priced }, 7, 3);
        await run('u3', { usage: account({ key: 'sha256:k2', model: 'n' }) }, 5, 5);
        await run('u4', { tenant: 'other', usage: account({ key: 'sha256:k3' }) }, 9, 1);
        await run('u5', {}, 50, 50); // no account: not recorded
        const usage = s.usage?.bind(s);
        if (usage === undefined) throw new Error('usage missing');
        expect(await usage({ days: ['2026-11-24'], tenant: 't' })).toEqual([
          {
            day: '2026-11-24',
            tenant: 't',
            key: 'sha256:k1',
            model: 'm',
            requests: 2,
            inputTokens: 24,
            outputTokens: 13,
            cost: (20 * 0.5 + 10 * 1.5) / 1e6 + (4 * 0.5 + 3 * 1.5) / 1e6,
          },
          {
            day: '2026-11-24',
            tenant: 't',
            key: 'sha256:k2',
            model: 'n',
            requests: 1,
            inputTokens: 0,
            outputTokens: 5,
            cost: 0,
          },
        ]);
        expect(await usage({ days: ['2026-11-24'], model: 'm' })).toHaveLength(2);
        expect(await usage({ days: ['2026-11-24'], key: 'sha256:k3' })).toMatchObject([
          { tenant: 'other', requests: 1, inputTokens: 8, outputTokens: 1 },
        ]);
        expect(await usage({ days: ['2026-11-23', '2026-11-25'] })).toEqual([]);
      });

      it('reserves as much as the budget holds down to minAmount, the same share of every such quota', async () => {
        const priced = account({ priceIn: 1_000_000, priceOut: 1_000_000 });
        // 30 of 100 tokens used; the request wants 40..200 tokens (and their cost, 1 a token).
        expect(await run('a', { usage: priced }, 30, 10)).toMatchObject({ ok: true });
        const flexible = (id: string) =>
          s.admit(
            admitOf(makeReq(id), {
              usage: priced,
              quotas: [
                quota({ amount: 200, minAmount: 40 }),
                quota({ kind: 'spend', window: 'month', budget: 1000, amount: 200, minAmount: 40 }),
              ],
            }),
          );
        const r = await flexible('b');
        // Tokens: (100 - 30 - 40) / (200 - 40) = 0.1875 of the way; spend has room for all of it.
        expect(r).toEqual({ ok: true, queued: 1, quotaShare: 0.1875, windows: [] });
        // Both quotas reserved 40 + 0.1875 × 160 = 70: the token budget is full.
        expect(
          await s.admit(admitOf(makeReq('c'), { usage: priced, quotas: [quota({ amount: 1 })] })),
        ).toMatchObject({ ok: false, code: 'quota_exceeded', key: 'quota:tenant:day:tokens' });
        expect(await flexible('d')).toMatchObject({ ok: false, code: 'quota_exceeded' });
        // Settled with its true usage (12 tokens), the rest of the reservation comes back.
        await dispatchedId();
        await s.settle({ id: 'b', nowMs: 1, finalCost: 0, actualTokens: 12, outputTokens: 2 });
        expect(await flexible('e')).toEqual({
          ok: true,
          queued: 1,
          quotaShare: (100 - 42 - 40) / 160,
          windows: [],
        });
      });

      it('reports a share of 1 when every amount fits, and none without a minAmount', async () => {
        const q = (id: string, over: Partial<QuotaCheck>) =>
          s.admit(admitOf(makeReq(id), { usage: account(), quotas: [quota({ budget: 1000, ...over })] }));
        expect(await q('a', { amount: 50, minAmount: 10 })).toEqual({
          ok: true,
          queued: 1,
          quotaShare: 1,
          windows: [],
        });
        expect(await q('b', { amount: 50 })).toEqual({ ok: true, queued: 2, windows: [] });
      });

      it('refuses a request whose reservation does not fit the budget, changing nothing', async () => {
        const q = { usage: account(), quotas: [quota()] };
        expect(await run('a', q, 30, 10)).toMatchObject({ ok: true }); // used 40
        expect(await run('b', q, 45, 5)).toMatchObject({ ok: true }); // used 90
        const refused = await s.admit(admitOf(makeReq('c'), { ...q, nowMs: 400 }));
        expect(refused).toEqual({
          ok: false,
          code: 'quota_exceeded',
          retryAfterMs: 600,
          key: 'quota:tenant:day:tokens',
        });
        // A reservation of 10 still fits (90 + 10 <= 100).
        expect(await s.admit(admitOf(makeReq('d'), { ...q, quotas: [quota({ amount: 10 })] }))).toMatchObject(
          {
            ok: true,
          },
        );
        // Another tenant's and another day's budgets are their own.
        expect(await s.admit(admitOf(makeReq('e'), { ...q, tenant: 'other' }))).toMatchObject({ ok: true });
        expect(
          await s.admit(admitOf(makeReq('f'), { ...q, usage: account({ day: '2026-11-25' }) })),
        ).toMatchObject({ ok: true });
      });

      it('holds a reservation while the request runs and returns what it did not use at settle', async () => {
        const q = { usage: account(), quotas: [quota({ budget: 100, amount: 60 })] };
        expect(await s.admit(admitOf(makeReq('a'), q))).toMatchObject({ ok: true });
        await dispatchedId();
        expect(await s.admit(admitOf(makeReq('b'), q))).toMatchObject({ ok: false, code: 'quota_exceeded' });
        await s.settle({ id: 'a', nowMs: 1, finalCost: 0, actualTokens: 15, outputTokens: 5 });
        expect(await s.admit(admitOf(makeReq('b'), q))).toMatchObject({ ok: true }); // 15 + 60
        expect(await s.cancel('b', 2)).toBe(true); // a cancelled request gives its reservation back
        expect(await s.admit(admitOf(makeReq('c'), { ...q, quotas: [quota({ amount: 85 })] }))).toMatchObject(
          {
            ok: true,
          },
        );
      });

      it('keeps key, tenant, day, month, token and spend budgets apart', async () => {
        const priced = account({ priceIn: 1_000_000, priceOut: 2_000_000 }); // 1 and 2 per token
        const spend = quota({ scope: 'key', window: 'month', kind: 'spend', budget: 50, amount: 0 });
        expect(await run('a', { usage: priced, quotas: [spend] }, 30, 10)).toMatchObject({ ok: true }); // 40
        const next = { usage: priced, quotas: [{ ...spend, amount: 11 }] };
        expect(await s.admit(admitOf(makeReq('b'), next))).toMatchObject({
          ok: false,
          code: 'quota_exceeded',
          key: 'quota:key:month:spend',
        });
        // The month's spend counts another day's usage; another key's budget is untouched.
        const otherDay = { ...next, usage: { ...priced, day: '2026-11-30' } };
        expect(await s.admit(admitOf(makeReq('c'), otherDay))).toMatchObject({ ok: false });
        const otherKey = { ...next, usage: { ...priced, key: 'sha256:k9' } };
        expect(await s.admit(admitOf(makeReq('d'), otherKey))).toMatchObject({ ok: true });
        // Tokens of the tenant's day: 30 used (20 in, 10 out).
        const tokens = { usage: priced, quotas: [quota({ budget: 50, amount: 21 })] };
        expect(await s.admit(admitOf(makeReq('e'), tokens))).toMatchObject({
          ok: false,
          key: 'quota:tenant:day:tokens',
        });
      });

      it('reports an alert once per window when usage reaches its threshold', async () => {
        const q = (amount: number) => ({ usage: account(), quotas: [quota({ amount, alertAt: 80 })] });
        const first = await run('a', q(50), 50, 10);
        expect(first).toEqual({ ok: true, queued: 1, windows: [] });
        const second = await s.admit(admitOf(makeReq('b'), q(30)));
        expect(second).toEqual({
          ok: true,
          queued: 1,
          alerts: [{ quota: 'tenant:day:tokens', bucket: '2026-11-24', budget: 100, used: 80 }],
          windows: [],
        });
        await dispatchedId();
        await s.settle({ id: 'b', nowMs: 2, finalCost: 0, actualTokens: 5, outputTokens: 1 });
        expect(await s.admit(admitOf(makeReq('c'), q(30)))).toEqual({ ok: true, queued: 1, windows: [] });
        const nextDay = {
          usage: account({ day: '2026-11-25' }),
          quotas: [quota({ amount: 90, alertAt: 80 })],
        };
        expect(await s.admit(admitOf(makeReq('d'), nextDay))).toMatchObject({
          alerts: [{ bucket: '2026-11-25', used: 90 }],
        });
      });

      it('keeps the reservation of a running request reclaimed with its dead owner, and drops a queued one’s', async () => {
        const q = { usage: account(), quotas: [quota({ budget: 100, amount: 40 })] };
        expect(await s.admit(admitOf(makeReq('run', { owner: 'dead' }), q))).toMatchObject({ ok: true });
        await dispatchedId();
        expect(await s.admit(admitOf(makeReq('wait', { owner: 'dead' }), q))).toMatchObject({ ok: true });
        await s.renewOwner('dead', 0, 10);
        expect(await s.reclaim(10)).toEqual({ dropped: ['wait'], released: ['run'] });
        // 40 stay counted for the request that ran (its usage is unknown); the queued one's 40 are back.
        const check = (amount: number) =>
          s.admit(admitOf(makeReq(`n${amount}`), { ...q, quotas: [quota({ amount })] }));
        expect(await check(61)).toMatchObject({ ok: false, code: 'quota_exceeded' });
        expect(await check(60)).toMatchObject({ ok: true });
        expect(await s.usage?.({ days: ['2026-11-24'] })).toEqual([]);
      });

      it('rejects quotas without a usage account, and a key quota without a key', async () => {
        await expect(s.admit(admitOf(makeReq('x'), { quotas: [quota()] }))).rejects.toThrow(/quotas/);
        await expect(
          s.admit(
            admitOf(makeReq('y'), { usage: account({ key: undefined }), quotas: [quota({ scope: 'key' })] }),
          ),
        ).rejects.toThrow(/key quota/);
      });
    });

    describe('validation', () => {
      it('rejects malformed input naming the field', async () => {
        await expect(s.admit(admitOf(makeReq('x', { reserveTokens: -1 })))).rejects.toThrow(
          /req\.reserveTokens/,
        );
        await expect(s.dispatch(dispatchOf({ bands: [0.5] }))).rejects.toThrow(/bands\[0\]/);
        await expect(s.renewOwner('d', 0, 0)).rejects.toThrow(/leaseMs/);
      });
    });
  });
}
