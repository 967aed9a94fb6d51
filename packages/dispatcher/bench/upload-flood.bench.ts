/**
 * Does one tenant uploading files as fast as it can move another tenant's chat? Real processes: a
 * `fairway serve` at its defaults (access log on) on a Redis and a NATS of this bench's own, two
 * `fairway engine-sim` replicas with their agents. Phase "alone": `--clients` closed-loop chat
 * clients of one tenant for `--duration` seconds. Phase "flood": the same clients while
 * `--uploaders` connections of another tenant upload `--file-mib` files back to back, under a
 * storage quota large enough to take `--quota-files` of them (the rest are refused). Each phase is
 * run `--rounds` times, alternating. Prints chat p50/p99 and errors per phase, their ratio, the
 * uploads stored and refused, and Redis's memory.
 *
 * Usage: npm run bench:upload-flood [-- --duration 8 --clients 16 --uploaders 4 --file-mib 1
 *        --quota-files 200 --rounds 2]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { startNatsServer, startRedisServer } from '@fairway/testkit';
import { Redis } from 'ioredis';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '8' },
    clients: { type: 'string', default: '16' },
    uploaders: { type: 'string', default: '4' },
    'file-mib': { type: 'string', default: '1' },
    'quota-files': { type: 'string', default: '200' },
    rounds: { type: 'string', default: '2' },
  },
});
const DURATION_MS = Number(args.duration) * 1000;
const CLIENTS = Number(args.clients);
const UPLOADERS = Number(args.uploaders);
const FILE_BYTES = Math.round(Number(args['file-mib']) * 1024 * 1024);
const QUOTA_FILES = Number(args['quota-files']);
const ROUNDS = Number(args.rounds);
const BIN = resolve(import.meta.dirname, '..', '..', 'cli', 'bin', 'fairway.js');
const MODEL = 'llama-2-7b';
const VICTIM = 'sk-bench-victim-000001';
const HOARDER = 'sk-bench-hoarder-00001';

const children: ChildProcess[] = [];

/** Starts `fairway …` and resolves with the URL its ready line names. */
function fairway(argv: string[], env: Record<string, string>): Promise<string> {
  const child = spawn(process.execPath, [BIN, ...argv], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  children.push(child);
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`fairway ${argv[0]} did not start`)), 30_000);
    createInterface({ input: child.stdout! }).on('line', (l) => {
      const m = /listening on (http:\S+)/.exec(l);
      if (m?.[1] !== undefined) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    child.once('exit', (code) => fail(new Error(`fairway ${argv[0]} exited with ${code}`)));
  });
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

interface Phase {
  readonly latencies: number[];
  errors: number;
  stored: number;
  refused: number;
}

async function chatLoop(url: string, until: number, phase: Phase): Promise<void> {
  while (performance.now() < until) {
    const t0 = performance.now();
    try {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${VICTIM}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: 'hello there' }],
          max_tokens: 8,
          fairway_output_tokens: 8,
        }),
      });
      await res.arrayBuffer();
      if (res.status === 200) phase.latencies.push(performance.now() - t0);
      else phase.errors++;
    } catch {
      phase.errors++;
    }
  }
}

async function uploadLoop(url: string, until: number, phase: Phase, body: string): Promise<void> {
  while (performance.now() < until) {
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([body]), 'flood.jsonl');
    const res = await fetch(`${url}/v1/files`, {
      method: 'POST',
      headers: { authorization: `Bearer ${HOARDER}` },
      body: form,
    }).catch(() => undefined);
    await res?.arrayBuffer();
    if (res?.status === 200) phase.stored++;
    else phase.refused++;
  }
}

/** A batch input of about `bytes`: valid lines, each its own custom_id. */
function batchFile(bytes: number): string {
  const lines: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const line = JSON.stringify({
      custom_id: `r${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(200) }], max_tokens: 4 },
    });
    lines.push(line);
    size += line.length + 1;
  }
  return `${lines.join('\n')}\n`;
}

async function main(): Promise<void> {
  const redis = await startRedisServer();
  const nats = await startNatsServer();
  const dir = mkdtempSync(join(tmpdir(), 'fairway-upload-flood-'));
  const stop = async (): Promise<void> => {
    for (const c of children) c.kill('SIGTERM');
    await redis.stop();
    await nats.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    writeFileSync(
      join(dir, 'fairway.yaml'),
      [
        'tenants:',
        `  - { id: victim, keys: [{ key: ${VICTIM} }] }`,
        `  - id: hoarder`,
        `    keys: [{ key: ${HOARDER} }]`,
        `    storage: { maxFiles: ${QUOTA_FILES}, maxBytes: ${QUOTA_FILES * (FILE_BYTES + 65_536)}, uploadsPerMinute: 100000 }`,
        'pools:',
        `  - { id: llama, model: ${MODEL} }`,
        '',
      ].join('\n'),
    );
    const url = await fairway(
      ['serve', '-c', join(dir, 'fairway.yaml'), '--port', '0', '--operator-port', '0'],
      {
        REDIS_URL: redis.url,
        NATS_URL: nats.url,
      },
    );
    for (const id of ['bench-a', 'bench-b'])
      await fairway(
        ['engine-sim', '--port', '0', '--speed', '100', '--replica-id', id, '--nats-url', nats.url],
        {},
      );
    const until = performance.now() + 20_000;
    for (;;) {
      const ok = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${VICTIM}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
      }).then((r) => r.status === 200);
      if (ok) break;
      if (performance.now() > until) throw new Error('the fleet did not start serving');
      await new Promise((r) => setTimeout(r, 200));
    }
    const body = batchFile(FILE_BYTES);
    const phases: Record<'alone' | 'flood', Phase> = {
      alone: { latencies: [], errors: 0, stored: 0, refused: 0 },
      flood: { latencies: [], errors: 0, stored: 0, refused: 0 },
    };
    for (let round = 0; round < ROUNDS; round++)
      for (const name of ['alone', 'flood'] as const) {
        const end = performance.now() + DURATION_MS;
        const phase = phases[name];
        await Promise.all([
          ...Array.from({ length: CLIENTS }, () => chatLoop(url, end, phase)),
          ...(name === 'flood'
            ? Array.from({ length: UPLOADERS }, () => uploadLoop(url, end, phase, body))
            : []),
        ]);
      }
    const r = new Redis(redis.url);
    const memory = /used_memory:(\d+)/.exec(await r.info('memory'))?.[1];
    await r.quit();
    console.log(
      `machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load ${loadavg()
        .map((l) => l.toFixed(2))
        .join(
          ' ',
        )}; fairway serve at its defaults; ${CLIENTS} chat clients, ${UPLOADERS} uploaders of ${(FILE_BYTES / 1048576).toFixed(1)} MiB files, quota ${QUOTA_FILES} files; ${ROUNDS} × ${DURATION_MS / 1000} s per phase`,
    );
    console.log('| phase | chat requests | errors | p50 ms | p99 ms | uploads stored | uploads refused |');
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    const row = (name: 'alone' | 'flood') => {
      const p = phases[name];
      const sorted = [...p.latencies].sort((a, b) => a - b);
      console.log(
        `| ${name} | ${sorted.length} | ${p.errors} | ${percentile(sorted, 50).toFixed(1)} | ${percentile(sorted, 99).toFixed(1)} | ${p.stored} | ${p.refused} |`,
      );
      return sorted;
    };
    const a = row('alone');
    const f = row('flood');
    console.log(
      `flood / alone: p50 ${(percentile(f, 50) / percentile(a, 50)).toFixed(2)}×, p99 ${(percentile(f, 99) / percentile(a, 99)).toFixed(2)}×; Redis used_memory ${((Number(memory) || 0) / 1048576).toFixed(1)} MiB`,
    );
  } finally {
    await stop();
  }
}

await main();
