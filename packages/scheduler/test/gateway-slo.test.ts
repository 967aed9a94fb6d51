import { ManualClock, type RequestDescriptor } from '@fairway/core';
import {
  fcfsPolicy,
  joinShortestQueuePlacement,
  type PlacementPolicy,
  VirtualQueueRouter,
  vtcPolicy,
} from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type Dispatched, Gateway, type GatewayOptions } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

let n = 0;
function req(over: Partial<RequestDescriptor> = {}): RequestDescriptor {
  n++;
  return {
    id: `s${n}`,
    tenant: 't1',
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 100,
    outputTokens: 50,
    arrivalMs: n,
    ...over,
  };
}

function setup(fleet: Fleet, over: Partial<GatewayOptions> = {}) {
  const store = new MemoryStore();
  const clock = new ManualClock(0);
  const dispatched: Dispatched[] = [];
  const gw = new Gateway({
    id: 'gw',
    store,
    clock,
    ordering: fcfsPolicy(),
    placement: joinShortestQueuePlacement(),
    replicas: fleet,
    onDispatch: (d) => dispatched.push(d),
    headroom: { tokenFraction: 0 },
    ...over,
  });
  return { store, clock, dispatched, gw };
}

describe('Gateway eviction (QLM request eviction)', () => {
  it('re-queues a running batch request at the head and lets an interactive one take its room', async () => {
    const { gw, dispatched, store } = setup(new Fleet(['r1', 200]));
    await gw.submit(req({ id: 'b1', sloClass: 'batch-2' }));
    await gw.submit(req({ id: 'b2', sloClass: 'batch-2' }));
    await gw.submit(req({ id: 'i1', sloClass: 'interactive' }));
    expect(dispatched.map((d) => d.id)).toEqual(['b1']);
    expect(await gw.evict('b1', 30)).toBe(true);
    await gw.pump();
    // The interactive request runs before both batch requests; b1 comes back first among them.
    expect(dispatched.map((d) => d.id)).toEqual(['b1', 'i1']);
    await gw.complete('i1', { inputTokens: 100, outputTokens: 50 });
    expect(dispatched.map((d) => d.id)).toEqual(['b1', 'i1', 'b1']);
    expect(dispatched[2]?.resumeFrom).toBe(30);
    expect(await store.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
    expect(gw.stats()).toMatchObject({ evicted: 1, running: 1, queued: 1 });
  });

  it('charges the evicted request only for what it was served, then its true total', async () => {
    const { gw, store } = setup(new Fleet(['r1', 1000]), { ordering: vtcPolicy(), flushTokens: 1 });
    await gw.submit(req({ id: 'x', tenant: 'a', sloClass: 'batch-1', inputTokens: 100 }));
    gw.recordTokens('x', 10);
    await gw.flush();
    // 100 input + 2·10 output = 120 so far; 15 more tokens streamed but not yet flushed.
    gw.recordTokens('x', 25);
    expect(await gw.evict('x', 25)).toBe(true);
    expect((await store.snapshot('m', 1)).counters.a).toBe(150);
    await gw.pump();
    gw.recordTokens('x', 40);
    await gw.flush();
    expect((await store.snapshot('m', 1)).counters.a).toBe(180);
    await gw.complete('x', { inputTokens: 100, outputTokens: 45 });
    expect((await store.snapshot('m', 1)).counters.a).toBe(190);
  });

  it('refuses to evict a request that is not running here', async () => {
    const { gw } = setup(new Fleet(['r1', 100]));
    await gw.submit(req({ id: 'a' }));
    await gw.submit(req({ id: 'b' }));
    expect(await gw.evict('b', 0)).toBe(false);
    expect(await gw.evict('nope', 0)).toBe(false);
  });
});

describe('Gateway routing (QLM virtual queues)', () => {
  it('lets each replica take bands in its own virtual-queue order', async () => {
    const router = new VirtualQueueRouter();
    router.setQueues({ r1: [1, 0], r2: [0] });
    const fleet = new Fleet(['r1', 200], ['r2', 400]);
    const { gw, dispatched } = setup(fleet, { router });
    // Queue everything first with no room, then open up.
    router.hold('r1', true);
    router.hold('r2', true);
    await gw.submit(req({ id: 'i1', sloClass: 'interactive' }));
    await gw.submit(req({ id: 'i2', sloClass: 'interactive' }));
    await gw.submit(req({ id: 'b1', sloClass: 'batch-1' }));
    expect(dispatched).toEqual([]);
    router.hold('r1', false);
    router.hold('r2', false);
    await gw.pump();
    const placed = Object.fromEntries(dispatched.map((d) => [d.id, d.replica]));
    expect(placed).toEqual({ b1: 'r1', i1: 'r2', i2: 'r2' });
  });

  it("with prompt bands, queues each request in its group's band and lets a replica take a class's long prompts first", async () => {
    const router = new VirtualQueueRouter();
    const fleet = new Fleet(['r1', 6000], ['r2', 6000]);
    const { gw, dispatched, store } = setup(fleet, { router, promptBands: [256, 1024, 4096] });
    router.hold('r1', true);
    router.hold('r2', true);
    await gw.submit(req({ id: 'short', sloClass: 'batch-1', inputTokens: 100 }));
    await gw.submit(req({ id: 'long', sloClass: 'batch-1', inputTokens: 2000 }));
    await gw.submit(req({ id: 'chat', sloClass: 'interactive', inputTokens: 300 }));
    // batch-1 is band 1: its buckets are bands 4–7; interactive (band 0) 0–3.
    expect((await store.snapshot('m', 4)).queued).toEqual({ t1: 1 });
    expect((await store.snapshot('m', 6)).queued).toEqual({ t1: 1 });
    expect((await store.snapshot('m', 1)).queued).toEqual({ t1: 1 });
    // The plan gives r1 the long-prompt group first, r2 the interactive and short ones.
    router.setQueues({ r1: [6], r2: [1, 4] });
    router.hold('r1', false);
    await gw.pump();
    expect(dispatched.map((d) => [d.id, d.replica])).toEqual([
      ['long', 'r1'],
      ['chat', 'r1'],
      ['short', 'r1'],
    ]);
  });

  it('pushes everything routed to a replica when pulling is off', async () => {
    const router = new VirtualQueueRouter({ pull: false });
    const { gw, dispatched } = setup(new Fleet(['r1', 300, 1]), { router });
    for (let i = 0; i < 5; i++) await gw.submit(req());
    expect(dispatched).toHaveLength(5);
  });

  it('keeps a replica without a planned queue work-conserving, and a pinned one to its bands', async () => {
    const router = new VirtualQueueRouter({ workConserving: false });
    router.setQueues({ r1: [0] });
    const { gw, dispatched } = setup(new Fleet(['r1', 200]), { router });
    await gw.submit(req({ id: 'b', sloClass: 'batch-1' }));
    expect(dispatched).toEqual([]);
    router.setQueues({});
    await gw.pump();
    expect(dispatched.map((d) => d.id)).toEqual(['b']);
  });
});

describe('Gateway placement capacity', () => {
  it('offers each replica no more room than the placement policy allows', async () => {
    const capped: PlacementPolicy = {
      ...joinShortestQueuePlacement(),
      capacity: (r) => ({ tokenCapacity: r.id === 'r1' ? 150 : 1000, seqCapacity: 1 }),
    };
    const { gw, dispatched } = setup(new Fleet(['r1', 1000], ['r2', 1000]), { placement: capped });
    for (let i = 0; i < 3; i++) await gw.submit(req({ maxTokens: 100 }));
    // 200 tokens each: r1 (cap 150) takes none, r2 (one sequence) takes one.
    expect(dispatched.map((d) => d.replica)).toEqual(['r2']);
  });

  it('reserves the output predictor’s guess under reserve "predicted"', async () => {
    const { gw, dispatched } = setup(new Fleet(['r1', 1000]), {
      reserve: 'predicted',
      outputPredictor: (r) => r.inputTokens / 2,
    });
    await gw.submit(req({ inputTokens: 100, maxTokens: 500 }));
    expect(dispatched[0]?.reserveTokens).toBe(150);
  });
});
