import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeAgent } from '@fairway/agent';
import type { QuotaAlertMessage } from '@fairway/bus';
import { hashApiKey, parseConfig, silentLogger, systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { startNatsServer, startRedisServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectInfrastructure,
  type Infrastructure,
  type RunningDispatcher,
  serveSettings,
  startDispatcher,
} from '../src/index.ts';
import { utcDay } from '../src/quotas.ts';
import { waitFor } from './support/stack.ts';

/**
 * Usage accounting and quotas on a throw-away Redis and NATS: three dispatchers, each
 * with its own store client and bus connection (as three processes would have), in front of two
 * engine-sims. Budgets and usage must be exact across them.
 */

const MODEL = 'llama-2-7b';
const CAPPED = 'sk-capped-key-0001';
const FREE_A = 'sk-free-key-a-0001';
const FREE_B = 'sk-free-key-b-0001';
const SPY = 'sk-spy-key-000001';
const TINY = 'sk-tiny-budget-0001';
const ADMIN_TOKEN = 'admin-token-for-issue-13';
const BUDGET = 10_000;

interface Fleet {
  readonly dispatchers: readonly RunningDispatcher[];
  readonly infras: readonly Infrastructure[];
  close(): Promise<void>;
}

async function startFleet(redis: TestServer, nats: TestServer, dir: string): Promise<Fleet> {
  const config = parseConfig(
    {
      tenants: [
        { id: 'capped', keys: [{ key: CAPPED }], quotas: { tokensPerDay: BUDGET, alertAt: 0.8 } },
        { id: 'free', keys: [{ key: FREE_A }, { key: FREE_B }] },
        { id: 'spy', keys: [{ key: SPY }] },
        { id: 'tiny', keys: [{ key: TINY }], quotas: { tokensPerDay: 50 } },
      ],
      pools: [{ id: 'llama', model: MODEL }],
      pricing: { [MODEL]: { input: 0.5, output: 1.5 } },
    },
    'issue-13 config',
  );
  const tokenFile = join(dir, 'admin-token');
  writeFileSync(tokenFile, ADMIN_TOKEN);
  const prefix = uniquePrefix('i13');
  const infras: Infrastructure[] = [];
  for (let i = 0; i < 3; i++)
    infras.push(
      await connectInfrastructure({
        redisUrl: redis.url,
        natsUrl: nats.url,
        prefix,
        defaultLeaseMs: 10_000,
        staleAfterMs: 2_000,
        name: `d${i + 1}`,
        clock: systemClock,
        logger: silentLogger,
      }),
    );
  const sims: EngineSimHandle[] = [];
  const clients: VllmClient[] = [];
  const agents: NodeAgent[] = [];
  for (let i = 0; i < 2; i++) {
    const sim = await startEngineSim({ servedModelName: MODEL, speed: 50, seed: i, maxNumSeqs: 64 });
    sims.push(sim);
    const engine = new VllmClient({ url: sim.url });
    clients.push(engine);
    const agent = new NodeAgent({
      bus: (infras[0] as Infrastructure).bus,
      engine,
      clock: systemClock,
      replicaId: `sim-${i + 1}`,
      pool: 'llama',
      model: MODEL,
      maxNumSeqs: 64,
      heartbeatIntervalMs: 200,
    });
    await agent.start();
    agents.push(agent);
  }
  const dispatchers: RunningDispatcher[] = [];
  for (const [i, infra] of infras.entries())
    dispatchers.push(
      await startDispatcher({
        settings: serveSettings(
          {},
          { port: 0, operatorPort: 0, dispatcherId: `d${i + 1}`, adminTokenFile: tokenFile },
        ),
        config,
        logger: silentLogger,
        infrastructure: infra,
      }),
    );
  const deadline = Date.now() + 10_000;
  while (!infras.every((x) => x.registry.list().filter((v) => v.acceptsWork).length === 2)) {
    if (Date.now() > deadline) throw new Error('replicas did not register on every dispatcher');
    await new Promise((r) => setTimeout(r, 20));
  }
  return {
    dispatchers,
    infras,
    async close() {
      for (const d of dispatchers) await d.close();
      for (const a of agents) await a.stop();
      for (const c of clients) await c.close();
      for (const s of sims) await s.close();
      for (const x of infras) await x.close();
    },
  };
}

interface Answer {
  readonly status: number;
  readonly body: {
    usage?: { prompt_tokens: number; completion_tokens: number };
    error?: { code: string; type: string; message: string };
  };
}

async function chat(url: string, key: string, tokens: number, words: number): Promise<Answer> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: 'word '.repeat(words) }],
      max_tokens: tokens,
      fairway_output_tokens: tokens,
    }),
  });
  return { status: res.status, body: (await res.json()) as Answer['body'] };
}

/** Runs `n` tasks with at most `lanes` at once. */
async function pool<T>(n: number, lanes: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: lanes }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await task(i);
      }
    }),
  );
  return out;
}

describe('usage accounting and quotas across three dispatchers (Redis, NATS)', () => {
  let redis: TestServer;
  let nats: TestServer;
  let dir: string;
  let fleet: Fleet;
  beforeAll(async () => {
    redis = await startRedisServer();
    nats = await startNatsServer();
    dir = mkdtempSync(join(tmpdir(), 'fairway-i13-'));
    fleet = await startFleet(redis, nats, dir);
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    await nats?.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function usageOf(query: string, token = ADMIN_TOKEN, d = 0) {
    const res = await (fleet.dispatchers[d] as RunningDispatcher).dispatcher.operator.inject({
      method: 'GET',
      url: `/admin/v1/usage?${query}`,
      headers: { authorization: `Bearer ${token}` },
    });
    return { status: res.statusCode, body: res.json() };
  }

  it('tells a request larger than a whole budget that it can never fit, with no Retry-After', async () => {
    const url = (fleet.dispatchers[0] as RunningDispatcher).url;
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TINY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100 }),
    });
    const body = (await res.json()) as { error: { message: string; code: string } };
    expect(res.status).toBe(400);
    expect(res.headers.get('retry-after')).toBeNull();
    expect(body.error.code).toBe('tokens_exceed_limit');
    expect(body.error.message).toMatch(/more than your organization's whole daily budget of 50 tokens/);
    expect(body.error.message).toMatch(/can never fit/);
    // Nothing was spent: a request that fits is served.
    expect((await chat(url, TINY, 10, 2)).status).toBe(200);
  });

  it('admits no more than a 10,000-token budget under concurrency, refusing the rest with insufficient_quota', async () => {
    const alerts: QuotaAlertMessage[] = [];
    const unsub = (fleet.infras[1] as Infrastructure).bus.subscribe('quotaAlert', (m) => {
      alerts.push(m);
    });
    // Each request reserves its prompt estimate + 200 and uses its true prompt + 120..200.
    const answers = await pool(150, 24, (i) =>
      chat((fleet.dispatchers[i % 3] as RunningDispatcher).url, CAPPED, 120 + (i % 5) * 20, 40),
    );
    const served = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status !== 200);
    const used = served.reduce(
      (s, a) => s + (a.body.usage?.prompt_tokens ?? 0) + (a.body.usage?.completion_tokens ?? 0),
      0,
    );
    expect(used).toBeLessThanOrEqual(BUDGET);
    expect(used).toBeGreaterThan(BUDGET / 2);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.status).toBe(429);
      expect(r.body.error).toMatchObject({ code: 'insufficient_quota', type: 'insufficient_quota' });
      expect(r.body.error?.message).toMatch(/daily token budget/);
      expect(r.body.error?.message).not.toMatch(/free|spy/);
    }
    // The store's record is exactly what the clients were served.
    const day = utcDay(Date.now());
    const { body } = await usageOf(`tenant=capped&from=${day}&to=${day}`);
    expect(body.totals.requests).toBe(served.length);
    expect(body.totals.inputTokens + body.totals.outputTokens).toBe(used);
    // One alert for the window, whichever dispatcher admitted the request that crossed 80%.
    await new Promise((r) => setTimeout(r, 300));
    unsub();
    expect(alerts).toHaveLength(1);
    expect(alerts[0]).toMatchObject({ tenant: 'capped', scope: 'tenant', window: 'day', kind: 'tokens' });
    expect(alerts[0]?.used).toBeGreaterThanOrEqual(0.8 * BUDGET);
  }, 120_000);

  it('records per key exactly the usage the engines reported over 1,000 requests', async () => {
    const keys = [FREE_A, FREE_B];
    const answers = await pool(1000, 30, (i) =>
      chat(
        (fleet.dispatchers[i % 3] as RunningDispatcher).url,
        keys[i % 2] as string,
        2 + (i % 7),
        3 + (i % 11),
      ),
    );
    const reported = new Map<string, { requests: number; input: number; output: number }>();
    for (const [i, a] of answers.entries()) {
      expect(a.status).toBe(200);
      const id = hashApiKey(keys[i % 2] as string);
      const r = reported.get(id) ?? { requests: 0, input: 0, output: 0 };
      r.requests++;
      r.input += a.body.usage?.prompt_tokens ?? 0;
      r.output += a.body.usage?.completion_tokens ?? 0;
      reported.set(id, r);
    }
    const day = utcDay(Date.now());
    for (const [id, r] of reported) {
      // A client can read its last byte just before its dispatcher's settle (which records the
      // usage) reaches the store: wait for every request to be recorded, then compare exactly.
      const query = `key=${id}&from=${day}&to=${day}`;
      await waitFor(
        async () => (await usageOf(query, ADMIN_TOKEN)).body.data[0]?.requests === r.requests,
        10_000,
        `usage of all ${r.requests} requests of ${id}`,
      );
      // Asked of a different dispatcher each time: every one reads the same record.
      const { status, body } = await usageOf(query, ADMIN_TOKEN, r.requests % 3);
      expect(status).toBe(200);
      expect(body.data).toHaveLength(1);
      expect(body.data[0]).toMatchObject({
        tenant: 'free',
        key: id,
        model: MODEL,
        requests: r.requests,
        inputTokens: r.input,
        outputTokens: r.output,
      });
      expect(body.data[0].cost).toBeCloseTo((r.input * 0.5 + r.output * 1.5) / 1e6, 12);
    }
  }, 300_000);

  it('never shows usage to a tenant: the admin API wants the admin token, the public port has no such route', async () => {
    const day = utcDay(Date.now());
    const asSpy = await usageOf(`tenant=free&from=${day}&to=${day}`, SPY);
    expect(asSpy.status).toBe(401);
    expect(JSON.stringify(asSpy.body)).not.toMatch(/inputTokens|sha256/);
    const d = fleet.dispatchers[0] as RunningDispatcher;
    const res = await fetch(`${d.url}/admin/v1/usage?tenant=free`, {
      headers: { authorization: `Bearer ${SPY}` },
    });
    expect(res.status).toBe(404);
    expect(await res.text()).not.toMatch(/inputTokens|sha256/);
    const bad = await usageOf('from=2026-01-01&to=2028-01-01');
    expect(bad.status).toBe(400);
    expect(bad.body.error.param).toBe('from');
  });
});
