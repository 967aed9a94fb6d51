// How many concurrent streams and streamed tokens per second engine-sim sustains on this machine:
// one engine-sim process, then several, each loaded by separate client processes that read every
// stream through VllmClient (closed loop: a finished stream is replaced at once).
//
// Run: npm run bench:engine-sim [-- --streams 2000 --seconds 8 --speed 20]
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '@fairway/testkit';
import { VllmClient } from '../src/vllm-client.ts';
import type { WorkerReport } from './load-worker.ts';

const { values } = parseArgs({
  options: {
    streams: { type: 'string', default: '2000' },
    seconds: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '3' },
    speed: { type: 'string', default: '20' },
    output: { type: 'string', default: '400' },
    layouts: { type: 'string', default: '1x1,2x2,3x2' },
    flush: { type: 'string', default: '0,20' },
  },
});
const STREAMS = Number(values.streams);
const SECONDS = Number(values.seconds);
const WARMUP = Number(values.warmup);
const SPEED = Number(values.speed);
const OUTPUT = Number(values.output);
const FLUSHES = values.flush.split(',').map(Number);
const LAYOUTS = values.layouts.split(',').map((l) => {
  const [sims, workers] = l.split('x').map(Number);
  return { sims: sims!, workers: workers! };
});

const simBin = fileURLToPath(new URL('../src/bin/engine-sim.ts', import.meta.url));
const workerScript = fileURLToPath(new URL('./load-worker.ts', import.meta.url));

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

async function startSim(flushMs: number): Promise<{ url: string; proc: ChildProcess }> {
  const port = await freePort();
  const proc = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      simBin,
      '--port',
      String(port),
      '--speed',
      String(SPEED),
      // Room for every stream at once: the engine, not the cache, is what is measured.
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
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  track(proc);
  const url = `http://127.0.0.1:${port}`;
  const client = new VllmClient({ url });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await client.health();
      break;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  await client.close();
  return { url, proc };
}

/** Generation tokens and running requests summed over the engines, and when the scrape ended. */
async function engineTokens(
  urls: readonly string[],
): Promise<{ tokens: number; running: number; atMs: number }> {
  const pages = await Promise.all(
    urls.map(async (url) => {
      // A saturated engine answers scrapes late: give it time.
      const c = new VllmClient({ url, controlTimeoutMs: 30_000 });
      const m = await c.metrics();
      await c.close();
      return m;
    }),
  );
  return {
    tokens: pages.reduce((n, m) => n + m.generationTokensTotal, 0),
    running: pages.reduce((n, m) => n + m.running, 0),
    atMs: performance.timeOrigin + performance.now(),
  };
}

interface Result {
  readonly flushMs: number;
  readonly sims: number;
  readonly workers: number;
  readonly open: number;
  readonly engineRunning: number;
  readonly clientTokensPerS: number;
  readonly engineTokensPerS: number;
  readonly errors: number;
}

async function runLayout(sims: number, workers: number, flushMs: number): Promise<Result> {
  const engines = await Promise.all(Array.from({ length: sims }, () => startSim(flushMs)));
  const urls = engines.map((e) => e.url);
  const latest = new Map<number, WorkerReport>();
  const procs = Array.from({ length: workers }, (_, w) => {
    const streams = Math.floor(STREAMS / workers) + (w < STREAMS % workers ? 1 : 0);
    // Each worker spreads its streams over every engine.
    const p = fork(workerScript, [JSON.stringify({ urls, streams, outputTokens: OUTPUT, promptChars: 64 })], {
      execArgv: ['--import', 'tsx'],
    });
    p.on('message', (m) => latest.set(w, m as WorkerReport));
    return track(p);
  });
  const sum = () => {
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
    return { tokens, open, errors, atMs, firstError };
  };
  await new Promise((r) => setTimeout(r, WARMUP * 1000));
  const e0 = await engineTokens(urls);
  const c0 = sum();
  let minOpen = Number.POSITIVE_INFINITY;
  for (let s = 0; s < SECONDS; s++) {
    await new Promise((r) => setTimeout(r, 1000));
    minOpen = Math.min(minOpen, sum().open);
  }
  const c1 = sum();
  const e1 = await engineTokens(urls);
  for (const p of procs) p.send('stop');
  await Promise.all(procs.map((p) => new Promise((r) => p.once('exit', r))));
  for (const e of engines) e.proc.kill('SIGTERM');
  await Promise.all(engines.map((e) => new Promise((r) => e.proc.once('exit', r))));
  if (c1.firstError) console.log(`  (first client error: ${c1.firstError})`);
  return {
    flushMs,
    sims,
    workers,
    open: minOpen,
    engineRunning: e1.running,
    clientTokensPerS: ((c1.tokens - c0.tokens) * 1000) / (c1.atMs - c0.atMs),
    engineTokensPerS: ((e1.tokens - e0.tokens) * 1000) / (e1.atMs - e0.atMs),
    errors: c1.errors,
  };
}

console.log(
  `engine-sim bench: ${STREAMS} concurrent streams (closed loop, ${OUTPUT} output tokens each, llama-2-7b on A100-80GB at speed ${SPEED}), ${WARMUP} s warm-up + ${SECONDS} s measured, on ${(await import('node:os')).availableParallelism()} cores`,
);
console.log(
  'flush ms | engine-sim procs | client procs | streams open (min) | running in engines | tokens/s (clients) | tokens/s (engines) | per engine | errors',
);
for (const flushMs of FLUSHES) {
  for (const { sims, workers } of LAYOUTS) {
    const r = await runLayout(sims, workers, flushMs);
    console.log(
      [
        String(r.flushMs).padStart(8),
        String(r.sims).padStart(16),
        String(r.workers).padStart(12),
        String(r.open).padStart(18),
        String(r.engineRunning).padStart(18),
        r.clientTokensPerS.toFixed(0).padStart(18),
        r.engineTokensPerS.toFixed(0).padStart(18),
        (r.engineTokensPerS / r.sims).toFixed(0).padStart(10),
        String(r.errors),
      ].join(' | '),
    );
  }
}
