import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BatchKeys } from '@fairway/batch';
import { freePort, natsUrl, type RedisCluster, startRedisCluster, uniquePrefix } from '@fairway/testkit';
import { Cluster } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { E2E_MODEL, E2E_POOL, singleTenantConfig } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startFairway, untilServed } from './support/processes.ts';

/**
 * The Files and Batch API on a Redis Cluster: two `fairway serve` dispatchers on a throw-away
 * 3-primary cluster (`REDIS_CLUSTER`) and the machine's NATS, two `fairway engine-sim` replicas.
 * A file uploaded through one dispatcher becomes a batch whose lines both dispatchers' BullMQ
 * workers run; its output file is read through the other.
 */
const KEY = 'sk-cluster-batch-0001';
const LINES = 200;
/** The batch SLO class of the default classes (the lowest priority): batch lines run in it. */
const BATCH_CLASS = 'batch-2';

/** Completed requests in the batch SLO class, as a dispatcher's operator port reports them. */
async function batchClassRequests(d: FairwayProcess): Promise<number> {
  const metricsUrl = /metrics on (http:\/\/\S+\/metrics)/.exec(d.line)?.[1];
  if (metricsUrl === undefined) throw new Error(`no metrics URL in: ${d.line}`);
  const text = await (await fetch(metricsUrl)).text();
  let n = 0;
  for (const line of text.split('\n'))
    if (line.startsWith('fairway_slo_requests_total{') && line.includes(`slo_class="${BATCH_CLASS}"`))
      n += Number(line.slice(line.lastIndexOf(' ') + 1));
  return n;
}

describe('the Batch API on a 3-primary Redis Cluster, two dispatchers', () => {
  const prefix = uniquePrefix('clbatch');
  const procs: FairwayProcess[] = [];
  const dispatchers: FairwayProcess[] = [];
  let cluster: RedisCluster;
  let client: Cluster;

  beforeAll(async () => {
    cluster = await startRedisCluster({ primaries: 3 });
    client = new Cluster(cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })));
    const dir = mkdtempSync(join(tmpdir(), 'fairway-clbatch-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, singleTenantConfig(KEY, 60));
    const common = ['--nats-url', natsUrl(), '--prefix', prefix, '--pool', E2E_POOL, '--log-level', 'warn'];
    const engines = startEngineSims(2, ['--speed', '10', '--max-num-seqs', '8', ...common]);
    const env = {
      FAIRWAY_CONFIG: configPath,
      REDIS_CLUSTER: cluster.seeds,
      // Not the test run's single Redis (an empty variable counts as unset).
      REDIS_URL: '',
      NATS_URL: natsUrl(),
      FAIRWAY_PREFIX: prefix,
      PORT: '0',
      FAIRWAY_LOG_LEVEL: 'warn',
      FAIRWAY_BATCH_CONCURRENCY: '4',
    };
    // Operator ports on: each dispatcher's metrics count the batch lines it ran.
    const operatorPorts = [await freePort(), await freePort()];
    const serves = ['a', 'b'].map((id, i) =>
      startFairway(['serve', '--id', id], /listening on (http:\/\/\S+)/, {
        ...env,
        FAIRWAY_OPERATOR_PORT: String(operatorPorts[i]),
      }),
    );
    procs.push(...(await engines));
    dispatchers.push(...(await Promise.all(serves)));
    procs.push(...dispatchers);
    // Every dispatcher must have heard a replica register before the batch starts.
    for (const d of dispatchers)
      await untilServed(d, async () => {
        const res = await fetch(`${d.url}/v1/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: E2E_MODEL, prompt: 'warm up', max_tokens: 1 }),
        });
        return res.status;
      });
  }, 90_000);

  afterAll(async () => {
    try {
      await Promise.all(procs.map((p) => p.stop()));
      client?.disconnect();
    } finally {
      // The cluster's processes never outlive the suite, whatever failed above.
      await cluster?.stop();
    }
  }, 30_000);

  it('runs an uploaded batch on both dispatchers and returns every line once in its output file', async () => {
    const [a, b] = dispatchers as [FairwayProcess, FairwayProcess];
    const viaA = new OpenAI({ apiKey: KEY, baseURL: `${a.url}/v1`, maxRetries: 0 });
    const viaB = new OpenAI({ apiKey: KEY, baseURL: `${b.url}/v1`, maxRetries: 0 });
    const input = Array.from({ length: LINES }, (_, i) =>
      JSON.stringify({
        custom_id: `c-${i}`,
        method: 'POST',
        url: '/v1/completions',
        body: { model: E2E_MODEL, prompt: `line ${i}`, max_tokens: 8 },
      }),
    ).join('\n');
    const before = await Promise.all(dispatchers.map(batchClassRequests));
    const file = await viaA.files.create({
      file: await toFile(Buffer.from(input), 'in.jsonl'),
      purpose: 'batch',
    });
    expect(file).toMatchObject({ object: 'file', purpose: 'batch', bytes: Buffer.byteLength(input) });
    const created = await viaA.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/completions',
      completion_window: '24h',
    });
    let done = await viaB.batches.retrieve(created.id);
    for (
      const deadline = Date.now() + 90_000;
      !['completed', 'failed', 'expired', 'cancelled'].includes(done.status);
    ) {
      if (Date.now() > deadline)
        throw new Error(`batch still ${done.status}: ${JSON.stringify(done.request_counts)}`);
      await new Promise((r) => setTimeout(r, 200));
      done = await viaB.batches.retrieve(created.id);
    }
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
    expect(done.error_file_id).toBeNull();
    const out = (await (await viaB.files.content(done.output_file_id!)).text())
      .trim()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as { custom_id: string; response: { status_code: number; body: { object: string } } },
      );
    expect(out.map((l) => l.custom_id)).toEqual(Array.from({ length: LINES }, (_, i) => `c-${i}`));
    for (const l of out)
      expect(l.response).toMatchObject({ status_code: 200, body: { object: 'text_completion' } });
    // Both dispatchers' workers took lines from the one queue; together they ran each line once.
    const after = await Promise.all(dispatchers.map(batchClassRequests));
    const ran = after.map((n, i) => n - (before[i] ?? 0));
    console.info(`cluster batch: dispatcher a ran ${ran[0]} lines, b ${ran[1]}, of ${LINES}`);
    for (const n of ran) expect(n).toBeGreaterThan(0);
    expect(ran.reduce((s, n) => s + n, 0)).toBe(LINES);
  }, 120_000);

  it('keeps every batch key and BullMQ key on the one primary serving the prefix’s slot', async () => {
    const keys = new BatchKeys(prefix);
    const slot = Number(await client.cluster('KEYSLOT', keys.base));
    const serving = (await client.cluster('SLOTS')).find(
      ([from, to]) => slot >= from && slot <= to,
    )?.[2]?.[1];
    const holders: number[] = [];
    let bull = 0;
    for (const node of client.nodes('master')) {
      const found = await node.keys(`${keys.base}:*`);
      if (found.length > 0) holders.push(node.options.port ?? 0);
      bull += found.filter((k) => k.startsWith(`${keys.bullPrefix}:`)).length;
    }
    expect(holders).toEqual([serving]);
    expect(bull).toBeGreaterThan(0);
  });
});
