// How many concurrent streams and streamed tokens per second engine-sim sustains on this machine:
// one engine-sim process, then several, each loaded by separate client processes that read every
// stream through VllmClient (closed loop: a finished stream is replaced at once). The engine's
// speed factor sets the token rate its model demands; "keep-up" says whether the process delivers
// it (model time stepped ÷ real time × speed; 1.00 = the engine keeps real time).
//
// The machine may be shared: "tok/engine-CPU-s" (tokens per CPU-second the engine processes got)
// is the number that does not depend on what else runs.
//
// Run: npm run bench:engine-sim [-- --streams 2000 --speeds 5,10,20 --layouts 1x1,2x2 --flush 0,20]
// (layout EnxCm: n engine-sim processes loaded by m client processes; flush = --stream-flush-ms)
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { VllmClient } from '@fairway/engine';
import { freePort } from '@fairway/testkit';
import type { WorkerReport } from './load-worker.ts';

const { values } = parseArgs({
  options: {
    streams: { type: 'string', default: '2000' },
    seconds: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '3' },
    speeds: { type: 'string', default: '5,10' },
    output: { type: 'string', default: '400' },
    layouts: { type: 'string', default: '1x1,2x2' },
    flush: { type: 'string', default: '0,20' },
  },
});
const STREAMS = Number(values.streams);
const SECONDS = Number(values.seconds);
const WARMUP = Number(values.warmup);
const OUTPUT = Number(values.output);
const SPEEDS = values.speeds.split(',').map(Number);
const FLUSHES = values.flush.split(',').map(Number);
const LAYOUTS = values.layouts.split(',').map((l) => {
  const [sims, workers] = l.split('x').map(Number);
  return { sims: sims!, workers: workers! };
});

const simBin = fileURLToPath(new URL('../src/bin/engine-sim.ts', import.meta.url));
const workerScript = fileURLToPath(new URL('./load-worker.ts', import.meta.url));

/**
 * CPU seconds (user + system) a process has used, from /proc (Linux). The machine may be shared,
 * so throughput is also reported per CPU-second the engines and clients actually got.
 */
function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return 0;
  }
}

const children = new Set<ChildProcess>();
function track(p: ChildProcess): ChildProcess {
  children.add(p);
  p.once('exit', () => children.delete(p));
  return p;
}
// Never leave engines or load workers behind, whatever happens to this process.
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(130));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function startSim(speed: number, flushMs: number): Promise<{ url: string; proc: ChildProcess }> {
  const port = await freePort();
  const args = [
    '--import',
    'tsx',
    simBin,
    '--port',
    String(port),
    '--speed',
    String(speed),
    // Room for every stream at once: the engine loop, not the cache, is what is measured.
    '--kv-capacity-tokens',
    '8000000',
    '--max-num-seqs',
    '8192',
    '--max-num-batched-tokens',
    '262144',
    '--stream-flush-ms',
    String(flushMs),
    '--log-level',
    'warn',
  ];
  const proc = track(spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'] }));
  const url = `http://127.0.0.1:${port}`;
  const client = new VllmClient({ url });
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      await client.health();
      break;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(200);
    }
  }
  await client.close();
  return { url, proc };
}

interface EngineSnapshot {
  readonly tokens: number;
  readonly running: number;
  readonly modelBusyMs: number;
  readonly realMs: number;
  readonly cpuS: number;
}

/** Generation tokens, running requests and loop timing, summed over the engines. */
async function snapshot(engines: readonly { url: string; proc: ChildProcess }[]): Promise<EngineSnapshot> {
  const parts = await Promise.all(
    engines.map(async ({ url, proc }) => {
      // A saturated engine answers late: give it time.
      const c = new VllmClient({ url, controlTimeoutMs: 30_000, connectTimeoutMs: 30_000 });
      const [m, stats] = await Promise.all([
        c.metrics(),
        fetch(`${url}/fairway/stats`).then(
          (r) => r.json() as Promise<{ modelBusyMs: number; realMs: number }>,
        ),
      ]);
      await c.close();
      return { m, stats, cpuS: cpuSeconds(proc.pid) };
    }),
  );
  return {
    tokens: parts.reduce((n, p) => n + p.m.generationTokensTotal, 0),
    running: parts.reduce((n, p) => n + p.m.running, 0),
    modelBusyMs: parts.reduce((n, p) => n + p.stats.modelBusyMs, 0),
    realMs: parts.reduce((n, p) => n + p.stats.realMs, 0),
    cpuS: parts.reduce((n, p) => n + p.cpuS, 0),
  };
}

interface Result {
  readonly flushMs: number;
  readonly speed: number;
  readonly sims: number;
  readonly workers: number;
  readonly running: number;
  readonly tokensPerS: number;
  readonly clientTokensPerS: number;
  /** Model time stepped ÷ (real time × speed), averaged over the engines. */
  readonly keepUp: number;
  readonly engineCpu: number;
  readonly engineTokensPerCpuS: number;
  readonly clientCpu: number;
  readonly clientTokensPerCpuS: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

async function run(speed: number, flushMs: number, sims: number, workers: number): Promise<Result> {
  const engines = await Promise.all(Array.from({ length: sims }, () => startSim(speed, flushMs)));
  const urls = engines.map((e) => e.url);
  const latest = new Map<number, WorkerReport>();
  const procs = Array.from({ length: workers }, (_, w) => {
    const streams = Math.floor(STREAMS / workers) + (w < STREAMS % workers ? 1 : 0);
    // Each worker spreads its streams over every engine.
    const config = JSON.stringify({ urls, streams, outputTokens: OUTPUT, promptChars: 64 });
    const p = track(fork(workerScript, [config], { execArgv: ['--import', 'tsx'] }));
    p.on('message', (m) => latest.set(w, m as WorkerReport));
    return p;
  });
  const clients = () => {
    let tokens = 0;
    let open = 0;
    let errors = 0;
    let atMs = 0;
    let firstError: string | undefined;
    for (const r of latest.values()) {
      tokens += r.tokens;
      open += r.open;
      errors += r.errors;
      atMs += r.atMs / latest.size;
      firstError ??= r.firstError;
    }
    const cpuS = procs.reduce((n, p) => n + cpuSeconds(p.pid), 0);
    return { tokens, open, errors, atMs, firstError, cpuS };
  };
  // Workers compile and connect first; the warm-up starts once the engines hold every stream.
  const inflight = async () => {
    const stats = await Promise.all(
      urls.map((u) => fetch(`${u}/fairway/stats`).then((r) => r.json() as Promise<{ inflight: number }>)),
    );
    return stats.reduce((n, st) => n + st.inflight, 0);
  };
  const readyBy = Date.now() + 120_000;
  while (Date.now() < readyBy && (await inflight()) < STREAMS * 0.99) await sleep(250);
  await sleep(WARMUP * 1000);
  const e0 = await snapshot(engines);
  const c0 = clients();
  const t0 = performance.now();
  await sleep(SECONDS * 1000);
  const c1 = clients();
  const e1 = await snapshot(engines);
  const wallS = (performance.now() - t0) / 1000;
  for (const p of procs) p.send('stop');
  await Promise.all(procs.map((p) => new Promise((r) => p.once('exit', r))));
  for (const e of engines) e.proc.kill('SIGTERM');
  await Promise.all(engines.map((e) => new Promise((r) => e.proc.once('exit', r))));
  const realS = (e1.realMs - e0.realMs) / 1000 / sims;
  return {
    flushMs,
    speed,
    sims,
    workers,
    running: e1.running,
    tokensPerS: (e1.tokens - e0.tokens) / realS,
    clientTokensPerS: ((c1.tokens - c0.tokens) * 1000) / (c1.atMs - c0.atMs),
    keepUp: (e1.modelBusyMs - e0.modelBusyMs) / (e1.realMs - e0.realMs) / speed,
    engineCpu: (e1.cpuS - e0.cpuS) / wallS,
    engineTokensPerCpuS: (e1.tokens - e0.tokens) / (e1.cpuS - e0.cpuS),
    clientCpu: (c1.cpuS - c0.cpuS) / wallS,
    clientTokensPerCpuS: (c1.tokens - c0.tokens) / (c1.cpuS - c0.cpuS),
    errors: c1.errors,
    firstError: c1.firstError,
  };
}

console.log(
  `engine-sim bench: ${STREAMS} concurrent streams, closed loop, ${OUTPUT} output tokens each (ignore_eos), llama-2-7b on A100-80GB, ${WARMUP} s warm-up + ${SECONDS} s measured, ${availableParallelism()} cores`,
);
const header = [
  'flush ms',
  'speed',
  'engines',
  'clients',
  'running',
  'tokens/s (engines)',
  'tokens/s (clients)',
  'keep-up',
  'engine CPU',
  'tok/engine-CPU-s',
  'client CPU',
  'tok/client-CPU-s',
  'errors',
];
console.log(header.join(' | '));
for (const flushMs of FLUSHES) {
  for (const { sims, workers } of LAYOUTS) {
    for (const speed of SPEEDS) {
      const r = await run(speed, flushMs, sims, workers);
      const cells = [
        r.flushMs,
        r.speed,
        r.sims,
        r.workers,
        r.running,
        r.tokensPerS.toFixed(0),
        r.clientTokensPerS.toFixed(0),
        r.keepUp.toFixed(2),
        r.engineCpu.toFixed(2),
        r.engineTokensPerCpuS.toFixed(0),
        r.clientCpu.toFixed(2),
        r.clientTokensPerCpuS.toFixed(0),
        r.errors,
      ];
      console.log(cells.map((c, i) => String(c).padStart(header[i]!.length)).join(' | '));
      if (r.firstError) console.log(`  first client error: ${r.firstError}`);
    }
  }
}
