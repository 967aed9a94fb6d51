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
 * Env: CG_REDIS_URL (redis://127.0.0.1:6392), CG_DIR (/tmp/fairway-cg), BENCH_N (2000: 100 flows
 * of 20 queued requests; valgrind slows Redis about 50-fold).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { type QueuedRequest, RedisStore } from '../src/index.ts';

const PID = process.argv[2];
if (PID === undefined || !/^\d+$/.test(PID)) {
  console.error('usage: store-instructions.bench.ts <pid of redis-server running under callgrind>');
  process.exit(2);
}
const N = Number(process.env.BENCH_N ?? 2000);
const DIR = process.env.CG_DIR ?? '/tmp/fairway-cg';
const FLOWS = 100;
const IN_FLIGHT = 64;
const replicas = [{ id: 'r1', tokenCapacity: 1e12, seqCapacity: 1e9 }];

function req(i: number): QueuedRequest {
  return {
    id: `q${i}`,
    pool: 'p',
    band: 0,
    flow: `f${i % FLOWS}`,
    score: i,
    arrivalMs: i,
    reserveTokens: 300,
    dispatchCost: 100 + (i % 7),
    owner: 'bench',
    payload: '{"model":"m"}',
  };
}

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
  for (const f of readdirSync(DIR).filter((x) => x.startsWith(`cg.${PID}.`))) {
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
  const phases: [string, number, (i: number) => Promise<unknown>][] = [
    [
      'admit',
      N,
      (i) => store.admit({ req: req(i), nowMs: i, lift: 'vtc', limits: [], overloaded: false, tenant: 't' }),
    ],
    ['dispatch', N / 2, (i) => store.dispatch({ ...dispatch, nowMs: i })],
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
  ];
  await store.charge([{ id: 'warm-up', amount: 1 }]); // loads the library before counting
  dump('start');
  console.log(`redis instructions per operation (callgrind, N=${N}, ${FLOWS} flows, ${IN_FLIGHT} in flight)`);
  for (const [i, [name, n, op]] of phases.entries()) {
    await run(n, op);
    const total = dump(`phase${i}`);
    console.log(`  ${name.padEnd(26)} ${(total / n / 1000).toFixed(1).padStart(8)} k instructions/op`);
  }
  await redis.quit();
}

await main();
