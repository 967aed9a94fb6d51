/**
 * The mixed run: interactive traffic's time to first token with and without a large
 * batch running on the same fleet. `fairway up` on a throw-away Redis (the batch's BullMQ jobs and
 * state) with two simulated engines; closed-loop interactive clients (tenant globex, streaming,
 * SLO class interactive) run first alone, then while a batch of tenant acme runs (its lines in the
 * configured batch class), until the batch finishes. Prints one table.
 *
 *   npm run bench:batch-mix                 # 5,000 lines
 *   BATCH_MIX_LINES=1000 npm run bench:batch-mix
 *
 * Knobs: BATCH_MIX_LINES, BATCH_MIX_CLIENTS (4), BATCH_MIX_BASELINE_S (20), BATCH_MIX_SPEED (4),
 * BATCH_MIX_CONCURRENCY (8 lines in flight).
 */
import { createLogger } from '@fairway/core';
import { startRedisServer } from '@fairway/testkit';
import OpenAI, { toFile } from 'openai';
import { startUp } from '../src/commands/up.ts';

const LINES = Number(process.env.BATCH_MIX_LINES ?? 5000);
const CLIENTS = Number(process.env.BATCH_MIX_CLIENTS ?? 4);
const BASELINE_S = Number(process.env.BATCH_MIX_BASELINE_S ?? 20);
const INTERACTIVE_TOKENS = 32;
const BATCH_TOKENS = 16;
/** Batch lines in flight (FAIRWAY_BATCH_CONCURRENCY of the dispatcher). */
const CONCURRENCY = process.env.BATCH_MIX_CONCURRENCY ?? '8';
const MODEL = 'llama-2-7b';

/** One interactive request: time to its first content chunk and its wait in fairway's queue, ms. */
interface Sample {
  readonly ttft: number;
  /** `x-fairway-queue-ms`: the part of the TTFT the scheduler's queue took. */
  readonly queue: number;
}

/** One streamed chat completion (undefined if it failed). */
async function ttftOnce(url: string): Promise<Sample | undefined> {
  const start = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: 'Bearer sk-fairway-globex-demo', 'content-type': 'application/json' },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: 'x'.repeat(36) }],
      max_tokens: INTERACTIVE_TOKENS,
      fairway_output_tokens: INTERACTIVE_TOKENS,
      stream: true,
    }),
  });
  if (res.status !== 200 || res.body === null) {
    await res.text();
    return undefined;
  }
  let first: number | undefined;
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    if (first === undefined && decoder.decode(chunk as Uint8Array).includes('"content"'))
      first = performance.now() - start;
  }
  return first === undefined
    ? undefined
    : { ttft: first, queue: Number(res.headers.get('x-fairway-queue-ms') ?? Number.NaN) };
}

/** Runs `CLIENTS` closed-loop interactive clients until `stop()` is true; returns the TTFTs and failures. */
async function interactive(url: string, stop: () => boolean): Promise<{ samples: Sample[]; failed: number }> {
  const samples: Sample[] = [];
  let failed = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (!stop()) {
        const t = await ttftOnce(url).catch(() => undefined);
        if (t === undefined) failed++;
        else samples.push(t);
      }
    }),
  );
  return { samples, failed };
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
}

const redis = await startRedisServer();
const up = await startUp({
  redisUrl: redis.url,
  port: 0,
  operatorPort: 0,
  env: { FAIRWAY_BATCH_CONCURRENCY: CONCURRENCY },
  engines: 2,
  speed: Number(process.env.BATCH_MIX_SPEED ?? 4),
  maxNumSeqs: 16,
  logger: createLogger({ level: 'error', name: 'batch-mix' }),
});
try {
  const acme = new OpenAI({ apiKey: 'sk-fairway-acme-demo', baseURL: `${up.url}/v1`, maxRetries: 0 });
  // Warm up the path (connections, JIT) before measuring.
  await interactive(
    up.url,
    (() => {
      const until = performance.now() + 2000;
      return () => performance.now() > until;
    })(),
  );

  const baseEnd = performance.now() + BASELINE_S * 1000;
  const alone = await interactive(up.url, () => performance.now() > baseEnd);

  const input = Array.from({ length: LINES }, (_, i) =>
    JSON.stringify({
      custom_id: `mix-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: {
        model: MODEL,
        messages: [{ role: 'user', content: `line ${i}` }],
        max_tokens: BATCH_TOKENS,
        fairway_output_tokens: BATCH_TOKENS,
      },
    }),
  ).join('\n');
  const file = await acme.files.create({
    file: await toFile(Buffer.from(input), 'mix.jsonl'),
    purpose: 'batch',
  });
  const batchStart = performance.now();
  const created = await acme.batches.create({
    input_file_id: file.id,
    endpoint: '/v1/chat/completions',
    completion_window: '24h',
  });
  let finished = false;
  let last = created;
  const poll = (async () => {
    while (!['completed', 'failed', 'cancelled', 'expired'].includes(last.status)) {
      await new Promise((r) => setTimeout(r, 250));
      last = await acme.batches.retrieve(created.id);
    }
    finished = true;
  })();
  // Measure only while the batch has lines running.
  while (last.status === 'validating') await new Promise((r) => setTimeout(r, 20));
  const mixed = await interactive(up.url, () => finished);
  await poll;
  const batchS = (performance.now() - batchStart) / 1000;

  const ttfts = (r: { samples: Sample[] }) => r.samples.map((x) => x.ttft);
  const p50a = quantile(ttfts(alone), 0.5);
  const p50b = quantile(ttfts(mixed), 0.5);
  const ms = (v: number) => v.toFixed(1).padStart(8);
  const row = (name: string, r: { samples: Sample[]; failed: number }) => {
    const t = ttfts(r);
    const q = r.samples.map((x) => x.queue);
    return `| ${name.padEnd(26)} | ${String(t.length).padStart(8)} | ${String(r.failed).padStart(6)} | ${ms(quantile(t, 0.5))} | ${ms(quantile(t, 0.9))} | ${ms(quantile(t, 0.99))} | ${ms(quantile(q, 0.5))} | ${ms(quantile(q, 0.99))} |`;
  };
  console.log(
    `batch-mix: ${CLIENTS} closed-loop interactive clients (${INTERACTIVE_TOKENS} output tokens, streamed), ` +
      `batch of ${LINES} lines (${BATCH_TOKENS} output tokens, ${CONCURRENCY} in flight), 2 engine-sims (max-num-seqs 16, speed ${process.env.BATCH_MIX_SPEED ?? 4})\n`,
  );
  console.log(
    '| interactive phase          | requests | failed | TTFT p50 | TTFT p90 | TTFT p99 | queue p50 | queue p99 |',
  );
  console.log(
    '|----------------------------|---------:|-------:|---------:|---------:|---------:|----------:|----------:|',
  );
  console.log(row('alone', alone));
  console.log(row('with the batch running', mixed));
  console.log("(ms; queue = x-fairway-queue-ms, the wait in fairway's fair queue before dispatch)");
  console.log(`\nTTFT p50 with the batch / alone: ${(p50b / p50a).toFixed(2)}x (target <= 1.2x)`);
  console.log(
    `batch: ${last.status} in ${batchS.toFixed(1)} s (${(LINES / batchS).toFixed(0)} lines/s), request_counts ${JSON.stringify(last.request_counts)}`,
  );
} finally {
  await up.close();
  await redis.stop();
}
