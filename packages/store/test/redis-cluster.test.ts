import { type RedisCluster, startRedisCluster, uniquePrefix } from '@fairway/testkit';
import { type Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type AdmitInput,
  purgeStore,
  RedisStore,
  redisSlotGroupStore,
  type SlotGroupStore,
  tenantScoped,
  type WindowLimit,
} from '../src/index.ts';
import { loadLibrary } from '../src/script-loader.ts';
import { connectCluster, primaryAfterFailover, primaryOf, spreadGroups } from './cluster-harness.ts';
import { admitOf, describeStoreConformance, dispatchOf, makeReq } from './conformance.ts';

let cluster: RedisCluster;
let client: Cluster;

beforeAll(async () => {
  cluster = await startRedisCluster({ primaries: 3 });
  client = connectCluster(cluster);
}, 60_000);

afterAll(async () => {
  client?.disconnect();
  await cluster?.stop();
});

/** A slot-group store whose default group and groups of `p` and `q` sit on the three primaries. */
async function spreadStore(): Promise<{ store: SlotGroupStore; prefix: string; groups: string[] }> {
  const prefix = uniquePrefix('cl');
  const groups = await spreadGroups(client, prefix, 3);
  const [gp, gq] = groups as [string, string];
  const store = redisSlotGroupStore({ redis: client, prefix, slotGroups: { [gp]: ['p'], [gq]: ['q'] } });
  return { store, prefix, groups };
}

describeStoreConformance(
  'redis cluster, pools p and q and the default group on three primaries',
  async () => {
    const { store, prefix, groups } = await spreadStore();
    const ports = await Promise.all([undefined, ...groups].map((g) => primaryOf(client, prefix, g)));
    if (new Set(ports).size !== 3) throw new Error(`groups share a primary: ${ports.join(', ')}`);
    return {
      store,
      dispose: async () => {
        await store.close();
        await purgeStore(client, prefix, groups);
      },
    };
  },
);

describe('RedisStore on Redis Cluster: slot groups', () => {
  it('puts three pools in three groups on three primaries, each pool’s keys on its own', async () => {
    const prefix = uniquePrefix('cl');
    const [ga, gb] = (await spreadGroups(client, prefix, 3)) as [string, string];
    const store = redisSlotGroupStore({ redis: client, prefix, slotGroups: { [ga]: ['a'], [gb]: ['b'] } });
    try {
      const ports = [
        await primaryOf(client, prefix, undefined),
        await primaryOf(client, prefix, ga),
        await primaryOf(client, prefix, gb),
      ];
      expect(new Set(ports).size).toBe(3);
      const usage = { model: 'm', day: '2026-11-24', month: '2026-11' };
      for (const [i, pool] of ['a', 'b', 'c'].entries()) {
        const req = makeReq(`x-${pool}`, { pool, flow: 't' });
        const r = await store.admitAndDispatch({
          admit: admitOf(req, { usage }),
          dispatch: dispatchOf({ pool, replicas: [{ id: `r-${pool}`, tokenCapacity: 100, seqCapacity: 2 }] }),
        });
        expect(r.dispatch).toMatchObject({ kind: 'dispatched', replica: `r-${pool}` });
        // Each pool's keys are on its group's primary and on no other.
        const node = new Redis(ports[i === 2 ? 0 : i + 1] as number, '127.0.0.1');
        const group = pool === 'a' ? ga : pool === 'b' ? gb : undefined;
        const tag = group === undefined ? `{${prefix}}` : `{${prefix}:${group}}`;
        expect(await node.exists(`${tag}:req:x-${pool}`)).toBe(1);
        await node.quit();
      }
      // By id: each request settles in its own group, in one call.
      expect(await store.locate(['x-a', 'x-b', 'x-c', 'x-none'])).toEqual({
        running: new Map([
          ['x-a', 'r-a'],
          ['x-b', 'r-b'],
          ['x-c', 'r-c'],
        ]),
        unknown: ['x-none'],
      });
      for (const pool of ['a', 'b', 'c'])
        expect(
          await store.settle({ id: `x-${pool}`, nowMs: 1, finalCost: 10, actualTokens: 12, outputTokens: 2 }),
        ).toBe(true);
      // The tenant's usage is the sum of its rows in every group.
      expect(await store.usage({ days: ['2026-11-24'], tenant: 't' })).toEqual([
        {
          day: '2026-11-24',
          tenant: 't',
          key: '',
          model: 'm',
          requests: 3,
          inputTokens: 30,
          outputTokens: 6,
          cost: 0,
        },
      ]);
      // A request another store admitted (no route here) is still found, in every group.
      const other = redisSlotGroupStore({ redis: client, prefix, slotGroups: { [ga]: ['a'], [gb]: ['b'] } });
      await other.admit(admitOf(makeReq('y-b', { pool: 'b' })));
      expect(await store.cancel('y-b', 2)).toBe(true);
      // Owner leases and reclaims reach every group.
      await store.renewOwner('gone', 0, 10);
      for (const pool of ['a', 'b', 'c'])
        await store.admit(admitOf(makeReq(`z-${pool}`, { pool, owner: 'gone' }), { nowMs: 3 }));
      const r = await store.reclaim(10);
      expect([...r.dropped].sort()).toEqual(['z-a', 'z-b', 'z-c']);
      await other.close();
    } finally {
      await store.close();
      await purgeStore(client, prefix, [ga, gb]);
    }
  });

  it('puts back into its own group what a dispatcher holds when one group’s primary lost its state', async () => {
    const { store, prefix, groups } = await spreadStore();
    const [gp] = groups as [string];
    const rpm: WindowLimit = { key: 'rpm', limit: 3, amount: 1, windowMs: 60_000, code: 'rpm_limited' };
    const admit = (id: string, pool: string, nowMs: number) =>
      store.admit(admitOf(makeReq(id, { pool }), { nowMs, limits: [rpm] }));
    try {
      expect(await admit('x', 'p', 0)).toMatchObject({ ok: true });
      expect(await store.dispatch(dispatchOf({ nowMs: 1 }))).toMatchObject({ kind: 'dispatched' });
      expect(await store.settle({ id: 'x', nowMs: 2, finalCost: 10, actualTokens: 1, outputTokens: 1 })).toBe(
        true,
      );
      expect(await admit('y', 'q', 3)).toMatchObject({ ok: true });
      // Pool p's group loses everything (its primary restarted without persistence).
      await purgeStore(client, `${prefix}:${gp}`);
      await expect(admit('z', 'p', 4)).rejects.toMatchObject({ code: 'FAIRWAY_STORE_STATE_LOST' });
      // Pool q's group is untouched and keeps working meanwhile.
      expect(await admit('y2', 'q', 4)).toMatchObject({ ok: true });
      await store.adoptEpoch();
      // The settled request's window entry goes back into p's group only.
      await store.restore({
        nowMs: 5,
        lift: 'vtc',
        windows: [{ key: tenantScoped('t', 'rpm'), id: 'x', atMs: 0, windowMs: 60_000, amount: 1 }],
        requests: [],
      });
      expect(await admit('z', 'p', 6)).toMatchObject({ ok: true });
      expect(await admit('z2', 'p', 6)).toMatchObject({ ok: true });
      expect(await admit('w', 'p', 7)).toMatchObject({ ok: false, code: 'rpm_limited' });
      // q's window holds its own two, not x's entry: one more fits there.
      expect(await admit('y3', 'q', 7)).toMatchObject({ ok: true });
      expect(await admit('y4', 'q', 7)).toMatchObject({ ok: false, code: 'rpm_limited' });
    } finally {
      await store.close();
      await purgeStore(client, prefix, groups);
    }
  });

  it('refuses an admission and dispatch whose pools are in different groups', async () => {
    const prefix = uniquePrefix('cl');
    const store = redisSlotGroupStore({ redis: client, prefix, slotGroups: { g: ['a'] } });
    try {
      await expect(
        store.admitAndDispatch({
          admit: admitOf(makeReq('x', { pool: 'a' })),
          dispatch: dispatchOf({ pool: 'b' }),
        }),
      ).rejects.toThrow(/another slot group/);
    } finally {
      await store.close();
      await purgeStore(client, prefix, ['g']);
    }
  });

  it('loads the functions library on every primary, and again on one that lost it', async () => {
    const { store, prefix, groups } = await spreadStore();
    const library = loadLibrary();
    try {
      await store.admit(admitOf(makeReq('before', { pool: 'p' })));
      for (const n of cluster.nodes) {
        const node = new Redis(n.port, '127.0.0.1');
        const libs = (await node.function('LIST', 'LIBRARYNAME', library.name)) as unknown[];
        expect(libs).toHaveLength(1);
        await node.quit();
      }
      // Pool p's primary loses every function (as a restarted node without persistence would).
      const port = await primaryOf(client, prefix, groups[0]);
      const node = new Redis(port, '127.0.0.1');
      await node.function('FLUSH');
      expect(await node.function('LIST', 'LIBRARYNAME', library.name)).toEqual([]);
      // The next call reaches it, finds the function missing, loads the library there and retries.
      expect(await store.admit(admitOf(makeReq('after', { pool: 'p' })))).toEqual({
        ok: true,
        queued: 2,
        windows: [],
      });
      expect(await node.function('LIST', 'LIBRARYNAME', library.name)).toHaveLength(1);
      expect(await store.dispatch(dispatchOf())).toMatchObject({ kind: 'dispatched', req: { id: 'before' } });
      await node.quit();
    } finally {
      await store.close();
      await purgeStore(client, prefix, groups);
    }
  });
});

describe('RedisStore on Redis Cluster under concurrent dispatchers', () => {
  const CLIENTS = 4;
  const rpm: WindowLimit = {
    key: 'rpm:tenant:t',
    limit: 60,
    amount: 1,
    windowMs: 60_000,
    code: 'rpm_limited',
  };
  const admission = (id: string, pool: string, c: number, i: number): AdmitInput => ({
    req: makeReq(id, { pool, flow: 't', owner: `d${c}` }),
    nowMs: 1_000 + i,
    lift: 'vtc',
    limits: [rpm],
    overloaded: false,
    tenant: 't',
  });

  it('admits exactly the RPM limit of a group however many cluster clients race for it', async () => {
    const prefix = uniquePrefix('clconc');
    const [g] = (await spreadGroups(client, prefix, 2)) as [string];
    const clients = Array.from({ length: CLIENTS }, () => connectCluster(cluster));
    // Pools a and b share group g (and so the tenant's window); pool c is in the default group.
    const stores = clients.map((redis) =>
      redisSlotGroupStore({ redis, prefix, slotGroups: { [g]: ['a', 'b'] } }),
    );
    try {
      const attempts = stores.flatMap((s, c) =>
        Array.from({ length: 40 }, (_, i) => s.admit(admission(`c${c}-${i}`, i % 2 === 0 ? 'a' : 'b', c, i))),
      );
      const results = await Promise.all(attempts);
      expect(results.filter((r) => r.ok)).toHaveLength(60);
      expect(results.filter((r) => !r.ok && r.code === 'rpm_limited')).toHaveLength(160 - 60);
      // Another group keeps its own window of the same tenant (limits are exact per group).
      const elsewhere = await Promise.all(
        stores.flatMap((s, c) =>
          Array.from({ length: 20 }, (_, i) => s.admit(admission(`e${c}-${i}`, 'c', c, i))),
        ),
      );
      expect(elsewhere.filter((r) => r.ok)).toHaveLength(60);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
      await purgeStore(client, prefix, [g]);
      await Promise.all(clients.map((c) => c.quit()));
    }
  });

  it('a single-group store (no slot groups) runs unchanged on a cluster, with today’s keys', async () => {
    const prefix = uniquePrefix('clone');
    const clients = Array.from({ length: CLIENTS }, () => connectCluster(cluster));
    const stores = clients.map((redis) => new RedisStore({ redis, prefix }));
    try {
      const results = await Promise.all(
        stores.flatMap((s, c) =>
          Array.from({ length: 40 }, (_, i) => s.admit(admission(`c${c}-${i}`, 'p', c, i))),
        ),
      );
      expect(results.filter((r) => r.ok)).toHaveLength(60);
      const port = await primaryOf(client, prefix, undefined);
      const node = new Redis(port, '127.0.0.1');
      expect(await node.exists(`{${prefix}}:layout`, `{${prefix}}:epoch`)).toBe(2);
      await node.quit();
    } finally {
      await Promise.all(stores.map((s) => s.close()));
      await purgeStore(client, prefix);
      await Promise.all(clients.map((c) => c.quit()));
    }
  });
});

describe('RedisStore on Redis Cluster: fail-over', () => {
  it('keeps serving, with its state and the library, after a replica takes over a group’s primary', async () => {
    const withReplicas = await startRedisCluster({ primaries: 3, replicas: 1 });
    const c = connectCluster(withReplicas);
    const prefix = uniquePrefix('clfo');
    const [gp] = (await spreadGroups(c, prefix, 2)) as [string];
    const store = redisSlotGroupStore({ redis: c, prefix, slotGroups: { [gp]: ['p'] } });
    try {
      expect(await store.admit(admitOf(makeReq('before')))).toMatchObject({ ok: true });
      // The replica of pool p's primary takes over (CLUSTER FAILOVER, as after the primary's loss).
      const primary = await primaryOf(c, prefix, gp);
      const lines = String(await c.cluster('NODES'))
        .split('\n')
        .map((l: string) => l.split(' '));
      const primaryId = lines.find((l) => l[1]?.startsWith(`127.0.0.1:${primary}@`))?.[0];
      const replicaPort = Number(lines.find((l) => l[3] === primaryId)?.[1]?.split(/[:@]/)[1]);
      const replica = new Redis(replicaPort, '127.0.0.1');
      await replica.cluster('FAILOVER');
      for (let i = 0; (await replica.role())[0] !== 'master'; i++) {
        if (i > 100) throw new Error('the replica did not take over');
        await new Promise((r) => setTimeout(r, 50));
      }
      await replica.quit();
      // The store follows the slot to the new primary, which has the library (replicated) and the state.
      expect(await store.admit(admitOf(makeReq('after')))).toMatchObject({ ok: true, queued: 2 });
      expect(await store.dispatch(dispatchOf())).toMatchObject({ kind: 'dispatched', req: { id: 'before' } });
      expect(await primaryAfterFailover(c, prefix, gp, primary)).toBe(replicaPort);
    } finally {
      await store.close();
      c.disconnect();
      await withReplicas.stop();
    }
  }, 60_000);

  it('serves again, state and library intact, after a group’s primary is killed and its replica elected', async () => {
    const withReplicas = await startRedisCluster({ primaries: 3, replicas: 1 });
    const c = connectCluster(withReplicas);
    const prefix = uniquePrefix('clkill');
    const [gp] = (await spreadGroups(c, prefix, 2)) as [string];
    const store = redisSlotGroupStore({ redis: c, prefix, slotGroups: { [gp]: ['p'] } });
    try {
      expect(await store.admit(admitOf(makeReq('before')))).toMatchObject({ ok: true });
      const primaryPort = await primaryOf(c, prefix, gp);
      const primary = new Redis(primaryPort, '127.0.0.1');
      // Replication is asynchronous: what a client was told before the kill is on the replica
      // once WAIT says so (a write acknowledged but not yet replicated could be lost; see docs/operators/redis-cluster.md).
      expect(await primary.wait(1, 5_000)).toBe(1);
      const pid = Number(/process_id:(\d+)/.exec(await primary.info('server'))?.[1]);
      primary.disconnect();
      process.kill(pid, 'SIGKILL');
      const killedAt = Date.now();
      // Until the replica is elected (cluster-node-timeout 2 s, then the vote) calls fail, as
      // a dispatcher's requests get 503s; then the same store serves again without a restart.
      const deadline = Date.now() + 30_000;
      let after: Awaited<ReturnType<typeof store.admit>> | undefined;
      let failures = 0;
      while (after === undefined) {
        try {
          after = await store.admit(admitOf(makeReq('after')));
        } catch (err) {
          failures++;
          if (Date.now() > deadline) throw err;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      const elapsedMs = Date.now() - killedAt;
      expect(after).toMatchObject({ ok: true, queued: 2 });
      expect(await store.dispatch(dispatchOf())).toMatchObject({ kind: 'dispatched', req: { id: 'before' } });
      expect(await primaryAfterFailover(c, prefix, gp, primaryPort)).not.toBe(primaryPort);
      console.log(`primary killed: ${failures} failed calls before the replica served, ${elapsedMs} ms`);
    } finally {
      await store.close();
      c.disconnect();
      await withReplicas.stop();
    }
  }, 90_000);
});
