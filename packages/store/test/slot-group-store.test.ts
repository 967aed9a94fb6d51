import { uniquePrefix } from '@fairway/testkit';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_SLOT_GROUP,
  MemoryStore,
  purgeStore,
  redisSlotGroupStore,
  SlotGroupStore,
} from '../src/index.ts';
import { admitOf, describeStoreConformance, dispatchOf, makeReq } from './conformance.ts';
import { connect } from './redis-harness.ts';

/** A slot-group store over memory stores: pools p and q each in a group of its own, the rest in the default one. */
function memoryGroups(): SlotGroupStore {
  return new SlotGroupStore({
    groups: new Map([
      [DEFAULT_SLOT_GROUP, new MemoryStore()],
      ['gp', new MemoryStore()],
      ['gq', new MemoryStore()],
    ]),
    poolGroups: new Map([
      ['p', 'gp'],
      ['q', 'gq'],
    ]),
  });
}

describeStoreConformance('slot groups over memory stores', async () => {
  const store = memoryGroups();
  return { store, dispose: () => store.close() };
});

let redis: Redis;
beforeAll(() => {
  redis = connect({ enableAutoPipelining: true });
});
afterAll(async () => {
  await redis.quit();
});

describeStoreConformance('slot groups on one Redis (no cluster)', async () => {
  const prefix = uniquePrefix('groups');
  const store = redisSlotGroupStore({ redis, prefix, slotGroups: { gp: ['p'], gq: ['q'] } });
  return {
    store,
    dispose: async () => {
      await store.close();
      await purgeStore(redis, prefix, ['gp', 'gq']);
    },
  };
});

describe('SlotGroupStore', () => {
  it('refuses a pool mapped to a group it does not have', () => {
    expect(
      () =>
        new SlotGroupStore({
          groups: new Map([[DEFAULT_SLOT_GROUP, new MemoryStore()]]),
          poolGroups: new Map([['p', 'nowhere']]),
        }),
    ).toThrow(/unknown slot group "nowhere"/);
  });

  it('applies a dispatch’s coalesced charges of another group’s requests in that group', async () => {
    const store = memoryGroups();
    await store.admit(admitOf(makeReq('a', { pool: 'p' })));
    await store.admit(admitOf(makeReq('b', { pool: 'q' })));
    expect(await store.dispatch(dispatchOf({ pool: 'q' }))).toMatchObject({ kind: 'dispatched' });
    const d = await store.dispatch(dispatchOf({ pool: 'p', charges: [{ id: 'b', amount: 5 }] }));
    expect(d).toMatchObject({ kind: 'dispatched', req: { id: 'a' } });
    expect((await store.snapshot('q', 0)).counters).toEqual({ a: 15 });
    expect((await store.snapshot('p', 0)).counters).toEqual({ a: 10 });
  });

  it('refuses an id still queued in another group as a duplicate', async () => {
    const store = memoryGroups();
    expect(await store.admit(admitOf(makeReq('x', { pool: 'p' })))).toMatchObject({ ok: true });
    expect(await store.admit(admitOf(makeReq('x', { pool: 'q' })))).toEqual({
      ok: false,
      code: 'duplicate',
      retryAfterMs: 0,
      key: 'x',
    });
  });

  it('counts a tenant’s window per group: pools in two groups each admit up to the limit', async () => {
    const store = memoryGroups();
    const rpm = { key: 'rpm', limit: 1, amount: 1, windowMs: 60_000, code: 'rpm_limited' as const };
    expect(await store.admit(admitOf(makeReq('a', { pool: 'p' }), { limits: [rpm] }))).toMatchObject({
      ok: true,
    });
    expect(await store.admit(admitOf(makeReq('b', { pool: 'q' }), { limits: [rpm] }))).toMatchObject({
      ok: true,
    });
    expect(await store.admit(admitOf(makeReq('c', { pool: 'q' }), { limits: [rpm] }))).toMatchObject({
      ok: false,
      code: 'rpm_limited',
    });
  });
});
