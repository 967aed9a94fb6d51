import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type AdmitInput,
  MemoryStore,
  type QuotaCheck,
  type SchedulingStore,
  USAGE_RETENTION_DAYS,
  type UsageAccount,
} from '../src/index.ts';
import { admitOf, dispatchOf, makeReq } from './conformance.ts';
import { connect, deletePrefix, freshRedisStore } from './redis-harness.ts';

const DAY_MS = 86_400_000;
const RETENTION_S = USAGE_RETENTION_DAYS * 86_400;

function account(day: string): UsageAccount {
  return { key: 'sha256:k1', model: 'm', day, month: day.slice(0, 7), priceIn: 1, priceOut: 2 };
}

const quota: QuotaCheck = {
  scope: 'tenant',
  window: 'month',
  kind: 'tokens',
  budget: 1_000_000,
  amount: 10,
  resetAtMs: 1,
};

/** Admits, dispatches and settles one request with a usage account for `day` at `nowMs`. */
async function serve(
  s: SchedulingStore,
  id: string,
  day: string,
  nowMs: number,
  over: Partial<AdmitInput> = {},
) {
  const admitted = await s.admit(
    admitOf(makeReq(id), { usage: account(day), quotas: [quota], nowMs, ...over }),
  );
  expect(admitted).toMatchObject({ ok: true });
  expect(await s.dispatch(dispatchOf({ nowMs }))).toMatchObject({ kind: 'dispatched', req: { id } });
  expect(await s.settle({ id, nowMs, finalCost: 0, actualTokens: 30, outputTokens: 10 })).toBe(true);
}

describe('usage retention: nothing a tenant used stays in Redis for good', () => {
  let redis: Redis;
  beforeAll(() => {
    redis = connect();
  });
  afterAll(async () => {
    await redis.quit();
  });

  it('gives every usage key (day rows, day and month totals of tenant and key) the retention as its expiry', async () => {
    const store = freshRedisStore(redis);
    try {
      await serve(store, 'u1', '2026-11-24', Date.now());
      const k = store.keys;
      const keys = [
        k.key('usageDay', '2026-11-24'),
        k.key('usageTotal', 'tenant:t', '2026-11-24'),
        k.key('usageTotal', 'tenant:t', '2026-11'),
        k.key('usageTotal', 'key:sha256:k1', '2026-11-24'),
        k.key('usageTotal', 'key:sha256:k1', '2026-11'),
      ];
      for (const key of keys) {
        expect(await redis.exists(key), key).toBe(1);
        const ttl = await redis.ttl(key);
        expect(ttl, key).toBeGreaterThan(RETENTION_S - 120);
        expect(ttl, key).toBeLessThanOrEqual(RETENTION_S);
      }
      // A total created by a quota reservation alone (the request is cancelled, never settled).
      expect(
        await store.admit(
          admitOf(makeReq('u2'), {
            tenant: 'other',
            usage: account('2026-11-25'),
            quotas: [quota],
            nowMs: 5,
          }),
        ),
      ).toMatchObject({ ok: true });
      expect(await store.cancel('u2', 6)).toBe(true);
      const reservedOnly = k.key('usageTotal', 'tenant:other', '2026-11');
      expect(await redis.exists(reservedOnly)).toBe(1);
      expect(await redis.ttl(reservedOnly)).toBeGreaterThan(RETENTION_S - 120);
    } finally {
      await deletePrefix(redis, store);
      await store.close();
    }
  });

  it('keeps usage rows and totals readable until they expire (the expiry does not reset their values)', async () => {
    const store = freshRedisStore(redis);
    try {
      await serve(store, 'a', '2026-11-24', Date.now());
      await serve(store, 'b', '2026-11-24', Date.now());
      expect(await store.usage({ days: ['2026-11-24'] })).toMatchObject([
        { tenant: 't', key: 'sha256:k1', model: 'm', requests: 2, inputTokens: 40, outputTokens: 20 },
      ]);
    } finally {
      await deletePrefix(redis, store);
      await store.close();
    }
  });
});

describe('usage retention in the memory store', () => {
  it('drops days and total buckets that ended more than the retention before a settlement', async () => {
    const s = new MemoryStore();
    const t0 = Date.UTC(2026, 10, 24, 12);
    await serve(s, 'old', '2026-11-24', t0);
    // Still inside the retention: kept.
    await serve(s, 'mid', '2027-06-01', t0 + 189 * DAY_MS);
    expect(await s.usage({ days: ['2026-11-24'] })).toHaveLength(1);
    // Past it, and past the end of the old day's month: its rows and totals are gone, the new
    // ones are there.
    const later = t0 + (USAGE_RETENTION_DAYS + 40) * DAY_MS;
    const day = new Date(later).toISOString().slice(0, 10);
    await serve(s, 'new', day, later);
    expect(await s.usage({ days: ['2026-11-24'] })).toEqual([]);
    expect(await s.usage({ days: ['2027-06-01', day] })).toHaveLength(2);
    // The old month's total went too: a month quota on 2026-11 starts from nothing again.
    const full = { ...quota, budget: 10, amount: 10 };
    expect(
      await s.admit(
        admitOf(makeReq('again'), { usage: account('2026-11-24'), quotas: [full], nowMs: later }),
      ),
    ).toMatchObject({ ok: true });
    await s.close();
  });
});
