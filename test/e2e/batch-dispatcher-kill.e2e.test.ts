import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNatsServer, startRedisServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { E2E_MODEL, E2E_POOL, singleTenantConfig } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startFairway } from './support/processes.ts';

/**
 * A dispatcher SIGKILLed in the middle of a batch, on a real fleet: two `fairway serve`
 * dispatchers sharing a throw-away Redis (BullMQ and the batch state) and a NATS server, two
 * `fairway engine-sim` replicas. The lines the dead one held (BullMQ locks, queued and running
 * requests) run again on the survivor once their locks lapse; the batch completes with every
 * line in the output exactly once.
 */
const MODEL = E2E_MODEL;
const POOL = E2E_POOL;
const KEY = 'sk-batch-kill-0001';
const LINES = 300;
const CONFIG = singleTenantConfig(KEY, 60);

describe('a dispatcher SIGKILLed mid-batch', () => {
  const prefix = uniquePrefix('bkill');
  let nats: TestServer;
  let redis: TestServer;
  const engines: FairwayProcess[] = [];
  const dispatchers: FairwayProcess[] = [];

  beforeAll(async () => {
    [nats, redis] = await Promise.all([startNatsServer(), startRedisServer()]);
    const dir = mkdtempSync(join(tmpdir(), 'fairway-bkill-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    const common = ['--nats-url', nats.url, '--prefix', prefix, '--pool', POOL, '--log-level', 'warn'];
    engines.push(...(await startEngineSims(2, ['--speed', '2', '--max-num-seqs', '8', ...common])));
    dispatchers.push(
      ...(await Promise.all(
        ['a', 'b'].map((id) =>
          startFairway(['serve', '--id', id], /listening on (http:\/\/\S+)/, {
            FAIRWAY_CONFIG: configPath,
            REDIS_URL: redis.url,
            NATS_URL: nats.url,
            FAIRWAY_PREFIX: prefix,
            PORT: '0',
            FAIRWAY_LEASE_MS: '3000',
            FAIRWAY_OPERATOR_PORT: '0',
            FAIRWAY_LOG_LEVEL: 'warn',
            FAIRWAY_BATCH_LOCK_MS: '2000',
            FAIRWAY_BATCH_CONCURRENCY: '16',
          }),
        ),
      )),
    );
  }, 90_000);

  afterAll(async () => {
    await Promise.all([...dispatchers, ...engines].map((p) => p.stop()));
    await Promise.all([nats?.stop(), redis?.stop()]);
  }, 60_000);

  it('completes the batch on the survivor with every line exactly once', async () => {
    const [a, b] = dispatchers as [FairwayProcess, FairwayProcess];
    const viaA = new OpenAI({ apiKey: KEY, baseURL: `${a.url}/v1`, maxRetries: 0 });
    const viaB = new OpenAI({ apiKey: KEY, baseURL: `${b.url}/v1`, maxRetries: 0 });
    const input = Array.from({ length: LINES }, (_, i) =>
      JSON.stringify({
        custom_id: `k-${i}`,
        method: 'POST',
        url: '/v1/completions',
        body: { model: MODEL, prompt: `line ${i}`, max_tokens: 24 },
      }),
    ).join('\n');
    const file = await viaA.files.create({
      file: await toFile(Buffer.from(input), 'kill.jsonl'),
      purpose: 'batch',
    });
    const batch = await viaA.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/completions',
      completion_window: '24h',
    });
    // Both dispatchers take lines; kill one once part of the batch is done.
    let before = 0;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
      const r = await viaB.batches.retrieve(batch.id);
      before = r.request_counts?.completed ?? 0;
      if (before >= LINES / 4) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(before).toBeGreaterThan(0);
    const exited = new Promise((r) => a.proc.once('exit', r));
    a.kill9();
    await exited;
    let done = await viaB.batches.retrieve(batch.id);
    for (
      const deadline = Date.now() + 90_000;
      !['completed', 'failed', 'expired', 'cancelled'].includes(done.status);
    ) {
      if (Date.now() > deadline)
        throw new Error(
          `batch still ${done.status}: ${JSON.stringify(done.request_counts)}\n${b.output.slice(-30).join('\n')}`,
        );
      await new Promise((r) => setTimeout(r, 200));
      done = await viaB.batches.retrieve(batch.id);
    }
    console.info(
      `batch SIGKILL: ${before} of ${LINES} lines done when dispatcher a was killed; the batch ${done.status} on b`,
    );
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
    expect(done.error_file_id).toBeNull();
    const out = (await (await viaB.files.content(done.output_file_id!)).text()).trim().split('\n');
    const ids = out.map((l) => (JSON.parse(l) as { custom_id: string }).custom_id);
    // Every line exactly once, in input order.
    expect(ids).toEqual(Array.from({ length: LINES }, (_, i) => `k-${i}`));
  }, 180_000);
});
