import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  purgeStore,
  redisSlotGroupStore,
  type SlotGroupStore,
  StoreKeys,
  slotGroupPrefix,
} from '@fairway/store';
import { natsUrl, type RedisCluster, startRedisCluster, uniquePrefix } from '@fairway/testkit';
import { Cluster } from 'ioredis';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClosedLoop, openai, type StreamRecord } from './support/load.ts';
import { type FairwayProcess, startFairway, untilServed } from './support/processes.ts';

/**
 * Two `fairway serve` processes on a throw-away 3-primary Redis Cluster (`REDIS_CLUSTER`) and the
 * machine's NATS, two pools in two slot groups whose slots are on different primaries, one
 * `fairway engine-sim` per pool. Engines run 10x faster than the GPU they model and batch at most
 * 2 sequences, so queues fill with little load (two cores).
 */
const POOLS = { a: { pool: 'pa', model: 'llama-2-7b' }, b: { pool: 'pb', model: 'llama-2-7b-b' } } as const;
const SEQS = 2;
const PROMPT = 'x'.repeat(12);
const PROMPT_TOKENS = 11;
const KEYS = {
  alpha: 'sk-cluster-alpha-0001',
  heavy: 'sk-cluster-heavy-0001',
  light: 'sk-cluster-light-0001',
  rpm30: 'sk-cluster-rpm30-0001',
};

/** Slot group names for pools a and b whose slots live on two different primaries. */
async function twoGroupsApart(client: Cluster, prefix: string): Promise<[string, string]> {
  const primaryOf = async (group: string): Promise<number> => {
    const slot = Number(
      await client.cluster('KEYSLOT', new StoreKeys(slotGroupPrefix(prefix, group)).layout()),
    );
    for (const [from, to, primary] of await client.cluster('SLOTS'))
      if (primary !== undefined && slot >= from && slot <= to) return primary[1];
    throw new Error(`no primary serves slot ${slot}`);
  };
  const first = await primaryOf('ga');
  for (let i = 0; i < 100; i++) if ((await primaryOf(`gb${i}`)) !== first) return ['ga', `gb${i}`];
  throw new Error('cannot place two groups on two primaries');
}

describe('two fairway serve processes on a 3-primary Redis Cluster, two pools in two slot groups', () => {
  const prefix = uniquePrefix('clfleet');
  const procs: FairwayProcess[] = [];
  const dispatchers: FairwayProcess[] = [];
  let cluster: RedisCluster;
  let client: Cluster;
  let store: SlotGroupStore;
  let groups: [string, string];

  beforeAll(async () => {
    cluster = await startRedisCluster({ primaries: 3 });
    client = new Cluster(cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })));
    groups = await twoGroupsApart(client, prefix);
    const dir = mkdtempSync(join(tmpdir(), 'fairway-clfleet-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(
      configPath,
      `
tenants:
  - { id: alpha, keys: [{ key: ${KEYS.alpha} }] }
  - { id: heavy, keys: [{ key: ${KEYS.heavy} }] }
  - { id: light, keys: [{ key: ${KEYS.light} }] }
  - { id: rpm30, limits: { rpm: 30 }, keys: [{ key: ${KEYS.rpm30} }] }
pools:
  - { id: ${POOLS.a.pool}, model: ${POOLS.a.model} }
  - { id: ${POOLS.b.pool}, model: ${POOLS.b.model} }
policy:
  ordering: vtc
  placement: least-kv
  queueTimeoutS: 60
store:
  slotGroups:
    ${groups[0]}: [${POOLS.a.pool}]
    ${groups[1]}: [${POOLS.b.pool}]
`,
    );
    store = redisSlotGroupStore({
      redis: client,
      prefix,
      slotGroups: { [groups[0]]: [POOLS.a.pool], [groups[1]]: [POOLS.b.pool] },
    });
    const common = ['--nats-url', natsUrl(), '--prefix', prefix, '--log-level', 'warn', '--speed', '10'];
    const engineStarts = Object.values(POOLS).map(({ pool, model }, k) =>
      startFairway(
        [
          'engine-sim',
          '--port',
          '0',
          '--seed',
          String(k + 1),
          '--replica-id',
          `sim-${pool}`,
          '--model',
          'llama-2-7b',
          '--served-model-name',
          model,
          '--pool',
          pool,
          '--max-num-seqs',
          String(SEQS),
          ...common,
        ],
        /listening on (http:\/\/\S+)/,
      ),
    );
    const env = {
      FAIRWAY_CONFIG: configPath,
      REDIS_CLUSTER: cluster.seeds,
      // Not the test run's single Redis (an empty variable counts as unset).
      REDIS_URL: '',
      NATS_URL: natsUrl(),
      FAIRWAY_PREFIX: prefix,
      PORT: '0',
      FAIRWAY_OPERATOR_PORT: '0',
      FAIRWAY_LOG_LEVEL: 'warn',
    };
    const serveStarts = [1, 2].map((i) =>
      startFairway(['serve', '--id', `d${i}`], /listening on (http:\/\/\S+)/, env),
    );
    procs.push(...(await Promise.all(engineStarts)));
    dispatchers.push(...(await Promise.all(serveStarts)));
    procs.push(...dispatchers);
    // Every dispatcher must have heard both replicas register before the tests start.
    for (const d of dispatchers)
      for (const { model } of Object.values(POOLS))
        await untilServed(d, async () => {
          const res = await fetch(`${d.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${KEYS.alpha}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model, messages: [{ role: 'user', content: 'warm up' }], max_tokens: 1 }),
          });
          return res.status;
        });
  }, 90_000);

  afterAll(async () => {
    try {
      await Promise.all(procs.map((p) => p.stop()));
      if (client) {
        await store?.close();
        await purgeStore(client, prefix, groups ?? []);
        client.disconnect();
      }
    } finally {
      // The cluster's processes never outlive the suite, whatever failed above.
      await cluster?.stop();
    }
  }, 30_000);

  it('serves both pools through both dispatchers with exact usage, summed over the groups', async () => {
    const day = new Date().toISOString().slice(0, 10);
    const requestsOf = async (): Promise<number> =>
      (await store.usage({ days: [day], tenant: 'alpha' })).reduce((s, r) => s + r.requests, 0);
    const before = await requestsOf();
    for (const d of dispatchers)
      for (const { model } of Object.values(POOLS)) {
        const body: ChatCompletionCreateParamsNonStreaming & { fairway_output_tokens: number } = {
          model,
          messages: [{ role: 'user', content: PROMPT }],
          max_tokens: 9,
          fairway_output_tokens: 9,
        };
        const res = await openai(d.url, KEYS.alpha).chat.completions.create(body);
        expect(res.usage).toMatchObject({ prompt_tokens: PROMPT_TOKENS, completion_tokens: 9 });
      }
    // Each pool's usage is recorded in its own group; the store's usage read sums them. A dispatcher
    // answers before it settles, so the last settlement may land just after the client's last byte.
    await expect.poll(requestsOf, { timeout: 5000 }).toBe(before + 4);
    const rows = await store.usage({ days: [day], tenant: 'alpha' });
    expect(new Set(rows.map((r) => r.model))).toEqual(new Set([POOLS.a.model, POOLS.b.model]));
  });

  it('never admits more than a tenant RPM limit of one group across dispatchers (exactly 30 of 45)', async () => {
    const msg = [{ role: 'user' as const, content: PROMPT }];
    const results = await Promise.all(
      Array.from({ length: 45 }, (_, i) =>
        openai(dispatchers[i % 2]!.url, KEYS.rpm30)
          .chat.completions.create({ model: POOLS.a.model, messages: msg, max_tokens: 2 })
          .then(
            () => 200,
            (e: unknown) => (e as { status?: number }).status ?? 0,
          ),
      ),
    );
    expect(results.filter((s) => s === 200)).toHaveLength(30);
    expect(results.filter((s) => s === 429)).toHaveLength(15);
    // The other group keeps its own window for the tenant: limits are exact per slot group.
    const other = await openai(dispatchers[0]!.url, KEYS.rpm30).chat.completions.create({
      model: POOLS.b.model,
      messages: msg,
      max_tokens: 2,
    });
    expect(other.usage?.completion_tokens).toBeGreaterThan(0);
  });

  it('gives two backlogged tenants equal service in each pool while both pools are loaded', async () => {
    const origin = performance.now();
    const req = (tenant: 'heavy' | 'light', model: string, i: number) => ({
      client: openai(dispatchers[i % 2]!.url, KEYS[tenant]),
      tenant: `${tenant}@${model}`,
      dispatcher: i % 2,
      model,
      prompt: PROMPT,
      tokens: 48,
      origin,
    });
    const t0 = performance.now() - origin;
    // Per pool: heavy keeps 3x the pool's slots in flight, light 2x.
    const loops = Object.values(POOLS).flatMap(({ model }) => [
      new ClosedLoop(3 * SEQS, (w, i) => req('heavy', model, w + i)),
      new ClosedLoop(2 * SEQS, (w, i) => req('light', model, w + i)),
    ]);
    await new Promise((r) => setTimeout(r, 3000));
    const stopAt = performance.now() - origin;
    await Promise.all(loops.map((l) => l.stop()));
    const done = loops.flatMap((l) => l.records).filter((r) => r.startMs >= t0 && r.endMs <= stopAt);
    for (const r of done) expect(r.error).toBeUndefined();
    const cost = (r: StreamRecord) => r.promptTokens + 2 * r.completionTokens;
    const bound = 2 * Math.max(PROMPT_TOKENS, 2 * SEQS * 48);
    const inFlight = SEQS * (PROMPT_TOKENS + 2 * 48);
    for (const { model } of Object.values(POOLS)) {
      const service = (tenant: string) =>
        done.filter((r) => r.tenant === `${tenant}@${model}`).reduce((s, r) => s + cost(r), 0);
      const [sHeavy, sLight] = [service('heavy'), service('light')];
      console.info(
        `cluster fleet, ${model}: service heavy ${sHeavy} light ${sLight} (bound ${bound} + ${inFlight})`,
      );
      expect(sHeavy + sLight).toBeGreaterThan(3 * bound);
      expect(Math.abs(sHeavy - sLight)).toBeLessThanOrEqual(bound + inFlight);
    }
  });
});
