/**
 * Store operations per second, both backends: admit, dispatch, charge, settle, dispatch+charge
 * pairs, and the fused calls of the request path (admit+dispatch when a request arrives,
 * settle+dispatch when one completes, each dispatch followed by its share of a coalesced charge
 * flush). The Redis runs use one connection with many calls in flight, as the dispatcher's
 * connection is (calls made in one event-loop turn leave in one write). Ends with the exact-limit
 * demo: 4 dispatcher clients share one RPM limit of 60.
 *
 *   npm run bench:store            (REDIS_URL defaults to redis://127.0.0.1:6379)
 *   BENCH_N=50000 npm run bench:store
 *   BENCH_ONLY=redis npm run bench:store   (skip the memory runs and the exact-limit demo)
 *   BENCH_VALIDATE=1 npm run bench:store   (Redis store with zod input validation; the dispatcher runs
 *                                          without, so the default is off)
 *   BENCH_PREFIX_PARTS=8 npm run bench:store   (requests carry eight prefix parts their flow shares: the
 *                                          cost of reserving shared prompt parts once per replica)
 *   BENCH_USAGE=1 npm run bench:store      (admissions carry a usage account, priced, and a tenant and a
 *                                          key token budget: the cost of usage accounting and quotas)
 *   BENCH_AUTOPIPELINE=0 npm run bench:store   (ioredis auto-pipelining off: the store's own calls
 *                                          batch their writes either way; other commands do not)
 *   BENCH_CLUSTER=3 npm run bench:store    (only this: 3 pools in 3 slot groups on one throw-away Redis,
 *                                          then on a throw-away 3-primary Redis Cluster; see store-cluster.bench.ts)
 *   BENCH_ONLY=windows npm run bench:store (only the window-limit costs: Redis µs per call of admits refused
 *                                          by full RPM / TPM / throttle windows, one that passes, a settle)
 *
 * The window-limit costs read `INFO commandstats` (µs inside FCALL per call): run them on a Redis
 * no one else uses, or other clients' calls count too.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  MemoryStore,
  purgeStore,
  type QueuedRequest,
  RedisStore,
  type SchedulingStore,
  type WindowLimit,
} from '../src/index.ts';
import { benchRequest, FLOWS } from './bench-requests.ts';
import { clusterBench } from './store-cluster.bench.ts';
import { windowScenarios } from './window-scenarios.ts';

const N = Number(process.env.BENCH_N ?? 20_000);
const ONLY_REDIS = process.env.BENCH_ONLY === 'redis';
const VALIDATE = process.env.BENCH_VALIDATE === '1';
const USAGE = process.env.BENCH_USAGE === '1';
/** With BENCH_USAGE=1: what the dispatcher adds to each admission for accounting and two budgets. */
const accounting = USAGE
  ? {
      usage: {
        key: 'sha256:k',
        model: 'm',
        day: '2026-11-24',
        month: '2026-11',
        priceIn: 0.5,
        priceOut: 1.5,
      },
      quotas: (['tenant', 'key'] as const).map((scope) => ({
        scope,
        window: 'day' as const,
        kind: 'tokens' as const,
        budget: 1e15,
        amount: 300,
        alertAt: 0.8e15,
        resetAtMs: 1e13,
      })),
    }
  : {};
const AUTOPIPELINE = process.env.BENCH_AUTOPIPELINE !== '0';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const IN_FLIGHT = 256;
const replicas = [{ id: 'r1', tokenCapacity: 1e12, seqCapacity: 1e9 }];

/** Items per coalesced charge flush in the request-path rows (the gateway flushes every 512 tokens or 50 ms). */
const FLUSH_ITEMS = 16;

/** Runs `op(i)` for i in [0, n) with at most `inFlight` outstanding; returns ops per second. */
async function run(n: number, inFlight: number, op: (i: number) => Promise<unknown>): Promise<number> {
  const start = performance.now();
  let next = 0;
  async function lane(): Promise<void> {
    while (next < n) await op(next++);
  }
  await Promise.all(Array.from({ length: inFlight }, lane));
  return n / ((performance.now() - start) / 1000);
}

/** CPU seconds the Redis server has used (user + sys), to report its cost per operation. */
async function redisCpuSeconds(redis: Redis | undefined): Promise<number> {
  if (redis === undefined) return 0;
  const info = await redis.info('cpu');
  const user = Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? 0);
  const sys = Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? 0);
  return user + sys;
}

/** Calls and µs per Redis command (INFO commandstats), to diff around a run. */
async function commandStats(redis: Redis | undefined): Promise<Map<string, { calls: number; usec: number }>> {
  const out = new Map<string, { calls: number; usec: number }>();
  if (redis === undefined) return out;
  for (const m of (await redis.info('commandstats')).matchAll(/cmdstat_([^:]+):calls=(\d+),usec=(\d+)/g)) {
    out.set(m[1] as string, { calls: Number(m[2]), usec: Number(m[3]) });
  }
  return out;
}

/** Per operation: µs inside the Lua functions and commands they ran (from the diff; other clients of the Redis count too). */
function perOp(
  before: Map<string, { calls: number; usec: number }>,
  after: Map<string, { calls: number; usec: number }>,
  n: number,
): { scriptUs: number; innerCalls: number } {
  let scriptUsec = 0;
  let inner = 0;
  for (const [name, a] of after) {
    const b = before.get(name) ?? { calls: 0, usec: 0 };
    if (name === 'fcall' || name === 'evalsha' || name === 'eval') scriptUsec += a.usec - b.usec;
    else if (!['info', 'scan', 'quit', 'function|load'].includes(name)) inner += a.calls - b.calls;
  }
  return { scriptUs: scriptUsec / n, innerCalls: inner / n };
}

async function measure(
  label: string,
  store: SchedulingStore,
  inFlight: number,
  redis?: Redis,
): Promise<void> {
  const results: Record<string, number> = {};
  const cpuPerOp: Record<string, number> = {};
  const clientPerOp: Record<string, number> = {};
  const scripts: Record<string, { scriptUs: number; innerCalls: number }> = {};
  const rate = async (name: string, n: number, op: (i: number) => Promise<unknown>): Promise<void> => {
    const stats = await commandStats(redis);
    const before = await redisCpuSeconds(redis);
    const client = process.cpuUsage();
    results[name] = await run(n, inFlight, op);
    const used = process.cpuUsage(client);
    clientPerOp[name] = (used.user + used.system) / n;
    cpuPerOp[name] = (((await redisCpuSeconds(redis)) - before) * 1e6) / n;
    scripts[name] = perOp(stats, await commandStats(redis), n);
  };
  await rate('admit', N, (i) =>
    store.admit({
      req: benchRequest(i),
      nowMs: i,
      lift: 'vtc',
      limits: [],
      overloaded: false,
      tenant: 't',
      ...accounting,
    }),
  );
  await rate('dispatch', N / 2, (i) =>
    store.dispatch({
      pool: 'p',
      bands: [0],
      ordering: 'fair',
      nowMs: i,
      picker: 'bench',
      replicas,
      fit: 'first',
    }),
  );
  await rate('dispatch+charge', N / 4, async (i) => {
    const d = await store.dispatch({
      pool: 'p',
      bands: [0],
      ordering: 'fair',
      nowMs: i,
      picker: 'bench',
      replicas,
      fit: 'first',
    });
    if (d.kind === 'dispatched') await store.charge([{ id: d.req.id, amount: 2 }]);
  });
  // The dispatcher's coalesced charge for the request it dispatched before travels with the next
  // dispatch: one round trip per pair.
  let previous: string | undefined;
  await rate('dispatch+charge, one call', N / 4, async (i) => {
    const charges = previous === undefined ? [] : [{ id: previous, amount: 2 }];
    const d = await store.dispatch({
      pool: 'p',
      bands: [0],
      ordering: 'fair',
      nowMs: i,
      picker: 'bench',
      replicas,
      fit: 'first',
      charges,
    });
    if (d.kind === 'dispatched') previous = d.req.id;
  });
  await rate('charge', N, (i) => store.charge([{ id: `q${i}`, amount: 2 }]));
  await rate('charge x16', N / 16, (b) =>
    store.charge(Array.from({ length: 16 }, (_, k) => ({ id: `q${b * 16 + k}`, amount: 1 }))),
  );
  await rate('settle', N, (i) =>
    store.settle({ id: `q${i}`, nowMs: N + i, finalCost: 300, actualTokens: 350, outputTokens: 100 }),
  );
  // The request path as the gateway runs it, on a pool of its own: a request that arrives while a
  // replica has room (the pool is empty) is admitted and dispatched in one call; a completion settles and dispatches the next queued
  // request in one call; output charges of the running requests go in coalesced flushes of
  // FLUSH_ITEMS items, one flush per FLUSH_ITEMS dispatches here.
  const dispatchIn = {
    pool: 'w',
    bands: [0],
    ordering: 'fair' as const,
    picker: 'bench',
    replicas,
    fit: 'first' as const,
  };
  const path = (i: number): QueuedRequest => ({ ...benchRequest(i), id: `w${i}`, pool: 'w' });
  let pending: { id: string; amount: number }[] = [];
  const coalesced = async (id: string | undefined): Promise<void> => {
    if (id !== undefined) pending.push({ id, amount: 2 });
    if (pending.length < FLUSH_ITEMS) return;
    const items = pending;
    pending = [];
    await store.charge(items);
  };
  const admitIn = (i: number) => ({
    req: path(i),
    nowMs: i,
    lift: 'vtc' as const,
    limits: [],
    overloaded: false,
    tenant: 't',
    ...accounting,
  });
  await rate('admit+dispatch, one call', N / 2, async (i) => {
    const r = await store.admitAndDispatch?.({ admit: admitIn(i), dispatch: { ...dispatchIn, nowMs: i } });
    await coalesced(r?.dispatch?.kind === 'dispatched' ? r.dispatch.req.id : undefined);
  });
  /** Queues requests `from` .. `to` - 1 (untimed). */
  const queue = async (from: number, to: number): Promise<void> => {
    for (let i = from; i < to; i += IN_FLIGHT)
      await Promise.all(
        Array.from({ length: Math.min(IN_FLIGHT, to - i) }, (_, k) => store.admit(admitIn(i + k))),
      );
  };
  await queue(N / 2, N);
  await rate('settle+dispatch, one call', N / 2, async (i) => {
    const r = await store.settleAndDispatch?.({
      settle: { id: `w${i}`, nowMs: N + i, finalCost: 300, actualTokens: 350, outputTokens: 100 },
      dispatch: { ...dispatchIn, nowMs: N + i },
    });
    await coalesced(r?.dispatch.kind === 'dispatched' ? r.dispatch.req.id : undefined);
  });
  await queue(N, N + N / 2);
  await rate('dispatch + coalesced charge', N / 2, async (i) => {
    const d = await store.dispatch({ ...dispatchIn, nowMs: i });
    await coalesced(d.kind === 'dispatched' ? d.req.id : undefined);
  });
  console.log(
    `\n${label} (N=${N}, ${FLOWS} flows, ${inFlight} in flight${USAGE ? ', usage account and 2 budgets' : ''})`,
  );
  for (const [op, perS] of Object.entries(results)) {
    const sc = scripts[op] ?? { scriptUs: 0, innerCalls: 0 };
    const cpu =
      redis === undefined
        ? ''
        : `   redis CPU ${(cpuPerOp[op] ?? 0).toFixed(1).padStart(6)} µs/op` +
          ` (${Math.round(((cpuPerOp[op] ?? 0) * perS) / 1e4)
            .toString()
            .padStart(3)}% busy)` +
          `   in scripts ${sc.scriptUs.toFixed(1).padStart(6)} µs/op` +
          `   redis.call ${sc.innerCalls.toFixed(1).padStart(5)}/op` +
          `   client CPU ${(clientPerOp[op] ?? 0).toFixed(1).padStart(6)} µs/op`;
    console.log(`  ${op.padEnd(26)} ${Math.round(perS).toLocaleString('en-US').padStart(10)} ops/s${cpu}`);
  }
}

/** 4 clients, one RPM limit of 60, 3 windows of 60 s (virtual time): admitted per window. */
async function exactLimitDemo(): Promise<void> {
  const prefix = `bench-${randomBytes(4).toString('hex')}`;
  const clients = Array.from({ length: 4 }, () => new Redis(REDIS_URL));
  const stores = clients.map((redis) => new RedisStore({ redis, prefix }));
  const rpm: WindowLimit = {
    key: 'rpm:tenant:shared',
    limit: 60,
    amount: 1,
    windowMs: 60_000,
    code: 'rpm_limited',
  };
  console.log('\nexact-limit demo: 4 dispatcher clients share RPM 60; each tries 50 requests per window');
  for (let w = 0; w < 3; w++) {
    const attempts = stores.flatMap((s, c) =>
      Array.from({ length: 50 }, (_, i) =>
        s.admit({
          req: { ...benchRequest(w * 1000 + c * 100 + i), owner: `d${c}`, flow: 'shared' },
          nowMs: w * 60_000 + i * 1000 + c,
          lift: 'vtc',
          limits: [rpm],
          overloaded: false,
          tenant: 't',
        }),
      ),
    );
    const results = await Promise.all(attempts);
    const perClient = stores.map((_, c) => results.slice(c * 50, c * 50 + 50).filter((r) => r.ok).length);
    const admitted = results.filter((r) => r.ok).length;
    console.log(
      `  window ${w}: admitted ${admitted} (per client ${perClient.join(' / ')}), rejected ${200 - admitted}`,
    );
  }
  await purgeStore(clients[0] as Redis, prefix);
  await Promise.all(clients.map((c) => c.quit()));
}

/**
 * Redis µs per FCALL of the window-limit calls (window-scenarios.ts), from `INFO commandstats`: run
 * on a Redis no one else uses, or other clients' calls count too.
 */
async function windowCosts(redis: Redis): Promise<void> {
  const store = new RedisStore({ redis, prefix: `bench-${randomBytes(4).toString('hex')}`, validate: false });
  const calls = Math.min(N, 5000);
  const rows: [string, number][] = [];
  try {
    for (const { label, setup, op } of windowScenarios(store, calls, IN_FLIGHT)) {
      await setup();
      const before = (await commandStats(redis)).get('fcall') ?? { calls: 0, usec: 0 };
      await run(calls, 16, op);
      const after = (await commandStats(redis)).get('fcall') ?? { calls: 0, usec: 0 };
      rows.push([label, (after.usec - before.usec) / (after.calls - before.calls)]);
    }
  } finally {
    await purgeStore(redis, store.keys.prefix);
  }
  console.log(`\nwindow limits, redis µs per FCALL (INFO commandstats; ${calls} calls each, 16 in flight)`);
  for (const [label, us] of rows) console.log(`  ${label.padEnd(48)} ${us.toFixed(1).padStart(8)} µs/call`);
}

async function main(): Promise<void> {
  if (process.env.BENCH_CLUSTER !== undefined) {
    await clusterBench(Number(process.env.BENCH_CLUSTER), N);
    return;
  }
  if (!ONLY_REDIS && process.env.BENCH_ONLY !== 'windows') {
    await measure('memory', new MemoryStore(), 1);
    await measure('memory, validation off', new MemoryStore({ validate: false }), 1);
  }
  const redis = new Redis(REDIS_URL, { enableAutoPipelining: AUTOPIPELINE });
  if (process.env.BENCH_ONLY === 'windows') {
    try {
      await windowCosts(redis);
    } finally {
      await redis.quit();
    }
    return;
  }
  const store = new RedisStore({
    redis,
    prefix: `bench-${randomBytes(4).toString('hex')}`,
    validate: VALIDATE,
  });
  try {
    await measure(
      `redis, one connection${AUTOPIPELINE ? ', auto-pipelined' : ''}${VALIDATE ? '' : ', validation off'}`,
      store,
      IN_FLIGHT,
      redis,
    );
    await windowCosts(redis);
  } finally {
    await purgeStore(redis, store.keys.prefix);
    await redis.quit();
  }
  if (!ONLY_REDIS) await exactLimitDemo();
}

await main();
