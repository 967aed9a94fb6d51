/**
 * What one dispatcher adds to a request (issue 5): the same open-loop load sent straight to an
 * engine-sim and through one `fairway serve` (Redis store on the machine's Redis under a unique
 * prefix, NATS bus, VTC ordering), in one run on this machine. Four processes: engine-sim (with its
 * node agent), the dispatcher, the load generator (undici, its own process) and this orchestrator,
 * which only hands out phases and prints. Redis and NATS are the machine's.
 *
 * Prints, for non-streamed requests at `--rate` and for streamed ones at `--stream-rate`, direct
 * vs via-dispatcher p50/p90/p99 latency (and time to first byte for streams) and the difference;
 * the CPU each process used per request; then the highest rate one dispatcher sustains (open-loop
 * steps until completions fall behind or latency explodes), and published gateway overheads to
 * compare with.
 *
 * Usage: npm run bench:overhead [-- --duration 8 --rate 500 --stream-rate 500 --rounds 2
 *        --max-rates 500,1000,1500,2000,2500,3000 --cpu-prof]
 * `--cpu-prof` writes the dispatcher's V8 CPU profile and prints its heaviest functions.
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { StoreKeys } from '@fairway/store';
import { Redis } from 'ioredis';
import type { PhaseReport, PhaseRequest } from './load-generator.ts';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '8' },
    rate: { type: 'string', default: '500' },
    'stream-rate': { type: 'string', default: '500' },
    rounds: { type: 'string', default: '2' },
    'max-rates': { type: 'string', default: '500,1000,1500,2000,2500,3000,4000' },
    'max-duration': { type: 'string', default: '4' },
    'output-tokens': { type: 'string', default: '2' },
    'stream-tokens': { type: 'string', default: '8' },
    'cpu-prof': { type: 'boolean', default: false },
    'skip-max': { type: 'boolean', default: false },
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
const OUTPUT_TOKENS = Number(args['output-tokens']);
const STREAM_TOKENS = Number(args['stream-tokens']);
const FAIRWAY_BIN = resolve(import.meta.dirname, '..', '..', 'cli', 'bin', 'fairway.js');
const GENERATOR = resolve(import.meta.dirname, 'load-generator.ts');
const MODEL = 'bench-model';
const POOL = 'bench';
const TENANTS = ['t1', 't2', 't3', 't4'];
const keyOf = (t: string): string => `sk-bench-${t}-key`;

interface Proc {
  readonly child: ChildProcess;
  readonly url: string;
  stop(): Promise<void>;
}

/** Spawns `fairway <args>` and resolves with the URL of its "listening on" line. */
function startFairway(
  argv: readonly string[],
  env: Record<string, string>,
  execArgv: readonly string[] = [],
): Promise<Proc> {
  const child = spawn(process.execPath, [...execArgv, FAIRWAY_BIN, ...argv], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (l) => output.push(l));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`fairway ${argv[0]} did not start:\n${output.join('\n')}`));
    }, 30_000);
    child.once('exit', (code) =>
      reject(new Error(`fairway ${argv[0]} exited ${code}:\n${output.join('\n')}`)),
    );
    createInterface({ input: child.stdout! }).on('line', (l) => {
      output.push(l);
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
      });
    });
  });
}

/** CPU time (user + system) the whole machine has been busy so far, ms summed over cores. */
function machineBusyMs(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
  const cpu = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: busy is everything but idle and iowait.
  const busy = cpu.reduce((a, x) => a + x, 0) - (cpu[3] ?? 0) - (cpu[4] ?? 0);
  return (busy * 1000) / 100;
}

/** CPU time (user + system) a process has used so far, ms. */
function cpuMs(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return 0;
  }
}

function pct(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
}

const f2 = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : '-');

class Generator {
  readonly #child: ChildProcess;
  readonly ready: Promise<void>;
  #pending: ((r: PhaseReport) => void) | undefined;
  #fail: ((e: Error) => void) | undefined;

  constructor() {
    this.#child = fork(GENERATOR, [], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
    this.ready = new Promise((r) => {
      this.#child.on('message', (m: { kind: string; message?: string }) => {
        if (m.kind === 'ready') r();
        else if (m.kind === 'report') this.#pending?.(m as PhaseReport);
        else if (m.kind === 'failed') this.#fail?.(new Error(m.message));
      });
    });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  run(p: Omit<PhaseRequest, 'kind'>): Promise<PhaseReport> {
    return new Promise((resolvePromise, reject) => {
      this.#pending = resolvePromise;
      this.#fail = reject;
      this.#child.send({ kind: 'phase', ...p });
    });
  }

  stop(): void {
    this.#child.send({ kind: 'exit' });
  }
}

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
}

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
  const redis = new Redis(args['redis-url'] as string);
  const redisPid = Number(/process_id:(\d+)/.exec(await redis.info('server'))?.[1]);
  const profDir = join(dir, 'prof');
  if (args['cpu-prof']) mkdirSync(profDir);

  const procs: Proc[] = [];
  let gen: Generator | undefined;
  try {
    const engine = await startFairway(
      [
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
        args['nats-url'] as string,
        '--prefix',
        prefix,
        '--replica-id',
        'bench-engine',
        '--pool',
        POOL,
        '--log-level',
        'warn',
      ],
      {},
    );
    procs.push(engine);
    const dispatcher = await startFairway(
      ['serve', '--config', configPath, '--port', '0', '--prefix', prefix],
      {
        REDIS_URL: args['redis-url'] as string,
        NATS_URL: args['nats-url'] as string,
        FAIRWAY_LOG_LEVEL: 'warn',
      },
      args['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [],
    );
    procs.push(dispatcher);
    gen = new Generator();
    await gen.ready;

    const headers = { 'content-type': 'application/json', authorization: `Bearer ${keyOf('t1')}` };
    const target = (via: boolean) => ({
      url: via ? dispatcher.url : engine.url,
      path: '/v1/chat/completions',
    });
    // Wait until the engine's agent has registered with the dispatcher.
    const deadline = Date.now() + 20_000;
    for (;;) {
      const r = await gen.run({
        ...target(true),
        headers,
        bodies: bodies(false, 1),
        rate: 10,
        durationMs: 100,
        stream: false,
        connections: 1,
        drainMs: 2000,
      });
      if (r.completed > 0) break;
      if (Date.now() > deadline) throw new Error(`the dispatcher never served: ${r.firstError}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const pids = {
      generator: gen.pid,
      dispatcher: dispatcher.child.pid,
      engine: engine.child.pid,
      redis: redisPid,
    };
    const g = gen;
    const phase = async (
      via: boolean,
      stream: boolean,
      rate: number,
      durationMs: number,
    ): Promise<Sample> => {
      const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuMs(pid)]));
      const busyBefore = machineBusyMs();
      const report = await g.run({
        ...target(via),
        headers,
        bodies: bodies(stream, stream ? STREAM_TOKENS : OUTPUT_TOKENS),
        rate,
        durationMs,
        stream,
        connections: 256,
        drainMs: 10_000,
      });
      const cpu: Record<string, number> = Object.fromEntries(
        Object.entries(pids).map(([k, pid]) => [k, cpuMs(pid) - (before[k] ?? 0)]),
      );
      const ours = Object.values(cpu).reduce((a, x) => a + x, 0);
      // Everything else on the machine: other work running beside the bench, NATS, the kernel.
      cpu.other = Math.max(0, machineBusyMs() - busyBefore - ours);
      return { report, cpu };
    };

    console.log(
      `fairway overhead bench: engine-sim ${engine.url} (speed 1000), dispatcher ${dispatcher.url} ` +
        `(Redis ${args['redis-url']}, prefix ${prefix}, VTC, least-kv), ${ROUNDS} rounds of ${DURATION_MS / 1000} s per phase\n`,
    );
    // Warm-up: JIT, connection pools, Redis script cache.
    await phase(false, false, 200, 2000);
    await phase(true, false, 200, 2000);
    await phase(false, true, 200, 1000);
    await phase(true, true, 200, 1000);

    const results: Record<string, Sample[]> = {};
    const add = (name: string, s: Sample): void => {
      results[name] ??= [];
      results[name].push(s);
    };
    for (let r = 0; r < ROUNDS; r++) {
      add('direct', await phase(false, false, RATE, DURATION_MS));
      add('via', await phase(true, false, RATE, DURATION_MS));
      add('direct-stream', await phase(false, true, STREAM_RATE, DURATION_MS));
      add('via-stream', await phase(true, true, STREAM_RATE, DURATION_MS));
    }
    const all = (name: string, pick: (r: PhaseReport) => number[]): number[] =>
      (results[name] ?? []).flatMap((s) => pick(s.report));
    const totals = (name: string) => {
      const ss = results[name] ?? [];
      const sum = (f: (s: Sample) => number) => ss.reduce((a, s) => a + f(s), 0);
      return {
        sent: sum((s) => s.report.sent),
        completed: sum((s) => s.report.completed),
        errors: sum((s) => s.report.errors),
        cpu: Object.fromEntries([...Object.keys(pids), 'other'].map((k) => [k, sum((s) => s.cpu[k] ?? 0)])),
      };
    };

    const row = (label: string, d: number[], v: number[]): string => {
      const cells = [50, 90, 99].map((p) => {
        const a = pct(d, p);
        const b = pct(v, p);
        return `${f2(a).padStart(7)} ${f2(b).padStart(7)} ${f2(b - a).padStart(7)}`;
      });
      return `${label.padEnd(34)}${cells.join('  |')}`;
    };
    console.log(`latency, ms: direct = engine-sim alone; via = through the dispatcher; +disp = via − direct`);
    console.log(`${''.padEnd(34)}${'  direct     via    diff  |'.repeat(3)}`);
    console.log(
      row(
        `non-streamed @ ${RATE}/s, total`,
        all('direct', (r) => r.latencies),
        all('via', (r) => r.latencies),
      ),
    );
    console.log(
      row(
        `streamed @ ${STREAM_RATE}/s, first byte (TTFT)`,
        all('direct-stream', (r) => r.firstBytes),
        all('via-stream', (r) => r.firstBytes),
      ),
    );
    console.log(
      row(
        `streamed @ ${STREAM_RATE}/s, total`,
        all('direct-stream', (r) => r.latencies),
        all('via-stream', (r) => r.latencies),
      ),
    );
    const own = all('via', (r) => r.selfOverheads);
    const ownS = all('via-stream', (r) => r.selfOverheads);
    console.log(
      `dispatcher's own x-fairway-overhead-ms (arrival → engine call, excl. engine): non-streamed p50 ${f2(pct(own, 50))} p99 ${f2(pct(own, 99))}; streamed p50 ${f2(pct(ownS, 50))} p99 ${f2(pct(ownS, 99))}`,
    );
    const queued = all('via', (r) => r.queueTimes);
    console.log(
      `dispatcher's x-fairway-queue-ms (held waiting for capacity): p50 ${f2(pct(queued, 50))} p99 ${f2(pct(queued, 99))}`,
    );
    const lags = [...all('direct', (r) => r.lags), ...all('via', (r) => r.lags)];
    console.log(`generator send lag p50 ${f2(pct(lags, 50))} p99 ${f2(pct(lags, 99))} ms`);

    const cols = [...Object.keys(pids), 'other'];
    console.log('\nCPU per request, ms (all processes share 2 cores; other = the rest of the machine):');
    console.log(`${'phase'.padEnd(16)}${'ok/sent'.padStart(14)}${cols.map((k) => k.padStart(12)).join('')}`);
    for (const name of ['direct', 'via', 'direct-stream', 'via-stream']) {
      const t = totals(name);
      const per = cols.map((k) => f2((t.cpu[k] ?? 0) / Math.max(1, t.completed)).padStart(12)).join('');
      console.log(`${name.padEnd(16)}${`${t.completed}/${t.sent}`.padStart(14)}${per}`);
    }

    const p50 =
      pct(
        all('via', (r) => r.latencies),
        50,
      ) -
      pct(
        all('direct', (r) => r.latencies),
        50,
      );
    const p99 =
      pct(
        all('via', (r) => r.latencies),
        99,
      ) -
      pct(
        all('direct', (r) => r.latencies),
        99,
      );
    const ttft =
      pct(
        all('via-stream', (r) => r.firstBytes),
        50,
      ) -
      pct(
        all('direct-stream', (r) => r.firstBytes),
        50,
      );
    console.log('\ntargets (issue 5):');
    console.log(`  added latency p50 ≤ 1.5 ms @ ${RATE}/s: ${f2(p50)} ms ${p50 <= 1.5 ? 'met' : 'MISSED'}`);
    console.log(`  added latency p99 ≤ 5 ms   @ ${RATE}/s: ${f2(p99)} ms ${p99 <= 5 ? 'met' : 'MISSED'}`);
    console.log(`  added TTFT p50 ≤ 2 ms (streaming):     ${f2(ttft)} ms ${ttft <= 2 ? 'met' : 'MISSED'}`);

    if (!args['skip-max'] && MAX_RATES.length > 0) {
      console.log(
        `\nsustained rate through one dispatcher (non-streamed, ${MAX_DURATION_MS / 1000} s per step):`,
      );
      console.log(
        `${'offered/s'.padStart(10)}${'done/s'.padStart(9)}${'errors'.padStart(8)}${'p50'.padStart(9)}${'p99'.padStart(9)}${'disp CPU'.padStart(10)}`,
      );
      let best = 0;
      for (const rate of MAX_RATES) {
        const s = await phase(true, false, rate, MAX_DURATION_MS);
        const r = s.report;
        const doneRate = (r.completed * 1000) / MAX_DURATION_MS;
        const p50r = pct(r.latencies, 50);
        const p99r = pct(r.latencies, 99);
        const cpuShare = (s.cpu.dispatcher ?? 0) / MAX_DURATION_MS;
        console.log(
          `${String(rate).padStart(10)}${doneRate.toFixed(0).padStart(9)}${String(r.errors).padStart(8)}${f2(p50r).padStart(9)}${f2(p99r).padStart(9)}${`${(cpuShare * 100).toFixed(0)}%`.padStart(10)}`,
        );
        // Sustained: every request answered, and latency not queueing up (p99 under 50 ms).
        const ok = r.errors === 0 && r.completed >= r.sent * 0.999 && p99r < 50;
        if (!ok) break;
        best = rate;
        await new Promise((r) => setTimeout(r, 500));
      }
      console.log(`  highest sustained rate: ${best > 0 ? `${best} requests/s` : `below ${MAX_RATES[0]}/s`}`);
    }

    console.log('\npublished gateway overheads for comparison (DESIGN.md "Peers"):');
    console.log('  LiteLLM proxy: 4.3 ms added unloaded; p50 12 ms / p99 43 ms at 1k RPS');
    console.log(
      `  fairway (this run): p50 ${f2(p50)} ms / p99 ${f2(p99)} ms at ${RATE} RPS, TTFT p50 ${f2(ttft)} ms`,
    );
  } finally {
    gen?.stop();
    for (const p of procs.reverse()) await p.stop();
    const keys = new StoreKeys(prefix);
    let cursor = '0';
    do {
      const [next, found] = await redis.scan(cursor, 'MATCH', keys.pattern(), 'COUNT', 1000);
      cursor = next;
      if (found.length > 0) await redis.del(...found);
    } while (cursor !== '0');
    await redis.quit();
    if (args['cpu-prof']) printProfile(profDir);
    rmSync(dir, { recursive: true, force: true });
  }
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
