import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startNatsServer, startRedisServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatAnswer, type ChatMessage, chatAnswer, servedBy } from './support/completions.ts';
import { E2E_MODEL, E2E_POOL, poolEngineArgs } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startServe, untilEachServed } from './support/processes.ts';

/**
 * Placement by the engines' KV cache events, against a real fleet: three `fairway engine-sim`
 * processes hashing their prefix-cache blocks as vLLM's `sha256_cbor` (`PYTHONHASHSEED` fixed) and
 * publishing vLLM's KV cache events over ZeroMQ, each agent relaying its engine's events over NATS,
 * and two `fairway serve` dispatchers placing round-robin but for those events. A conversation is
 * first sent to one engine directly, bypassing fairway, so no dispatcher placed it and its prefix
 * index knows nothing of it: a follow-up turn through either dispatcher reaching that engine, with
 * its usage showing the cached tokens, is the events' doing.
 */
const KEY = 'sk-kv-events-alpha-01';
const SEED = '1234';
const CONFIG = `
tenants:
  - { id: alpha, keys: [{ key: ${KEY} }] }
pools:
  - { id: ${E2E_POOL}, model: ${E2E_MODEL}, prefixAffinity: bounded, kvEvents: { hashSeed: "${SEED}" } }
policy:
  ordering: vtc
  placement: round-robin
  queueTimeoutS: 60
`;

/** One non-streamed chat completion at `url` (a dispatcher, or an engine directly). */
function ask(url: string, messages: readonly ChatMessage[]): Promise<ChatAnswer> {
  return chatAnswer(url, { model: E2E_MODEL, messages, output: 16, key: KEY });
}

describe('placement by the engines’ KV cache events across two dispatchers', () => {
  const prefix = uniquePrefix('kvevents');
  let nats: TestServer;
  let redis: TestServer;
  const engines: FairwayProcess[] = [];
  const dispatchers: { proc: FairwayProcess; operatorUrl: string }[] = [];

  /** Sends `messages` through dispatcher `via`; returns the answer and the engine that served it. */
  function through(via: number, messages: readonly ChatMessage[]): Promise<ChatAnswer & { engine: number }> {
    return servedBy(
      engines.map((e) => e.url),
      () => ask(dispatchers[via]!.proc.url, messages),
    );
  }

  beforeAll(async () => {
    [nats, redis] = await Promise.all([startNatsServer(), startRedisServer()]);
    const dir = mkdtempSync(join(tmpdir(), 'fairway-kv-events-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    const ports = await Promise.all([freePort(), freePort(), freePort()]);
    engines.push(
      ...(await startEngineSims(
        ports.length,
        (k) => [
          '--speed',
          '20',
          '--enable-prefix-caching',
          '--enable-prompt-tokens-details',
          '--prefix-caching-hash-algo',
          'sha256_cbor',
          '--kv-events-config',
          JSON.stringify({
            enable_kv_cache_events: true,
            publisher: 'zmq',
            endpoint: `tcp://127.0.0.1:${ports[k]}`,
            topic: 'kv-events',
          }),
          ...poolEngineArgs(nats.url, prefix),
        ],
        { PYTHONHASHSEED: SEED },
      )),
    );
    for (const id of ['a', 'b'])
      dispatchers.push(
        await startServe(
          id,
          { configPath, redisUrl: redis.url, natsUrl: nats.url, prefix },
          // The access log (info) says what affinity did for each request.
          { FAIRWAY_LOG_LEVEL: 'info' },
        ),
      );
    // Every dispatcher has heard all three replicas register.
    await untilEachServed(
      dispatchers.map((d) => d.proc),
      3,
      (d, k) => ask(d.url, [{ role: 'user', content: `warm up ${k}` }]),
    );
  }, 90_000);

  afterAll(async () => {
    await Promise.all([...dispatchers.map((d) => d.proc), ...engines].map((p) => p.stop()));
    await Promise.all([nats?.stop(), redis?.stop()]);
  }, 60_000);

  it('sends a follow-up through either dispatcher to the engine whose cache holds its conversation, though no dispatcher placed it there', async () => {
    const hits = () =>
      dispatchers.map((d) => d.proc.output.filter((l) => l.includes('"affinity":"hit"')).length);
    const hitsBefore = hits();
    // One conversation per engine, each started on its engine directly.
    for (let k = 0; k < engines.length; k++) {
      const history: ChatMessage[] = [
        {
          role: 'system',
          content: `You are assistant ${k}. ${'Answer briefly and precisely. '.repeat(20)}`,
        },
        {
          role: 'user',
          content: `Conversation ${k}: ${'tell me about prefix caching in vLLM. '.repeat(15)}`,
        },
      ];
      const first = await ask(engines[k]!.url, history);
      history.push({ role: 'assistant', content: first.content }, { role: 'user', content: 'And then?' });
      // The engine's events reach the dispatchers through its agent and NATS: a few ms.
      await new Promise((r) => setTimeout(r, 300));
      const via = k % 2;
      const second = await through(via, history);
      expect(second.engine, `conversation ${k} through dispatcher ${'ab'[via]}`).toBe(k);
      expect(second.cachedTokens).toBeGreaterThan(0);
      expect(second.cachedTokens).toBeLessThan(second.promptTokens);
    }
    // The access log line is written as the response ends: give the last one a moment.
    const total = () => hits().reduce((a, b, i) => a + b - (hitsBefore[i] ?? 0), 0);
    for (let deadline = Date.now() + 2000; total() < 3 && Date.now() < deadline; )
      await new Promise((r) => setTimeout(r, 20));
    expect(total()).toBe(3);
    // Each dispatcher knows blocks on every replica.
    for (const d of dispatchers) {
      const text = await (await fetch(`${d.operatorUrl}/metrics`)).text();
      for (let k = 1; k <= engines.length; k++) {
        const line = text
          .split('\n')
          .find((l) => l.startsWith(`fairway_kv_cached_blocks{replica="sim-${k}"}`));
        expect(Number(line?.slice(line.lastIndexOf(' ') + 1) ?? 0), `sim-${k}`).toBeGreaterThan(0);
      }
    }
  }, 60_000);
});
