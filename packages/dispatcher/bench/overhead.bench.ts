/**
 * What one dispatcher adds to a request: the same open-loop load sent straight to an
 * engine-sim and through one dispatcher (`fairway serve`'s setup: Redis store on the machine's
 * Redis under a unique prefix, NATS bus, VTC ordering), in one run on this machine. Separate
 * processes: engine-sim (with its node agent), the dispatcher, the load generator (undici) and
 * this orchestrator, which only hands out phases and prints. Redis and NATS are the machine's.
 *
 * Prints, for non-streamed requests at `--rate` and streamed ones at `--stream-rate`, direct vs
 * through-the-dispatcher p50/p90/p99 latency and time to first token and the difference; the
 * dispatcher's own overhead and queue headers; the CPU each process (and the rest of the machine)
 * used per request; the highest rate one dispatcher sustains (open-loop steps until completions
 * fall behind or p99 passes 50 ms), the most it completes closed-loop (`--closed-concurrency`
 * clients sending back to back); and published gateway overheads to compare with. Latency counts
 * from each request's intended send time (load-generator.ts), so a late send is not hidden.
 *
 * `--baseline` adds a second dispatcher on the same store with the fused store operations hidden
 * (the calls made before admitAndDispatch/settleAndDispatch), measured in the same rounds.
 * `--tracing` adds two more dispatchers on the same store with OpenTelemetry tracing on, sampling 1%
 * and 100% of requests and exporting OTLP/HTTP to a receiver in this process, measured in the
 * same rounds, and prints one row per mode (off / 1% / 100%): added latency, TTFT and CPU.
 * `--cpu-prof` writes the dispatcher's V8 CPU profile and prints its heaviest functions.
 * `--diagnose` prints each dispatcher phase's event-loop delay and GC pauses (by kind);
 * `--heap-profile <file>` writes a sampling heap profile of everything the dispatcher allocated
 * (with `--heap-promoted`, only of what outlived a scavenge: what promotion and old-generation
 * collections are made of);
 * `--trace-gc` runs it with V8's `--trace-gc-nvp` and prints each phase's scavenges (pause, bytes
 * copied and promoted) and the KB the dispatcher allocated per request.
 * The dispatchers run with the production image's `NODE_OPTIONS` (infra/Dockerfile) and `fairway
 * serve`'s default log level, info: one access-log line per request, read by this process as a log
 * shipper would (`--log-level warn` measures without it, and the header says so);
 * `--log-reader-stalled` leaves the dispatcher's stderr unread for the whole run (a log shipper
 * that has stalled: the dispatcher holds, then drops, its access log, and keeps serving);
 * `--node-options "<flags>"` replaces them for an experiment; `--node-flags "<flags>"` adds V8 flags
 * to the dispatcher's command line (for those node refuses in NODE_OPTIONS).
 *
 * Usage: npm run bench:overhead [-- --duration 8 --rate 500 --stream-rate 500 --rounds 2
 *        --max-rates 500,1000,1500,2000 --closed-concurrency 64 --closed-duration 4 --baseline
 *        --tracing --skip-max --skip-closed --cpu-prof --diagnose --trace-gc --log-level info
 *        --log-reader-stalled]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { purgeStore } from '@fairway/store';
import { Redis } from 'ioredis';
import type { PhaseReport } from './load-generator.ts';
import { Generator } from './load-generator-process.ts';
import { cpuMs, machineBusyMs, pct, runWaitMs } from './process-stats.ts';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '8' },
    rate: { type: 'string', default: '500' },
    'stream-rate': { type: 'string', default: '500' },
    rounds: { type: 'string', default: '2' },
    'max-rates': { type: 'string', default: '500,1000,1500,2000,2500,3000,4000' },
    'max-duration': { type: 'string', default: '4' },
    'output-tokens': { type: 'string', default: '2' },
    'log-level': { type: 'string', default: 'info' },
    'stream-tokens': { type: 'string', default: '8' },
    'cpu-prof': { type: 'boolean', default: false },
    'skip-max': { type: 'boolean', default: false },
    'closed-concurrency': { type: 'string', default: '64' },
    'closed-duration': { type: 'string', default: '4' },
    'skip-closed': { type: 'boolean', default: false },
    diagnose: { type: 'boolean', default: false },
    'heap-profile': { type: 'string' },
    'heap-promoted': { type: 'boolean', default: false },
    'node-options': { type: 'string' },
    'node-flags': { type: 'string' },
    'trace-gc': { type: 'boolean', default: false },
    'log-reader-stalled': { type: 'boolean', default: false },
    baseline: { type: 'boolean', default: false },
    tracing: { type: 'boolean', default: false },
    'redis-url': { type: 'string', default: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' },
    'nats-url': { type: 'string', default: process.env.NATS_URL ?? 'nats://127.0.0.1:4222' },
  },
});

const DURATION_MS = Number(args.duration) * 1000;
const RATE = Number(args.rate);
const STREAM_RATE = Number(args['stream-rate']);
const ROUNDS = Number(args.rounds);
const MAX_RATES = (args['max-rates'] ?? '')
  .split(',')
  .map(Number)
  .filter((n) => n > 0);
const MAX_DURATION_MS = Number(args['max-duration']) * 1000;
const CLOSED_CONCURRENCY = Number(args['closed-concurrency']);
const CLOSED_DURATION_MS = Number(args['closed-duration']) * 1000;
const OUTPUT_TOKENS = Number(args['output-tokens']);
const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
/** The dispatchers' log level: `fairway serve`'s default, info (one access-log line per request). */
const LOG_LEVEL = LOG_LEVELS.find((l) => l === args['log-level']);
if (LOG_LEVEL === undefined) throw new Error(`--log-level: one of ${LOG_LEVELS.join(', ')}`);
const STREAM_TOKENS = Number(args['stream-tokens']);
const FAIRWAY_BIN = resolve(import.meta.dirname, '..', '..', 'cli', 'bin', 'fairway.js');
const DISPATCHER = resolve(import.meta.dirname, 'dispatcher-process.ts');
const MODEL = 'bench-model';
const POOL = 'bench';
const TENANTS = ['t1', 't2', 't3', 't4'];
const keyOf = (t: string): string => `sk-bench-${t}-key`;

interface Proc {
  readonly child: ChildProcess;
  readonly url: string;
  stop(): Promise<void>;
  /** Sends SIGUSR2 and resolves with the `diag {json}` line it answers with (dispatchers with diagnose). */
  diag(): Promise<Diag>;
  /** The scavenges V8 traced (`--trace-gc-nvp`) since the last call. */
  scavenges(): Scavenge[];
  /** Bytes the heap allocated since the last call, summed over every GC V8 traced (`--trace-gc-nvp`). */
  allocated(): number;
}

/** One scavenge as V8's `--trace-gc-nvp` prints it: pause, and bytes copied within new space and promoted. */
interface Scavenge {
  readonly pauseMs: number;
  readonly survivedBytes: number;
  readonly promotedBytes: number;
}

/** A dispatcher's event-loop delay and GC pauses over one phase (dispatcher-process.ts). */
interface Diag {
  readonly loop: { p50: number; p99: number; p999: number; max: number; samples: number };
  readonly gc: Record<string, { n: number; totalMs: number; maxMs: number; over2ms: number }>;
  /** Engine calls as the dispatcher timed them (to the body, or to a stream's headers), ms. */
  readonly engine: { p50: number; p99: number; n: number };
  readonly heapMb: number;
}

/**
 * The `NODE_OPTIONS` of the production image (infra/Dockerfile), with which the dispatchers run
 * here too, so the bench measures the process `fairway serve` ships as.
 */
function productionNodeOptions(): string {
  const dockerfile = readFileSync(
    resolve(import.meta.dirname, '..', '..', '..', 'infra', 'Dockerfile'),
    'utf8',
  );
  const m = /^ENV NODE_OPTIONS="([^"]*)"/m.exec(dockerfile);
  return m?.[1] ?? '';
}

/**
 * Spawns `node <execArgv> <argv>` and resolves with the URL of its "listening on" line. With
 * `stderrUnread`, nothing reads its stderr: a log shipper that has stalled.
 */
function startProcess(
  argv: readonly string[],
  execArgv: readonly string[],
  env: Readonly<Record<string, string>> = {},
  stderrUnread = false,
): Promise<Proc> {
  const child = spawn(process.execPath, [...execArgv, ...argv], {
    env: { ...process.env, FAIRWAY_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const what = argv.slice(0, 2).join(' ');
  // The last lines each process wrote, for an error message (the access log is one line a request).
  const output: string[] = [];
  const keep = (l: string) => {
    output.push(l);
    if (output.length > 200) output.splice(0, 100);
  };
  if (stderrUnread) child.stderr?.pause();
  else createInterface({ input: child.stderr! }).on('line', keep);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const diags: ((d: Diag) => void)[] = [];
  let scavenges: Scavenge[] = [];
  let allocated = 0;
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} did not start:\n${output.join('\n')}`));
    }, 30_000);
    child.once('exit', (code) => reject(new Error(`${what} exited ${code}:\n${output.join('\n')}`)));
    createInterface({ input: child.stdout! }).on('line', (l) => {
      const field = (name: string): number => Number(new RegExp(`\\b${name}=([\\d.]+)`).exec(l)?.[1] ?? 0);
      // Every GC line says what was allocated since the previous GC.
      if (l.includes(' gc=') && l.includes(' pause=')) allocated += field('allocated');
      if (l.includes(' gc=s ')) {
        scavenges.push({
          pauseMs: field('pause'),
          survivedBytes: field('new_space_survived'),
          promotedBytes: field('promoted'),
        });
        return;
      }
      if (l.includes(' gc=') && l.includes(' pause=')) return;
      if (l.startsWith('diag ')) {
        diags.shift()?.(JSON.parse(l.slice(5)) as Diag);
        return;
      }
      keep(l);
      const m = /listening on (\S+)/.exec(l);
      if (!m) return;
      clearTimeout(timer);
      resolvePromise({
        child,
        url: m[1] as string,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill('SIGTERM');
          const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(t);
        },
        scavenges() {
          const out = scavenges;
          scavenges = [];
          return out;
        },
        allocated() {
          const out = allocated;
          allocated = 0;
          return out;
        },
        diag() {
          return new Promise((r) => {
            diags.push(r);
            child.kill('SIGUSR2');
          });
        },
      });
    });
  });
}

const f2 = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : '-');

function bodies(stream: boolean, tokens: number): string[] {
  return TENANTS.map((t, i) =>
    JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: `Say something short, ${t} #${i}.` }],
      max_tokens: tokens + 4,
      // engine-sim's hook: generate exactly this many tokens (the engine must not be the bottleneck).
      fairway_output_tokens: tokens,
      ...(stream ? { stream: true } : {}),
    }),
  );
}

interface Sample {
  readonly report: PhaseReport;
  readonly cpu: Record<string, number>;
  /** Run-queue wait of each process's main thread over the phase, ms. */
  readonly runWait: Record<string, number>;
  /** The target dispatcher's event-loop delay and GC over the phase (`--diagnose`). */
  readonly diag?: Diag;
  /** The target dispatcher's scavenges over the phase (`--trace-gc`). */
  readonly scavenges?: Scavenge[];
  /** Bytes the target dispatcher allocated over the phase (`--trace-gc`). */
  readonly allocatedBytes?: number;
}

/** Where a phase sends its load. */
type Target = 'direct' | 'via' | 'baseline' | 'trace1' | 'trace100';

/** The dispatchers traced with `--tracing`, and the share of requests each samples. */
const TRACED = { trace1: 0.01, trace100: 1 } as const;

const TARGET_LABEL: Record<Target, string> = {
  direct: 'engine-sim alone',
  via: 'through the dispatcher',
  baseline: 'through the dispatcher, before (baseline)',
  trace1: 'through the dispatcher, tracing 1%',
  trace100: 'through the dispatcher, tracing 100%',
};

async function main(): Promise<void> {
  const prefix = `bench-overhead-${randomBytes(4).toString('hex')}`;
  const dir = mkdtempSync(join(tmpdir(), 'fairway-overhead-'));
  const configPath = join(dir, 'fairway.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      tenants: TENANTS.map((t) => ({ id: t, keys: [{ key: keyOf(t) }] })),
      pools: [{ id: POOL, model: MODEL, maxQueued: 100_000 }],
      policy: { ordering: 'vtc', placement: 'least-kv' },
      defaultLimits: { maxQueued: 100_000 },
    }),
  );
  const redisUrl = args['redis-url'] as string;
  const natsUrl = args['nats-url'] as string;
  const redis = new Redis(redisUrl);
  const redisPid = Number(/process_id:(\d+)/.exec(await redis.info('server'))?.[1]);
  const profDir = join(dir, 'prof');
  if (args['cpu-prof']) mkdirSync(profDir);

  const procs: Proc[] = [];
  let gen: Generator | undefined;
  try {
    const engine = await startProcess(
      [
        FAIRWAY_BIN,
        'engine-sim',
        '--port',
        '0',
        '--model',
        'llama-2-7b',
        '--served-model-name',
        MODEL,
        '--speed',
        '1000',
        '--max-num-seqs',
        '1024',
        '--stream-flush-ms',
        '0',
        '--nats-url',
        natsUrl,
        '--prefix',
        prefix,
        '--replica-id',
        'bench-engine',
        '--pool',
        POOL,
        '--log-level',
        'warn',
      ],
      [],
    );
    procs.push(engine);
    const dispatcherArgs = (name: string, baseline: boolean) => [
      DISPATCHER,
      JSON.stringify({
        configPath,
        redisUrl,
        natsUrl,
        prefix,
        name,
        baseline,
        logLevel: LOG_LEVEL,
        diagnose: args.diagnose,
        ...(args['heap-profile'] !== undefined && !baseline ? { heapProfile: args['heap-profile'] } : {}),
        promotedOnly: args['heap-promoted'],
      }),
    ];
    // `--node-options` replaces the production image's, for experiments; `--node-flags` adds
    // V8 flags that NODE_OPTIONS may not carry (node refuses most V8 flags there).
    const nodeOptions = { NODE_OPTIONS: args['node-options'] ?? productionNodeOptions() };
    const nodeFlags = (args['node-flags'] ?? '').split(/\s+/).filter((f) => f !== '');
    const dispatcher = await startProcess(
      dispatcherArgs('bench-dispatcher', false),
      [
        ...nodeFlags,
        '--import',
        'tsx',
        ...(args['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : []),
        ...(args['trace-gc'] ? ['--trace-gc-nvp'] : []),
      ],
      nodeOptions,
      args['log-reader-stalled'],
    );
    procs.push(dispatcher);
    const baseline = args.baseline
      ? await startProcess(dispatcherArgs('bench-baseline', true), ['--import', 'tsx'], nodeOptions)
      : undefined;
    if (baseline) procs.push(baseline);
    const receiver = args.tracing ? await startOtlpReceiver() : undefined;
    const traced: Partial<Record<'trace1' | 'trace100', Proc>> = {};
    if (receiver !== undefined)
      for (const [t, ratio] of Object.entries(TRACED) as ['trace1' | 'trace100', number][]) {
        const p = await startProcess(dispatcherArgs(`bench-${t}`, false), ['--import', 'tsx'], {
          ...nodeOptions,
          ...tracingEnv(receiver.url, ratio),
        });
        procs.push(p);
        traced[t] = p;
      }
    gen = new Generator();
    await gen.ready;

    const headers = { 'content-type': 'application/json', authorization: `Bearer ${keyOf('t1')}` };
    const urlOf: Record<Target, string | undefined> = {
      direct: engine.url,
      via: dispatcher.url,
      baseline: baseline?.url,
      trace1: traced.trace1?.url,
      trace100: traced.trace100?.url,
    };
    const targets = (['direct', 'via', 'baseline', 'trace1', 'trace100'] as const).filter(
      (t) => urlOf[t] !== undefined,
    );
    // Wait until the engine's agent has registered with the dispatchers.
    for (const t of targets) {
      const deadline = Date.now() + 20_000;
      for (;;) {
        const r = await gen.run({
          url: urlOf[t] as string,
          path: '/v1/chat/completions',
          headers,
          bodies: bodies(false, 1),
          rate: 10,
          durationMs: 100,
          stream: false,
          connections: 1,
          drainMs: 2000,
        });
        if (r.completed > 0) break;
        if (Date.now() > deadline) throw new Error(`${t} never served: ${r.firstError}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    const pids: Record<string, number | undefined> = {
      generator: gen.pid,
      dispatcher: dispatcher.child.pid,
      engine: engine.child.pid,
      redis: redisPid,
    };
    if (baseline) pids.baseline = baseline.child.pid;
    for (const [t, p] of Object.entries(traced)) pids[t] = p.child.pid;
    const g = gen;
    const phase = async (
      target: Target,
      stream: boolean,
      rate: number,
      durationMs: number,
      concurrency?: number,
    ): Promise<Sample> => {
      const proc =
        target === 'via'
          ? dispatcher
          : target === 'baseline'
            ? baseline
            : target === 'direct'
              ? undefined
              : traced[target];
      if (args.diagnose) await proc?.diag();
      proc?.scavenges();
      proc?.allocated();
      const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuMs(pid)]));
      const waitBefore = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, runWaitMs(pid)]));
      const busyBefore = machineBusyMs();
      const report = await g.run({
        url: urlOf[target] as string,
        path: '/v1/chat/completions',
        headers,
        bodies: bodies(stream, stream ? STREAM_TOKENS : OUTPUT_TOKENS),
        rate,
        durationMs,
        stream,
        connections: Math.max(256, concurrency ?? 0),
        drainMs: 10_000,
        ...(concurrency !== undefined ? { concurrency } : {}),
      });
      const cpu: Record<string, number> = Object.fromEntries(
        Object.entries(pids).map(([k, pid]) => [k, cpuMs(pid) - (before[k] ?? 0)]),
      );
      const ours = Object.values(cpu).reduce((a, x) => a + x, 0);
      // Everything else on the machine: other work running beside the bench, NATS, the kernel.
      cpu.other = Math.max(0, machineBusyMs() - busyBefore - ours);
      const runWait = Object.fromEntries(
        Object.entries(pids).map(([k, pid]) => [k, runWaitMs(pid) - (waitBefore[k] ?? 0)]),
      );
      const diag = args.diagnose ? await proc?.diag() : undefined;
      const scavenges = args['trace-gc'] ? proc?.scavenges() : undefined;
      const allocatedBytes = args['trace-gc'] ? proc?.allocated() : undefined;
      return {
        report,
        cpu,
        runWait,
        ...(diag ? { diag } : {}),
        ...(scavenges ? { scavenges } : {}),
        ...(allocatedBytes !== undefined ? { allocatedBytes } : {}),
      };
    };

    console.log(
      `fairway overhead bench: engine-sim ${engine.url} (speed 1000), dispatcher ${dispatcher.url} ` +
        `(NODE_OPTIONS "${nodeOptions.NODE_OPTIONS}", log level ${LOG_LEVEL}` +
        `${LOG_LEVEL === 'info' ? ": fairway serve's default, access log on" : ': not fairway serve’s default'}` +
        `${args['log-reader-stalled'] ? '; nothing reads its stderr' : ''})` +
        `${baseline ? `, baseline dispatcher ${baseline.url}` : ''} (Redis ${redisUrl}, prefix ${prefix}, VTC, ` +
        `least-kv); ${ROUNDS} rounds of ${DURATION_MS / 1000} s per phase, load generator in its own process\n`,
    );
    // Warm-up: JIT, connection pools, Redis script cache, then the measured rates for as long as a
    // phase, so V8 has sized the young generation and the heap for them, as in a dispatcher that has
    // been serving that load (a first round at a rate the heap has not seen paid for its growth).
    for (const t of targets) {
      await phase(t, false, 200, 2000);
      await phase(t, true, 200, 1000);
      await phase(t, false, RATE, DURATION_MS);
      await phase(t, true, STREAM_RATE, DURATION_MS);
    }

    const results = new Map<string, Sample[]>();
    const key = (t: Target, stream: boolean): string => `${t}${stream ? '-stream' : ''}`;
    for (let r = 0; r < ROUNDS; r++)
      for (const stream of [false, true])
        for (const t of targets) {
          const k = key(t, stream);
          const s = await phase(t, stream, stream ? STREAM_RATE : RATE, DURATION_MS);
          results.set(k, [...(results.get(k) ?? []), s]);
        }
    const all = (k: string, pick: (r: PhaseReport) => number[]): number[] =>
      (results.get(k) ?? []).flatMap((s) => pick(s.report));

    const table = (
      title: string,
      stream: boolean,
      pick: (r: PhaseReport) => number[],
    ): Map<Target, number[]> => {
      console.log(
        `${title.padEnd(46)}${'p50'.padStart(8)}${'p90'.padStart(8)}${'p99'.padStart(8)}   added: ${'p50'.padStart(7)}${'p90'.padStart(8)}${'p99'.padStart(8)}`,
      );
      const d = all(key('direct', stream), pick);
      const added = new Map<Target, number[]>();
      for (const t of targets) {
        const v = all(key(t, stream), pick);
        const ps = [50, 90, 99].map((p) => pct(v, p));
        const diff = [50, 90, 99].map((p) => pct(v, p) - pct(d, p));
        if (t !== 'direct') added.set(t, diff);
        console.log(
          `  ${TARGET_LABEL[t].padEnd(44)}${ps.map((x) => f2(x).padStart(8)).join('')}` +
            (t === 'direct' ? '' : `          ${diff.map((x) => f2(x).padStart(8)).join('')}`),
        );
      }
      return added;
    };
    console.log(
      'latency, ms (open-loop; from the intended send time to the last byte, or to the first for TTFT)',
    );
    const total = table(`non-streamed @ ${RATE}/s, total`, false, (r) => r.latencies);
    const ttft = table(`streamed @ ${STREAM_RATE}/s, time to first token`, true, (r) => r.firstBytes);
    table(`streamed @ ${STREAM_RATE}/s, total`, true, (r) => r.latencies);
    for (const t of targets.filter((x) => x !== 'direct')) {
      const own = [
        ...all(key(t, false), (r) => r.selfOverheads),
        ...all(key(t, true), (r) => r.selfOverheads),
      ];
      const queued = [...all(key(t, false), (r) => r.queueTimes), ...all(key(t, true), (r) => r.queueTimes)];
      console.log(
        `${TARGET_LABEL[t]}: own x-fairway-overhead-ms p50 ${f2(pct(own, 50))} p99 ${f2(pct(own, 99))}; ` +
          `x-fairway-queue-ms p50 ${f2(pct(queued, 50))} p99 ${f2(pct(queued, 99))}`,
      );
    }
    // Each round on its own (the targets ask for every run to meet them, not the pooled one).
    for (const t of targets.filter((x) => x !== 'direct')) {
      const direct = results.get(key('direct', false)) ?? [];
      const rounds = (results.get(key(t, false)) ?? []).map((s, i) => {
        const d = direct[i]?.report.latencies ?? [];
        const v = s.report.latencies;
        return `${f2(pct(v, 50) - pct(d, 50))}/${f2(pct(v, 99) - pct(d, 99))}`;
      });
      console.log(`${TARGET_LABEL[t]}, non-streamed added p50/p99 per round: ${rounds.join(', ')} ms`);
    }
    const lags = targets.flatMap((t) => all(key(t, false), (r) => r.lags));
    console.log(`generator send lag p50 ${f2(pct(lags, 50))} p99 ${f2(pct(lags, 99))} ms`);

    const cols = [...Object.keys(pids), 'other'];
    console.log('\nCPU per request, ms (every process shares the 2 cores; other = the rest of the machine):');
    console.log(`${'phase'.padEnd(18)}${'ok/sent'.padStart(14)}${cols.map((k) => k.padStart(12)).join('')}`);
    for (const [k, ss] of results) {
      const completed = ss.reduce((a, s) => a + s.report.completed, 0);
      const sent = ss.reduce((a, s) => a + s.report.sent, 0);
      const per = cols
        .map((c) => f2(ss.reduce((a, s) => a + (s.cpu[c] ?? 0), 0) / Math.max(1, completed)).padStart(12))
        .join('');
      const failed = ss.map((s) => s.report).find((r) => r.errors > 0);
      const why =
        failed === undefined
          ? ''
          : `  (first error: ${failed.firstError}; ${JSON.stringify(failed.statuses)})`;
      console.log(`${k.padEnd(18)}${`${completed}/${sent}`.padStart(14)}${per}${why}`);
    }

    if (args.diagnose) {
      console.log(
        '\ndispatcher per phase: event-loop delay of 2 ms samples (ms; ~2 = no stall), engine calls as it timed\n' +
          'them (compare with engine-sim alone above), GC pauses:',
      );
      for (const [k, ss] of results)
        for (const s of ss) {
          if (s.diag === undefined) continue;
          const l = s.diag.loop;
          const gc = Object.entries(s.diag.gc)
            .map(
              ([kind, g]) =>
                `${kind} ${g.n}× total ${f2(g.totalMs)} max ${f2(g.maxMs)} (>2 ms: ${g.over2ms})`,
            )
            .join('; ');
          const e = s.diag.engine;
          // This phase's own client latency (TTFT when streamed) and the rest of the machine's
          // CPU per request, to tell quiet rounds from disturbed ones.
          const lat = k.endsWith('-stream') ? s.report.firstBytes : s.report.latencies;
          const other = (s.cpu.other ?? 0) / Math.max(1, s.report.completed);
          console.log(
            `  ${k.padEnd(16)} client p50 ${f2(pct(lat, 50))} p99 ${f2(pct(lat, 99))} (other CPU ${f2(other)} ms/req); ` +
              `loop p50 ${f2(l.p50)} p99 ${f2(l.p99)} p99.9 ${f2(l.p999)} max ${f2(l.max)}; ` +
              `engine call p50 ${f2(e.p50)} p99 ${f2(e.p99)}; heap ${s.diag.heapMb} MB; ${gc || 'no GC'}`,
          );
        }
    }

    if (args['trace-gc']) {
      console.log('\ndispatcher scavenges per phase (V8 --trace-gc-nvp): pause, and what each copied:');
      for (const [k, ss] of results)
        for (const s of ss) {
          const sc = s.scavenges ?? [];
          const mean = (f: (x: Scavenge) => number): number =>
            sc.reduce((a, x) => a + f(x), 0) / Math.max(1, sc.length);
          const kbPerRequest = (s.allocatedBytes ?? 0) / 1024 / Math.max(1, s.report.completed);
          console.log(
            `  ${k.padEnd(16)} ${sc.length} scavenges; pause mean ${f2(mean((x) => x.pauseMs))} max ` +
              `${f2(Math.max(0, ...sc.map((x) => x.pauseMs)))} ms; survived mean ` +
              `${f2(mean((x) => x.survivedBytes) / 1e6)} MB, promoted mean ${f2(mean((x) => x.promotedBytes) / 1e6)} MB; ` +
              `allocated ${f2(kbPerRequest)} KB per request`,
          );
        }
    }

    console.log('\nrun-queue wait per request, ms (main thread runnable but not running: CPU contention):');
    console.log(
      `${'phase'.padEnd(18)}${Object.keys(pids)
        .map((k) => k.padStart(12))
        .join('')}`,
    );
    for (const [k, ss] of results) {
      const completed = ss.reduce((a, s) => a + s.report.completed, 0);
      const per = Object.keys(pids)
        .map((c) => f2(ss.reduce((a, s) => a + (s.runWait[c] ?? 0), 0) / Math.max(1, completed)).padStart(12))
        .join('');
      console.log(`${k.padEnd(18)}${per}`);
    }

    const via = total.get('via') ?? [];
    const viaTtft = ttft.get('via') ?? [];
    if (receiver !== undefined) {
      // The dispatcher's own CPU per completed request in its phases (non-streamed and streamed).
      const cpuPer = (t: Target, pid: string): number => {
        const ss = [...(results.get(key(t, false)) ?? []), ...(results.get(key(t, true)) ?? [])];
        const done = ss.reduce((a, s) => a + s.report.completed, 0);
        return ss.reduce((a, s) => a + (s.cpu[pid] ?? 0), 0) / Math.max(1, done);
      };
      console.log(
        `\ntracing overhead (same rounds; OTLP/HTTP protobuf to a receiver in the orchestrator, ${receiver.requests()} exports, ${(receiver.bytes() / 1e6).toFixed(1)} MB):`,
      );
      console.log(
        `${'tracing'.padEnd(10)}${'added p50'.padStart(11)}${'added p99'.padStart(11)}${'TTFT+ p50'.padStart(11)}${'TTFT+ p99'.padStart(11)}${'disp CPU ms/req'.padStart(17)}`,
      );
      const rows: [string, Target, string][] = [
        ['off', 'via', 'dispatcher'],
        ['1%', 'trace1', 'trace1'],
        ['100%', 'trace100', 'trace100'],
      ];
      for (const [label, t, pid] of rows) {
        const a = total.get(t) ?? [];
        const f = ttft.get(t) ?? [];
        console.log(
          `${label.padEnd(10)}${f2(a[0] ?? Number.NaN).padStart(11)}${f2(a[2] ?? Number.NaN).padStart(11)}${f2(f[0] ?? Number.NaN).padStart(11)}${f2(f[2] ?? Number.NaN).padStart(11)}${f2(cpuPer(t, pid)).padStart(17)}`,
        );
      }
      await receiver.close();
    }
    // A negative difference means the direct phase was disturbed (other work on the machine).
    const verdict = (x: number | undefined, limit: number): string =>
      `${f2(x ?? Number.NaN)} ms ${
        (x ?? 0) < 0
          ? 'UNRELIABLE (direct slower than via: noisy machine)'
          : (x ?? Number.POSITIVE_INFINITY) <= limit
            ? 'met'
            : 'MISSED'
      }`;
    console.log('\ntargets, through the dispatcher:');
    console.log(`  added latency p50 ≤ 1.5 ms @ ${RATE}/s:  ${verdict(via[0], 1.5)}`);
    console.log(`  added latency p99 ≤ 5 ms   @ ${RATE}/s:  ${verdict(via[2], 5)}`);
    console.log(`  added TTFT p50 ≤ 2 ms (streaming):      ${verdict(viaTtft[0], 2)}`);

    if (!args['skip-max'] && MAX_RATES.length > 0) {
      for (const t of targets.filter((x) => x !== 'direct')) {
        console.log(
          `\nsustained rate, ${TARGET_LABEL[t]} (non-streamed, ${MAX_DURATION_MS / 1000} s per step):`,
        );
        console.log(
          `${'offered/s'.padStart(10)}${'done/s'.padStart(9)}${'errors'.padStart(8)}${'p50'.padStart(9)}${'p99'.padStart(9)}${'disp CPU'.padStart(10)}`,
        );
        let best = 0;
        for (const rate of MAX_RATES) {
          const s = await phase(t, false, rate, MAX_DURATION_MS);
          const r = s.report;
          const doneRate = (r.completed * 1000) / MAX_DURATION_MS;
          const p50r = pct(r.latencies, 50);
          const p99r = pct(r.latencies, 99);
          const cpuShare = (s.cpu[t === 'via' ? 'dispatcher' : t] ?? 0) / MAX_DURATION_MS;
          console.log(
            `${String(rate).padStart(10)}${doneRate.toFixed(0).padStart(9)}${String(r.errors).padStart(8)}${f2(p50r).padStart(9)}${f2(p99r).padStart(9)}${`${(cpuShare * 100).toFixed(0)}%`.padStart(10)}`,
          );
          // Sustained: every request answered and latency not queueing up (p99 under 50 ms).
          if (!(r.errors === 0 && r.completed >= r.sent * 0.999 && p99r < 50)) break;
          best = rate;
          await new Promise((r) => setTimeout(r, 500));
        }
        console.log(
          `  highest sustained rate: ${best > 0 ? `${best} requests/s` : `below ${MAX_RATES[0]}/s`}`,
        );
      }
    }

    if (!args['skip-closed'] && CLOSED_CONCURRENCY > 0) {
      console.log(
        `\nclosed loop (${CLOSED_CONCURRENCY} clients sending back to back, non-streamed, ${CLOSED_DURATION_MS / 1000} s):`,
      );
      console.log(
        `${'target'.padEnd(46)}${'done/s'.padStart(9)}${'errors'.padStart(8)}${'p50'.padStart(9)}${'p99'.padStart(9)}${'disp CPU'.padStart(10)}${'CPU ms/req'.padStart(12)}`,
      );
      const budget: string[] = [];
      for (const t of targets) {
        const s = await phase(t, false, 0, CLOSED_DURATION_MS, CLOSED_CONCURRENCY);
        const r = s.report;
        const own = t === 'via' ? 'dispatcher' : t === 'baseline' ? 'baseline' : 'engine';
        const cpu = s.cpu[own] ?? 0;
        console.log(
          `  ${TARGET_LABEL[t].padEnd(44)}${((r.completed * 1000) / CLOSED_DURATION_MS).toFixed(0).padStart(9)}` +
            `${String(r.errors).padStart(8)}${f2(pct(r.latencies, 50)).padStart(9)}${f2(pct(r.latencies, 99)).padStart(9)}` +
            `${`${((cpu / CLOSED_DURATION_MS) * 100).toFixed(0)}%`.padStart(10)}${f2(cpu / Math.max(1, r.completed)).padStart(12)}`,
        );
        // Where the machine's two cores went, per completed request: a closed loop is bounded by
        // the sum over every process, not by the dispatcher's share alone.
        const done = Math.max(1, r.completed);
        const total = Object.values(s.cpu).reduce((a, x) => a + x, 0);
        budget.push(
          `  ${TARGET_LABEL[t].padEnd(44)}${Object.entries(s.cpu)
            .map(([k, ms]) => `${k} ${f2(ms / done)}`)
            .join(
              ', ',
            )}; all ${f2(total / done)} ms/req, machine ${((total / CLOSED_DURATION_MS / 2) * 100).toFixed(0)}% busy` +
            ` (2 cores at this cost: ${((2 * 1000) / (total / done)).toFixed(0)} req/s)`,
        );
        await new Promise((r) => setTimeout(r, 500));
      }
      console.log('closed-loop CPU per request by process, ms:');
      for (const b of budget) console.log(b);
    }

    console.log('\npublished gateway overheads for comparison (DESIGN.md "Peers"):');
    console.log('  LiteLLM proxy: 4.3 ms added unloaded; p50 12 ms / p99 43 ms at 1k RPS');
    console.log(
      `  fairway (this run): p50 ${f2(via[0] ?? Number.NaN)} ms / p99 ${f2(via[2] ?? Number.NaN)} ms at ${RATE} RPS, ` +
        `TTFT p50 ${f2(viaTtft[0] ?? Number.NaN)} ms`,
    );
  } finally {
    await gen?.stop();
    for (const p of procs.reverse()) await p.stop();
    await purgeStore(redis, prefix);
    await redis.quit();
    if (args['cpu-prof']) printProfile(profDir);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The `OTEL_*` environment of a dispatcher tracing `ratio` of its requests to `url` (OTLP/HTTP). */
function tracingEnv(url: string, ratio: number): Record<string, string> {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: String(ratio),
  };
}

/**
 * An OTLP/HTTP trace receiver that reads and drops every export (answering 200 with an empty
 * body, which OTLP takes as full success), counting requests and bytes.
 */
async function startOtlpReceiver(): Promise<{
  url: string;
  requests(): number;
  bytes(): number;
  close(): Promise<void>;
}> {
  let requests = 0;
  let bytes = 0;
  const server = createServer((req, res) => {
    req.on('data', (c: Buffer) => {
      bytes += c.length;
    });
    req.on('end', () => {
      requests++;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests: () => requests,
    bytes: () => bytes,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
}

/** Prints the dispatcher profile's heaviest functions by self time. */
function printProfile(dir: string): void {
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  if (file === undefined) {
    console.log('\n(no CPU profile was written)');
    return;
  }
  const prof = JSON.parse(readFileSync(join(dir, file), 'utf8')) as {
    nodes: ProfileNode[];
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  let total = 0;
  prof.samples.forEach((id, i) => {
    const n = byId.get(id);
    const dt = prof.timeDeltas[i] ?? 0;
    total += dt;
    if (!n) return;
    const cf = n.callFrame;
    const where = cf.url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*\/packages\//, '');
    const key = `${cf.functionName || '(anonymous)'} ${where}:${cf.lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + dt);
  });
  const idle = [...self].filter(([k]) => k.startsWith('(idle)')).reduce((a, [, v]) => a + v, 0);
  console.log(
    `\ndispatcher CPU profile: heaviest functions by self time (of ${((total - idle) / 1000).toFixed(0)} ms busy):`,
  );
  for (const [k, v] of [...self]
    .filter(([k]) => !k.startsWith('(idle)'))
    .sort((a, b) => b[1] - a[1])
    .slice(0, 25))
    console.log(`  ${((100 * v) / Math.max(1, total - idle)).toFixed(1).padStart(5)}%  ${k}`);
  const saved = join(tmpdir(), `fairway-dispatcher-${Date.now()}.cpuprofile`);
  writeFileSync(saved, readFileSync(join(dir, file)));
  console.log(`  (profile saved to ${saved}; open it in Chrome DevTools)`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
