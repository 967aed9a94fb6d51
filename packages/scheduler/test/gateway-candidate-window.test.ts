import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, leastKvPlacement } from '@fairway/policy';
import { type DispatchInput, MemoryStore, type SchedulingStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type Dispatched, Gateway, type ReplicaSource } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

/** A real MemoryStore behind a proxy that records the replicas each dispatching call was offered. */
function offersOf(store: SchedulingStore): { store: SchedulingStore; offers: string[][] } {
  const offers: string[][] = [];
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function') return v;
      return (arg: unknown, ...rest: unknown[]) => {
        const input = arg as { dispatch?: DispatchInput; replicas?: DispatchInput['replicas'] } | undefined;
        const replicas = input?.dispatch?.replicas ?? input?.replicas;
        if (replicas !== undefined && prop !== 'restore') offers.push(replicas.map((r) => r.id));
        return (v as (...a: unknown[]) => unknown).apply(target, [arg, ...rest]);
      };
    },
  });
  return { store: proxy, offers };
}

let n = 0;
/** A request reserving 300 KV tokens (100 in, 200 out). */
function req(): RequestDescriptor {
  n++;
  return {
    id: `w${n}`,
    tenant: `t${n % 3}`,
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 200,
    arrivalMs: n,
  };
}

function gateway(id: string, replicas: ReplicaSource, store: SchedulingStore) {
  const dispatched: Dispatched[] = [];
  const gw = new Gateway({
    id,
    store,
    clock: new ManualClock(0),
    ordering: fcfsPolicy(),
    placement: leastKvPlacement(),
    replicas,
    onDispatch: (d) => dispatched.push(d),
    headroom: { tokenFraction: 0 },
  });
  return { gw, dispatched };
}

/** `count` replicas r1… of pool m with `kv` KV tokens each. */
function fleet(count: number, kv: number): Fleet {
  return new Fleet(...Array.from({ length: count }, (_, i): [string, number] => [`r${i + 1}`, kv]));
}

describe('Gateway candidate window', () => {
  it('offers the store at most four replicas per dispatch whatever the pool size, and places everything that fits', async () => {
    const { store, offers } = offersOf(new MemoryStore());
    const { gw, dispatched } = gateway('gw-a', fleet(40, 1_000), store);
    // 40 replicas × 3 requests of 300 tokens: 120 fit, the rest wait.
    for (let i = 0; i < 130; i++) await gw.submit(req());
    expect(offers.length).toBeGreaterThan(0);
    expect(Math.max(...offers.map((o) => o.length))).toBe(4);
    expect(dispatched).toHaveLength(120);
    expect(new Set(dispatched.map((d) => d.replica)).size).toBe(40);
    // Settling frees room: each waiting request goes to the replica that freed it.
    for (const d of dispatched.slice(0, 10)) await gw.complete(d.id, { inputTokens: 100, outputTokens: 10 });
    expect(dispatched).toHaveLength(130);
    expect(Math.max(...offers.map((o) => o.length))).toBe(4);
  });

  it('spreads arrivals sent together, before any answer, over the replicas instead of piling them on one', async () => {
    const { store, offers } = offersOf(new MemoryStore());
    const { gw, dispatched } = gateway('gw-a', fleet(4, 10_000), store);
    // Eight admissions in flight at once: none has its store answer when the next is offered.
    await Promise.all(Array.from({ length: 8 }, () => gw.submit(req())));
    expect(dispatched).toHaveLength(8);
    const perReplica = new Map<string, number>();
    for (const d of dispatched) perReplica.set(d.replica, (perReplica.get(d.replica) ?? 0) + 1);
    expect([...perReplica.values()].sort()).toEqual([2, 2, 2, 2]);
    // Each was offered a different replica first as the room the earlier ones would take was counted.
    expect(
      offers
        .slice(0, 4)
        .map((o) => o[0])
        .sort(),
    ).toEqual(['r1', 'r2', 'r3', 'r4']);
  });

  it('dispatches an arrival whose offered replicas another dispatcher filled onto one its view had left out', async () => {
    const shared = new MemoryStore();
    // Dispatcher B sees only r1–r4 and fills them; A, which has read nothing yet, sees all 8 empty
    // and offers the first four in placement order.
    const b = gateway('gw-b', fleet(4, 1_000), shared);
    for (let i = 0; i < 12; i++) await b.gw.submit(req());
    expect(b.dispatched).toHaveLength(12);

    const { store, offers } = offersOf(shared);
    const a = gateway('gw-a', fleet(8, 1_000), store);
    const r = req();
    expect(await a.gw.submit(r)).toMatchObject({ ok: true });
    expect(offers[0]).toEqual(['r1', 'r2', 'r3', 'r4']);
    expect(a.dispatched.map((d) => d.id)).toEqual([r.id]);
    expect(['r5', 'r6', 'r7', 'r8']).toContain(a.dispatched[0]?.replica);
    expect(a.gw.stats()).toMatchObject({ queued: 0, running: 1 });
  });

  it('leaves a request queued, without a further store call, when its view shows no room anywhere', async () => {
    const { store, offers } = offersOf(new MemoryStore());
    const { gw, dispatched } = gateway('gw-a', fleet(8, 1_000), store);
    for (let i = 0; i < 24; i++) await gw.submit(req());
    expect(dispatched).toHaveLength(24);
    const before = offers.length;
    await gw.submit(req());
    expect(dispatched).toHaveLength(24);
    expect(offers.length - before).toBe(1);
  });
});
