import { createRng, type Rng } from '@fairway/core';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type AdmitAndDispatchResult,
  type DispatchInput,
  MemoryStore,
  type QueuedRequest,
  type SchedulingStore,
  type SettleAndDispatchResult,
  type WindowLimit,
} from '../src/index.ts';
import { connect, deletePrefix, freshRedisStore } from './redis-harness.ts';

let redis: Redis;
beforeAll(() => {
  redis = connect();
});
afterAll(async () => {
  await redis.quit();
});

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[rng.int(0, xs.length - 1)] as T;
/** Costs with fractional parts, so float formatting differences would show. */
const fractional = (rng: Rng, max: number): number => rng.next() * max;

interface Op {
  readonly name: string;
  run(s: SchedulingStore): Promise<unknown>;
}

/**
 * Generates random operations against the current simulated time and id space. `light`: a fleet
 * with room, where most requests arrive through admitAndDispatch and pools often run empty (the
 * request path's common case, which the Redis backend serves without queueing the request).
 */
function randomOps(seed: number, count: number, light = false): Op[] {
  const rng = createRng(seed);
  // Prefix affinity draws from its own stream, so the rest of each seed's sequence is unchanged.
  const arng = createRng(seed * 7919 + 1);
  const ops: Op[] = [];
  let now = 0;
  let nextId = 0;
  const ids: string[] = [];
  const pools = ['p', 'q'];
  const flows = ['a', 'b', 'c', 'd', 'e'];
  const owners = ['d1', 'd2', 'd3'];
  const replicas = ['r1', 'r2', 'r3'];
  const limitsFor = (flow: string, reserve: number): WindowLimit[] => {
    const out: WindowLimit[] = [];
    if (rng.next() < 0.5)
      out.push({ key: `rpm:${flow}`, limit: 2, amount: 1, windowMs: 1000, code: 'rpm_limited' });
    if (rng.next() < 0.4)
      out.push({ key: `tpm:${flow}`, limit: 200, amount: reserve, windowMs: 1000, code: 'tpm_limited' });
    if (rng.next() < 0.3)
      out.push({
        key: `oit:${flow}`,
        limit: 1,
        amount: 1,
        windowMs: 1000,
        code: 'throttled',
        onlyWhenOverloaded: true,
      });
    return out;
  };
  const dispatchInput = (t: number, pool?: string): DispatchInput => {
    const n = rng.int(light ? 1 : 0, 3);
    return {
      pool: pool ?? pick(rng, pools),
      bands: rng.next() < 0.5 ? [0, 1] : [1, 0],
      ordering: rng.next() < 0.7 ? ('fair' as const) : ('score' as const),
      nowMs: t,
      picker: pick(rng, owners),
      replicas: replicas.slice(0, n).map((id) => ({
        id,
        tokenCapacity: rng.int(light ? 200 : 50, 400),
        seqCapacity: rng.int(1, 6),
      })),
      fit: rng.next() < 0.5 ? ('first' as const) : ('best' as const),
      ...(rng.next() < 0.3 && ids.length > 0
        ? { charges: [{ id: pick(rng, ids), amount: fractional(rng, 8), reserveTokens: rng.int(0, 30) }] }
        : {}),
      ...(arng.next() < 0.6 ? { affinityTokens: arng.int(0, 300) } : {}),
    };
  };
  for (let i = 0; i < count; i++) {
    now += rng.int(0, 40);
    const t = now;
    const r = rng.next();
    if (r < 0.35) {
      const id = `r${nextId++}`;
      ids.push(id);
      const flow = pick(rng, flows);
      const reserve = rng.int(1, 120);
      const cont = rng.next();
      const req = {
        id,
        pool: pick(rng, pools),
        band: rng.int(0, 1),
        flow,
        score: rng.int(0, 20) + (rng.next() < 0.5 ? 0.25 : 0),
        arrivalMs: t - 50 + rng.int(0, 100) * 0.5,
        reserveTokens: reserve,
        dispatchCost: fractional(rng, 50),
        owner: pick(rng, owners),
        payload: `{"n":${i}}`,
        ...(cont < 0.2 ? { continuation: true } : cont < 0.3 ? { continuation: false } : {}),
        // r4 is never a candidate: an affinity replica read outside the offered ones.
        ...(arng.next() < 0.4
          ? {
              affinity: {
                id: pick(arng, [...replicas, 'r4']),
                tokenCapacity: arng.int(50, 400),
                seqCapacity: arng.int(1, 6),
              },
            }
          : {}),
      };
      const limits = limitsFor(flow, reserve);
      const interaction =
        rng.next() < 0.3 ? { key: `i${rng.int(0, 4)}`, ttlMs: rng.int(50, 400) } : undefined;
      const input = {
        req,
        // Two tenants sharing window and interaction keys: their windows must stay apart alike.
        tenant: rng.next() < 0.8 ? 'ta' : 'tb',
        nowMs: t,
        lift: rng.next() < 0.8 ? ('vtc' as const) : ('none' as const),
        limits,
        overloaded: rng.next() < 0.5,
        ...(interaction ? { interaction } : {}),
        ...(rng.next() < 0.2 ? { maxQueuedFlow: rng.int(1, 4) } : {}),
        ...(rng.next() < 0.2 ? { maxQueuedPool: rng.int(3, 12) } : {}),
      };
      if (rng.next() < (light ? 0.8 : 0.3)) {
        const dispatch = dispatchInput(t, rng.next() < (light ? 0.95 : 0.8) ? req.pool : undefined);
        ops.push({
          name: `admitAndDispatch ${id}`,
          run: (s) => {
            if (!s.admitAndDispatch) throw new Error('no admitAndDispatch');
            return s.admitAndDispatch({ admit: input, dispatch });
          },
        });
      } else {
        ops.push({ name: `admit ${id}`, run: (s) => s.admit(input) });
      }
    } else if (r < 0.6) {
      const input = dispatchInput(t);
      ops.push({ name: 'dispatch', run: (s) => s.dispatch(input) });
    } else if (r < 0.72) {
      const items = Array.from({ length: rng.int(1, 5) }, () => ({
        id: ids.length > 0 && rng.next() < 0.9 ? pick(rng, ids) : 'nope',
        amount: fractional(rng, 8),
        // Some items grow the request's reservation (an output past its prediction).
        ...(rng.next() < 0.3 ? { reserveTokens: rng.int(1, 60) } : {}),
      }));
      ops.push({ name: 'charge', run: (s) => s.charge(items) });
    } else if (r < 0.84) {
      const id = ids.length > 0 ? pick(rng, ids) : 'nope';
      const input = {
        id,
        nowMs: t,
        finalCost: fractional(rng, 200),
        actualTokens: rng.int(0, 150),
        outputTokens: rng.int(0, 100),
      };
      if (rng.next() < 0.3) {
        const dispatch = dispatchInput(t);
        ops.push({
          name: `settleAndDispatch ${id}`,
          run: (s) => {
            if (!s.settleAndDispatch) throw new Error('no settleAndDispatch');
            return s.settleAndDispatch({ settle: input, dispatch });
          },
        });
      } else {
        ops.push({ name: `settle ${id}`, run: (s) => s.settle(input) });
      }
    } else if (r < 0.89) {
      const id = ids.length > 0 ? pick(rng, ids) : 'nope';
      ops.push({ name: `cancel ${id}`, run: (s) => s.cancel(id, t) });
    } else if (r < 0.93) {
      const owner = pick(rng, owners);
      const lease = rng.int(100, 2000);
      ops.push({ name: `renew ${owner}`, run: (s) => s.renewOwner(owner, t, lease) });
    } else if (r < 0.95) {
      ops.push({ name: 'reclaim', run: (s) => s.reclaim(t) });
    } else {
      const pool = pick(rng, pools);
      const band = rng.int(0, 1);
      const flow = pick(rng, flows);
      const replica = pick(rng, replicas);
      ops.push({
        name: `read ${pool}/${band}`,
        run: async (s) => ({
          snapshot: await s.snapshot(pool, band),
          predicted: await s.predictedOutput(flow),
          reserved: await s.reserved(replica),
        }),
      });
    }
  }
  return ops;
}

describe('MemoryStore and RedisStore', () => {
  /** Outcomes seen over all seeds: coverage is a property of the suite, not of one random stream. */
  const seen = new Set<string>();
  for (const [seed, light] of [
    [1, false],
    [2, false],
    [3, false],
    [4, false],
    [5, true],
    [6, true],
  ] as const) {
    it(`return identical results for a random operation sequence (seed ${seed}${light ? ', fleet with room' : ''})`, async () => {
      const memory = new MemoryStore({ defaultLeaseMs: 1500 });
      const red = freshRedisStore(redis, { defaultLeaseMs: 1500 });
      try {
        const ops = randomOps(seed, 700, light);
        const outcomes = new Set<string>();
        for (const [i, op] of ops.entries()) {
          const a = await op.run(memory);
          const b = await op.run(red);
          expect(b, `op ${i}: ${op.name}`).toEqual(a);
          if (typeof a === 'object' && a !== null) {
            if ('kind' in a) outcomes.add(String(a.kind));
            const placed = ('dispatch' in a ? a.dispatch : a) as {
              kind?: string;
              replica?: string;
              req?: QueuedRequest;
            };
            if (placed?.kind === 'dispatched' && placed.req?.affinity !== undefined)
              outcomes.add(
                placed.replica === placed.req.affinity.id ? 'placed by affinity' : 'affinity passed over',
              );
            if (placed?.kind === 'dispatched' && placed.replica === 'r4')
              outcomes.add('placed on a non-candidate');
            if ('code' in a) outcomes.add(String(a.code));
            if ('settled' in a) {
              const f = a as SettleAndDispatchResult;
              outcomes.add(`settled-fused ${f.settled}`);
              outcomes.add(`settled-fused ${f.dispatch.kind}`);
            }
            if ('admit' in a) {
              const f = a as AdmitAndDispatchResult;
              outcomes.add(f.admit.ok ? 'fused admitted' : 'fused rejected');
              if (f.dispatch !== undefined) outcomes.add(`fused ${f.dispatch.kind}`);
              // Admitted into an empty pool and dispatched at once.
              if (
                f.admit.ok &&
                f.admit.queued === 1 &&
                f.dispatch?.kind === 'dispatched' &&
                f.poolQueued === 0
              )
                outcomes.add('fused straight through');
            }
            if ('dropped' in a && Array.isArray(a.dropped) && a.dropped.length > 0) outcomes.add('reclaimed');
          }
        }
        for (const o of outcomes) seen.add(o);
        for (const pool of ['p', 'q']) {
          for (const band of [0, 1])
            expect(await red.snapshot(pool, band)).toEqual(await memory.snapshot(pool, band));
        }
      } finally {
        await deletePrefix(redis, red);
        await red.close();
      }
    });
  }
  it('exercises the interesting outcomes over the seeds, not only no-ops', () => {
    for (const outcome of [
      'dispatched',
      'blocked',
      'rpm_limited',
      'tpm_limited',
      'throttled',
      'reclaimed',
      'queue_full',
      'fused rejected',
      'fused dispatched',
      'fused straight through',
      'fused blocked',
      'settled-fused true',
      'settled-fused false',
      'settled-fused dispatched',
      'placed by affinity',
      'affinity passed over',
      'placed on a non-candidate',
    ])
      expect(seen, outcome).toContain(outcome);
  });
});
