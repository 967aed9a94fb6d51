import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RedisStore } from '@fairway/store';
import { redisUrl, startNatsServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineMetric, gatewayMetric } from './support/chat.ts';
import { accessLineOf, type CompletionStream, streamCompletion, until } from './support/completions.ts';
import { E2E_MODEL, E2E_POOL, poolEngineArgs } from './support/fleet-config.ts';
import {
  type FairwayProcess,
  startEngineSims,
  startServe,
  stopFleet,
  untilEachServed,
} from './support/processes.ts';

/**
 * Aladdin's re-balancing where an engine queue allows it, on a real fleet: two `fairway serve`
 * dispatchers (Redis with a random prefix, a NATS server of this test's own) at `placement:
 * aladdin`, whose moves are on by default, and two `fairway engine-sim` replicas of 3 sequences.
 * One engine also runs two requests sent to it directly, past the gateway, which the store's
 * reservations do not show: a request placed there waits in that engine's queue. The dispatcher
 * holding it takes it out — nothing has reached its client — and runs it on the other replica.
 */
const KEY = 'sk-moves-alpha-0001';
const CONFIG = `
tenants:
  - { id: alpha, keys: [{ key: ${KEY} }] }
pools:
  - { id: ${E2E_POOL}, model: ${E2E_MODEL} }
policy:
  ordering: fcfs
  placement: aladdin
  queueTimeoutS: 60
`;

/** Streams a completion of exactly `output` tokens, through a gateway (with the key) or to an engine. */
const stream = (url: string, tag: string, output: number, key?: string) =>
  streamCompletion(url, { model: E2E_MODEL, prompt: `${tag} abc abc`, maxTokens: output, output, key });

describe('a request waiting in a full engine queue moves to a replica with room, across two dispatchers', () => {
  const prefix = uniquePrefix('moves');
  let nats: TestServer;
  let redis: Redis;
  let store: RedisStore;
  const engines: FairwayProcess[] = [];
  const dispatchers: FairwayProcess[] = [];
  const operators: string[] = [];
  const streams: CompletionStream[] = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    const configPath = join(mkdtempSync(join(tmpdir(), 'fairway-moves-')), 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    engines.push(
      ...(await startEngineSims(2, [
        '--speed',
        '2',
        '--max-num-seqs',
        '3',
        ...poolEngineArgs(nats.url, prefix),
      ])),
    );
    redis = new Redis(redisUrl());
    store = new RedisStore({ redis, prefix });
    for (const id of ['a', 'b']) {
      const d = await startServe(id, { configPath, redisUrl: redisUrl(), natsUrl: nats.url, prefix });
      dispatchers.push(d.proc);
      operators.push(d.operatorUrl);
    }
    await untilEachServed(dispatchers, 1, (d) => stream(d.url, 'warm', 1, KEY).done);
  }, 90_000);

  afterAll(async () => {
    for (const s of streams) s.stop();
    redis?.disconnect();
    await stopFleet([...dispatchers, ...engines], nats, prefix);
  }, 60_000);

  it('runs it on the other replica while the full engine still runs all of its requests', async () => {
    const [a, b] = dispatchers as [FairwayProcess, FairwayProcess];
    const long = stream(a.url, 'long', 2000, KEY);
    streams.push(long);
    await until(() => long.tokens > 0, 30_000, 'the long request to stream');
    const seqs = await Promise.all(['sim-1', 'sim-2'].map(async (r) => (await store.reserved(r)).seqs));
    const x = seqs.indexOf(1);
    expect(x).toBeGreaterThanOrEqual(0);
    const y = 1 - x;
    // The engine it runs on fills up with two requests the gateway does not see.
    for (const tag of ['direct1', 'direct2']) streams.push(stream(engines[x]!.url, tag, 2000));
    await until(
      async () => (await engineMetric(engines[x]!.url, 'vllm:num_requests_running')) === 3,
      30_000,
      'the engine to run three requests',
    );
    // Aladdin's fullest-first order places the next request on the same replica, by the store's
    // reservations (shared by both dispatchers); it reaches that engine's waiting queue.
    const short = stream(b.url, 'short', 7, KEY);
    streams.push(short);
    await short.done;
    expect(short.tokens).toBe(7);
    expect(long.endedAt).toBeUndefined();
    expect(await accessLineOf(b, 7)).toMatchObject({ replica: `sim-${y + 1}`, movedFrom: [`sim-${x + 1}`] });
    expect(await gatewayMetric(operators[1] as string, 'fairway_moves_total')).toBe(1);
    // The full engine ran every one of its requests to this point; the moved one left its queue.
    expect(await engineMetric(engines[x]!.url, 'vllm:num_requests_running')).toBe(3);
    expect(await engineMetric(engines[x]!.url, 'vllm:num_requests_waiting')).toBe(0);
  }, 120_000);
});
