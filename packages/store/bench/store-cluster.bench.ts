/**
 * Redis Cluster mode of `bench:store` (`BENCH_CLUSTER=3 npm run bench:store`): three pools in three
 * slot groups, driven concurrently, on a throw-away Redis Cluster of that many primaries and, for
 * comparison, on one throw-away Redis (the same three groups, so the same client code). Prints
 * admissions and dispatch+charge pairs per second, the Redis CPU per operation on each primary
 * (INFO cpu deltas) and the client's CPU per operation. Both servers are started by the test kit,
 * so the shared Redis on 6379 is never touched.
 *
 * What it can show on a small machine: capacity per primary (Redis µs/op), not aggregate
 * throughput — the primaries, the client and everything else share the machine's cores.
 */
import { randomBytes } from 'node:crypto';
import { startRedisCluster, startRedisServer } from '@fairway/testkit';
import { Cluster, Redis } from 'ioredis';
import { purgeStore, type RedisClient, redisSlotGroupStore } from '../src/index.ts';
import { StoreKeys, slotGroupPrefix } from '../src/keys.ts';
import { benchRequest } from './bench-requests.ts';

const IN_FLIGHT = 256;
const replicas = [{ id: 'r1', tokenCapacity: 1e12, seqCapacity: 1e9 }];

async function cpuSeconds(node: Redis): Promise<number> {
  const info = await node.info('cpu');
  return (
    Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? 0) +
    Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? 0)
  );
}

/** Group names whose slots are on different primaries (one per primary when there are as many). */
async function spread(client: RedisClient, prefix: string, count: number): Promise<string[]> {
  if (!(client instanceof Cluster)) return Array.from({ length: count }, (_, i) => `g${i}`);
  const used = new Set<string>();
  const names: string[] = [];
  for (let i = 0; names.length < count && i < 500; i++) {
    const slot = Number(
      await client.cluster('KEYSLOT', new StoreKeys(slotGroupPrefix(prefix, `g${i}`)).layout()),
    );
    const node = client.slots[slot]?.[0] ?? '';
    if (used.has(node)) continue;
    used.add(node);
    names.push(`g${i}`);
  }
  return names;
}

interface Phase {
  readonly perS: number;
  readonly clientUs: number;
  /** Redis CPU µs per operation (admission, or dispatch+charge pair) on each node, for those it served. */
  readonly nodeUs: readonly number[];
  /** Share of a core each node was busy. */
  readonly nodeBusy: readonly number[];
}

async function phase(
  nodes: readonly Redis[],
  opsPerNode: readonly number[],
  total: number,
  lanes: readonly (() => Promise<boolean>)[],
): Promise<Phase> {
  const before = await Promise.all(nodes.map(cpuSeconds));
  const client = process.cpuUsage();
  const start = performance.now();
  await Promise.all(
    lanes.map(async (step) => {
      while (await step());
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  const used = process.cpuUsage(client);
  const after = await Promise.all(nodes.map(cpuSeconds));
  const cpu = after.map((a, i) => a - (before[i] ?? 0));
  return {
    perS: total / seconds,
    clientUs: (used.user + used.system) / total,
    nodeUs: cpu.map((c, i) => (c * 1e6) / Math.max(1, opsPerNode[i] ?? 0)),
    nodeBusy: cpu.map((c) => c / seconds),
  };
}

async function runOn(label: string, client: RedisClient, nodes: readonly Redis[], n: number): Promise<void> {
  const prefix = `bench-${randomBytes(4).toString('hex')}`;
  const groups = await spread(client, prefix, 3);
  const pools = groups.map((_, i) => `p${i}`);
  const store = redisSlotGroupStore({
    redis: client,
    prefix,
    validate: false,
    slotGroups: Object.fromEntries(groups.map((g, i) => [g, [pools[i] as string]])),
  });
  // Which node serves each pool's group: operations per node.
  const nodeOfPool = await Promise.all(
    groups.map(async (g) => {
      if (!(client instanceof Cluster)) return 0;
      const slot = Number(
        await client.cluster('KEYSLOT', new StoreKeys(slotGroupPrefix(prefix, g)).layout()),
      );
      const key = client.slots[slot]?.[0] ?? '';
      return nodes.findIndex((node) => `${node.options.host}:${node.options.port}` === key);
    }),
  );
  const perNode = (opsPerPool: number) => {
    const out = nodes.map(() => 0);
    for (const i of nodeOfPool) out[i] = (out[i] ?? 0) + opsPerPool;
    return out;
  };
  try {
    await store.renewOwner('bench', 0, 1e12); // claims every group, loads the library
    const lanesOf = (make: (pool: string) => () => Promise<boolean>) =>
      Array.from({ length: IN_FLIGHT }, (_, k) => make(pools[k % pools.length] as string));
    const admitted = pools.map(() => 0);
    const admit = await phase(
      nodes,
      perNode(n),
      n * pools.length,
      lanesOf((pool) => async () => {
        const p = pools.indexOf(pool);
        const i = admitted[p] ?? 0;
        if (i >= n) return false;
        admitted[p] = i + 1;
        await store.admit({
          req: benchRequest(i, pool, `${pool}-q${i}`),
          nowMs: i,
          lift: 'vtc',
          limits: [],
          overloaded: false,
          tenant: 't',
        });
        return true;
      }),
    );
    const pairs = n / 2;
    const done = pools.map(() => 0);
    const pair = await phase(
      nodes,
      perNode(pairs),
      pairs * pools.length,
      lanesOf((pool) => async () => {
        const p = pools.indexOf(pool);
        if ((done[p] ?? 0) >= pairs) return false;
        done[p] = (done[p] ?? 0) + 1;
        const d = await store.dispatch({
          pool,
          bands: [0],
          ordering: 'fair',
          nowMs: 0,
          picker: 'bench',
          replicas,
          fit: 'first',
        });
        if (d.kind === 'dispatched') await store.charge([{ id: d.req.id, amount: 2 }]);
        return true;
      }),
    );
    console.log(`\n${label}: 3 pools in 3 slot groups, ${n} requests per pool, ${IN_FLIGHT} in flight`);
    for (const [name, r, unit] of [
      ['admit', admit, 'admissions'],
      ['dispatch+charge', pair, 'pairs'],
    ] as const) {
      const perPrimary = r.nodeUs
        .map((us, i) => `${us.toFixed(1)} µs/op (${Math.round((r.nodeBusy[i] ?? 0) * 100)}% busy)`)
        .join(', ');
      // What the primaries could serve with a core each, from their measured µs per operation.
      const capacity = r.nodeUs.reduce((sum, us) => sum + 1e6 / us, 0);
      console.log(
        `  ${name.padEnd(16)} ${Math.round(r.perS).toLocaleString('en-US').padStart(8)} ${unit}/s   redis CPU per primary: ${perPrimary}   client CPU ${r.clientUs.toFixed(1)} µs/op   capacity at one core per primary ≈ ${Math.round(capacity).toLocaleString('en-US')}/s (computed)`,
      );
    }
  } finally {
    await store.close();
    await purgeStore(client, prefix, groups);
  }
}

/** Runs the comparison: one Redis, then a `primaries`-primary cluster. */
export async function clusterBench(primaries: number, n: number): Promise<void> {
  const single = await startRedisServer();
  const cluster = await startRedisCluster({ primaries });
  const nodes = cluster.nodes.map((x) => new Redis(x.port, '127.0.0.1'));
  const one = new Redis(single.port, '127.0.0.1', { enableAutoPipelining: true });
  const client = new Cluster(
    cluster.nodes.map((x) => ({ host: '127.0.0.1', port: x.port })),
    // FCALL is left out of auto-pipelining on a cluster (see the store's checkClient).
    { enableAutoPipelining: true, autoPipeliningIgnoredCommands: ['fcall', 'eval', 'evalsha'] },
  );
  try {
    await runOn('1 primary (one redis-server)', one, [one], n);
    await runOn(`${primaries} primaries (Redis Cluster)`, client, nodes, n);
  } finally {
    await Promise.all([one.quit(), client.quit(), ...nodes.map((x) => x.quit())]);
    await cluster.stop();
    await single.stop();
  }
}
