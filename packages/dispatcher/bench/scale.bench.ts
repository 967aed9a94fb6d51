/**
 * How dispatchers scale out: N stateless `fairway serve` processes sharing one store, as operators
 * run them. Real processes only: N dispatchers (the CLI, default settings — access log on, log
 * level info — given only REDIS_URL or REDIS_CLUSTER, NATS_URL, a config file and ports), E
 * `fairway engine-sim` processes whose node agents register over NATS (`--speed 1000`, so the
 * engines are never the bottleneck), and a redis-server (or, with `--cluster`, a three-primary
 * Redis Cluster) and a nats-server this bench starts for itself on free ports, so that Redis's
 * `INFO cpu` and `INFO commandstats` count this bench's work only. Load comes from one
 * load-generator.ts process per dispatcher (undici), each keeping `--connections` requests in
 * flight against its dispatcher (closed loop), with the requests spread over four tenants' keys.
 *
 * For each N in `--dispatchers` (the dispatchers are restarted for each) it prints total req/s,
 * scaling efficiency (req/s ÷ (N × the first N's req/s per dispatcher); with `--dispatchers 1,…`
 * that is the N=1 figure), p50/p99 latency, the dispatchers' CPU per request (user + system from
 * /proc/<pid>/stat deltas, summed over the N), Redis's CPU per request (`INFO cpu` delta, summed
 * over the cluster's nodes) and Redis's top 5 commands by time (`CONFIG RESETSTAT` before each
 * phase; calls per request and µs per call). The engines', generators' and the rest of the
 * machine's CPU are printed beside them: on a small machine every process shares the same cores.
 *
 * `--rate R` adds an open-loop phase: every dispatcher offered R req/s at once.
 * `--placement <name>` sets the config's `policy.placement` (default: the config's default,
 * least-kv); under `aladdin` the dispatchers also send each other their running requests.
 * `--abuse` adds a phase per N with one more tenant (`limits.rpm: 600`) flooding one dispatcher at
 * 10× its limit beside the closed-loop load, after a lead-in long enough to use up its 60 s window
 * (so it is refused throughout the measured phase), then the closed loop alone again, and compares
 * the others' served req/s with the flood against the mean of the closed loop before and after it;
 * the flood alone after that gives what a refused request costs its dispatcher and Redis.
 *
 * Every process it starts is stopped at the end, on an error and on SIGINT/SIGTERM.
 *
 * Usage: npm run bench:scale [-- --dispatchers 1,2,4 --replicas 6 --duration 5 --connections 32
 *        --rate 300 --abuse --cluster --warmup 1 --placement aladdin --json --out scale.json]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import {
  freePort,
  type RedisCluster,
  startNatsServer,
  startRedisCluster,
  startRedisServer,
  type TestServer,
} from '@fairway/testkit';
import { Redis } from 'ioredis';
import type { PhaseReport, PhaseRequest } from './load-generator.ts';
import { Generator } from './load-generator-process.ts';
import { cpuMs, machineBusyMs, pct } from './process-stats.ts';

const { values: args } = parseArgs({
  options: {
    dispatchers: { type: 'string', default: '1,2,4' },
    replicas: { type: 'string', default: '6' },
    duration: { type: 'string', default: '5' },
    connections: { type: 'string', default: '32' },
    rate: { type: 'string' },
    abuse: { type: 'boolean', default: false },
    cluster: { type: 'boolean', default: false },
    warmup: { type: 'string', default: '1' },
    placement: { type: 'string' },
    json: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});

/** A flag's value as a positive whole number, or an error naming the flag. */
function wholeFlag(name: string, value: string | undefined): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`--${name}: must be a whole number ≥ 1 (got "${value}")`);
  return n;
}

const DISPATCHERS = (args.dispatchers ?? '').split(',').map((x) => wholeFlag('dispatchers', x.trim()));
const REPLICAS = wholeFlag('replicas', args.replicas);
const DURATION_MS = Number(args.duration) * 1000;
const CONNECTIONS = wholeFlag('connections', args.connections);
const RATE = args.rate === undefined ? undefined : Number(args.rate);
const WARMUP_MS = Number(args.warmup) * 1000;
if (!(DURATION_MS > 0))
  throw new Error(`--duration: must be a number of seconds > 0 (got "${args.duration}")`);
if (RATE !== undefined && !(RATE > 0)) throw new Error(`--rate: must be req/s > 0 (got "${args.rate}")`);
if (!(WARMUP_MS >= 0)) throw new Error(`--warmup: must be seconds ≥ 0 (got "${args.warmup}")`);

const FAIRWAY_BIN = resolve(import.meta.dirname, '..', '..', 'cli', 'bin', 'fairway.js');
/** With a cluster, one pool per primary, each in a slot group of its own, so the load spreads over them. */
const POOLS = args.cluster ? 3 : 1;
const poolId = (i: number): string => `bench-${i}`;
const modelOf = (i: number): string => `bench-model-${i}`;
const TENANTS = ['t1', 't2', 't3', 't4'];
const keyOf = (t: string): string => `sk-bench-${t}-key`;
/** The flooding tenant's limit, and how much faster than it the flood is sent. */
const FLOOD_RPM = 600;
const FLOOD_FACTOR = 10;
const FLOOD_RATE = (FLOOD_RPM / 60) * FLOOD_FACTOR;
/** The flood's rate when it runs alone, its window full: enough refusals to weigh their CPU. */
const FLOOD_ALONE_RATE = 1000;
/** Long enough for the flood to use up its sliding 60 s window before the measured phase. */
const FLOOD_LEAD_MS = (60_000 * FLOOD_RPM) / (FLOOD_RPM * FLOOD_FACTOR);
/** One flooding tenant per N, so one run's window never carries over into the next. */
const floodTenant = (n: number): string => `flood-${n}`;
/** Tokens each request generates (engine-sim's `fairway_output_tokens` hook). */
const OUTPUT_TOKENS = 2;

/** Progress goes to stderr under `--json`, so stdout carries the JSON alone. */
const progress = (line: string): void => {
  if (args.json) process.stderr.write(`${line}\n`);
  else console.log(line);
};
/** The report, printed as it is made and kept for `--out`. */
const report: string[] = [];
const say = (line = ''): void => {
  report.push(line);
  if (!args.json) console.log(line);
};

// ---------------------------------------------------------------------------------------------
// Processes: every child is tracked until it exits, so cleanup can stop whatever is still running.

const children = new Set<ChildProcess>();
const generators: Generator[] = [];
const servers: TestServer[] = [];
let cluster: RedisCluster | undefined;
/** The bench's own connections to Redis (one per node), for INFO and CONFIG RESETSTAT. */
let redisNodes: Redis[] = [];
let workDir: string | undefined;

/** A fairway process (dispatcher or engine-sim) with its output in a log file. */
interface FairwayProc {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  /** The URL of its "listening on" line. */
  readonly url: string;
  readonly logPath: string;
}

/**
 * The environment children start from: this process's, less anything that would configure
 * fairway or node behind the bench's back (the bench gives each process what it needs).
 */
function cleanEnv(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).filter(
      (e): e is [string, string] =>
        e[1] !== undefined && !/^(FAIRWAY_|REDIS_|NATS_|OTEL_)/.test(e[0]) && e[0] !== 'NODE_OPTIONS',
    ),
  );
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  await new Promise<void>((r) => {
    const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
    child.once('exit', () => {
      clearTimeout(t);
      r();
    });
    child.kill('SIGTERM');
  });
}

/**
 * Starts `fairway <argv>` with its stdout and stderr in `logPath` (written by the kernel: reading
 * the access log would cost this process CPU on the cores under test) and resolves once its log
 * says "listening on <url>".
 */
async function startFairway(
  name: string,
  argv: readonly string[],
  env: Readonly<Record<string, string>>,
  logPath: string,
): Promise<FairwayProc> {
  const fd = openSync(logPath, 'a');
  const child = spawn(process.execPath, [FAIRWAY_BIN, ...argv], {
    env: { ...cleanEnv(), ...env },
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  children.add(child);
  child.once('exit', () => children.delete(child));
  // Generous: on a small, busy machine dozens of node processes starting at once take a while.
  const deadline = Date.now() + 180_000;
  for (;;) {
    const log = readFileSync(logPath, 'utf8');
    const m = /listening on (\S+)/.exec(log);
    if (m !== null && child.pid !== undefined)
      return { name, child, pid: child.pid, url: m[1] as string, logPath };
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`${name} exited (${child.signalCode ?? child.exitCode}) before listening:\n${log}`);
    if (Date.now() > deadline) throw new Error(`${name} did not listen within 180 s:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

let cleaning: Promise<void> | undefined;
/** Stops every process the bench started (idempotent): generators, fairway processes, servers. */
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await Promise.all([...generators.map((g) => g.stop()), ...[...children].map((c) => stopChild(c))]);
    for (const r of redisNodes) r.disconnect();
    await cluster?.stop();
    await Promise.all(servers.map((s) => s.stop()));
    if (workDir !== undefined) rmSync(workDir, { recursive: true, force: true });
  })();
  return cleaning;
}

// `on`, not `once`: a Ctrl-C reaches this process twice (from the terminal and relayed by tsx), and
// a second SIGINT with no handler would end it before its children are stopped.
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => {
    if (cleaning !== undefined) return;
    progress(`\n${signal}: stopping every process the bench started…`);
    void cleanup().finally(() => process.exit(130));
  });

// ---------------------------------------------------------------------------------------------
// Redis: INFO cpu and commandstats, summed over every node (one, or the cluster's).

/**
 * The bench's connection to one Redis node. Errors after cleanup began are expected (a Ctrl-C stops
 * the servers too) and not reported; before, they fail the command that meets them.
 */
function benchRedis(url: string): Redis {
  const r = new Redis(url, { maxRetriesPerRequest: 2 });
  r.on('error', (err: Error) => {
    if (cleaning === undefined) progress(`redis ${url}: ${err.message}`);
  });
  return r;
}

/** Redis's CPU in the kernel (used_cpu_sys) and in Redis itself (used_cpu_user), ms, summed over `nodes`. */
async function redisCpu(nodes: readonly Redis[]): Promise<{ sys: number; user: number }> {
  let sys = 0;
  let user = 0;
  for (const r of nodes) {
    const info = await r.info('cpu');
    const field = (k: string): number => Number(new RegExp(`^${k}:([\\d.]+)`, 'm').exec(info)?.[1] ?? 0);
    sys += field('used_cpu_sys') * 1000;
    user += field('used_cpu_user') * 1000;
  }
  return { sys, user };
}

/** Redis's CPU (used_cpu_sys + used_cpu_user), ms, summed over `nodes`. */
async function redisCpuMs(nodes: readonly Redis[]): Promise<number> {
  const { sys, user } = await redisCpu(nodes);
  return sys + user;
}

/** One command's total over a phase, summed over the nodes. */
interface CommandStat {
  readonly command: string;
  readonly calls: number;
  readonly usec: number;
}

/** `INFO commandstats` summed over `nodes`, less the bench's own INFO and CONFIG calls. */
async function commandStats(nodes: readonly Redis[]): Promise<CommandStat[]> {
  const sum = new Map<string, { calls: number; usec: number }>();
  for (const r of nodes) {
    const info = await r.info('commandstats');
    for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
      const command = m[1] as string;
      if (command === 'info' || command.startsWith('config')) continue;
      const s = sum.get(command) ?? { calls: 0, usec: 0 };
      s.calls += Number(m[2]);
      s.usec += Number(m[3]);
      sum.set(command, s);
    }
  }
  return [...sum].map(([command, s]) => ({ command, ...s })).sort((a, b) => b.usec - a.usec);
}

// ---------------------------------------------------------------------------------------------
// Phases.

/** What one generator is asked to do in a phase, and whether its requests are the flood. */
interface Load {
  readonly gen: Generator;
  readonly request: Omit<PhaseRequest, 'kind'>;
  readonly flood: boolean;
}

/** One phase's figures, as printed and as `--json` writes them. */
interface PhaseResult {
  readonly phase: 'closed' | 'open' | 'abuse';
  readonly dispatchers: number;
  readonly durationS: number;
  /** The well-behaved tenants' requests (the flood's are apart). */
  readonly sent: number;
  readonly completed: number;
  readonly errors: number;
  readonly statuses: Record<string, number>;
  readonly firstError?: string;
  /**
   * Completed well-behaved requests per second, per dispatcher (its generator's completions over
   * its first send to last answer) and their sum.
   */
  readonly reqPerS: number;
  readonly reqPerSByDispatcher: number[];
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** The flood's outcome (`--abuse`). */
  readonly flood?: { readonly sent: number; readonly statuses: Record<string, number> };
  /** Every completed request (the flood's 200s too): the denominator of the CPU figures. */
  readonly served: number;
  /** CPU per served request, ms: the N dispatchers together, Redis, the engines, the generators. */
  readonly cpuMsPerRequest: {
    readonly dispatchers: number;
    readonly redis: number;
    readonly engines: number;
    readonly generators: number;
    /** The rest of the machine: NATS, the kernel, this process, other people's work. */
    readonly other: number;
  };
  /** Share of Redis's CPU spent in the kernel (sockets), the rest in Redis's own code. */
  readonly redisSysShare: number;
  /** Bytes the dispatchers wrote to stdout/stderr (the access log) per served request. */
  readonly logBytesPerRequest: number;
  /** Share of the machine's cores busy over the phase. */
  readonly machineBusy: number;
  /** Redis's top 5 commands by total time. */
  readonly topCommands: {
    readonly command: string;
    readonly callsPerRequest: number;
    readonly usecPerCall: number;
    readonly usecShare: number;
  }[];
  /** 1, 5 and 15 minute load averages at the phase's end. */
  readonly load: number[];
}

interface Fleet {
  readonly dispatchers: readonly FairwayProc[];
  readonly engines: readonly FairwayProc[];
  readonly redisNodes: readonly Redis[];
}

/**
 * Runs every load at once and measures, from just before to just after: the processes' CPU, Redis's
 * CPU and command stats (reset first) and the machine's busy time.
 */
async function measure(
  phase: PhaseResult['phase'],
  fleet: Fleet,
  loads: readonly Load[],
  durationMs: number,
): Promise<PhaseResult> {
  const pidsOf = (ps: readonly FairwayProc[]): (number | undefined)[] => ps.map((p) => p.pid);
  const groups = {
    dispatchers: pidsOf(fleet.dispatchers),
    engines: pidsOf(fleet.engines),
    generators: loads.map((l) => l.gen.pid),
  };
  const cpuOf = (pids: readonly (number | undefined)[]): number =>
    pids.reduce<number>((a, p) => a + cpuMs(p), 0);
  const logBytes = (): number => fleet.dispatchers.reduce((a, d) => a + statSync(d.logPath).size, 0);
  await Promise.all(fleet.redisNodes.map((r) => r.config('RESETSTAT')));
  const logBefore = logBytes();
  const before = {
    dispatchers: cpuOf(groups.dispatchers),
    engines: cpuOf(groups.engines),
    generators: cpuOf(groups.generators),
    redis: await redisCpu(fleet.redisNodes),
    machine: machineBusyMs(),
  };
  const started = performance.now();
  const reports = await Promise.all(loads.map((l) => l.gen.run(l.request)));
  const wallMs = performance.now() - started;
  const delta = {
    dispatchers: cpuOf(groups.dispatchers) - before.dispatchers,
    engines: cpuOf(groups.engines) - before.engines,
    generators: cpuOf(groups.generators) - before.generators,
    redis: await redisCpu(fleet.redisNodes).then((c) => ({
      sys: c.sys - before.redis.sys,
      user: c.user - before.redis.user,
    })),
    machine: machineBusyMs() - before.machine,
  };
  const stats = await commandStats(fleet.redisNodes);
  const logged = logBytes() - logBefore;

  const well = reports.filter((_, i) => !loads[i]?.flood);
  const floods = reports.filter((_, i) => loads[i]?.flood);
  const sumOf = (rs: readonly PhaseReport[], f: (r: PhaseReport) => number): number =>
    rs.reduce((a, r) => a + f(r), 0);
  const statusesOf = (rs: readonly PhaseReport[]): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const r of rs) for (const [s, n] of Object.entries(r.statuses)) out[s] = (out[s] ?? 0) + n;
    return out;
  };
  const latencies = well.flatMap((r) => r.latencies);
  const completed = sumOf(well, (r) => r.completed);
  const served = completed + sumOf(floods, (r) => r.completed);
  const per = (ms: number): number => ms / Math.max(1, served);
  const ours = delta.dispatchers + delta.engines + delta.generators + delta.redis.sys + delta.redis.user;
  const totalUsec = stats.reduce((a, s) => a + s.usec, 0);
  // Over each generator's first send to last answer: a closed loop's last requests end after its duration.
  const byDispatcher = well.map((r) => (r.completed * 1000) / Math.max(durationMs, r.elapsedMs));
  const firstError = well.find((r) => r.firstError !== undefined)?.firstError;
  return {
    phase,
    dispatchers: fleet.dispatchers.length,
    durationS: durationMs / 1000,
    sent: sumOf(well, (r) => r.sent),
    completed,
    errors: sumOf(well, (r) => r.errors),
    statuses: statusesOf(well),
    ...(firstError !== undefined ? { firstError } : {}),
    reqPerS: byDispatcher.reduce((a, x) => a + x, 0),
    reqPerSByDispatcher: byDispatcher,
    p50Ms: pct(latencies, 50),
    p99Ms: pct(latencies, 99),
    ...(floods.length > 0
      ? { flood: { sent: sumOf(floods, (r) => r.sent), statuses: statusesOf(floods) } }
      : {}),
    served,
    cpuMsPerRequest: {
      dispatchers: per(delta.dispatchers),
      redis: per(delta.redis.sys + delta.redis.user),
      engines: per(delta.engines),
      generators: per(delta.generators),
      other: per(Math.max(0, delta.machine - ours)),
    },
    redisSysShare: delta.redis.sys / Math.max(1e-9, delta.redis.sys + delta.redis.user),
    logBytesPerRequest: logged / Math.max(1, served),
    machineBusy: delta.machine / wallMs / cpus().length,
    topCommands: stats.slice(0, 5).map((s) => ({
      command: s.command,
      callsPerRequest: s.calls / Math.max(1, served),
      usecPerCall: s.usec / Math.max(1, s.calls),
      usecShare: s.usec / Math.max(1, totalUsec),
    })),
    load: loadavg(),
  };
}

/** Request bodies, used in turn: one per pool's model, each generating `OUTPUT_TOKENS`. */
function bodies(pools: readonly number[]): string[] {
  return pools.map((p) =>
    JSON.stringify({
      model: modelOf(p),
      messages: [{ role: 'user', content: `Say something short about pool ${p}.` }],
      max_tokens: OUTPUT_TOKENS + 4,
      fairway_output_tokens: OUTPUT_TOKENS,
    }),
  );
}

const headersOf = (tenant: string): Record<string, string> => ({
  'content-type': 'application/json',
  authorization: `Bearer ${keyOf(tenant)}`,
});

/** The closed-loop request against one dispatcher: `CONNECTIONS` clients, every tenant's key in turn. */
function closedRequest(url: string, durationMs: number): Omit<PhaseRequest, 'kind'> {
  return {
    url,
    path: '/v1/chat/completions',
    headers: headersOf(TENANTS[0] as string),
    headerSets: TENANTS.map(headersOf),
    bodies: bodies(Array.from({ length: POOLS }, (_, i) => i)),
    rate: 0,
    durationMs,
    stream: false,
    connections: CONNECTIONS,
    drainMs: 10_000,
    concurrency: CONNECTIONS,
  };
}

/** The open-loop request against one dispatcher at `rate` req/s. */
function openRequest(url: string, rate: number, durationMs: number): Omit<PhaseRequest, 'kind'> {
  const { concurrency: _closed, ...rest } = closedRequest(url, durationMs);
  return { ...rest, rate, connections: 256 };
}

/** The flood: the flooding tenant at `FLOOD_RATE` req/s on the first pool. */
function floodRequest(
  url: string,
  n: number,
  durationMs: number,
  rate = FLOOD_RATE,
): Omit<PhaseRequest, 'kind'> {
  return {
    url,
    path: '/v1/chat/completions',
    headers: headersOf(floodTenant(n)),
    bodies: bodies([0]),
    rate,
    durationMs,
    stream: false,
    connections: 64,
    drainMs: 10_000,
  };
}

/** The generator for slot `i`, started on first use and kept for the next N. */
async function generatorAt(i: number): Promise<Generator> {
  while (generators.length <= i) generators.push(new Generator());
  const g = generators[i] as Generator;
  await g.ready;
  return g;
}

// ---------------------------------------------------------------------------------------------
// The fleet.

/** Distinct replicas a dispatcher's operator `/metrics` reports a KV gauge for. */
async function replicasSeen(operatorUrl: string): Promise<number> {
  try {
    const text = await (await fetch(`${operatorUrl}/metrics`)).text();
    const ids = new Set<string>();
    for (const m of text.matchAll(/^fairway_replica_kv_usage_ratio\{[^}]*replica="([^"]+)"/gm))
      ids.add(m[1] as string);
    return ids.size;
  } catch {
    return 0;
  }
}

/** Starts `n` dispatchers and waits until each sees every engine. */
async function startDispatchers(
  n: number,
  configPath: string,
  storeEnv: Readonly<Record<string, string>>,
  natsUrl: string,
  dir: string,
): Promise<FairwayProc[]> {
  const started = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const [port, operatorPort] = [await freePort(), await freePort()];
      const p = await startFairway(
        `dispatcher ${i + 1}/${n}`,
        ['serve', '--config', configPath, '--port', String(port), '--operator-port', String(operatorPort)],
        { ...storeEnv, NATS_URL: natsUrl },
        join(dir, `dispatcher-n${n}-${i + 1}.log`),
      );
      return { p, operatorUrl: `http://127.0.0.1:${operatorPort}` };
    }),
  );
  const deadline = Date.now() + 60_000;
  for (const { p, operatorUrl } of started)
    for (;;) {
      const seen = await replicasSeen(operatorUrl);
      if (seen >= REPLICAS) break;
      if (Date.now() > deadline) throw new Error(`${p.name} sees ${seen} of ${REPLICAS} engines after 60 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  return started.map((s) => s.p);
}

/** Starts the engine-sims, two per core at a time (each start loads the CLI through tsx: CPU-heavy). */
async function startEngines(natsUrl: string, dir: string): Promise<FairwayProc[]> {
  const engines: FairwayProc[] = [];
  const batch = 2 * cpus().length;
  for (let first = 0; first < REPLICAS; first += batch) {
    const started = await Promise.all(
      Array.from({ length: Math.min(batch, REPLICAS - first) }, (_, k) => {
        const i = first + k;
        const pool = i % POOLS;
        return startFairway(
          `engine-sim ${i + 1}`,
          [
            'engine-sim',
            ...['--port', '0', '--model', 'llama-2-7b', '--served-model-name', modelOf(pool)],
            ...['--speed', '1000', '--max-num-seqs', '1024', '--log-level', 'warn'],
            ...['--nats-url', natsUrl, '--replica-id', `engine-${i + 1}`, '--pool', poolId(pool)],
          ],
          {},
          join(dir, `engine-${i + 1}.log`),
        );
      }),
    );
    engines.push(...started);
    progress(`  ${engines.length}/${REPLICAS} engine-sims listening`);
  }
  return engines;
}

function writeConfig(path: string): void {
  const pools = Array.from({ length: POOLS }, (_, i) => i);
  writeFileSync(
    path,
    JSON.stringify({
      tenants: [
        ...TENANTS.map((t) => ({ id: t, keys: [{ key: keyOf(t) }] })),
        ...(args.abuse
          ? DISPATCHERS.map((n) => ({
              id: floodTenant(n),
              keys: [{ key: keyOf(floodTenant(n)) }],
              limits: { rpm: FLOOD_RPM },
            }))
          : []),
      ],
      pools: pools.map((i) => ({ id: poolId(i), model: modelOf(i), maxQueued: 100_000 })),
      defaultLimits: { maxQueued: 100_000 },
      ...(args.placement === undefined ? {} : { policy: { placement: args.placement } }),
      // On a cluster, each pool's state in a hash slot of its own (store.slotGroups).
      ...(POOLS > 1
        ? { store: { slotGroups: Object.fromEntries(pools.map((i) => [`g${i}`, [poolId(i)]])) } }
        : {}),
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// Printing.

const f = (x: number, digits = 2): string => (Number.isFinite(x) ? x.toFixed(digits) : '-');
const loadText = (l: readonly number[]): string => l.map((x) => x.toFixed(2)).join(', ');

/** Each dispatcher's CPU with no load, ms per s, by number of dispatchers. */
const idleMsPerS = new Map<number, number>();
/** With `--abuse`: what a refused request of the flood, sent alone, cost, by number of dispatchers. */
const refusalCost = new Map<number, { refused: number; dispatcherMs: number; redisUs: number }>();

function printPhaseTable(title: string, rows: readonly PhaseResult[], base: number | undefined): void {
  say(title);
  say(
    `${'N'.padStart(3)}${'req/s'.padStart(9)}${'per disp'.padStart(10)}${'eff'.padStart(6)}${'p50 ms'.padStart(8)}${'p99 ms'.padStart(8)}` +
      `${'errors'.padStart(8)}   CPU ms/req: ${'disp'.padStart(6)}${'redis'.padStart(7)}${'engines'.padStart(8)}${'gens'.padStart(6)}${'other'.padStart(7)}${'busy'.padStart(6)}${'load1'.padStart(7)}`,
  );
  for (const r of rows) {
    const c = r.cpuMsPerRequest;
    const eff = base === undefined ? Number.NaN : r.reqPerS / (r.dispatchers * base);
    say(
      `${String(r.dispatchers).padStart(3)}${f(r.reqPerS, 0).padStart(9)}${f(r.reqPerS / r.dispatchers, 0).padStart(10)}` +
        `${f(eff).padStart(6)}${f(r.p50Ms, 1).padStart(8)}${f(r.p99Ms, 1).padStart(8)}${String(r.errors).padStart(8)}` +
        `               ${f(c.dispatchers).padStart(6)}${f(c.redis, 3).padStart(7)}${f(c.engines).padStart(8)}` +
        `${f(c.generators).padStart(6)}${f(c.other).padStart(7)}${`${(r.machineBusy * 100).toFixed(0)}%`.padStart(6)}` +
        `${f(r.load[0] ?? Number.NaN).padStart(7)}`,
    );
    if (r.errors > 0) say(`      errors: ${JSON.stringify(r.statuses)}; first: ${r.firstError}`);
  }
  for (const r of rows) {
    const idle = idleMsPerS.get(r.dispatchers) ?? 0;
    const net = r.cpuMsPerRequest.dispatchers - (idle * r.dispatchers * r.durationS) / Math.max(1, r.served);
    say(
      `  N=${r.dispatchers}: each dispatcher idle uses ${f(idle, 1)} ms CPU per s (heartbeats of ${REPLICAS} engines); ` +
        `dispatcher CPU per request net of it ${f(net, 3)} ms`,
    );
    say(
      `  N=${r.dispatchers}: req/s by dispatcher ${r.reqPerSByDispatcher.map((x) => x.toFixed(0)).join(' / ')}; ` +
        `access log ${r.logBytesPerRequest.toFixed(0)} B/req; Redis CPU ${f(r.cpuMsPerRequest.redis * 1000, 1)} µs/req, ` +
        `${(r.redisSysShare * 100).toFixed(0)}% of it in the kernel; Redis top commands by time (calls/req, µs/call, share):`,
    );
    for (const c of r.topCommands)
      say(
        `      ${c.command.padEnd(14)}${f(c.callsPerRequest).padStart(7)}${f(c.usecPerCall, 1).padStart(9)}${`${(c.usecShare * 100).toFixed(0)}%`.padStart(6)}`,
      );
  }
  say();
}

function printAbuse(
  closed: readonly PhaseResult[],
  abuse: readonly PhaseResult[],
  after: readonly PhaseResult[],
): void {
  say(
    `abuse: tenant flood-N at ${FLOOD_RATE} req/s (${FLOOD_FACTOR}× its rpm ${FLOOD_RPM}) through dispatcher 1, beside the closed loop;` +
      ` measured after ${FLOOD_LEAD_MS / 1000} s of flood (its 60 s window used up); "without" is the mean of the closed loop` +
      ' run before the flood and again after it (each in brackets)',
  );
  say(
    `${'N'.padStart(3)}${'others req/s: without'.padStart(23)}${'(before, after)'.padStart(17)}${'with'.padStart(8)}${'ratio'.padStart(7)}` +
      `${'p99 without'.padStart(13)}${'with'.padStart(8)}   flood: ${'sent'.padStart(6)}   statuses          disp ms/req with flood`,
  );
  const before = (n: number): PhaseResult | undefined => closed.find((x) => x.dispatchers === n);
  for (const a of abuse) {
    const before1 = before(a.dispatchers);
    const again = after.find((x) => x.dispatchers === a.dispatchers);
    const runs = [before1, again].filter((x) => x !== undefined);
    const without = runs.length > 0 ? runs.reduce((a, x) => a + x.reqPerS, 0) / runs.length : Number.NaN;
    const p99Without = runs.length > 0 ? Math.max(...runs.map((x) => x.p99Ms)) : Number.NaN;
    const brackets = `(${f(before1?.reqPerS ?? Number.NaN, 0)}, ${f(again?.reqPerS ?? Number.NaN, 0)})`;
    say(
      `${String(a.dispatchers).padStart(3)}${f(without, 0).padStart(23)}${brackets.padStart(17)}${f(a.reqPerS, 0).padStart(8)}` +
        `${f(a.reqPerS / without).padStart(7)}${f(p99Without, 1).padStart(13)}${f(a.p99Ms, 1).padStart(8)}` +
        `          ${String(a.flood?.sent ?? 0).padStart(6)}   ${JSON.stringify(a.flood?.statuses ?? {}).padEnd(18)}${f(a.cpuMsPerRequest.dispatchers).padStart(6)}`,
    );
  }
  for (const a of abuse) {
    const cost = refusalCost.get(a.dispatchers);
    const served = before(a.dispatchers);
    if (cost === undefined || served === undefined) continue;
    say(
      `  N=${a.dispatchers}: a refused request (the flood alone: ${cost.refused} refused) cost its dispatcher ` +
        `${f(cost.dispatcherMs, 3)} ms of CPU net of idle and Redis ${f(cost.redisUs, 1)} µs; a served one ` +
        `${f(served.cpuMsPerRequest.dispatchers - (idleMsPerS.get(a.dispatchers) ?? 0) / Math.max(1, served.reqPerS / served.dispatchers), 3)} ms and ${f(served.cpuMsPerRequest.redis * 1000, 1)} µs`,
    );
  }
  say();
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'fairway-scale-'));
  workDir = dir;
  const configPath = join(dir, 'fairway.json');
  writeConfig(configPath);
  const cpu = cpus();
  const machine = { cpus: cpu.length, model: cpu[0]?.model ?? 'unknown', loadAtStart: loadavg() };

  progress(`starting ${args.cluster ? 'a Redis Cluster (3 primaries)' : 'redis-server'} and nats-server…`);
  let storeEnv: Record<string, string>;
  if (args.cluster) {
    cluster = await startRedisCluster({ primaries: 3 });
    storeEnv = { REDIS_CLUSTER: cluster.seeds };
    redisNodes = cluster.nodes.map((n) => benchRedis(n.url));
  } else {
    const redis = await startRedisServer();
    servers.push(redis);
    storeEnv = { REDIS_URL: redis.url };
    redisNodes = [benchRedis(redis.url)];
  }
  const nats = await startNatsServer();
  servers.push(nats);
  progress(`starting ${REPLICAS} engine-sims…`);
  const engines = await startEngines(nats.url, dir);
  // What the engine-sims (their agents heartbeating) cost with no load: on a small machine it is
  // taken from the dispatchers.
  const idleBefore = engines.reduce((a, e) => a + cpuMs(e.pid), 0);
  await new Promise((r) => setTimeout(r, 2000));
  const enginesIdle = (engines.reduce((a, e) => a + cpuMs(e.pid), 0) - idleBefore) / 2000;

  say(
    `fairway scale bench: ${cpu.length} × ${machine.model}; load ${loadText(machine.loadAtStart)} (1/5/15 min) at start`,
  );
  say(
    `  dispatchers ${DISPATCHERS.join(',')} (fairway serve, default settings), ${REPLICAS} engine-sims (speed 1000, ` +
      `${POOLS} pool${POOLS > 1 ? 's' : ''}), ${args.cluster ? 'Redis Cluster of 3 primaries' : 'one redis-server'}, one nats-server; ` +
      `${CONNECTIONS} connections per dispatcher, ${DURATION_MS / 1000} s per phase, one load generator per dispatcher`,
  );
  say(`  tenants ${TENANTS.join(', ')} without limits, keys in turn on every connection`);
  say(
    `  the ${REPLICAS} engine-sims idle (agents heartbeating) use ${(enginesIdle * 100).toFixed(0)}% of a core together`,
  );
  say();

  const closed: PhaseResult[] = [];
  const open: PhaseResult[] = [];
  const abuse: PhaseResult[] = [];
  /** With `--abuse`: the closed loop run again after the flood phase. */
  const after: PhaseResult[] = [];
  for (const n of DISPATCHERS) {
    progress(`N=${n}: starting ${n} dispatcher${n > 1 ? 's' : ''}…`);
    const dispatchers = await startDispatchers(n, configPath, storeEnv, nats.url, dir);
    const fleet: Fleet = { dispatchers, engines, redisNodes };
    // What each dispatcher spends with no load (the engines' heartbeats, timers): a cost per
    // second that grows with the fleet, not with the requests.
    const idleFrom = dispatchers.reduce((a, d) => a + cpuMs(d.pid), 0);
    await new Promise((r) => setTimeout(r, 2000));
    idleMsPerS.set(n, (dispatchers.reduce((a, d) => a + cpuMs(d.pid), 0) - idleFrom) / 2 / n);
    const gens = await Promise.all(dispatchers.map((_, i) => generatorAt(i)));
    const closedLoads = (ms: number): Load[] =>
      dispatchers.map((d, i) => ({
        gen: gens[i] as Generator,
        request: closedRequest(d.url, ms),
        flood: false,
      }));
    if (WARMUP_MS > 0) {
      progress(`N=${n}: warm-up ${WARMUP_MS / 1000} s`);
      await measure('closed', fleet, closedLoads(WARMUP_MS), WARMUP_MS);
    }
    progress(`N=${n}: closed loop ${DURATION_MS / 1000} s`);
    closed.push(await measure('closed', fleet, closedLoads(DURATION_MS), DURATION_MS));
    if (RATE !== undefined) {
      progress(`N=${n}: open loop ${RATE} req/s per dispatcher, ${DURATION_MS / 1000} s`);
      const loads = dispatchers.map((d, i) => ({
        gen: gens[i] as Generator,
        request: openRequest(d.url, RATE, DURATION_MS),
        flood: false,
      }));
      open.push(await measure('open', fleet, loads, DURATION_MS));
    }
    if (args.abuse) {
      const flooder = await generatorAt(Math.max(...DISPATCHERS));
      const target = (dispatchers[0] as FairwayProc).url;
      progress(`N=${n}: flood lead-in ${FLOOD_LEAD_MS / 1000} s, then the closed loop beside it`);
      await flooder.run(floodRequest(target, n, FLOOD_LEAD_MS));
      const loads = [
        ...closedLoads(DURATION_MS),
        { gen: flooder, request: floodRequest(target, n, DURATION_MS), flood: true },
      ];
      abuse.push(await measure('abuse', fleet, loads, DURATION_MS));
      // The flood alone, its window still full, at FLOOD_ALONE_RATE: what a refused request costs
      // its dispatcher (net of the dispatcher's idle CPU) and Redis.
      progress(`N=${n}: the flood alone at ${FLOOD_ALONE_RATE} req/s, ${DURATION_MS / 1000} s`);
      const floodPid = (dispatchers[0] as FairwayProc).pid;
      const alone = { disp: cpuMs(floodPid), redis: await redisCpuMs(redisNodes), at: performance.now() };
      const flood = await flooder.run(floodRequest(target, n, DURATION_MS, FLOOD_ALONE_RATE));
      const aloneS = (performance.now() - alone.at) / 1000;
      const refused = flood.statuses['429'] ?? 0;
      refusalCost.set(n, {
        refused,
        dispatcherMs:
          (cpuMs(floodPid) - alone.disp - (idleMsPerS.get(n) ?? 0) * aloneS) / Math.max(1, refused),
        redisUs: (((await redisCpuMs(redisNodes)) - alone.redis) * 1000) / Math.max(1, refused),
      });
      // The same closed loop again once the flood has stopped: the run without it is taken on
      // both sides of the run with it, so a fleet still warming up (JIT, connection pools) does
      // not pass for the flood's effect.
      progress(`N=${n}: closed loop ${DURATION_MS / 1000} s again, without the flood`);
      after.push(await measure('closed', fleet, closedLoads(DURATION_MS), DURATION_MS));
    }
    progress(`N=${n}: stopping the dispatchers`);
    await Promise.all(dispatchers.map((d) => stopChild(d.child)));
  }

  const first = closed[0];
  const base = first === undefined ? undefined : first.reqPerS / first.dispatchers;
  printPhaseTable(
    `closed loop: ${CONNECTIONS} connections per dispatcher, ${DURATION_MS / 1000} s; eff = req/s ÷ (N × ${
      first?.dispatchers === 1 ? 'the N=1 req/s' : `the N=${first?.dispatchers} req/s per dispatcher`
    })`,
    closed,
    base,
  );
  if (open.length > 0)
    printPhaseTable(
      `open loop: ${RATE} req/s offered to every dispatcher at once, ${DURATION_MS / 1000} s; eff = served ÷ offered`,
      open,
      RATE,
    );
  if (abuse.length > 0) printAbuse(closed, abuse, after);
  const loadAtEnd = loadavg();
  say(
    `load ${loadText(loadAtEnd)} (1/5/15 min) at the end; CPU columns are per served request, ms; ` +
      `busy = share of all ${cpu.length} cores`,
  );

  const json = {
    machine: { ...machine, loadAtEnd },
    enginesIdleCores: enginesIdle,
    dispatcherIdleMsPerS: Object.fromEntries(idleMsPerS),
    settings: {
      dispatchers: DISPATCHERS,
      replicas: REPLICAS,
      durationS: DURATION_MS / 1000,
      connections: CONNECTIONS,
      rate: RATE ?? null,
      abuse: args.abuse,
      cluster: args.cluster,
      pools: POOLS,
    },
    efficiencyBase: base ?? null,
    closed,
    open,
    abuse,
    closedAfterAbuse: after,
    refusalCost: Object.fromEntries(refusalCost),
  };
  if (args.json) console.log(JSON.stringify(json, null, 2));
  if (args.out !== undefined)
    writeFileSync(args.out, args.json ? `${JSON.stringify(json, null, 2)}\n` : `${report.join('\n')}\n`);
}

try {
  await main();
} catch (err) {
  console.error(err);
  process.exitCode = 1;
} finally {
  await cleanup();
}
