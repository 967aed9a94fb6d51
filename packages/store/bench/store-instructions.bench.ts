/**
 * Redis instructions per store operation, counted by callgrind: a figure that does not move with
 * other load on the machine (ops/s and CPU µs do, a lot, on a shared 2-core box). Runs the same
 * operations as bench:store on a Redis started under valgrind and dumps callgrind's counter
 * between phases; every instruction the server ran in a phase (network, parsing, Lua, commands)
 * counts, divided by the phase's operations.
 *
 *   mkdir -p /tmp/fairway-cg && valgrind --tool=callgrind --dump-instr=no \
 *     --callgrind-out-file=/tmp/fairway-cg/cg.%p redis-server --port 6392 --save '' &
 *   tsx packages/store/bench/store-instructions.bench.ts <redis-server pid>
 *
 * Ends with the window-limit calls of window-scenarios.ts (CG_ONLY=windows: only those).
 *
 * `--toggle-collect=fcallCommand` on valgrind's command line counts only the FCALLs (no event loop,
 * parsing or server cron).
 *
 * Env: CG_REDIS_URL (redis://127.0.0.1:6392), CG_DIR (/tmp/fairway-cg), BENCH_N (2000: 100 flows
 * of 20 queued requests; valgrind slows Redis about 50-fold).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { RedisStore } from '../src/index.ts';
import { benchRequest, FLOWS } from './bench-requests.ts';
import { windowScenarios } from './window-scenarios.ts';

const PID = process.argv[2];
if (PID === undefined || !/^\d+$/.test(PID)) {
  console.error('usage: store-instructions.bench.ts <pid of redis-server running under callgrind>');
  process.exit(2);
}
const N = Number(process.env.BENCH_N ?? 2000);
const DIR = process.env.CG_DIR ?? '/tmp/fairway-cg';
const IN_FLIGHT = 64;
const replicas = [{ id: 'r1', tokenCapacity: 1e12, seqCapacity: 1e9 }];

async function run(n: number, op: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  async function lane(): Promise<void> {
    while (next < n) await op(next++);
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
}

/** Makes callgrind write the counts since the last dump, tagged; returns their total. */
function dump(tag: string): number {
  execFileSync('callgrind_control', ['-d', tag, PID as string], { stdio: 'ignore' });
  // Newest part first: a second run against the same server dumps the same tags again.
  const parts = readdirSync(DIR)
    .filter((x) => x.startsWith(`cg.${PID}.`))
    .sort((a, b) => Number(b.slice(b.lastIndexOf('.') + 1)) - Number(a.slice(a.lastIndexOf('.') + 1)));
  for (const f of parts) {
    const text = readFileSync(join(DIR, f), 'utf8');
    if (text.includes(`Trigger: dump ${tag}\n`)) return Number(/^(?:summary|totals): (\d+)/m.exec(text)?.[1]);
  }
  throw new Error(`no callgrind dump tagged ${tag} in ${DIR}`);
}

async function main(): Promise<void> {
  const redis = new Redis(process.env.CG_REDIS_URL ?? 'redis://127.0.0.1:6392');
  const store = new RedisStore({ redis, prefix: `cg-${process.pid}-${Date.now()}` });
  const dispatch = {
    pool: 'p',
    bands: [0],
    ordering: 'fair' as const,
    picker: 'b',
    replicas,
    fit: 'first' as const,
  };
  let previous: string | undefined;
  const admitIn = (i: number, pool = 'w') => ({
    req: { ...benchRequest(i), id: `${pool}${i}`, pool },
    nowMs: i,
    lift: 'vtc' as const,
    limits: [],
    overloaded: false,
    tenant: 't',
  });
  // As the dispatcher admits every request: with a usage account (its API key's, no price set).
  const account = { key: 'sha256:k', model: 'm', day: '2026-11-25', month: '2026-11' };
  let pending: { id: string; amount: number }[] = [];
  const coalesced = async (id: string | undefined): Promise<void> => {
    if (id !== undefined) pending.push({ id, amount: 2 });
    if (pending.length < 16) return;
    const items = pending;
    pending = [];
    await store.charge(items);
  };
  const queue = async (from: number, to: number): Promise<void> => {
    for (let i = from; i < to; i++) await store.admit(admitIn(i));
  };
  const phases: [string, number, (i: number) => Promise<unknown>, (() => Promise<void>)?][] = [
    [
      'admit',
      N,
      (i) =>
        store.admit({
          req: benchRequest(i),
          nowMs: i,
          lift: 'vtc',
          limits: [],
          overloaded: false,
          tenant: 't',
        }),
    ],
    ['dispatch', N / 2, (i) => store.dispatch({ ...dispatch, nowMs: i })],
    [
      'dispatch+charge',
      N / 4,
      async (i) => {
        const d = await store.dispatch({ ...dispatch, nowMs: i });
        if (d.kind === 'dispatched') await store.charge([{ id: d.req.id, amount: 2 }]);
      },
    ],
    [
      'dispatch+charge, one call',
      N / 4,
      async (i) => {
        const charges = previous === undefined ? [] : [{ id: previous, amount: 2 }];
        const d = await store.dispatch({ ...dispatch, nowMs: i, charges });
        if (d.kind === 'dispatched') previous = d.req.id;
      },
    ],
    ['charge', N, (i) => store.charge([{ id: `q${i}`, amount: 2 }])],
    [
      'charge x16',
      N / 16,
      (b) => store.charge(Array.from({ length: 16 }, (_, k) => ({ id: `q${b * 16 + k}`, amount: 1 }))),
    ],
    [
      'settle',
      N,
      (i) =>
        store.settle({ id: `q${i}`, nowMs: N + i, finalCost: 300, actualTokens: 350, outputTokens: 100 }),
    ],
    // The request path's fused calls and coalesced charges, as in bench:store, on a pool of their
    // own: requests arrive while a replica has room (the pool is empty), then completions
    // dispatch what queued meanwhile.
    [
      'admit+dispatch, one call',
      N / 2,
      async (i) => {
        const r = await store.admitAndDispatch({
          admit: admitIn(i),
          dispatch: { ...dispatch, pool: 'w', nowMs: i },
        });
        await coalesced(r.dispatch?.kind === 'dispatched' ? r.dispatch.req.id : undefined);
      },
    ],
    [
      'settle+dispatch, one call',
      N / 2,
      async (i) => {
        const r = await store.settleAndDispatch({
          settle: { id: `w${i}`, nowMs: N + i, finalCost: 300, actualTokens: 350, outputTokens: 100 },
          dispatch: { ...dispatch, pool: 'w', nowMs: N + i },
        });
        await coalesced(r.dispatch.kind === 'dispatched' ? r.dispatch.req.id : undefined);
      },
      // Uncounted: queues the requests these completions dispatch.
      () => queue(N / 2, N),
    ],
    [
      'dispatch + coalesced charge',
      N / 2,
      async (i) => {
        const d = await store.dispatch({ ...dispatch, pool: 'w', nowMs: i });
        await coalesced(d.kind === 'dispatched' ? d.req.id : undefined);
      },
      () => queue(N, N + N / 2),
    ],
    // The closed loop's completion: nothing queued, so the dispatch finds nothing.
    [
      'settle+dispatch, empty',
      N / 2,
      (i) =>
        store.settleAndDispatch({
          settle: { id: `e${i}`, nowMs: N + i, finalCost: 300, actualTokens: 350, outputTokens: 100 },
          dispatch: { ...dispatch, pool: 'e', nowMs: N + i },
        }),
      // Uncounted: requests running in a pool with nothing queued, as admit+dispatch leaves them.
      async () => {
        for (let i = 0; i < N / 2; i++)
          await store.admitAndDispatch({
            admit: admitIn(i, 'e'),
            dispatch: { ...dispatch, pool: 'e', nowMs: i },
          });
      },
    ],
    // The two calls of the dispatcher's closed loop, each request with a usage account.
    [
      'admit+dispatch, account',
      N / 2,
      (i) =>
        store.admitAndDispatch({
          admit: { ...admitIn(i, 'u'), usage: account },
          dispatch: { ...dispatch, pool: 'u', nowMs: i },
        }),
    ],
    [
      'settle+dispatch, account',
      N / 2,
      (i) =>
        store.settleAndDispatch({
          settle: { id: `u${i}`, nowMs: N + i, finalCost: 300, actualTokens: 350, outputTokens: 100 },
          dispatch: { ...dispatch, pool: 'u', nowMs: N + i },
        }),
    ],
  ];
  await store.charge([{ id: 'warm-up', amount: 1 }]); // loads the library before counting
  dump('start');
  console.log(`redis instructions per operation (callgrind, N=${N}, ${FLOWS} flows, ${IN_FLIGHT} in flight)`);
  for (const [i, [name, n, op, setup]] of process.env.CG_ONLY === 'windows' ? [] : phases.entries()) {
    if (setup !== undefined) {
      await setup();
      dump(`setup${i}`);
    }
    await run(n, op);
    const total = dump(`phase${i}`);
    console.log(`  ${name.padEnd(26)} ${(total / n / 1000).toFixed(1).padStart(8)} k instructions/op`);
  }
  // Window limits (window-scenarios.ts), each on a prefix of its own.
  const windows = new RedisStore({ redis, prefix: `cg-win-${process.pid}-${Date.now()}` });
  const calls = Math.min(N, 500);
  console.log(`window limits (${calls} calls each)`);
  for (const [i, { label, setup, op }] of windowScenarios(windows, calls, IN_FLIGHT).entries()) {
    await setup();
    dump(`wsetup${i}`);
    await run(calls, op);
    const total = dump(`wphase${i}`);
    console.log(`  ${label.padEnd(48)} ${(total / calls / 1000).toFixed(1).padStart(8)} k instructions/op`);
  }
  await redis.quit();
}

await main();
