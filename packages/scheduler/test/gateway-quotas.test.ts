import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, joinShortestQueuePlacement } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { type Dispatched, Gateway } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

function req(id: string): RequestDescriptor {
  return {
    id,
    tenant: 't1',
    keyId: 'sha256:k',
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 10,
    maxTokens: 30,
    arrivalMs: 0,
  };
}

describe('Gateway with usage accounting and quotas ', () => {
  it('passes the admission’s usage account and budgets to the store, reports alerts and records the settled usage', async () => {
    const store = new MemoryStore();
    const dispatched: Dispatched[] = [];
    const gw = new Gateway({
      id: 'gw',
      store,
      clock: new ManualClock(0),
      ordering: fcfsPolicy(),
      placement: joinShortestQueuePlacement(),
      replicas: new Fleet(['r1', 1_000_000, 8]),
      onDispatch: (d) => dispatched.push(d),
      headroom: { tokenFraction: 0, seqs: 0 },
      admission: (_req, ctx) => ({
        limits: [],
        usage: { key: 'sha256:k', model: 'm', day: '2026-11-24', month: '2026-11' },
        quotas: [
          {
            scope: 'key',
            window: 'day',
            kind: 'tokens',
            budget: 100,
            amount: ctx.reservedTokens,
            alertAt: 80,
            resetAtMs: 5_000,
          },
        ],
      }),
    });
    expect(await gw.submit(req('a'))).toEqual({ ok: true, queued: 1, windows: [], rateLimits: {} }); // reserves 40
    expect(await gw.submit(req('b'))).toMatchObject({
      ok: true,
      alerts: [{ quota: 'key:day:tokens', budget: 100, used: 80 }],
    });
    expect(await gw.submit(req('c'))).toMatchObject({
      ok: false,
      code: 'quota_exceeded',
      retryAfterMs: 5_000,
    });
    await gw.complete('a', { inputTokens: 12, outputTokens: 3 }); // 40 reserved → 15 used
    expect(await gw.submit(req('c'))).toMatchObject({ ok: true }); // 15 + 40 + 40 ≤ 100
    expect(await store.usage({ days: ['2026-11-24'] })).toEqual([
      {
        day: '2026-11-24',
        tenant: 't1',
        key: 'sha256:k',
        model: 'm',
        requests: 1,
        inputTokens: 12,
        outputTokens: 3,
        cost: 0,
      },
    ]);
    expect(dispatched.map((d) => d.id)).toEqual(['a', 'b', 'c']);
  });
});
