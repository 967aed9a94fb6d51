import { type RestartableRedisServer, startRestartableRedisServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreError, StoreErrorCode } from '../src/errors.ts';
import { STORE_LAYOUT_VERSION } from '../src/keys.ts';
import { RedisStore } from '../src/redis-store.ts';
import { admitOf, makeReq } from './conformance.ts';

async function errorOf(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (e: unknown) => e,
  );
}

function expectStateLost(err: unknown): void {
  expect(err).toBeInstanceOf(StoreError);
  expect((err as StoreError).code).toBe(StoreErrorCode.STATE_LOST);
}

/** A client that waits out a restart (its queued commands run once Redis is back). */
function client(server: RestartableRedisServer): Redis {
  return new Redis(server.url, { maxRetriesPerRequest: 50, retryStrategy: () => 50 });
}

describe('RedisStore after a Redis restart without persistence', () => {
  let server: RestartableRedisServer;
  beforeAll(async () => {
    server = await startRestartableRedisServer({ aof: false });
  });
  afterAll(async () => {
    await server.stop();
  });

  it('reports STATE_LOST on every operation instead of serving from empty state, and changes nothing', async () => {
    const redis = client(server);
    const prefix = uniquePrefix('loss');
    const store = new RedisStore({ redis, prefix });
    try {
      expect((await store.admit(admitOf(makeReq('a')))).ok).toBe(true);
      await server.restart();
      // The library is gone too: FCALL finds no function, the store loads it again, and the
      // call then finds the epoch missing.
      expect(await redis.function('LIST')).toEqual([]);
      expectStateLost(await errorOf(store.admit(admitOf(makeReq('b')))));
      expectStateLost(
        await errorOf(
          store.dispatch({
            pool: 'p',
            bands: [0],
            ordering: 'fair',
            nowMs: 1,
            picker: 'd1',
            replicas: [{ id: 'r', tokenCapacity: 100, seqCapacity: 4 }],
            fit: 'first',
          }),
        ),
      );
      expectStateLost(
        await errorOf(store.settle({ id: 'a', nowMs: 1, finalCost: 1, actualTokens: 1, outputTokens: 1 })),
      );
      expectStateLost(await errorOf(store.charge([{ id: 'a', amount: 1 }])));
      expectStateLost(await errorOf(store.renewOwner('d1', 1, 1000)));
      expect(await redis.exists(store.keys.key('req', 'b'), store.keys.layout())).toBe(0);
    } finally {
      await store.close();
      redis.disconnect();
    }
  });

  it('writes the layout marker back; the first dispatcher to adopt a new epoch wins and the others follow it', async () => {
    const prefix = uniquePrefix('loss');
    const ra = client(server);
    const rb = client(server);
    const a = new RedisStore({ redis: ra, prefix });
    const b = new RedisStore({ redis: rb, prefix });
    try {
      expect((await a.admit(admitOf(makeReq('a1')))).ok).toBe(true);
      expect((await b.admit(admitOf(makeReq('b1', { owner: 'd2' })))).ok).toBe(true);
      const before = await ra.get(a.keys.epoch());
      await server.restart();

      expectStateLost(await errorOf(a.admit(admitOf(makeReq('a2')))));
      await a.adoptEpoch();
      const after = await ra.get(a.keys.epoch());
      expect(after).not.toBeNull();
      expect(after).not.toBe(before);
      expect(await ra.get(a.keys.layout())).toBe(String(STORE_LAYOUT_VERSION));
      expect((await a.admit(admitOf(makeReq('a2')))).ok).toBe(true);

      // b's state vanished as well, though the marker is back: its epoch is the old one.
      expectStateLost(await errorOf(b.admit(admitOf(makeReq('b2', { owner: 'd2' })))));
      await b.adoptEpoch();
      expect(await rb.get(b.keys.epoch())).toBe(after);
      expect((await b.admit(admitOf(makeReq('b2', { owner: 'd2' })))).ok).toBe(true);
      expect((await a.snapshot('p', 0)).queued).toEqual({ a: 2 });
    } finally {
      await a.close();
      await b.close();
      ra.disconnect();
      rb.disconnect();
    }
  });
});

describe('RedisStore after a Redis restart with an append-only file', () => {
  let server: RestartableRedisServer;
  beforeAll(async () => {
    server = await startRestartableRedisServer({ aof: true });
  });
  afterAll(async () => {
    await server.stop();
  });

  it('keeps its state, windows and epoch: nothing is lost and nothing is reported lost', async () => {
    const redis = client(server);
    const store = new RedisStore({ redis, prefix: uniquePrefix('aof') });
    const rpm = { key: 'rpm:a', limit: 2, amount: 1, windowMs: 60_000, code: 'rpm_limited' } as const;
    try {
      expect((await store.admit(admitOf(makeReq('a'), { limits: [rpm] }))).ok).toBe(true);
      expect((await store.admit(admitOf(makeReq('b'), { limits: [rpm] }))).ok).toBe(true);
      await server.restart();
      expect((await store.snapshot('p', 0)).queued).toEqual({ a: 2 });
      expect(await store.admit(admitOf(makeReq('c'), { nowMs: 1, limits: [rpm] }))).toMatchObject({
        ok: false,
        code: 'rpm_limited',
      });
      await store.renewOwner('d1', 1, 1000);
    } finally {
      await store.close();
      redis.disconnect();
    }
  });
});
