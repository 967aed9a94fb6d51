import { uniquePrefix } from '@fairway/testkit';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreError, StoreErrorCode } from '../src/errors.ts';
import { STORE_LAYOUT_VERSION } from '../src/keys.ts';
import { RedisStore } from '../src/redis-store.ts';
import { loadLibrary } from '../src/script-loader.ts';
import { purgeStore } from '../src/store-purge.ts';
import { describeStoreConformance } from './conformance.ts';
import { connect, deletePrefix, freshRedisStore } from './redis-harness.ts';

let redis: Redis;
beforeAll(() => {
  redis = connect();
});
afterAll(async () => {
  await redis.quit();
});

describeStoreConformance('redis', async () => {
  const store = freshRedisStore(redis);
  return {
    store,
    dispose: async () => {
      await deletePrefix(redis, store);
      await store.close();
    },
  };
});

describeStoreConformance('redis, auto-pipelined with a control connection', async () => {
  const requests = connect({ enableAutoPipelining: true });
  const control = connect({ enableAutoPipelining: true });
  const store = new RedisStore({ redis: requests, control, prefix: uniquePrefix('store') });
  return {
    store,
    dispose: async () => {
      await deletePrefix(redis, store);
      await store.close();
      await Promise.all([requests.quit(), control.quit()]);
    },
  };
});

describe('control connection', () => {
  it('renews leases, reclaims and snapshots while the request connection is held up', async () => {
    const requests = connect({ enableAutoPipelining: true });
    const control = connect({ enableAutoPipelining: true });
    const store = new RedisStore({ redis: requests, control, prefix: uniquePrefix('store') });
    try {
      await store.renewOwner('d1', 0, 10_000); // claims the epoch, loads the library
      await store.reclaim(0);
      // A blocking read holds the request connection for 2 s; what queues behind it waits too.
      const blocked = requests.blpop(`${store.keys.base}:nothing`, 2).then(() => 'requests');
      // The BLPOP is auto-pipelined, written when this turn of the event loop ends; the store
      // writes its own commands at once, so its read is made in the next turn, behind it.
      await new Promise((resolve) => setImmediate(resolve));
      const queuedBehind = store.reserved('r1').then(() => 'queued behind');
      const controlCalls = Promise.all([
        store.renewOwner('d1', 1, 10_000),
        store.reclaim(1),
        store.snapshot('p', 0),
      ]).then(() => 'control');
      expect(await Promise.race([blocked, queuedBehind, controlCalls])).toBe('control');
      // The read queued behind the blocking command still waits a second later. (Not a race
      // with the BLPOP's own reply: auto-pipelined replies resolve a tick after the ones that
      // follow them on the wire.)
      const stillWaiting = new Promise((resolve) => setTimeout(() => resolve('still waiting'), 1000));
      expect(await Promise.race([queuedBehind, stillWaiting])).toBe('still waiting');
      expect(await Promise.all([blocked, queuedBehind])).toEqual(['requests', 'queued behind']);
    } finally {
      await deletePrefix(redis, store);
      await store.close();
      await Promise.all([requests.quit(), control.quit()]);
    }
  });
});

describe('redis functions library', () => {
  it('is loaded again when Redis loses it, and the call that found it missing still succeeds', async () => {
    const store = freshRedisStore(redis);
    try {
      const req = {
        pool: 'p',
        band: 0,
        flow: 'f',
        score: 0,
        arrivalMs: 0,
        reserveTokens: 1,
        dispatchCost: 1,
      };
      const admit = (id: string) =>
        store.admit({
          req: { ...req, id, owner: 'd1', payload: '' },
          nowMs: 0,
          lift: 'vtc',
          limits: [],
          overloaded: false,
          tenant: 't',
        });
      expect(await admit('a')).toEqual({ ok: true, queued: 1, windows: [] });
      await redis.function('DELETE', loadLibrary().name);
      expect(await admit('b')).toEqual({ ok: true, queued: 2, windows: [] });
      expect((await store.snapshot('p', 0)).queued).toEqual({ f: 2 });
    } finally {
      await deletePrefix(redis, store);
    }
  });
});

describe('restore in slices', () => {
  it('puts back more window entries and requests than one Lua run takes, in order', async () => {
    const store = freshRedisStore(redis);
    try {
      const windows = Array.from({ length: 1200 }, (_, i) => ({
        key: 'rpm:a',
        id: `w${i}`,
        atMs: i,
        windowMs: 60_000,
        amount: 1,
      }));
      const requests = Array.from({ length: 700 }, (_, i) => ({
        req: {
          id: `q${String(i).padStart(4, '0')}`,
          pool: 'p',
          band: 0,
          flow: 'f',
          score: 0,
          arrivalMs: i,
          reserveTokens: 1,
          dispatchCost: 1,
          owner: 'd1',
          payload: '',
        },
        windows: [],
      }));
      expect(
        await store.restore({
          nowMs: 1200,
          lift: 'vtc',
          windows,
          requests,
          owner: { id: 'd1', holds: requests.map((r) => r.req.id) },
        }),
      ).toEqual({ restored: 700, skipped: 0, forgotten: 0 });
      // All 1,200 count, in the window's three buckets: the newest (ending at 62 s) and two older.
      const sums = store.keys.key('windowSums', 'rpm:a');
      expect(await redis.hmget(sums, 't', 'l', 'n')).toEqual(['1200', '62000', '199']);
      expect(await redis.zrange(store.keys.key('windowBuckets', 'rpm:a'), 0, -1)).toEqual([
        '60000:1',
        '61000:1000',
      ]);
      expect((await store.snapshot('p', 0)).queued).toEqual({ f: 700 });
      const first = await store.dispatch({
        pool: 'p',
        bands: [0],
        ordering: 'fair',
        nowMs: 1200,
        picker: 'd1',
        replicas: [{ id: 'r', tokenCapacity: 10, seqCapacity: 10 }],
        fit: 'first',
      });
      expect(first).toMatchObject({ kind: 'dispatched', req: { id: 'q0000' } });
    } finally {
      await deletePrefix(redis, store);
    }
  });
});

describe('store layout version', () => {
  it('claims its prefix for its layout and refuses state another layout wrote, naming both', async () => {
    const store = freshRedisStore(redis);
    try {
      await store.snapshot('p', 0);
      expect(await redis.get(store.keys.layout())).toBe(String(STORE_LAYOUT_VERSION));

      await redis.set(store.keys.layout(), '2');
      const other = new RedisStore({ redis, prefix: store.keys.base.slice(1, -2) });
      const err = await other.snapshot('p', 0).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreError);
      expect((err as StoreError).code).toBe(StoreErrorCode.LAYOUT_MISMATCH);
      expect((err as Error).message).toMatch(/written by store layout 2, this fairway uses layout 3/);
    } finally {
      await deletePrefix(redis, store);
    }
  });
});

describe('purgeStore', () => {
  it("deletes every key of one store's prefix and nothing of another's", async () => {
    const a = freshRedisStore(redis);
    const b = freshRedisStore(redis);
    const admit = (store: RedisStore, id: string) =>
      store.admit({
        req: {
          id,
          pool: 'p',
          band: 0,
          flow: 'f',
          score: 0,
          arrivalMs: 0,
          reserveTokens: 1,
          dispatchCost: 1,
          owner: 'd',
          payload: '',
        },
        nowMs: 0,
        lift: 'vtc',
        limits: [],
        overloaded: false,
        tenant: 't',
      });
    try {
      await admit(a, 'x');
      await admit(b, 'y');
      expect(await purgeStore(redis, a.keys.prefix)).toBeGreaterThan(0);
      expect(await redis.keys(a.keys.pattern())).toEqual([]);
      expect((await b.snapshot('p', 0)).queued).toEqual({ f: 1 });
    } finally {
      await deletePrefix(redis, a);
      await deletePrefix(redis, b);
    }
  });
});
