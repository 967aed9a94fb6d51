import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { purgeStore, RedisStore } from '@fairway/store';
import { freePort, natsUrl, redisUrl, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineMetric, gatewayMetric as metric, sendChat } from './support/chat.ts';
import { E2E_MODEL, E2E_POOL, singleTenantConfig } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startFairway } from './support/processes.ts';

/**
 * One `fairway serve` over two `fairway engine-sim` processes on the machine's Redis and NATS. A
 * replica is killed (SIGKILL: its port refuses connections, its pooled connections are reset)
 * while the registry still lists it — the dispatcher sees replicas as stale only after 10 s
 * without a heartbeat here — so requests placed on it fail before any byte reaches the client.
 * They must be re-queued and served by the other replica.
 */
const MODEL = E2E_MODEL;
const POOL = E2E_POOL;
const KEY = 'sk-retry-alpha-0001';
const CONFIG = singleTenantConfig(KEY, 3);

const chat = (url: string, stream: boolean, tokens = 4) =>
  sendChat(url, { key: KEY, model: MODEL, tokens, stream, usage: true });

describe('a request whose replica fails before answering is retried on another replica', () => {
  const prefix = uniquePrefix('retry');
  const engines: FairwayProcess[] = [];
  let dispatcher: FairwayProcess;
  let operatorPort: number;
  let store: RedisStore;
  let redis: Redis;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-retry-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    const common = ['--nats-url', natsUrl(), '--prefix', prefix, '--pool', POOL, '--log-level', 'warn'];
    engines.push(...(await startEngineSims(2, ['--speed', '20', ...common])));
    operatorPort = await freePort();
    dispatcher = await startFairway(['serve', '--id', 'retry'], /listening on (http:\/\/\S+)/, {
      FAIRWAY_OPERATOR_PORT: String(operatorPort),
      FAIRWAY_CONFIG: configPath,
      REDIS_URL: redisUrl(),
      NATS_URL: natsUrl(),
      FAIRWAY_PREFIX: prefix,
      PORT: '0',
      FAIRWAY_STALE_MS: '10000',
      FAIRWAY_LOG_LEVEL: 'error',
    });
    redis = new Redis(redisUrl());
    store = new RedisStore({ redis, prefix });
    // Both replicas registered and used (keep-alive connections to each in the dispatcher's pool).
    const deadline = Date.now() + 15_000;
    for (;;) {
      const served = await Promise.all(Array.from({ length: 8 }, () => chat(dispatcher.url, false)));
      const prompts = await Promise.all(engines.map((e) => engineMetric(e.url, 'vllm:prompt_tokens_total')));
      if (served.every((a) => a.status === 200) && prompts.every((n) => n > 0)) break;
      if (Date.now() > deadline) throw new Error(`never served by both:\n${dispatcher.output.join('\n')}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 90_000);

  afterAll(async () => {
    await Promise.all([dispatcher, ...engines].filter(Boolean).map((p) => p.stop()));
    if (redis) {
      await purgeStore(redis, prefix);
      await store.close();
      redis.disconnect();
    }
  }, 30_000);

  it('serves every request after one replica is killed, streamed or not, and leaks no reservation', async () => {
    const before = await metric(`http://127.0.0.1:${operatorPort}`, 'fairway_engine_retries_total');
    const dead = engines[0] as FairwayProcess;
    const exited = new Promise((r) => dead.proc.once('exit', r));
    dead.kill9();
    await exited;

    // Concurrent, so least-kv spreads the first ones over both replicas (the dead one included).
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) => chat(dispatcher.url, i % 2 === 1)),
    );
    for (const a of answers) expect(a, a.text).toMatchObject({ status: 200 });
    for (const [i, a] of answers.entries()) {
      if (i % 2 === 1) {
        expect(a.text).toContain('data: [DONE]');
        expect(a.text).not.toContain('"error"');
      } else expect(JSON.parse(a.text).usage).toMatchObject({ completion_tokens: 4 });
    }
    // The failures really happened and were retried (not just avoided).
    expect(await metric(`http://127.0.0.1:${operatorPort}`, 'fairway_engine_retries_total')).toBeGreaterThan(
      before,
    );
    expect(await store.reserved('sim-1')).toEqual({ tokens: 0, seqs: 0 });
    expect(await store.reserved('sim-2')).toEqual({ tokens: 0, seqs: 0 });
  }, 60_000);

  it('answers 503 no_replica with an OpenAI-style error when every replica fails', async () => {
    const last = engines[1] as FairwayProcess;
    const exited = new Promise((r) => last.proc.once('exit', r));
    last.kill9();
    await exited;

    const a = await chat(dispatcher.url, false);
    expect(a.status).toBe(503);
    const body = JSON.parse(a.text);
    expect(body).toEqual({
      error: { message: expect.any(String), type: 'service_unavailable', param: null, code: 'no_replica' },
    });
    expect(a.text).not.toMatch(/\bat .*\.ts:\d+/);
    const s = await chat(dispatcher.url, true);
    expect(s.status).toBe(503);
    expect(JSON.parse(s.text).error.code).toBe('no_replica');
    expect(await store.reserved('sim-1')).toEqual({ tokens: 0, seqs: 0 });
    expect(await store.reserved('sim-2')).toEqual({ tokens: 0, seqs: 0 });
  }, 60_000);
});
