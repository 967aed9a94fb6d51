import { parseConfig, silentLogger, systemClock } from '@fairway/core';
import { type RedisSentinelGroup, startRedisSentinelGroup, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectInfrastructure, type Infrastructure, serveSettings, startDispatcher } from '../src/index.ts';
import { waitFor } from './support/stack.ts';

function admitOf(id: string) {
  return {
    req: {
      id,
      pool: 'p',
      band: 0,
      flow: 'a',
      score: 0,
      arrivalMs: 0,
      reserveTokens: 1,
      dispatchCost: 1,
      owner: 'd1',
      payload: '',
    },
    nowMs: 0,
    lift: 'vtc' as const,
    limits: [],
    overloaded: false,
    tenant: 't',
  };
}

/** The dispatcher's store is Redis and admits a request; the dispatcher is closed after. */
async function expectStoreServes(running: Awaited<ReturnType<typeof startDispatcher>>, id: string) {
  try {
    expect(running.infrastructure.storeKind).toBe('redis');
    expect(await running.infrastructure.store.admit(admitOf(id))).toEqual({
      ok: true,
      queued: 1,
      windows: [],
    });
  } finally {
    await running.close();
  }
}

/**
 * The store connected through Redis Sentinel (ioredis's own sentinel support): a real primary,
 * replica and sentinel on free ports; `SENTINEL FAILOVER` promotes the replica and the store
 * follows it, with the state the replica had.
 */
describe('store through Redis Sentinel', () => {
  let group: RedisSentinelGroup;
  beforeAll(async () => {
    group = await startRedisSentinelGroup();
  });
  afterAll(async () => {
    await group?.stop();
  });

  it('keeps working across a fail-over to the replica', async () => {
    const sentinel = new Redis({ port: group.sentinelPort, host: '127.0.0.1' });
    const primaryOf = async () =>
      ((await sentinel.call('SENTINEL', 'get-master-addr-by-name', group.name)) as string[])[1];
    let infra: Infrastructure | undefined;
    try {
      // The sentinel has seen the replica (it can only promote one it knows).
      await waitFor(
        async () => ((await sentinel.call('SENTINEL', 'replicas', group.name)) as unknown[]).length > 0,
        15_000,
        'the sentinel to discover the replica',
      );
      infra = await connectInfrastructure({
        redisSentinel: { sentinels: [{ host: '127.0.0.1', port: group.sentinelPort }], name: group.name },
        prefix: uniquePrefix('sentinel'),
        defaultLeaseMs: 10_000,
        staleAfterMs: 1000,
        name: 'test',
        clock: systemClock,
        logger: silentLogger,
      });
      const store = infra.store;
      expect(await store.admit(admitOf('a'))).toEqual({ ok: true, queued: 1, windows: [] });
      expect(await primaryOf()).toBe(String(group.primaryPort));

      // The replica must hold the admission before it is promoted (replication is asynchronous).
      const replica = new Redis({ port: group.replicaPort, host: '127.0.0.1' });
      await waitFor(async () => (await replica.keys('*sentinel*:req:*')).length > 0, 20_000, 'replication');
      replica.disconnect();

      await sentinel.call('SENTINEL', 'FAILOVER', group.name);
      await waitFor(async () => (await primaryOf()) === String(group.replicaPort), 15_000, 'the fail-over');

      // The next calls reach the new primary (the old one refuses writes or drops the connection).
      let admitted: unknown;
      await waitFor(
        async () => {
          admitted = await store.admit(admitOf('b')).catch(() => undefined);
          return admitted !== undefined;
        },
        15_000,
        'an admission on the new primary',
      );
      expect(admitted).toEqual({ ok: true, queued: 2, windows: [] });
      expect((await store.snapshot('p', 0)).queued).toEqual({ a: 2 });
    } finally {
      await infra?.close();
      sentinel.disconnect();
    }
  }, 60_000);

  it("connects through the sentinels named in the config file's store.redis", async () => {
    const config = parseConfig(
      {
        pools: [{ id: 'llama', model: 'llama-2-7b' }],
        store: { redis: { sentinels: [{ host: '127.0.0.1', port: group.sentinelPort }], name: group.name } },
      },
      'test config',
    );
    const running = await startDispatcher({
      settings: serveSettings({}, { port: 0, operatorPort: 0, prefix: uniquePrefix('sentinel') }),
      config,
      logger: silentLogger,
    });
    await expectStoreServes(running, 'c');
  }, 30_000);
});

describe('sentinels that require a password', () => {
  let group: RedisSentinelGroup;
  beforeAll(async () => {
    group = await startRedisSentinelGroup('guarded', { sentinelPassword: 'sentinel-pass-1' });
  });
  afterAll(async () => {
    await group?.stop();
  });

  it("takes the config file's sentinels' password from REDIS_SENTINEL_PASSWORD", async () => {
    const config = parseConfig(
      {
        pools: [{ id: 'llama', model: 'llama-2-7b' }],
        store: { redis: { sentinels: [{ host: '127.0.0.1', port: group.sentinelPort }], name: group.name } },
      },
      'test config',
    );
    const start = (env: Record<string, string>) =>
      startDispatcher({
        settings: serveSettings(env, { port: 0, operatorPort: 0, prefix: uniquePrefix('sentinel-auth') }),
        config,
        logger: silentLogger,
      });
    // Without it the sentinels refuse the client, and the start says so.
    await expect(start({})).rejects.toThrow(
      /cannot reach Redis at sentinel guarded@127\.0\.0\.1:\d+: .*NOAUTH/,
    );
    const running = await start({ REDIS_SENTINEL_PASSWORD: 'sentinel-pass-1' });
    await expectStoreServes(running, 'd');
  }, 30_000);
});
