import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { joinShortestQueuePlacement, vtcPolicy } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type Dispatched, Gateway } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

function req(id: string, tenant = 'a'): RequestDescriptor {
  return {
    id,
    tenant,
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 100,
    arrivalMs: 0,
  };
}

function setup(fleet: Fleet, moves = false) {
  const store = new MemoryStore();
  const dispatched: Dispatched[] = [];
  const gw = new Gateway({
    id: 'gw',
    store,
    clock: new ManualClock(0),
    ordering: vtcPolicy(),
    placement: joinShortestQueuePlacement(),
    replicas: fleet,
    onDispatch: (d) => dispatched.push(d),
    headroom: { tokenFraction: 0 },
    moves,
  });
  return { store, dispatched, gw };
}

describe('Gateway.requeueUnserved (retry after an engine failure)', () => {
  it('puts a request whose engine failed back in the queue as if never dispatched, then runs it elsewhere', async () => {
    const fleet = new Fleet(['r1', 1000, 8], ['r2', 1000, 8]);
    const { gw, store, dispatched } = setup(fleet);
    await gw.submit(req('x'));
    const first = dispatched[0]?.replica as string;
    const charged = (await store.snapshot('m', 0)).counters.a;
    expect(charged).toBeGreaterThan(0);

    expect(await gw.requeueUnserved('x')).toBe(true);
    // Nothing reserved and nothing charged for the failed attempt.
    expect(await store.reserved(first)).toEqual({ tokens: 0, seqs: 0 });
    expect((await store.snapshot('m', 0)).counters.a).toBe(0);
    expect(gw.stats()).toMatchObject({ queued: 1, running: 0 });

    fleet.down(first);
    await gw.pump();
    expect(dispatched.map((d) => d.id)).toEqual(['x', 'x']);
    expect(dispatched[1]?.replica).not.toBe(first);
    expect(dispatched[1]?.resumeFrom).toBeUndefined();
    // Charged again exactly what its first dispatch charged, then settled to its true cost.
    expect((await store.snapshot('m', 0)).counters.a).toBe(charged);
    await gw.complete('x', { inputTokens: 100, outputTokens: 10 });
    expect((await store.snapshot('m', 0)).counters.a).toBe(
      vtcPolicy().finalCost(req('x'), {
        inputTokens: 100,
        outputTokens: 10,
      }),
    );
    expect(gw.stats()).toMatchObject({ queued: 0, running: 0 });
  });

  it('places nothing more on a replica that failed while a dispatch round was running', async () => {
    const fleet = new Fleet(['r1', 100_000, 64], ['r2', 100_000, 64]);
    const { gw, store, dispatched } = setup(fleet);
    // Queued while no replica takes work, so one round dispatches them all.
    fleet.set('r1', { stale: true });
    fleet.set('r2', { stale: true });
    for (const id of ['a', 'b', 'c', 'd', 'e', 'f']) await gw.submit(req(id));
    expect(dispatched).toEqual([]);
    fleet.set('r1', { stale: false });
    fleet.set('r2', { stale: false });
    // r1's engine fails right after the round's first placement (its failure is reported meanwhile).
    const dispatch = store.dispatch.bind(store);
    let calls = 0;
    store.dispatch = async (input) => {
      const r = await dispatch(input);
      if (++calls === 1) fleet.set('r1', { stale: true });
      return r;
    };
    await gw.pump();
    expect(dispatched).toHaveLength(6);
    expect(dispatched.slice(1).map((d) => d.replica)).toEqual(['r2', 'r2', 'r2', 'r2', 'r2']);
  });

  it('goes back to the head of its flow, ahead of the flow requests queued after it', async () => {
    const fleet = new Fleet(['r1', 1000, 1]);
    const { gw, dispatched } = setup(fleet);
    await gw.submit(req('x'));
    await gw.submit(req('y'));
    expect(dispatched.map((d) => d.id)).toEqual(['x']);
    expect(await gw.requeueUnserved('x')).toBe(true);
    await gw.pump();
    expect(dispatched.map((d) => d.id)).toEqual(['x', 'x']);
  });

  it('refuses a request that is not running here', async () => {
    const fleet = new Fleet(['r1', 1000, 1]);
    const { gw } = setup(fleet);
    await gw.submit(req('x'));
    await gw.submit(req('y'));
    expect(await gw.requeueUnserved('y')).toBe(false);
    expect(await gw.requeueUnserved('nope')).toBe(false);
    expect(gw.stats()).toMatchObject({ queued: 1, running: 1 });
  });
});

describe('Gateway.moveTarget and a moved request (out of an engine queue)', () => {
  it('names a replica with room whose engine queues nothing, never the one the request waits on', async () => {
    const fleet = new Fleet(['r1', 1000, 8], ['r2', 1000, 8], ['r3', 1000, 8]);
    const { gw } = setup(fleet, true);
    await gw.submit(req('x'));
    fleet.set('r2', { waiting: 2 });
    expect(gw.moveTarget('m', 200, 'r1')?.id).toBe('r3');
    expect(gw.moveTarget('m', 200, 'r1', new Set(['r3']))).toBeUndefined();
    // No replica with room for the reservation.
    expect(gw.moveTarget('m', 1001, 'r1')).toBeUndefined();
  });

  it('places the moved request on its target, though the placement would choose another', async () => {
    const fleet = new Fleet(['r1', 1000, 8], ['r2', 1000, 8], ['r3', 1000, 8]);
    const { gw, store, dispatched } = setup(fleet, true);
    await gw.submit(req('x'));
    const from = dispatched[0]?.replica as string;
    const to = gw.moveTarget('m', 200, from);
    expect(to).toBeDefined();
    expect(await gw.requeueUnserved('x', to)).toBe(true);
    await gw.pump();
    // Shortest queue would take the replica it left (now empty, first in order) again.
    expect(dispatched[1]?.replica).toBe(to?.id);
    expect(await store.reserved(from)).toEqual({ tokens: 0, seqs: 0 });
    expect((await store.reserved(to?.id as string)).seqs).toBe(1);
  });
});
