import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, joinShortestQueuePlacement } from '@fairway/policy';
import { type ChargeItem, MemoryStore, purgeStore, RedisStore, type SchedulingStore } from '@fairway/store';
import { redisUrl, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { type Dispatched, Gateway, type GatewayOptions } from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

/** Two replicas of 1,000 KV tokens in pool `m`. */
const fleet = new Fleet(['r1', 1000], ['r2', 1000]);

function req(id: string, over: Partial<RequestDescriptor> = {}): RequestDescriptor {
  return {
    id,
    tenant: 't1',
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 900,
    arrivalMs: 0,
    ...over,
  };
}

/** Records every charge call, to show the growth rides on the flushes the gateway makes anyway. */
function recording(store: SchedulingStore): { store: SchedulingStore; calls: ChargeItem[][] } {
  const calls: ChargeItem[][] = [];
  const charge = store.charge.bind(store);
  store.charge = async (items) => {
    calls.push([...items]);
    await charge(items);
  };
  return { store, calls };
}

/** Prefixes of the Redis stores made, purged after each test. */
const redisPrefixes: string[] = [];
const backends: [string, () => SchedulingStore][] = [
  ['memory', () => new MemoryStore()],
  [
    'redis',
    () => {
      const prefix = uniquePrefix('repredict');
      redisPrefixes.push(prefix);
      return new RedisStore({ redis: redisUrl(), prefix });
    },
  ],
];

describe.each(backends)('Gateway re-prediction (Aladdin section 4.3) on the %s store', (_, makeStore) => {
  const open: SchedulingStore[] = [];
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close();
    if (redisPrefixes.length === 0) return;
    const redis = new Redis(redisUrl());
    for (const p of redisPrefixes.splice(0)) await purgeStore(redis, p);
    await redis.quit();
  });

  function setup(over: Partial<GatewayOptions> = {}) {
    const { store, calls } = recording(makeStore());
    open.push(store);
    const dispatched: Dispatched[] = [];
    const gw = new Gateway({
      id: 'gw',
      store,
      clock: new ManualClock(0),
      ordering: fcfsPolicy(),
      placement: joinShortestQueuePlacement(),
      // Best fit packs the fuller replica first, as Aladdin's placement does.
      fit: 'best',
      replicas: fleet,
      onDispatch: (d) => dispatched.push(d),
      headroom: { tokenFraction: 0 },
      reserve: 'predicted',
      // Every request is predicted 100 output tokens: it reserves 100 + 100.
      outputPredictor: () => 100,
      ...over,
    });
    const replicaOf = (id: string) => dispatched.find((d) => d.id === id)?.replica;
    return { gw, store, calls, replicaOf };
  }

  /** a and b run on r1; a streams 300 tokens, three times its prediction; then c arrives. */
  async function outrun(gw: Gateway) {
    expect(await gw.submit(req('a'))).toMatchObject({ ok: true });
    expect(await gw.submit(req('b'))).toMatchObject({ ok: true });
    gw.recordTokens('a', 300);
    await gw.flush();
    expect(await gw.submit(req('c'))).toMatchObject({ ok: true });
  }

  it('without re-prediction a replica whose request outran its prediction keeps taking new requests', async () => {
    const { gw, store, replicaOf } = setup();
    await outrun(gw);
    expect(['a', 'b', 'c'].map(replicaOf)).toEqual(['r1', 'r1', 'r1']);
    // r1 holds 400 KV tokens of a and b, but its reservation still says 600 for all three.
    expect(await store.reserved('r1')).toEqual({ tokens: 600, seqs: 3 });
    // The under-estimate is still observed (twice the tokens so far: 600), but nothing grew.
    expect(gw.stats()).toMatchObject({
      repredictions: 1,
      predictionErrors: { r1: { lengthError: 500, batchError: 1, underEstimated: 1, grownTokens: 0 } },
    });
  });

  it('grows the reservation of a request that outran its prediction and steers new requests away', async () => {
    const { gw, store, calls, replicaOf } = setup({
      repredict: true,
      // Conditional average output of past requests longer than what it has: 600.
      outputRepredictor: (_, generated) => (generated < 600 ? 600 : undefined),
    });
    await outrun(gw);
    // a now reserves 100 + 600: r1 holds 900 and c (200) goes to r2.
    expect(['a', 'b', 'c'].map(replicaOf)).toEqual(['r1', 'r1', 'r2']);
    expect(await store.reserved('r1')).toEqual({ tokens: 900, seqs: 2 });
    // The growth rode on the one charge call the flush made.
    expect(calls).toHaveLength(1);
    expect(calls[0]).toEqual([{ id: 'a', amount: expect.any(Number), reserveTokens: 500 }]);
    expect(gw.stats()).toMatchObject({
      repredictions: 1,
      predictionErrors: {
        r1: { lengthError: 500, batchError: 1, underEstimated: 1, overEstimated: 0, grownTokens: 500 },
      },
    });

    // Settling a releases what it held, growth included.
    await gw.complete('a', { inputTokens: 100, outputTokens: 450 });
    expect(await store.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
    // b finishes early: r1 is marked over-estimated.
    await gw.complete('b', { inputTokens: 100, outputTokens: 20 });
    await gw.complete('c', { inputTokens: 100, outputTokens: 100 });
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    expect(await store.reserved('r2')).toEqual({ tokens: 0, seqs: 0 });
    expect(gw.stats().predictionErrors.r1).toEqual({
      lengthError: 500 - 80,
      batchError: 0,
      underEstimated: 1,
      overEstimated: 1,
      grownTokens: 500,
    });
  });

  it('re-predicts from its own history of the prompt bucket: the mean of the longer outputs', async () => {
    const { gw, store } = setup({ repredict: true });
    for (const [id, out] of [
      ['h1', 50],
      ['h2', 400],
      ['h3', 600],
    ] as const) {
      await gw.submit(req(id));
      await gw.complete(id, { inputTokens: 100, outputTokens: out });
    }
    await gw.submit(req('x'));
    gw.recordTokens('x', 150);
    await gw.flush();
    // Past outputs longer than 150: 400 and 600, mean 500 → the reservation covers 500 output tokens.
    expect(await store.reserved('r1')).toEqual({ tokens: 600, seqs: 1 });
    // Past every output seen: twice what it has, within max_tokens.
    gw.recordTokens('x', 700);
    await gw.flush();
    expect(await store.reserved('r1')).toEqual({ tokens: 100 + 900, seqs: 1 });
    expect(gw.stats().repredictions).toBe(2);
  });

  it('an evicted request releases its grown reservation and is dispatched again with its first one', async () => {
    const { gw, store } = setup({ repredict: true, outputRepredictor: () => 600 });
    await gw.submit(req('a'));
    gw.recordTokens('a', 300);
    await gw.flush();
    expect(await store.reserved('r1')).toEqual({ tokens: 700, seqs: 1 });
    expect(await gw.evict('a', 300)).toBe(true);
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    await gw.pump();
    expect(await store.reserved('r1')).toEqual({ tokens: 200, seqs: 1 });
    await gw.complete('a', { inputTokens: 100, outputTokens: 320 });
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
  });
});

describe('Gateway reservation of a request without an output cap (max-tokens reserve)', () => {
  it('grows its reservation as it streams past what it reserved, up to its engine cap, and releases it all', async () => {
    const store = new MemoryStore();
    const gw = new Gateway({
      id: 'gw',
      store,
      clock: new ManualClock(0),
      ordering: fcfsPolicy(),
      placement: joinShortestQueuePlacement(),
      replicas: fleet,
      onDispatch: () => undefined,
      headroom: { tokenFraction: 0 },
      reserve: 'max-tokens',
    });
    // Reserves 100 + 64 (the pool default); the engine may generate up to 500.
    expect(await gw.submit(req('u', { maxTokens: 64, outputCap: 500 }))).toMatchObject({ ok: true });
    expect(await store.reserved('r1')).toEqual({ tokens: 164, seqs: 1 });
    gw.recordTokens('u', 50);
    await gw.flush();
    expect(await store.reserved('r1')).toEqual({ tokens: 164, seqs: 1 });
    // Past 64: the reservation doubles ahead of the output (128), then follows it to the cap.
    gw.recordTokens('u', 70);
    await gw.flush();
    expect(await store.reserved('r1')).toEqual({ tokens: 228, seqs: 1 });
    gw.recordTokens('u', 300);
    await gw.flush();
    expect(await store.reserved('r1')).toEqual({ tokens: 100 + 300, seqs: 1 });
    gw.recordTokens('u', 480);
    await gw.flush();
    expect(await store.reserved('r1')).toEqual({ tokens: 100 + 500, seqs: 1 });
    // A capped request never grows: its cap is what it reserved.
    expect(await gw.submit(req('c', { maxTokens: 64 }))).toMatchObject({ ok: true });
    gw.recordTokens('c', 64);
    await gw.flush();
    expect(await store.reserved('r2')).toEqual({ tokens: 164, seqs: 1 });
    await gw.complete('u', { inputTokens: 100, outputTokens: 480 });
    await gw.complete('c', { inputTokens: 100, outputTokens: 64 });
    expect(await store.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    expect(await store.reserved('r2')).toEqual({ tokens: 0, seqs: 0 });
    await store.close();
  });
});
