import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, joinShortestQueuePlacement } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type Dispatched, DrainRate, Gateway } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

let n = 0;
function req(): RequestDescriptor {
  n++;
  return {
    id: `r${n}`,
    tenant: 't1',
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 10,
    maxTokens: 10,
    arrivalMs: n,
  };
}

/**
 * A pool serving one request at a time, finishing one every `periodMs`, with room for 4 queued:
 * after 30 completions, the Retry-After (ms) of the request that finds the queue full.
 */
async function retryAfterWhenFull(periodMs: number): Promise<number> {
  const clock = new ManualClock(0);
  const dispatched: Dispatched[] = [];
  const gw = new Gateway({
    id: 'gw',
    store: new MemoryStore(),
    clock,
    ordering: fcfsPolicy(),
    placement: joinShortestQueuePlacement(),
    replicas: new Fleet(['r1', 1_000_000, 1]),
    onDispatch: (d) => dispatched.push(d),
    headroom: { tokenFraction: 0, seqs: 0 },
    admission: () => ({ limits: [], maxQueuedPool: 4 }),
  });
  for (let i = 0; i < 5; i++) expect(await gw.submit(req())).toMatchObject({ ok: true });
  for (let i = 0; i < 30; i++) {
    clock.advance(periodMs);
    await gw.complete(dispatched.at(-1)!.id, { inputTokens: 10, outputTokens: 10 });
    expect(await gw.submit(req())).toMatchObject({ ok: true });
  }
  const full = await gw.submit(req());
  expect(full).toMatchObject({ ok: false, code: 'queue_full', key: 'pool:m' });
  return full.ok ? 0 : full.retryAfterMs;
}

describe('queue_full Retry-After', () => {
  it('follows the pool’s measured drain rate and the depth ahead, not a constant', async () => {
    // 4 ahead, draining 2/s: about 2 s.
    const fast = await retryAfterWhenFull(500);
    expect(fast).toBeGreaterThanOrEqual(2000);
    expect(fast).toBeLessThanOrEqual(4000);
    // Draining one every 4 s: 4 ahead take about 16 s (the average, read just after a dispatch,
    // runs up to a fifth over the true rate).
    const slow = await retryAfterWhenFull(4000);
    expect(slow).toBeGreaterThanOrEqual(12_000);
    expect(slow).toBeLessThanOrEqual(60_000);
  });
});

describe('DrainRate', () => {
  it('says 60 s when nothing drained and clamps to 1 s when the pool drains fast', () => {
    const d = new DrainRate(1000);
    expect(d.retryAfterS('p', 10, 0)).toBe(60);
    for (let t = 0; t < 5000; t++) d.dispatched('p', t); // 1000/s
    expect(d.perSecond('p', 5000)).toBeGreaterThan(900);
    expect(d.retryAfterS('p', 10, 5000)).toBe(1);
    // The rate decays once dispatches stop.
    expect(d.perSecond('p', 10_000)).toBeLessThan(10);
  });
});
