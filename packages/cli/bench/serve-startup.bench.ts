/**
 * How long `fairway serve` takes from spawn to its "listening" line, and its resident memory then:
 * the cost of what the command loads at start. Runs the real binary against Redis and NATS (a
 * random prefix per run) RUNS times and prints the median of each, with the load average.
 *
 *   REDIS_URL=redis://127.0.0.1:6379 NATS_URL=nats://127.0.0.1:4222 npx tsx packages/cli/bench/serve-startup.bench.ts
 *
 * Knobs: SERVE_STARTUP_RUNS (5).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';

const RUNS = Number(process.env.SERVE_STARTUP_RUNS ?? 5);
const ROOT = resolve(import.meta.dirname, '..', '..', '..');
const BIN = resolve(ROOT, 'packages', 'cli', 'bin', 'fairway.js');
const CONFIG = resolve(ROOT, 'infra', 'fairway.example.yaml');

/** Resident set size of a live process, MiB (Linux). */
function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(/(\d+)/.exec(line ?? '')?.[1] ?? Number.NaN) / 1024;
}

async function once(): Promise<{ ms: number; rss: number }> {
  const started = performance.now();
  const proc = spawn(
    process.execPath,
    [
      BIN,
      'serve',
      '--config',
      CONFIG,
      '--port',
      '0',
      '--operator-port',
      '0',
      '--prefix',
      `bench-${randomBytes(4).toString('hex')}`,
    ],
    {
      env: {
        ...process.env,
        REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
        NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const exited = new Promise((r) => proc.once('exit', r));
  const ms = await new Promise<number>((res, rej) => {
    proc.once('exit', (code) => rej(new Error(`serve exited with ${code} before listening`)));
    createInterface({ input: proc.stdout }).on('line', (l) => {
      if (/listening on/.test(l)) res(performance.now() - started);
    });
  });
  // Whatever start-up left to do in the background (the first heartbeats, timers) settles first.
  await new Promise((r) => setTimeout(r, 500));
  const rss = rssMiB(proc.pid ?? 0);
  proc.kill('SIGTERM');
  await exited;
  return { ms, rss };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? Number.NaN;
}

const samples: { ms: number; rss: number }[] = [];
for (let i = 0; i < RUNS; i++) samples.push(await once());
const load = loadavg().map((x) => x.toFixed(2));
console.log(
  `fairway serve start-up over ${RUNS} runs: median ${median(samples.map((s) => s.ms)).toFixed(0)} ms to "listening", median RSS ${median(samples.map((s) => s.rss)).toFixed(1)} MiB (runs: ${samples.map((s) => `${s.ms.toFixed(0)} ms/${s.rss.toFixed(0)} MiB`).join(', ')}); load average ${load.join(' ')}`,
);
