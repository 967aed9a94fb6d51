import { NodeAgent } from '@fairway/agent';
import {
  type FairwayConfig,
  hashApiKey,
  type Logger,
  parseConfig,
  silentLogger,
  systemClock,
} from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { type EngineSimHandle, type EngineSimOptionsInput, startEngineSim } from '@fairway/engine-sim';
import { purgeStore, RedisStore, type SchedulingStore } from '@fairway/store';
import { redisUrl, uniquePrefix } from '@fairway/testkit';
import type { Tracer } from '@opentelemetry/api';
import { afterEach } from 'vitest';
import {
  connectInfrastructure,
  type DispatcherOptions,
  type Infrastructure,
  type RunningDispatcher,
  type ServeOverrides,
  serveSettings,
  startDispatcher,
} from '../../src/index.ts';
import { utcDay } from '../../src/quotas.ts';

/** Options of {@link startStack}. */
export interface StackOptions {
  /** Config file content (parsed like a config file). */
  readonly config: unknown;
  /** Simulated engines, each with its own options. @default one with defaults below */
  readonly engines?: readonly EngineSimOptionsInput[];
  /** Dispatchers sharing the store and bus. @default 1 */
  readonly dispatchers?: number;
  readonly options?: DispatcherOptions;
  /** Per-dispatcher option overrides, by index. */
  readonly perDispatcher?: readonly (DispatcherOptions | undefined)[];
  /** Pool the agents announce. @default the first configured pool's id */
  readonly agentPool?: string;
  /** Use the machine's Redis (unique prefix) instead of the in-memory store. @default false */
  readonly redis?: boolean;
  /** Use this Redis (a server the test started) instead of the machine's; implies `redis`. */
  readonly redisUrl?: string;
  /** Traces the dispatchers' requests with this tracer. @default none */
  readonly tracer?: Tracer;
  /** The dispatchers' logger (a test reading access log lines gives one). @default silent */
  readonly logger?: Logger;
}

/** A running in-process fleet: engine-sims with agents, dispatchers, one store and bus. */
export interface Stack {
  readonly config: FairwayConfig;
  readonly dispatchers: readonly RunningDispatcher[];
  readonly infra: Infrastructure;
  readonly store: SchedulingStore;
  readonly sims: readonly EngineSimHandle[];
  readonly agents: readonly NodeAgent[];
  /** Replica ids of the sims, in order. */
  readonly replicas: readonly string[];
  /** The store's key prefix. */
  readonly prefix: string;
  close(): Promise<void>;
}

/** Starts engines, their agents and dispatchers in this process; waits until every replica serves. */
export async function startStack(o: StackOptions): Promise<Stack> {
  const config = parseConfig(o.config, 'test config');
  const prefix = uniquePrefix('disp');
  const infra = await connectInfrastructure({
    redisUrl: o.redisUrl ?? (o.redis ? redisUrl() : undefined),
    prefix,
    defaultLeaseMs: o.options?.leaseMs ?? 10_000,
    // The agents heartbeat from this same process every 100 ms; on a loaded 2-core machine its
    // event loop can stall past 1 s, and a healthy replica would then look stale (no retry target).
    staleAfterMs: 3000,
    name: 'test',
    clock: systemClock,
    logger: silentLogger,
  });
  const sims: EngineSimHandle[] = [];
  const agents: NodeAgent[] = [];
  const clients: VllmClient[] = [];
  const pool = config.pools[0];
  const model = pool?.model ?? 'llama-2-7b';
  const replicas: string[] = [];
  for (const [i, e] of (o.engines ?? [{}]).entries()) {
    const sim = await startEngineSim({ servedModelName: model, speed: 20, seed: i, ...e });
    // An engine serving another model joins the configured pool of that model.
    const served = e.servedModelName ?? model;
    const servedPool = config.pools.find((p) => p.model === served)?.id;
    sims.push(sim);
    const engine = new VllmClient({ url: sim.url });
    clients.push(engine);
    const replicaId = `sim-${i + 1}`;
    replicas.push(replicaId);
    const agent = new NodeAgent({
      bus: infra.bus,
      engine,
      clock: systemClock,
      replicaId,
      pool: o.agentPool ?? servedPool ?? served,
      model: served,
      // The replica announces its GPU and TP as a real agent would (Aladdin's performance models).
      ...(e.gpu === undefined ? {} : { gpu: e.gpu }),
      ...(e.tp === undefined ? {} : { tp: e.tp }),
      maxNumSeqs: e.maxNumSeqs ?? 256,
      heartbeatIntervalMs: 100,
    });
    await agent.start();
    agents.push(agent);
  }
  const dispatchers: RunningDispatcher[] = [];
  for (let i = 0; i < (o.dispatchers ?? 1); i++) {
    const settings = serveSettings(
      {},
      {
        port: 0,
        // In-process tests read metrics with `dispatcher.operator.inject`; no operator listener.
        operatorPort: 0,
        dispatcherId: `d${i + 1}`,
        options: { ...o.options, ...o.perDispatcher?.[i] },
      },
    );
    dispatchers.push(
      await startDispatcher({
        settings,
        config,
        logger: o.logger ?? silentLogger,
        infrastructure: infra,
        ...(o.tracer === undefined ? {} : { tracer: o.tracer }),
      }),
    );
  }
  const deadline = Date.now() + 5000;
  while (infra.registry.list().filter((v) => v.acceptsWork).length < sims.length) {
    if (Date.now() > deadline) throw new Error('replicas did not register');
    await new Promise((r) => setTimeout(r, 10));
  }
  return {
    config,
    dispatchers,
    infra,
    store: infra.store,
    sims,
    agents,
    replicas,
    prefix,
    async close() {
      for (const d of dispatchers) await d.close();
      for (const a of agents) await a.stop();
      for (const c of clients) await c.close();
      for (const s of sims) await s.close();
      if (infra.store instanceof RedisStore) await cleanRedis(o.redisUrl ?? redisUrl(), prefix);
      await infra.close();
    },
  };
}

async function cleanRedis(url: string, prefix: string): Promise<void> {
  const { Redis } = await import('ioredis');
  const r = new Redis(url);
  await purgeStore(r, prefix);
  await r.quit();
}

/** What the store recorded today for API key `key`, over every model: requests and tokens. */
export async function recordedToday(
  store: SchedulingStore,
  key: string,
): Promise<{ requests: number; inputTokens: number; outputTokens: number }> {
  const rows = await store.usage!({ days: [utcDay(Date.now())], key: hashApiKey(key) });
  return rows.reduce(
    (t, r) => ({
      requests: t.requests + r.requests,
      inputTokens: t.inputTokens + r.inputTokens,
      outputTokens: t.outputTokens + r.outputTokens,
    }),
    { requests: 0, inputTokens: 0, outputTokens: 0 },
  );
}

/** Polls `check` until it is true, or fails after `timeoutMs`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Starts dispatchers of `config` in this process on their embedded store and bus (unless the
 * overrides name Redis or NATS), on free ports with no operator listener (tests use `inject`);
 * each is closed after the test that started it. Call inside a `describe`.
 */
export function dispatcherStarter(
  config: FairwayConfig,
  defaults: ServeOverrides = {},
): (overrides?: ServeOverrides) => Promise<RunningDispatcher> {
  const running: RunningDispatcher[] = [];
  afterEach(async () => {
    for (const d of running.splice(0)) await d.close();
  });
  return async (overrides = defaults) => {
    const settings = serveSettings({}, { port: 0, operatorPort: 0, ...overrides });
    const d = await startDispatcher({ settings, config, logger: silentLogger });
    running.push(d);
    return d;
  };
}
