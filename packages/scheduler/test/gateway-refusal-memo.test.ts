import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, joinShortestQueuePlacement, rpmWindow } from '@fairway/policy';
import { type AdmitAndDispatchInput, type AdmitInput, MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { Gateway } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

/** The memory store, counting the admissions it is asked for (alone or with a dispatch). */
class CountingStore extends MemoryStore {
  admits = 0;
  #fused = false;
  override admit(input: AdmitInput) {
    if (!this.#fused) this.admits++;
    return super.admit(input);
  }
  override async admitAndDispatch(input: AdmitAndDispatchInput) {
    this.admits++;
    this.#fused = true;
    try {
      return await super.admitAndDispatch(input);
    } finally {
      this.#fused = false;
    }
  }
}

let n = 0;
function req(tenant: string): RequestDescriptor {
  n++;
  return {
    id: `r${n}`,
    tenant,
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 10,
    maxTokens: 10,
    arrivalMs: n,
  };
}

/**
 * A tenant flooding past its own RPM limit: the store refuses the first request over the limit,
 * and the gateway answers the rest of that second itself, with what remains of the Retry-After,
 * so the flood costs the shared store one call a second instead of one per request.
 */
describe('refusals past a rate limit', () => {
  it('asks the store once a second per window, answers the rest with the same Retry-After, and admits again once room comes', async () => {
    const clock = new ManualClock(0);
    const store = new CountingStore();
    const gw = new Gateway({
      id: 'gw',
      store,
      clock,
      ordering: fcfsPolicy(),
      placement: joinShortestQueuePlacement(),
      replicas: new Fleet(['r1', 1_000_000, 1]),
      onDispatch: () => undefined,
      headroom: { tokenFraction: 0, seqs: 0 },
      admission: (r) => ({ limits: [rpmWindow(r.tenant, 3, 10_000)] }),
    });
    for (let i = 0; i < 3; i++) expect(await gw.submit(req('flood'))).toMatchObject({ ok: true });
    const first = await gw.submit(req('flood'));
    expect(first).toMatchObject({ ok: false, code: 'rpm_limited', key: 'rpm:tenant:flood' });
    const callsAfterFirst = store.admits;
    clock.advance(400);
    for (let i = 0; i < 100; i++) {
      const r = await gw.submit(req('flood'));
      expect(r).toMatchObject({ ok: false, code: 'rpm_limited' });
      if (!r.ok && !first.ok) expect(r.retryAfterMs).toBe(first.retryAfterMs - 400);
    }
    expect(store.admits).toBe(callsAfterFirst);
    // Another tenant is not touched by the flood's memory.
    expect(await gw.submit(req('calm'))).toMatchObject({ ok: true });
    // A second on, the store is asked again (still refused: the window has not moved).
    clock.advance(700);
    expect(await gw.submit(req('flood'))).toMatchObject({ ok: false, code: 'rpm_limited' });
    expect(store.admits).toBe(callsAfterFirst + 2);
    // Once the window lets entries go, the tenant is admitted.
    clock.advance(10_000);
    expect(await gw.submit(req('flood'))).toMatchObject({ ok: true });
  });
});
