import { mergeNatsSecurity } from '@fairway/bus';
import { ConfigError, parseConfig } from '@fairway/core';
import { type AdmissionRules, toRules } from '@fairway/scheduler';
import { describe, expect, it } from 'vitest';
import { resolveDispatcherOptions } from '../src/dispatcher-options.ts';
import { schedulingFromConfig } from '../src/scheduling-config.ts';
import { serveSettings, storeConnection } from '../src/serve-settings.ts';

function issues(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err.issues.map((i) => `${i.path}: ${i.message}`);
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('serveSettings', () => {
  it("takes the NATS password from NATS_PASSWORD and the user from the config's bus.nats.auth", () => {
    const s = serveSettings({ NATS_URL: 'nats://nats:4222', NATS_PASSWORD: 'fwsecret' });
    const config = parseConfig({ bus: { nats: { auth: { user: 'dispatcher' } } } }, 'test config');
    expect(mergeNatsSecurity(s.natsSecurity, config.bus.nats)).toEqual({
      auth: { user: 'dispatcher', password: 'fwsecret' },
    });
    // A password with no user anywhere is still refused, once every layer is in.
    expect(() => mergeNatsSecurity(s.natsSecurity, undefined)).toThrow(/give "user" with "password"/);
  });

  it('connects through Redis Sentinel from REDIS_SENTINELS and REDIS_SENTINEL_NAME', () => {
    const s = serveSettings({
      REDIS_SENTINELS: 'sentinel-0:26379,10.0.0.7:26380',
      REDIS_SENTINEL_NAME: 'fairway',
      REDIS_SENTINEL_PASSWORD: 's3cret',
      REDIS_PASSWORD: 'p4ss',
      REDIS_TLS: '1',
    });
    expect(s.redisUrl).toBeUndefined();
    expect(s.redisSentinel).toEqual({
      sentinels: [
        { host: 'sentinel-0', port: 26379 },
        { host: '10.0.0.7', port: 26380 },
      ],
      name: 'fairway',
      sentinelPassword: 's3cret',
      password: 'p4ss',
      tls: true,
    });
  });

  it('bounds every Redis command by REDIS_COMMAND_TIMEOUT_MS, and refuses one under 100 ms', () => {
    const s = serveSettings({ REDIS_URL: 'redis://redis:6379', REDIS_COMMAND_TIMEOUT_MS: '2500' });
    expect(s.redisCommandTimeoutMs).toBe(2500);
    expect(storeConnection(s, parseConfig({}, 'test config')).redisCommandTimeoutMs).toBe(2500);
    // Unset: the store's connection takes its default.
    expect(serveSettings({ REDIS_URL: 'redis://redis:6379' }).redisCommandTimeoutMs).toBeUndefined();
    expect(issues(() => serveSettings({ REDIS_COMMAND_TIMEOUT_MS: '10' }))[0]).toMatch(
      /^REDIS_COMMAND_TIMEOUT_MS: /,
    );
  });

  it('refuses sentinels without a primary name, or with REDIS_URL as well', () => {
    expect(issues(() => serveSettings({ REDIS_SENTINELS: 'a:1' }))).toEqual([
      'REDIS_SENTINEL_NAME: required with REDIS_SENTINELS (the monitored primary)',
    ]);
    expect(
      issues(() =>
        serveSettings({ REDIS_SENTINELS: 'a:1', REDIS_SENTINEL_NAME: 'm', REDIS_URL: 'redis://x:1' }),
      ),
    ).toEqual(['REDIS_SENTINELS: give one of REDIS_URL, REDIS_SENTINELS and REDIS_CLUSTER']);
    expect(issues(() => serveSettings({ REDIS_SENTINELS: 'a', REDIS_SENTINEL_NAME: 'm' }))).toEqual([
      'REDIS_SENTINELS: must be host:port,host:port',
    ]);
  });

  it('runs on a Redis Cluster from REDIS_CLUSTER, with REDIS_PASSWORD and REDIS_TLS', () => {
    const s = serveSettings({
      REDIS_CLUSTER: 'redis-0:6379,10.0.0.8:7001',
      REDIS_PASSWORD: 'p4ss',
      REDIS_TLS: '1',
    });
    expect(s.redisUrl).toBeUndefined();
    expect(s.redisCluster).toEqual({
      nodes: [
        { host: 'redis-0', port: 6379 },
        { host: '10.0.0.8', port: 7001 },
      ],
      password: 'p4ss',
      tls: true,
    });
    expect(issues(() => serveSettings({ REDIS_CLUSTER: 'a:1', REDIS_URL: 'redis://x:1' }))).toEqual([
      'REDIS_CLUSTER: give one of REDIS_URL, REDIS_SENTINELS and REDIS_CLUSTER',
    ]);
    expect(issues(() => serveSettings({ REDIS_CLUSTER: 'a' }))).toEqual([
      'REDIS_CLUSTER: must be host:port,host:port',
    ]);
  });

  it('reads the environment, with explicit values on top', () => {
    const s = serveSettings(
      {
        FAIRWAY_CONFIG: '/etc/fairway.yaml',
        REDIS_URL: 'redis://10.0.0.1:6379',
        NATS_URL: 'nats://10.0.0.2:4222',
        PORT: '9000',
        FAIRWAY_LEASE_MS: '5000',
        FAIRWAY_RESERVE: 'predicted',
        FAIRWAY_REPREDICT: '1',
        UNRELATED: 'x',
      },
      { port: 9100 },
    );
    expect(s).toMatchObject({
      configPath: '/etc/fairway.yaml',
      redisUrl: 'redis://10.0.0.1:6379',
      natsUrl: 'nats://10.0.0.2:4222',
      port: 9100,
      host: '127.0.0.1',
      prefix: 'fairway',
      options: { leaseMs: 5000, reserve: 'predicted', repredict: true },
    });
  });

  it('reads NATS credentials and operator public keys from the environment, flags on top', () => {
    const s = serveSettings(
      {
        NATS_USER: 'dispatcher',
        NATS_PASSWORD: 'from-env',
        NATS_TLS_CA_FILE: '/etc/nats/ca.pem',
        FAIRWAY_OPERATOR_PUBLIC_KEY_FILE: '/keys/a.pub, /keys/b.pub',
      },
      { natsSecurity: { auth: { password: 'from-flag' } } },
    );
    expect(s.natsSecurity).toEqual({
      auth: { user: 'dispatcher', password: 'from-flag' },
      tls: { caFile: '/etc/nats/ca.pem' },
    });
    expect(s.operatorPublicKeyFiles).toEqual(['/keys/a.pub', '/keys/b.pub']);
    expect(serveSettings({}).operatorPublicKeyFiles).toBeUndefined();
    expect(issues(() => serveSettings({ NATS_TOKEN: 't', NATS_USER: 'u' }))).toEqual([
      ': give one of user, token, not several',
    ]);
  });

  it('names every invalid variable', () => {
    expect(
      issues(() =>
        serveSettings({ PORT: '80a', REDIS_URL: 'http://x', FAIRWAY_LEASE_MS: '5', FAIRWAY_PREFIX: 'a b' }),
      ),
    ).toEqual([
      'REDIS_URL: must be a redis:// or rediss:// URL',
      'PORT: must be a whole number',
      'FAIRWAY_PREFIX: must be letters, digits, "_", "-" and dots',
      'FAIRWAY_LEASE_MS: Too small: expected number to be >=100',
    ]);
  });
});

describe('dispatcher options and policies from config', () => {
  it('takes queue timeout and charge interval from the config file unless given', () => {
    const config = parseConfig({ policy: { queueTimeoutS: 7, chargeFlushMs: 20 } });
    expect(resolveDispatcherOptions({}, config)).toMatchObject({
      queueTimeoutMs: 7000,
      flushMs: 20,
      leaseMs: 10_000,
    });
    expect(resolveDispatcherOptions({ queueTimeoutMs: 50 }, config).queueTimeoutMs).toBe(50);
    expect(issues(() => resolveDispatcherOptions({ leaseMs: 1000, renewEveryMs: 2000 }, config))).toEqual([
      'renewEveryMs: must be shorter than leaseMs, or the lease lapses between renewals',
    ]);
  });

  it('refuses policies the dispatcher cannot serve at start-up, naming the field (and builds the rest)', () => {
    expect(
      issues(() => schedulingFromConfig(parseConfig({ policy: { ordering: 'vtc-oracle' } }), 'd'))[0],
    ).toMatch(/^policy\.ordering: vtc-oracle needs true output lengths/);
    expect(schedulingFromConfig(parseConfig({ policy: { placement: 'aladdin' } }), 'd').placement.name).toBe(
      'aladdin',
    );
    expect(issues(() => schedulingFromConfig(parseConfig({ policy: { ordering: 'wsc' } }), 'd'))[0]).toMatch(
      /^apps: /,
    );
  });

  it('serves qlm as fairness inside class bands under the control plane, and edf as deadlines in one band', () => {
    const qlm = schedulingFromConfig(parseConfig({ policy: { ordering: 'qlm' } }), 'd');
    expect(qlm.planner).toBe('qlm');
    expect(qlm.ordering.name).toBe('qlm');
    expect(new Set(qlm.sloClasses.map((c) => c.band)).size).toBeGreaterThan(1);
    const edf = schedulingFromConfig(parseConfig({ policy: { ordering: 'edf' } }), 'd');
    expect(edf.planner).toBe('edf');
    expect(edf.ordering.mode).toBe('score');
    expect(edf.sloClasses.map((c) => c.band)).toEqual(edf.sloClasses.map(() => 0));
    expect(schedulingFromConfig(parseConfig({}), 'd').planner).toBeUndefined();
  });

  it('applies tenant limits (or the defaults), app limits and queue bounds at admission', () => {
    const config = parseConfig({
      tenants: [{ id: 'a', limits: { rpm: 5, tpm: 100, maxQueued: 3 } }, { id: 'b' }],
      apps: [{ id: 'chat', stages: [{ input: 1, output: 1 }], limits: { rpm: 9 } }],
      pools: [{ id: 'p', model: 'm', maxQueued: 50 }],
      defaultLimits: { rpm: 2 },
    });
    const s = schedulingFromConfig(config, 'd');
    const ctx = { nowMs: 0, pool: 'p', band: 0, flow: 'a', reservedTokens: 42, gateway: 'd' };
    const req = {
      id: 'r',
      tenant: 'a',
      model: 'm',
      sloClass: 'interactive',
      inputTokens: 2,
      maxTokens: 40,
      arrivalMs: 0,
    };
    const a: AdmissionRules = toRules(s.admission({ ...req, app: 'chat' }, ctx));
    expect(a).toMatchObject({ maxQueuedFlow: 3, maxQueuedPool: 50 });
    expect(a.limits).toEqual([
      expect.objectContaining({ key: 'rpm:tenant:a', limit: 5, amount: 1 }),
      expect.objectContaining({ key: 'tpm:tenant:a', limit: 100, amount: 42 }),
      expect.objectContaining({ key: 'rpm:app:chat', limit: 9, amount: 1 }),
    ]);
    const b = toRules(s.admission({ ...req, tenant: 'b' }, ctx));
    expect(b.limits).toEqual([expect.objectContaining({ key: 'rpm:tenant:b', limit: 2 })]);
    expect(s.poolOf('m')).toBe('p');
    expect(s.poolOf('other')).toBe('other');
  });

  it('tracks interactions for WSC (continuations first) without OIT throttles, and not for VTC', () => {
    const ctx = { nowMs: 0, pool: 'm', band: 0, flow: 'a', reservedTokens: 42, gateway: 'd' };
    const req = {
      id: 'r',
      tenant: 'a',
      model: 'm',
      sloClass: 'interactive',
      inputTokens: 2,
      maxTokens: 40,
      arrivalMs: 0,
      interactionId: 'conv-1',
    };
    const rulesOf = (policy: object) => {
      const config = parseConfig({ apps: [{ id: 'chat', stages: [{ input: 1, output: 1 }] }], policy });
      return toRules(schedulingFromConfig(config, 'd').admission(req, ctx));
    };
    const wsc = rulesOf({ ordering: 'wsc' });
    expect(wsc.interaction).toEqual({ key: 'ix:a:conv-1', ttlMs: 60_000 });
    expect(wsc.limits.filter((l) => l.onlyWhenOverloaded)).toEqual([]);
    expect(rulesOf({ ordering: 'vtc' }).interaction).toBeUndefined();
    const oit = rulesOf({ ordering: 'wsc', oit: true });
    expect(oit.interaction).toEqual({ key: 'ix:a:conv-1', ttlMs: 60_000 });
    expect(oit.limits.filter((l) => l.onlyWhenOverloaded)).toHaveLength(2);
  });

  it("prices WSC service by each end user's configured priority factor E", () => {
    const config = parseConfig({
      tenants: [{ id: 'a', userPriority: { vip: 0.5 } }],
      apps: [{ id: 'chat', stages: [{ input: 10, output: 10 }] }],
      policy: { ordering: 'wsc' },
    });
    const { ordering } = schedulingFromConfig(config, 'd');
    const req = (user: string) => ({
      id: 'r',
      tenant: 'a',
      app: 'chat',
      user: `a/${user}`,
      model: 'm',
      sloClass: 'interactive',
      inputTokens: 100,
      maxTokens: 10,
      arrivalMs: 0,
    });
    expect(ordering.dispatchCost(req('vip'), undefined)).toBeCloseTo(
      0.5 * ordering.dispatchCost(req('bob'), undefined),
      10,
    );
  });

  it("takes OIT's limits from the config: the fleet's per user and per app, and an app's own", () => {
    const ctx = { nowMs: 0, pool: 'm', band: 0, flow: 'a', reservedTokens: 42, gateway: 'd' };
    const req = {
      id: 'r',
      tenant: 'a',
      model: 'm',
      sloClass: 'interactive',
      inputTokens: 2,
      maxTokens: 40,
      arrivalMs: 0,
      user: 'u1',
    };
    const throttles = (config: object, app: string) => {
      const parsed = parseConfig(config);
      const rules = toRules(schedulingFromConfig(parsed, 'd').admission({ ...req, app }, ctx));
      return rules.limits.filter((l) => l.onlyWhenOverloaded).map((l) => l.limit);
    };
    const apps = [
      // Its always-on limit is not its overload limit.
      { id: 'chat', stages: [{ input: 1, output: 1 }], limits: { rpm: 9 } },
      { id: 'agent', stages: [{ input: 1, output: 1 }], oitRpm: 5 },
    ];
    expect(throttles({ apps, policy: { oit: true } }, 'chat')).toEqual([60, 600]);
    expect(throttles({ apps, policy: { oit: true, oitLimits: { userRpm: 7, appRpm: 70 } } }, 'chat')).toEqual(
      [7, 70],
    );
    expect(
      throttles({ apps, policy: { oit: true, oitLimits: { userRpm: 7, appRpm: 70 } } }, 'agent'),
    ).toEqual([7, 5]);
  });
});
