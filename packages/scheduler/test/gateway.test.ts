import { ManualClock, type RequestDescriptor } from '@fairway/core';
import {
  fcfsPolicy,
  joinShortestQueuePlacement,
  type OrderingPolicy,
  rateLimitAdmission,
  roundRobinPlacement,
} from '@fairway/policy';
import { type ChargeItem, MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import {
  type Dispatched,
  Gateway,
  GatewayError,
  type GatewayOptions,
  UnknownSloClassError,
} from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

/** A MemoryStore that also records the charge calls it receives. */
class CountingStore extends MemoryStore {
  readonly chargeCalls: ChargeItem[][] = [];
  override async charge(items: readonly ChargeItem[]): Promise<void> {
    this.chargeCalls.push([...items]);
    await super.charge(items);
  }
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
    outputTokens: 50,
    arrivalMs: n,
    ...over,
  };
}

function setup(fleet: Fleet, over: Partial<GatewayOptions> = {}) {
  const store = new CountingStore();
  const clock = new ManualClock(0);
  const dispatched: Dispatched[] = [];
  const gw = new Gateway({
    id: 'gw-a',
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

describe('Gateway', () => {
  it('holds requests until a replica has room and dispatches them in FCFS order as room frees', async () => {
    const { gw, dispatched, store } = setup(new Fleet(['r1', 1000]));
    const reqs = Array.from({ length: 5 }, () => req());
    for (const r of reqs) expect(await gw.submit(r)).toMatchObject({ ok: true });
    // Each reserves 100 + 200 = 300 tokens: three fit in 1000.
    expect(dispatched.map((d) => d.id)).toEqual(reqs.slice(0, 3).map((r) => r.id));
    expect(await store.reserved('r1')).toEqual({ tokens: 900, seqs: 3 });
    expect(gw.stats()).toMatchObject({ queued: 2, running: 3 });
    await gw.complete(reqs[1]!.id, { inputTokens: 100, outputTokens: 50 });
    expect(dispatched.map((d) => d.id)).toEqual(reqs.slice(0, 4).map((r) => r.id));
    for (const r of reqs.slice(0, 4))
      if (r !== reqs[1]) await gw.complete(r.id, { inputTokens: 100, outputTokens: 50 });
    await gw.complete(reqs[4]!.id, { inputTokens: 100, outputTokens: 50 });
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    expect(gw.stats()).toMatchObject({ queued: 0, running: 0, admitted: 5, dispatched: 5, settled: 5 });
  });

  it('respects sequence slots and headroom', async () => {
    const { gw, dispatched } = setup(new Fleet(['r1', 100_000, 4]), {
      headroom: { tokenFraction: 0, seqs: 1 },
    });
    for (let i = 0; i < 6; i++) await gw.submit(req());
    expect(dispatched).toHaveLength(3);
  });

  it('reserves predicted output once the flow has history, and the true length under oracle', async () => {
    const fleet = new Fleet(['r1', 100_000]);
    const p = setup(fleet, { reserve: 'predicted' });
    const first = req({ maxTokens: 1000 });
    await p.gw.submit(first);
    expect(p.dispatched[0]!.reserveTokens).toBe(1100);
    await p.gw.complete(first.id, { inputTokens: 100, outputTokens: 40 });
    await p.gw.submit(req({ maxTokens: 1000 }));
    expect(p.dispatched[1]!.reserveTokens).toBe(140);
    const o = setup(fleet, { reserve: 'oracle' });
    await o.gw.submit(req({ maxTokens: 1000, outputTokens: 70 }));
    expect(o.dispatched[0]!.reserveTokens).toBe(170);
  });

  it('caps a reservation larger than every replica and rejects a prompt that fits none', async () => {
    const { gw, dispatched } = setup(new Fleet(['r1', 1000], ['r2', 500]));
    await gw.submit(req({ inputTokens: 600, maxTokens: 4000 }));
    expect(dispatched[0]).toMatchObject({ replica: 'r1', reserveTokens: 1000 });
    expect(await gw.submit(req({ inputTokens: 1000 }))).toMatchObject({
      ok: false,
      code: 'context_too_long',
    });
  });

  it('never places on a stale replica, even an idle one', async () => {
    const fleet = new Fleet(['busy', 1000], ['idle-but-stale', 100_000]);
    fleet.set('idle-but-stale', { stale: true });
    const { gw, dispatched } = setup(fleet, { placement: roundRobinPlacement() });
    for (let i = 0; i < 5; i++) await gw.submit(req());
    expect(dispatched.map((d) => d.replica)).toEqual(['busy', 'busy', 'busy']);
    fleet.set('idle-but-stale', { stale: false });
    expect(await gw.pump()).toBe(2);
    expect(dispatched.slice(3).map((d) => d.replica)).toEqual(['idle-but-stale', 'idle-but-stale']);
  });

  it('coalesces streamed-output charges into one store call per flush', async () => {
    const { gw, store, clock } = setup(new Fleet(['r1', 100_000]), { flushMs: 50, flushTokens: 100 });
    const a = req();
    const b = req({ tenant: 't2' });
    await gw.submit(a);
    await gw.submit(b);
    for (let g = 1; g <= 10; g++) {
      expect(gw.recordTokens(a.id, g)).toBe(false);
      expect(gw.recordTokens(b.id, g)).toBe(false);
    }
    expect(store.chargeCalls).toHaveLength(0);
    expect(gw.flushDue()).toBe(false);
    clock.advance(50);
    expect(gw.flushDue()).toBe(true);
    expect(await gw.flush()).toBe(2);
    // FCFS charges output at VTC's default weight 2 per token.
    expect(store.chargeCalls).toEqual([
      [
        { id: a.id, amount: 20 },
        { id: b.id, amount: 20 },
      ],
    ]);
    expect(await gw.flush()).toBe(0);
    // The token threshold makes a flush due without waiting for the timer.
    let due = false;
    for (let g = 11; g <= 120 && !due; g++) due = gw.recordTokens(a.id, g);
    expect(due).toBe(true);
  });

  it('settles each flow’s counter to the true cost, whatever was charged while streaming', async () => {
    const { gw, store } = setup(new Fleet(['r1', 100_000]));
    const a = req({ tenant: 'acme', inputTokens: 100 });
    await gw.submit(a);
    gw.recordTokens(a.id, 30);
    await gw.flush();
    await gw.complete(a.id, { inputTokens: 100, outputTokens: 50 });
    const snap = await store.snapshot('m', 0);
    expect(snap.counters.acme).toBe(100 + 2 * 50);
  });

  it('lets another gateway sharing the store dispatch a request; its owner charges and settles it', async () => {
    const fleet = new Fleet(['r1', 600]);
    const store = new MemoryStore();
    const clock = new ManualClock(0);
    const dispatched: Dispatched[] = [];
    const gateways = new Map<string, Gateway>();
    for (const id of ['gw-a', 'gw-b'])
      gateways.set(
        id,
        new Gateway({
          id,
          store,
          clock,
          ordering: fcfsPolicy(),
          placement: joinShortestQueuePlacement(),
          replicas: fleet,
          headroom: { tokenFraction: 0 },
          onDispatch: (d) => {
            dispatched.push(d);
            if (d.owner !== d.picker) gateways.get(d.owner)!.started(d);
          },
        }),
      );
    const a = gateways.get('gw-a')!;
    const b = gateways.get('gw-b')!;
    const r1 = req();
    const r2 = req();
    const r3 = req();
    await a.submit(r1);
    await a.submit(r2);
    await a.submit(r3); // held: 600 tokens hold two 300-token reservations
    const r4 = req();
    await b.submit(r4); // held too: b's own pump finds no room
    // r1 finishing frees room; a's pump fills it with the oldest queued request, its own r3.
    await a.complete(r1.id, { inputTokens: 100, outputTokens: 50 });
    expect(dispatched.map((d) => [d.id, d.picker, d.owner])).toEqual([
      [r1.id, 'gw-a', 'gw-a'],
      [r2.id, 'gw-a', 'gw-a'],
      [r3.id, 'gw-a', 'gw-a'],
    ]);
    // r2 finishing: a picks b's request from the shared queue and tells b through onDispatch.
    await a.complete(r2.id, { inputTokens: 100, outputTokens: 50 });
    expect(dispatched[3]).toMatchObject({ id: r4.id, picker: 'gw-a', owner: 'gw-b' });
    expect(dispatched[3]!.req).toEqual(r4);
    expect(b.stats()).toMatchObject({ running: 1, queued: 0 });
    b.recordTokens(r4.id, 5);
    await b.flush();
    await b.complete(r4.id, { inputTokens: 100, outputTokens: 5 });
    await a.complete(r3.id, { inputTokens: 100, outputTokens: 50 });
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    await expect(a.complete(r4.id, { inputTokens: 1, outputTokens: 1 })).rejects.toThrow(GatewayError);
  });

  it('applies the admission function’s window limits', async () => {
    const { gw } = setup(new Fleet(['r1', 100_000]), {
      admission: (r) => [
        { key: `rpm:${r.tenant}`, limit: 2, amount: 1, windowMs: 60_000, code: 'rpm_limited' },
      ],
    });
    expect(await gw.submit(req())).toMatchObject({ ok: true });
    expect(await gw.submit(req())).toMatchObject({ ok: true });
    expect(await gw.submit(req())).toMatchObject({ ok: false, code: 'rpm_limited' });
    expect(await gw.submit(req({ tenant: 'other' }))).toMatchObject({ ok: true });
    expect(gw.stats()).toMatchObject({ admitted: 3, rejected: 1 });
  });

  it('combines the ordering policy’s own admission with the gateway’s, and marks its continuations', async () => {
    const ordering: OrderingPolicy = {
      ...fcfsPolicy(),
      mode: 'fair',
      admission: rateLimitAdmission({ rpm: 3 }),
      continuation: (r) => (r.interactionStage ?? 0) > 0,
    };
    const { gw, dispatched } = setup(new Fleet(['r1', 300]), {
      ordering,
      admission: rateLimitAdmission({ tpm: 100_000 }),
    });
    await gw.submit(req({ tenant: 'busy' })); // dispatched, fills the replica
    await gw.submit(req({ tenant: 'busy' }));
    await gw.submit(req({ tenant: 'busy' }));
    const follow = req({ tenant: 'calm', interactionId: 'chat-1', interactionStage: 2 });
    await gw.submit(follow);
    // The ordering policy's RPM (3 per minute) rejects the fourth request of a tenant...
    expect(await gw.submit(req({ tenant: 'busy' }))).toMatchObject({ ok: false, code: 'rpm_limited' });
    // ...and a gateway-level TPM (600 tokens per minute, 300 reserved each) counts on its own.
    const tpm = setup(new Fleet(['r1', 100_000]), { admission: rateLimitAdmission({ tpm: 600 }) });
    await tpm.gw.submit(req());
    await tpm.gw.submit(req());
    expect(await tpm.gw.submit(req())).toMatchObject({ ok: false, code: 'tpm_limited' });
    // When room frees, the continuation goes ahead of the older queued request.
    await gw.complete(dispatched[0]!.id, { inputTokens: 100, outputTokens: 50 });
    expect(dispatched[1]!.id).toBe(follow.id);
  });

  it('cancels a queued request and settles a running one', async () => {
    const { gw, store } = setup(new Fleet(['r1', 300]));
    const a = req();
    const b = req();
    await gw.submit(a);
    await gw.submit(b);
    expect(await gw.cancel(b.id)).toBe(true);
    expect(await gw.cancel(a.id, { inputTokens: 100, outputTokens: 3 })).toBe(true);
    expect(await gw.cancel('nope')).toBe(false);
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    expect(gw.stats()).toMatchObject({ queued: 0, running: 0 });
  });

  it('rejects bad input and options, naming the field', async () => {
    const { gw } = setup(new Fleet(['r1', 1000]));
    await expect(gw.submit(req({ sloClass: 'gold' }))).rejects.toThrow(UnknownSloClassError);
    await expect(gw.submit(req({ inputTokens: -1 }))).rejects.toThrow(/inputTokens/);
    expect(() => setup(new Fleet(['r1', 1]), { flushMs: -5 })).toThrow(/flushMs/);
    expect(() => setup(new Fleet(['r1', 1]), { reserve: 'maybe' as never })).toThrow(/reserve/);
  });
});
