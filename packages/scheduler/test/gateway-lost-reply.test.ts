import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { joinShortestQueuePlacement, vtcPolicy } from '@fairway/policy';
import { MemoryStore, type SchedulingStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { Gateway } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

function req(id: string): RequestDescriptor {
  return {
    id,
    tenant: 'a',
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 100,
    arrivalMs: 0,
  };
}

/**
 * The store as a dispatcher sees it over a connection that drops: the first admission runs in the
 * store but its reply is lost, and the store is unreachable for the next `downCalls` calls.
 */
function lossy(store: MemoryStore, downCalls: number): SchedulingStore {
  let lost = false;
  let down = 0;
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        if (down > 0) {
          down--;
          throw new Error('connection is closed');
        }
        const result = await value.apply(target, args);
        if (!lost && (prop === 'admit' || prop === 'admitAndDispatch')) {
          lost = true;
          down = downCalls;
          throw new Error('connection is closed');
        }
        return result;
      };
    },
  });
}

function setup(maxNumSeqs: number, downCalls: number) {
  const store = new MemoryStore();
  const fleet = new Fleet(['r1', 1000, maxNumSeqs]);
  const dispatched: string[] = [];
  const gw = new Gateway({
    id: 'gw',
    store: lossy(store, downCalls),
    clock: new ManualClock(0),
    ordering: vtcPolicy(),
    placement: joinShortestQueuePlacement(),
    replicas: fleet,
    onDispatch: (d) => {
      dispatched.push(d.id);
    },
    headroom: { tokenFraction: 0 },
  });
  return { store, gw, fleet, dispatched };
}

describe('Gateway after a lost admission reply', () => {
  it('frees the reservation and refunds the charge of a request the lost call dispatched', async () => {
    const { store, gw } = setup(8, 0);
    await expect(gw.submit(req('x'))).rejects.toThrow(/connection is closed/);
    await gw.heartbeat();
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    expect((await store.snapshot('m', 0)).counters.a ?? 0).toBe(0);
    expect((await store.snapshot('m', 0)).queued).toEqual({});
  });

  it('removes a request the lost call queued, once the store answers again', async () => {
    const { store, gw } = setup(0, 2);
    await expect(gw.submit(req('y'))).rejects.toThrow(/connection is closed/);
    // Still unreachable for the immediate attempt: the request stays queued in the store…
    expect((await store.snapshot('m', 0)).queued).toEqual({ a: 1 });
    await gw.heartbeat().catch(() => undefined);
    // …until a heartbeat reaches the store.
    await gw.heartbeat();
    expect((await store.snapshot('m', 0)).queued).toEqual({});
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
  });

  it('releases a request the lost call queued when a later admission dispatches it, and serves the later one', async () => {
    // The lost admission queues `y` (no room), and the store stays unreachable for the immediate
    // removal, so `y` is still queued under this gateway when room appears.
    const { store, gw, fleet, dispatched } = setup(0, 2);
    await expect(gw.submit(req('y'))).rejects.toThrow(/connection is closed/);
    await gw.heartbeat().catch(() => undefined);
    expect((await store.snapshot('m', 0)).queued).toEqual({ a: 1 });
    fleet.set('r1', { maxNumSeqs: 1 });
    // The next admission's dispatch picks `y` first (it arrived first): nobody waits for it, so it
    // is released, and `z` is admitted and runs.
    const z = await gw.submit({ ...req('z'), arrivalMs: 1 });
    expect(z.ok).toBe(true);
    expect(dispatched).toEqual(['z']);
    expect((await store.snapshot('m', 0)).queued).toEqual({});
    expect(await store.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
  });
});
