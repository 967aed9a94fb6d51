import { createRng } from '@fairway/core';
import { uniquePrefix } from '@fairway/testkit';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RedisStore, type ReplicaCandidate, type WindowLimit } from '../src/index.ts';
import { makeReq } from './conformance.ts';
import { connect, deletePrefix } from './redis-harness.ts';

const CLIENTS = 4;

describe.each([
  { connections: 'one connection each', pipelined: false },
  // As a dispatcher connects (infrastructure.ts): calls of one event-loop turn in one write, and
  // renewals, reclaims and snapshots on a second connection.
  { connections: 'auto-pipelined, with a control connection', pipelined: true },
])('RedisStore under concurrent dispatchers ($connections)', ({ pipelined }) => {
  let clients: Redis[];
  let controls: Redis[];
  let stores: RedisStore[];

  beforeEach(() => {
    const prefix = uniquePrefix('conc');
    clients = Array.from({ length: CLIENTS }, () => connect({ enableAutoPipelining: pipelined }));
    controls = pipelined ? clients.map(() => connect({ enableAutoPipelining: true })) : [];
    stores = clients.map((redis, i) => new RedisStore({ redis, control: controls[i], prefix }));
  });

  afterEach(async () => {
    await deletePrefix(clients[0] as Redis, stores[0] as RedisStore);
    await Promise.all(stores.map((s) => s.close()));
    await Promise.all([...clients, ...controls].map((c) => c.quit()));
  });

  it('admits exactly the shared RPM limit however many dispatchers race for it', async () => {
    const rpm: WindowLimit = {
      key: 'rpm:tenant:t',
      limit: 60,
      amount: 1,
      windowMs: 60_000,
      code: 'rpm_limited',
    };
    const attempts = stores.flatMap((s, c) =>
      Array.from({ length: 40 }, (_, i) =>
        s.admit({
          req: makeReq(`c${c}-${i}`, { flow: 't', owner: `d${c}` }),
          nowMs: 1_000 + i,
          lift: 'vtc',
          limits: [rpm],
          overloaded: false,
          tenant: 't',
        }),
      ),
    );
    const results = await Promise.all(attempts);
    expect(results.filter((r) => r.ok)).toHaveLength(60);
    expect(results.filter((r) => !r.ok && r.code === 'rpm_limited')).toHaveLength(160 - 60);
    // The next window admits again, exactly up to the limit (the entries admitted at 1,001 ms and
    // later leave at the end of their 1 s bucket, 62 s).
    const later = await Promise.all(
      stores.map((s, c) =>
        s.admit({
          req: makeReq(`late-${c}`, { flow: 't', owner: `d${c}` }),
          nowMs: 62_000,
          lift: 'vtc',
          limits: [rpm],
          overloaded: false,
          tenant: 't',
        }),
      ),
    );
    expect(later.every((r) => r.ok)).toBe(true);
  });

  it('never dispatches a request twice, never over-reserves and leaks nothing', async () => {
    const rng = createRng(7);
    const replicas: ReplicaCandidate[] = [
      { id: 'r1', tokenCapacity: 500, seqCapacity: 4 },
      { id: 'r2', tokenCapacity: 300, seqCapacity: 3 },
    ];
    const flows = ['a', 'b', 'c', 'd', 'e', 'f'];
    const total = 240;
    const expectedCost = new Map<string, number>();
    // Integer costs, so a counter equals the sum of its flow's charges whatever the order.
    const plan = Array.from({ length: total }, (_, i) => {
      const flow = flows[i % flows.length] as string;
      const finalCost = rng.int(10, 90);
      expectedCost.set(flow, (expectedCost.get(flow) ?? 0) + finalCost);
      return { id: `q${i}`, flow, reserve: rng.int(20, 150), dispatchCost: rng.int(1, 9), finalCost };
    });
    const byId = new Map(plan.map((p) => [p.id, p]));
    const dispatched: string[] = [];
    let admitted = 0;

    async function worker(c: number): Promise<void> {
      const s = stores[c] as RedisStore;
      const mine = plan.filter((_, i) => i % CLIENTS === c);
      let next = 0;
      const running: string[] = [];
      while (dispatched.length < total) {
        if (next < mine.length) {
          const p = mine[next++] as (typeof mine)[number];
          const r = await s.admit({
            req: makeReq(p.id, {
              flow: p.flow,
              reserveTokens: p.reserve,
              dispatchCost: p.dispatchCost,
              owner: `d${c}`,
            }),
            nowMs: 0,
            lift: 'none',
            limits: [],
            overloaded: false,
            tenant: 't',
          });
          expect(r.ok).toBe(true);
          admitted++;
        }
        const d = await s.dispatch({
          pool: 'p',
          bands: [0],
          ordering: 'fair',
          nowMs: 0,
          picker: `d${c}`,
          replicas,
          fit: c % 2 === 0 ? 'first' : 'best',
        });
        if (d.kind === 'dispatched') {
          dispatched.push(d.req.id);
          running.push(d.req.id);
          const reserved = await s.reserved(d.replica);
          const cap = replicas.find((r) => r.id === d.replica) as ReplicaCandidate;
          expect(reserved.tokens).toBeLessThanOrEqual(cap.tokenCapacity);
          expect(reserved.seqs).toBeLessThanOrEqual(cap.seqCapacity);
        }
        // Another dispatcher may have picked this worker's request: whoever picked it settles it,
        // after streaming a couple of charges.
        if (running.length > 0 && (d.kind !== 'dispatched' || rng.next() < 0.5)) {
          const id = running.shift() as string;
          const p = byId.get(id) as (typeof plan)[number];
          await s.charge([
            { id, amount: 1 },
            { id, amount: 2 },
          ]);
          expect(
            await s.settle({ id, nowMs: 1, finalCost: p.finalCost, actualTokens: 0, outputTokens: 5 }),
          ).toBe(true);
        }
      }
      for (const id of running) {
        const p = byId.get(id) as (typeof plan)[number];
        expect(
          await s.settle({ id, nowMs: 1, finalCost: p.finalCost, actualTokens: 0, outputTokens: 5 }),
        ).toBe(true);
      }
    }

    await Promise.all(stores.map((_, c) => worker(c)));
    expect(admitted).toBe(total);
    expect(new Set(dispatched).size).toBe(total);
    expect(dispatched).toHaveLength(total);
    const s = stores[0] as RedisStore;
    for (const r of replicas) expect(await s.reserved(r.id)).toEqual({ tokens: 0, seqs: 0 });
    const snap = await s.snapshot('p', 0);
    expect(snap.backlogged).toEqual([]);
    expect(snap.counters).toEqual(Object.fromEntries(expectedCost));
  });

  it('reclaims a crashed dispatcher’s requests so nothing stays stuck', async () => {
    const [alive, crashed] = stores as [RedisStore, RedisStore];
    await alive.renewOwner('alive', 0, 1_000);
    await crashed.renewOwner('crashed', 0, 1_000);
    const replicas = [{ id: 'r1', tokenCapacity: 100, seqCapacity: 10 }];
    for (let i = 0; i < 6; i++) {
      await crashed.admit({
        req: makeReq(`x${i}`, { owner: 'crashed', reserveTokens: 30 }),
        nowMs: 0,
        lift: 'vtc',
        limits: [],
        overloaded: false,
        tenant: 't',
      });
    }
    for (let i = 0; i < 3; i++) {
      const d = await alive.dispatch({
        pool: 'p',
        bands: [0],
        ordering: 'fair',
        nowMs: 0,
        picker: 'alive',
        replicas,
        fit: 'first',
      });
      expect(d.kind).toBe('dispatched');
    }
    expect(await alive.reserved('r1')).toEqual({ tokens: 90, seqs: 3 });
    await alive.renewOwner('alive', 900, 1_000);
    const [a, b] = await Promise.all([alive.reclaim(1_000), crashed.reclaim(1_000)]);
    const dropped = [...a.dropped, ...b.dropped].sort();
    const released = [...a.released, ...b.released].sort();
    expect(dropped).toEqual(['x3', 'x4', 'x5']);
    expect(released).toEqual(['x0', 'x1', 'x2']);
    expect(await alive.reserved('r1')).toEqual({ tokens: 0, seqs: 0 });
    expect((await alive.snapshot('p', 0)).backlogged).toEqual([]);
  });
});
