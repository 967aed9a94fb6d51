import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { purgeStore } from '@fairway/store';
import { freePort, redisUrl, startNatsServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { type ChatOutcome, engineMetric, gatewayMetric as metric, sendChat } from './support/chat.ts';
import { E2E_MODEL, E2E_POOL, singleTenantConfig } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startFairway } from './support/processes.ts';

/**
 * Engine crashes against a real fleet: `fairway engine-sim` processes (each with its node agent)
 * and `fairway serve` dispatchers on the machine's Redis (random prefix) and a NATS server of this
 * test's own. An engine is SIGKILLed: its port refuses connections, its streams are cut, its agent
 * dies with it. Requests that had no byte yet must be served by the other replica; streams cut
 * mid-way must end with an SSE error event; and a replica one dispatcher caught failing must be
 * avoided by the others without failing there themselves.
 */
const MODEL = E2E_MODEL;
const POOL = E2E_POOL;
const KEY = 'sk-faults-alpha-0001';
const CONFIG = singleTenantConfig(KEY, 20);

const chat = (url: string, tokens: number, stream = true) =>
  sendChat(url, { key: KEY, model: MODEL, tokens, stream });

/** One request as the client saw it. */

function kill(p: FairwayProcess): Promise<void> {
  const exited = new Promise<void>((r) => p.proc.once('exit', () => r()));
  p.kill9();
  return exited;
}

interface Fleet {
  readonly engines: FairwayProcess[];
  readonly dispatchers: FairwayProcess[];
  /** Each dispatcher's operator listener (`/metrics`), in order. */
  readonly metricsUrls: string[];
  close(): Promise<void>;
}

/** Two engine-sims with agents and two dispatchers; waits until both replicas served requests. */
async function startFleet(nats: TestServer, staleMs: number): Promise<Fleet> {
  const prefix = uniquePrefix('faults');
  const dir = mkdtempSync(join(tmpdir(), 'fairway-faults-'));
  const configPath = join(dir, 'fairway.yaml');
  writeFileSync(configPath, CONFIG);
  const common = ['--nats-url', nats.url, '--prefix', prefix, '--pool', POOL, '--log-level', 'warn'];
  // Few slots, so work queues at the gateway and retries go through dispatch rounds.
  const engines = await startEngineSims(2, ['--speed', '1', '--max-num-seqs', '4', ...common]);
  const operatorPorts = [await freePort(), await freePort()];
  const dispatchers = await Promise.all(
    ['a', 'b'].map((id, i) =>
      startFairway(['serve', '--id', id], /listening on (http:\/\/\S+)/, {
        FAIRWAY_OPERATOR_PORT: String(operatorPorts[i]),
        FAIRWAY_CONFIG: configPath,
        REDIS_URL: redisUrl(),
        NATS_URL: nats.url,
        FAIRWAY_PREFIX: prefix,
        PORT: '0',
        FAIRWAY_STALE_MS: String(staleMs),
        FAIRWAY_LOG_LEVEL: 'error',
      }),
    ),
  );
  const fleet: Fleet = {
    engines,
    dispatchers,
    metricsUrls: operatorPorts.map((p) => `http://127.0.0.1:${p}`),
    async close() {
      await Promise.all([...dispatchers, ...engines].map((p) => p.stop()));
      const redis = new Redis(redisUrl());
      await purgeStore(redis, prefix);
      redis.disconnect();
    },
  };
  const deadline = Date.now() + 20_000;
  for (;;) {
    const served = await Promise.all(
      Array.from({ length: 8 }, (_, i) => chat(dispatchers[i % 2]!.url, 2, false)),
    );
    const prompts = await Promise.all(engines.map((e) => engineMetric(e.url, 'vllm:prompt_tokens_total')));
    if (served.every((a) => a.status === 200) && prompts.every((n) => n > 0)) return fleet;
    if (Date.now() > deadline) {
      await fleet.close();
      throw new Error(`never served by both replicas:\n${dispatchers[0]!.output.join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('engine faults', () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  }, 60_000);

  async function fleet(staleMs: number): Promise<Fleet> {
    const nats = await startNatsServer();
    cleanup.push(() => nats.stop());
    const f = await startFleet(nats, staleMs);
    cleanup.push(() => f.close());
    return f;
  }

  it('answers no request that had no byte yet with a 5xx when one engine is SIGKILLed under load; cut streams end with an SSE error', async () => {
    const f = await fleet(1000);
    const outcomes: ChatOutcome[] = [];
    let running = true;
    const workers = Array.from({ length: 16 }, async (_, w) => {
      for (let i = 0; running; i++) outcomes.push(await chat(f.dispatchers[(w + i) % 2]!.url, 40));
    });
    await new Promise((r) => setTimeout(r, 1500));
    await kill(f.engines[0]!);
    await new Promise((r) => setTimeout(r, 3000));
    running = false;
    await Promise.all(workers);

    const refused = outcomes.filter((o) => !o.firstByte && o.status !== 200);
    const cut = outcomes.filter((o) => o.status === 200 && !o.ok);
    const retries = (
      await Promise.all(f.metricsUrls.map((u) => metric(u, 'fairway_engine_retries_total')))
    ).reduce((a, b) => a + b, 0);
    console.info(
      `engine SIGKILL under load: ${outcomes.length} requests, ${outcomes.filter((o) => o.ok).length} completed, ` +
        `${refused.length} failed before the first byte, ${cut.length} cut mid-stream ` +
        `(${cut.filter((o) => o.sseError).length} with an SSE error event), ${retries} engine calls retried`,
    );
    // The kill really hit requests in flight: cut streams or retried calls.
    expect(cut.length + retries, `${outcomes.length} requests`).toBeGreaterThan(0);
    expect(
      refused.map((o) => `${o.status} ${o.text.slice(0, 200)}`),
      `${outcomes.length} requests, ${retries} retried`,
    ).toEqual([]);
    for (const o of cut) expect(o.sseError, o.text.slice(-300)).toBe(true);
    expect(outcomes.filter((o) => o.ok).length).toBeGreaterThan(outcomes.length / 2);
  }, 90_000);

  it('keeps every dispatcher off a replica one of them saw fail, and answers 503 once every replica is down', async () => {
    // Heartbeats alone would take 10 s to show the dead replica: only the failure report can help B.
    const f = await fleet(10_000);
    const [a, b] = f.dispatchers as [FairwayProcess, FairwayProcess];
    const [aMetrics, bMetrics] = f.metricsUrls as [string, string];
    await kill(f.engines[0]!);
    // Dispatcher A catches the failure (least-kv spreads concurrent requests over both replicas).
    const deadline = Date.now() + 10_000;
    while ((await metric(aMetrics, 'fairway_engine_retries_total')) === 0) {
      if (Date.now() > deadline) throw new Error('dispatcher A never placed a request on the dead replica');
      const answers = await Promise.all(Array.from({ length: 4 }, () => chat(a.url, 2)));
      for (const x of answers) expect(x.status, x.text).toBe(200);
    }
    await new Promise((r) => setTimeout(r, 100));
    // Dispatcher B never calls the dead engine: no failure, no retry of its own.
    const answers = await Promise.all(Array.from({ length: 16 }, (_, i) => chat(b.url, 2, i % 2 === 0)));
    for (const x of answers) expect(x.status, x.text).toBe(200);
    expect(await metric(bMetrics, 'fairway_engine_retries_total')).toBe(0);

    // The last engine dies: a clear 503 no_replica from both — not a 504 after the 20 s queue timeout.
    await kill(f.engines[1]!);
    for (const d of [b, a, b]) {
      const x = await chat(d.url, 2, false);
      expect(x.status, x.text).toBe(503);
      expect(JSON.parse(x.text).error).toMatchObject({ code: 'no_replica', type: 'service_unavailable' });
    }
  }, 90_000);
});
