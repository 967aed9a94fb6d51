import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, joinShortestQueuePlacement, type ReplicaState } from '@fairway/policy';
import { MemoryStore, type SchedulingStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type Dispatched, Gateway, type GatewayOptions, type ReplicaSource } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

/** A real MemoryStore behind a proxy that records which operations the gateway calls. */
function recorded(store: SchedulingStore = new MemoryStore()): { store: SchedulingStore; calls: string[] } {
  const calls: string[] = [];
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls.push(String(prop));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: proxy, calls };
}

let n = 0;
function req(over: Partial<RequestDescriptor> = {}): RequestDescriptor {
  n++;
  return {
    id: `q${n}`,
    tenant: 't1',
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 200,
    arrivalMs: n,
    ...over,
  };
}

function gateway(replicas: ReplicaSource, store: SchedulingStore, over: Partial<GatewayOptions> = {}) {
  const dispatched: Dispatched[] = [];
  const clock = new ManualClock(0);
  const gw = new Gateway({
    id: 'gw-a',
    store,
    clock,
    ordering: fcfsPolicy(),
    placement: joinShortestQueuePlacement(),
    replicas,
    onDispatch: (d) => dispatched.push(d),
    headroom: { tokenFraction: 0 },
    ...over,
  });
  return { gw, dispatched, clock };
}

describe('Gateway request path', () => {
  it('admits and dispatches an arriving request in one store call, reading nothing', async () => {
    const { store, calls } = recorded();
    const { gw, dispatched } = gateway(new Fleet(['r1', 10_000]), store);
    const r = req();
    expect(await gw.submit(r)).toEqual({ ok: true, queued: 1, windows: [], rateLimits: {} });
    expect(calls).toEqual(['admitAndDispatch']);
    expect(dispatched.map((d) => [d.id, d.replica, d.reserveTokens])).toEqual([[r.id, 'r1', 300]]);
    expect(gw.stats()).toMatchObject({ admitted: 1, dispatched: 1, running: 1, queued: 0 });
  });

  it('orders replicas and judges overload from what its own calls reported, without reads', async () => {
    const { store, calls } = recorded();
    const seen: number[][] = [];
    const { gw, dispatched } = gateway(new Fleet(['r1', 10_000], ['r2', 10_000]), store, {
      // A throttle limit makes the gateway ask whether the pool is overloaded.
      admission: () => [
        { key: 'u', limit: 1000, amount: 1, windowMs: 1000, code: 'throttled', onlyWhenOverloaded: true },
      ],
      overloaded: (_pool, states: readonly ReplicaState[]) => {
        seen.push(states.map((s) => s.reservedTokens));
        return false;
      },
    });
    for (let i = 0; i < 3; i++) await gw.submit(req());
    // Join-shortest-queue sees each dispatch: the second request goes to the other replica.
    expect(dispatched.map((d) => d.replica)).toEqual(['r1', 'r2', 'r1']);
    expect(seen).toEqual([
      [0, 0],
      [300, 0],
      [300, 300],
    ]);
    expect(new Set(calls)).toEqual(new Set(['admitAndDispatch']));
    // Settling frees the room in the view too.
    await gw.complete(dispatched[0]!.id, { inputTokens: 100, outputTokens: 10 });
    await gw.submit(req());
    expect(seen.at(-1)).toEqual([300, 300]);
  });

  it('leaves a request queued after one call when nothing fits, and dispatches it as room frees', async () => {
    const { store, calls } = recorded();
    const { gw, dispatched } = gateway(new Fleet(['r1', 600]), store);
    const reqs = [req(), req(), req()];
    for (const r of reqs) await gw.submit(r);
    expect(calls).toEqual(['admitAndDispatch', 'admitAndDispatch', 'admitAndDispatch']);
    expect(dispatched.map((d) => d.id)).toEqual([reqs[0]!.id, reqs[1]!.id]);
    // Settling frees the room and the queued request takes it, in one call.
    await gw.complete(reqs[0]!.id, { inputTokens: 100, outputTokens: 50 });
    expect(dispatched.map((d) => d.id)).toEqual(reqs.map((r) => r.id));
    expect(calls.slice(3)).toEqual(['settleAndDispatch']);
    // With nothing queued, completing is one call too.
    await gw.complete(reqs[1]!.id, { inputTokens: 100, outputTokens: 50 });
    expect(calls.slice(4)).toEqual(['settleAndDispatch']);
    expect(await store.reserved('r1')).toEqual({ tokens: 300, seqs: 1 });
  });

  it('goes on dispatching the work queued behind an arrival that found room', async () => {
    const store = new MemoryStore();
    // Gateway b sees no replica yet: what it admits waits in the shared queue.
    const b = gateway(new Fleet(), store, { id: 'gw-b', onDispatch: () => undefined });
    const waiting = [req(), req()];
    for (const r of waiting) await b.gw.submit(r);
    const a = gateway(new Fleet(['r1', 10_000]), store);
    const arrival = req();
    await a.gw.submit(arrival);
    // FCFS: the waiting requests first, then the arrival, all through a's call and dispatch round.
    expect(a.dispatched.map((d) => [d.id, d.owner])).toEqual([
      [waiting[0]!.id, 'gw-b'],
      [waiting[1]!.id, 'gw-b'],
      [arrival.id, 'gw-a'],
    ]);
  });

  it('starts a request whose assignment from another gateway arrives before its own admission reply', async () => {
    const inner = new MemoryStore();
    let a: ReturnType<typeof gateway> | undefined;
    // The admission's reply is held back while gateway a dispatches the request and says so.
    const slow = new Proxy(inner, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target);
        if (prop === 'admit')
          return async (input: Parameters<MemoryStore['admit']>[0]) => {
            const res = await target.admit(input);
            await a?.gw.pump();
            return res;
          };
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const b = gateway(new Fleet(), slow, { id: 'gw-b', onDispatch: () => undefined });
    const picked: string[] = [];
    a = gateway(new Fleet(['r1', 10_000]), inner, {
      onDispatch: (d) => {
        picked.push(d.id);
        if (d.owner === 'gw-b') b.gw.started(d);
      },
    });
    const r = req();
    expect(await b.gw.submit(r)).toMatchObject({ ok: true });
    expect(picked).toEqual([r.id]);
    expect(b.gw.stats()).toMatchObject({ admitted: 1, running: 1, queued: 0 });
    await b.gw.complete(r.id, { inputTokens: 100, outputTokens: 1 });
    expect(await inner.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
  });

  it('falls back to an admission and a dispatch round on a store without admitAndDispatch', async () => {
    const inner = new MemoryStore();
    const { store, calls } = recorded({
      admit: (i) => inner.admit(i),
      dispatch: (i) => inner.dispatch(i),
      charge: (i) => inner.charge(i),
      settle: (i) => inner.settle(i),
      cancel: (id, t) => inner.cancel(id, t),
      renewOwner: (o, t, l) => inner.renewOwner(o, t, l),
      reclaim: (t) => inner.reclaim(t),
      predictedOutput: (f) => inner.predictedOutput(f),
      reserved: (r) => inner.reserved(r),
      locate: (ids) => inner.locate(ids),
      snapshot: (p, b) => inner.snapshot(p, b),
      close: () => inner.close(),
    });
    const { gw, dispatched } = gateway(new Fleet(['r1', 10_000]), store);
    const r = req();
    expect(await gw.submit(r)).toEqual({ ok: true, queued: 1, windows: [], rateLimits: {} });
    expect(dispatched.map((d) => d.id)).toEqual([r.id]);
    expect(calls).toEqual(['admit', 'reserved', 'dispatch', 'dispatch']);
  });

  it('serves a flow’s predicted output from memory and refreshes it in the background after its ttl', async () => {
    const { store, calls } = recorded();
    const { gw, dispatched, clock } = gateway(new Fleet(['r1', 100_000]), store, {
      reserve: 'predicted',
      predictionTtlMs: 1000,
    });
    const reads = () => calls.filter((c) => c === 'predictedOutput').length;
    const first = req({ maxTokens: 1000 });
    await gw.submit(first);
    expect(reads()).toBe(1);
    await gw.complete(first.id, { inputTokens: 100, outputTokens: 40 });
    // Within the ttl: the remembered value (no history yet), no read.
    clock.advance(500);
    await gw.submit(req({ maxTokens: 1000 }));
    expect(reads()).toBe(1);
    // Past the ttl: the old value once more, while a background read fetches the new one.
    clock.advance(600);
    await gw.submit(req({ maxTokens: 1000 }));
    expect(reads()).toBe(2);
    await gw.submit(req({ maxTokens: 1000 }));
    expect(reads()).toBe(2);
    expect(dispatched.map((d) => d.reserveTokens)).toEqual([1100, 1100, 1100, 140]);
  });

  it('reads reservations for a dispatch round only when its view is older than reservationsMaxAgeMs', async () => {
    const { store, calls } = recorded();
    const { gw, clock } = gateway(new Fleet(['r1', 10_000]), store, { reservationsMaxAgeMs: 100 });
    await gw.pump();
    await gw.pump();
    expect(calls.filter((c) => c === 'reserved')).toHaveLength(1);
    clock.advance(100);
    await gw.pump();
    expect(calls.filter((c) => c === 'reserved')).toHaveLength(2);
  });
});
