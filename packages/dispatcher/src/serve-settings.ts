import { hostname } from 'node:os';
import { layerNatsSecurity, mergeNatsSecurity, type NatsSecurity, natsSecurityFromEnv } from '@fairway/bus';
import { ConfigError, ErrorCode, type FairwayConfig, parseWith } from '@fairway/core';
import { z } from 'zod';
import type { DispatcherOptions } from './dispatcher-options.ts';
import type { InfrastructureOptions, RedisClusterSettings, RedisSentinelSettings } from './infrastructure.ts';

/**
 * Flags over environment, checked now except for a password without a user: the config file's
 * `bus.nats.auth.user`, layered under these when the dispatcher starts, may give it.
 */
function natsLayers(...layers: readonly (NatsSecurity | undefined)[]): NatsSecurity {
  const layered = layerNatsSecurity(...layers);
  if (layered.auth.password !== undefined && layered.auth.user === undefined) return layered;
  return mergeNatsSecurity(layered);
}

/** How a dispatcher process is run: where it listens and what it connects to. */
export interface ServeSettings {
  /** The fairway config file (tenants, keys, pools, policy). */
  readonly configPath: string | undefined;
  /** Redis for the shared store; the in-memory store when absent (one dispatcher only). */
  readonly redisUrl: string | undefined;
  /**
   * Password of the Redis at `redisUrl` when the URL carries none (`REDIS_PASSWORD`); a password
   * in the URL wins. Sentinel and cluster settings carry their own. @default none
   */
  readonly redisPassword?: string | undefined;
  /**
   * Password of the sentinels the config file's `store.redis` names, when it gives none
   * (`REDIS_SENTINEL_PASSWORD`). @default none
   */
  readonly redisSentinelPassword?: string | undefined;
  /**
   * Redis behind Sentinel instead of `redisUrl`: the primary is asked of the sentinels, and
   * found again after a fail-over (`REDIS_SENTINELS`, `REDIS_SENTINEL_NAME`, …).
   */
  readonly redisSentinel?: RedisSentinelSettings | undefined;
  /**
   * A Redis Cluster instead of `redisUrl`: seed primaries (`REDIS_CLUSTER=host:port,…` or
   * `--redis-cluster`, with `REDIS_PASSWORD`, `REDIS_TLS`); the config's `store.slotGroups` spread
   * the pools over its primaries.
   */
  readonly redisCluster?: RedisClusterSettings | undefined;
  /**
   * How long one Redis command may go unanswered before it fails, ms (`REDIS_COMMAND_TIMEOUT_MS`):
   * a Redis that hangs is answered for, not waited on. @default 5000
   */
  readonly redisCommandTimeoutMs?: number | undefined;
  /** NATS for the bus; the in-process bus when absent (one process only). */
  readonly natsUrl: string | undefined;
  /**
   * NATS credentials and TLS from `NATS_USER`, `NATS_PASSWORD`, `NATS_TOKEN`, `NATS_NKEY_SEED_FILE`,
   * `NATS_CREDS_FILE`, `NATS_TLS_*_FILE` (and flags); the config file's `bus.nats` fills the rest.
   * @default none
   */
  readonly natsSecurity: NatsSecurity;
  /**
   * Operator public keys (PEM files from `fairway admin keygen`) whose signed admin events apply;
   * `FAIRWAY_OPERATOR_PUBLIC_KEY_FILE` (comma-separated for several), else the config file's
   * `bus.operatorPublicKeyFiles`. @default none: on NATS, every admin event is refused
   */
  readonly operatorPublicKeyFiles: readonly string[] | undefined;
  /**
   * File holding the admin API's bearer token (`FAIRWAY_ADMIN_TOKEN_FILE`). @default none: the
   * admin API on the operator port answers 403
   */
  readonly adminTokenFile: string | undefined;
  /**
   * The operator private key (PEM, `fairway admin keygen`) the admin API signs its events with
   * (`FAIRWAY_OPERATOR_KEY_FILE`). @default none: admin writes only on the in-process bus
   */
  readonly operatorKeyFile: string | undefined;
  /** @default 8080 */
  readonly port: number;
  /** @default '127.0.0.1' */
  readonly host: string;
  /**
   * Port of the operator listener (`/metrics`, health); 0 disables it. @default config
   * `server.operatorPort` (9464)
   */
  readonly operatorPort: number | undefined;
  /** Interface of the operator listener. @default config `server.operatorHost` ('127.0.0.1') */
  readonly operatorHost: string | undefined;
  /** Redis key prefix and NATS subject prefix, so several fleets can share servers. @default 'fairway' */
  readonly prefix: string;
  /**
   * This dispatcher's name; its id in the store is the name plus a random suffix per start, so a
   * restarted process (same pod name) never inherits what its predecessor held — that is
   * reclaimed by lease. @default `<hostname>-<pid>`
   */
  readonly dispatcherId: string | undefined;
  /** A replica whose heartbeat is older than this gets no new work, ms. @default 1000 */
  readonly staleAfterMs: number;
  /** @default 'info' */
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  readonly options: DispatcherOptions;
}

const int = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .regex(/^\d+$/, 'must be a whole number')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

/** The environment variables a dispatcher reads; each is optional. */
export const serveEnvSchema = z.object({
  FAIRWAY_CONFIG: z.string().min(1).optional(),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\/\S+$/, 'must be a redis:// or rediss:// URL')
    .optional(),
  /** Sentinels as `host:port,host:port`; with it the store connects through Sentinel. */
  REDIS_SENTINELS: z
    .string()
    .regex(/^[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*$/, 'must be host:port,host:port')
    .optional(),
  /** Redis Cluster seed nodes as `host:port,host:port`; with it the store runs on the cluster. */
  REDIS_CLUSTER: z
    .string()
    .regex(/^[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*$/, 'must be host:port,host:port')
    .optional(),
  /** Name of the monitored primary (`sentinel monitor <name> …`). */
  REDIS_SENTINEL_NAME: z.string().min(1).optional(),
  REDIS_SENTINEL_PASSWORD: z.string().min(1).optional(),
  /**
   * Password of Redis: of the URL's server when `REDIS_URL` carries none, of the primary (and
   * replicas) through Sentinel, of a cluster's nodes.
   */
  REDIS_PASSWORD: z.string().min(1).optional(),
  /** `1`: TLS to the sentinels and the primary. */
  REDIS_TLS: z.enum(['0', '1']).optional(),
  /** How long one Redis command may go unanswered, ms. */
  REDIS_COMMAND_TIMEOUT_MS: int(100).optional(),
  NATS_URL: z
    .string()
    .regex(/^(nats|tls|ws|wss):\/\/\S+$/, 'must be a nats:// URL')
    .optional(),
  PORT: int(0, 65535).optional(),
  HOST: z.string().min(1).optional(),
  FAIRWAY_OPERATOR_PORT: int(0, 65535).optional(),
  FAIRWAY_OPERATOR_HOST: z.string().min(1).optional(),
  FAIRWAY_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, 'must be letters, digits, "_", "-" and dots')
    .optional(),
  FAIRWAY_DISPATCHER_ID: z
    .string()
    .regex(/^[A-Za-z0-9._:-]{1,128}$/, 'must be 1-128 letters, digits, ".", "_", ":" or "-"')
    .optional(),
  FAIRWAY_LEASE_MS: int(100).optional(),
  FAIRWAY_QUEUE_TIMEOUT_MS: int(1).optional(),
  FAIRWAY_DEFAULT_MAX_TOKENS: int(1).optional(),
  FAIRWAY_BODY_LIMIT_BYTES: int(1024).optional(),
  FAIRWAY_RESERVE: z.enum(['max-tokens', 'predicted']).optional(),
  FAIRWAY_REPREDICT: z.enum(['0', '1']).optional(),
  FAIRWAY_STALE_MS: int(10).optional(),
  FAIRWAY_LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).optional(),
  FAIRWAY_OPERATOR_PUBLIC_KEY_FILE: z.string().min(1).optional(),
  FAIRWAY_ADMIN_TOKEN_FILE: z.string().min(1).optional(),
  FAIRWAY_OPERATOR_KEY_FILE: z.string().min(1).optional(),
});

/** Explicit values (command-line flags) that win over the environment. */
export type ServeOverrides = Partial<Omit<ServeSettings, 'options'>> & {
  readonly options?: DispatcherOptions;
};

/**
 * Reads a dispatcher's settings from the environment (`FAIRWAY_CONFIG`, `REDIS_URL`, `REDIS_CLUSTER` or
 * `REDIS_SENTINELS` with `REDIS_SENTINEL_NAME`, `REDIS_SENTINEL_PASSWORD`, `REDIS_PASSWORD`,
 * `REDIS_TLS`, `NATS_URL`,
 * `PORT`, `HOST`, `FAIRWAY_OPERATOR_PORT`, `FAIRWAY_OPERATOR_HOST`, `FAIRWAY_PREFIX`,
 * `FAIRWAY_DISPATCHER_ID`, `FAIRWAY_LEASE_MS`,
 * `FAIRWAY_QUEUE_TIMEOUT_MS`, `FAIRWAY_DEFAULT_MAX_TOKENS`, `FAIRWAY_BODY_LIMIT_BYTES`,
 * `FAIRWAY_RESERVE`, `FAIRWAY_REPREDICT`, `FAIRWAY_STALE_MS`, `FAIRWAY_LOG_LEVEL`,
 * `FAIRWAY_OPERATOR_PUBLIC_KEY_FILE`, `FAIRWAY_ADMIN_TOKEN_FILE`, `FAIRWAY_OPERATOR_KEY_FILE` and the
 * `NATS_*` credentials), with `overrides` on top. Throws a
 * `ConfigError` naming every invalid variable.
 */
export function serveSettings(
  env: Readonly<Record<string, string | undefined>>,
  overrides: ServeOverrides = {},
): ServeSettings {
  const known = Object.fromEntries(
    Object.keys(serveEnvSchema.shape).flatMap((k) => {
      const v = env[k];
      return v === undefined || v === '' ? [] : [[k, v]];
    }),
  );
  const e = parseWith(serveEnvSchema, known, 'environment');
  const fromEnv: DispatcherOptions = {
    ...(e.FAIRWAY_LEASE_MS !== undefined ? { leaseMs: e.FAIRWAY_LEASE_MS } : {}),
    ...(e.FAIRWAY_QUEUE_TIMEOUT_MS !== undefined ? { queueTimeoutMs: e.FAIRWAY_QUEUE_TIMEOUT_MS } : {}),
    ...(e.FAIRWAY_DEFAULT_MAX_TOKENS !== undefined ? { defaultMaxTokens: e.FAIRWAY_DEFAULT_MAX_TOKENS } : {}),
    ...(e.FAIRWAY_BODY_LIMIT_BYTES !== undefined ? { bodyLimitBytes: e.FAIRWAY_BODY_LIMIT_BYTES } : {}),
    ...(e.FAIRWAY_RESERVE !== undefined ? { reserve: e.FAIRWAY_RESERVE } : {}),
    ...(e.FAIRWAY_REPREDICT !== undefined ? { repredict: e.FAIRWAY_REPREDICT === '1' } : {}),
  };
  const redisSentinel = overrides.redisSentinel ?? sentinelFromEnv(e);
  const redisUrl = overrides.redisUrl ?? e.REDIS_URL;
  const redisCluster = overrides.redisCluster ?? clusterFromEnv(e);
  const redisPassword = overrides.redisPassword ?? e.REDIS_PASSWORD;
  const redisSentinelPassword = overrides.redisSentinelPassword ?? e.REDIS_SENTINEL_PASSWORD;
  const redisCommandTimeoutMs = overrides.redisCommandTimeoutMs ?? e.REDIS_COMMAND_TIMEOUT_MS;
  if ([redisSentinel, redisUrl, redisCluster].filter((x) => x !== undefined).length > 1)
    throw new ConfigError(ErrorCode.CONFIG_INVALID, 'environment', [
      {
        path: redisCluster !== undefined ? 'REDIS_CLUSTER' : 'REDIS_SENTINELS',
        message: 'give one of REDIS_URL, REDIS_SENTINELS and REDIS_CLUSTER',
      },
    ]);
  const s: ServeSettings = {
    configPath: overrides.configPath ?? e.FAIRWAY_CONFIG,
    redisUrl,
    ...(redisPassword !== undefined ? { redisPassword } : {}),
    ...(redisSentinelPassword !== undefined ? { redisSentinelPassword } : {}),
    ...(redisSentinel !== undefined ? { redisSentinel } : {}),
    ...(redisCluster !== undefined ? { redisCluster } : {}),
    ...(redisCommandTimeoutMs !== undefined ? { redisCommandTimeoutMs } : {}),
    natsUrl: overrides.natsUrl ?? e.NATS_URL,
    natsSecurity: natsLayers(overrides.natsSecurity, natsSecurityFromEnv(env)),
    operatorPublicKeyFiles:
      overrides.operatorPublicKeyFiles ??
      e.FAIRWAY_OPERATOR_PUBLIC_KEY_FILE?.split(',')
        .map((f) => f.trim())
        .filter((f) => f !== ''),
    adminTokenFile: overrides.adminTokenFile ?? e.FAIRWAY_ADMIN_TOKEN_FILE,
    operatorKeyFile: overrides.operatorKeyFile ?? e.FAIRWAY_OPERATOR_KEY_FILE,
    port: overrides.port ?? e.PORT ?? 8080,
    host: overrides.host ?? e.HOST ?? '127.0.0.1',
    operatorPort: overrides.operatorPort ?? e.FAIRWAY_OPERATOR_PORT,
    operatorHost: overrides.operatorHost ?? e.FAIRWAY_OPERATOR_HOST,
    prefix: overrides.prefix ?? e.FAIRWAY_PREFIX ?? 'fairway',
    dispatcherId: overrides.dispatcherId ?? e.FAIRWAY_DISPATCHER_ID,
    staleAfterMs: overrides.staleAfterMs ?? e.FAIRWAY_STALE_MS ?? 1000,
    logLevel: overrides.logLevel ?? e.FAIRWAY_LOG_LEVEL ?? 'info',
    options: { ...fromEnv, ...overrides.options },
  };
  if (!Number.isInteger(s.port) || s.port < 0 || s.port > 65535)
    throw new ConfigError(ErrorCode.CONFIG_INVALID, 'settings', [
      { path: 'port', message: 'must be a whole number from 0 to 65535' },
    ]);
  return s;
}

/** Where a dispatcher's store is: the part of {@link InfrastructureOptions} that names Redis. */
export type StoreConnection = Pick<
  InfrastructureOptions,
  'redisUrl' | 'redisPassword' | 'redisSentinel' | 'redisCluster' | 'redisCommandTimeoutMs' | 'slotGroups'
>;

/**
 * The Redis a process started with `settings` and `config` connects its store to, for every command
 * that runs a dispatcher (`serve`, `up`): the settings' URL, sentinels or cluster (flags and
 * environment), else the config file's `store.redis` sentinels, else none (the in-memory store).
 * `REDIS_PASSWORD` applies to a URL without a password and to config sentinels without one, and
 * `REDIS_SENTINEL_PASSWORD` to config sentinels without a `sentinelPassword`.
 */
export function storeConnection(settings: ServeSettings, config: FairwayConfig): StoreConnection {
  const fromConfig = config.store.redis;
  return {
    redisUrl: settings.redisUrl,
    redisPassword: settings.redisPassword,
    redisCluster: settings.redisCluster,
    redisCommandTimeoutMs: settings.redisCommandTimeoutMs,
    // The environment's REDIS_URL / REDIS_SENTINELS / REDIS_CLUSTER win over the config file's store.redis.
    redisSentinel:
      settings.redisSentinel ??
      (settings.redisUrl === undefined && settings.redisCluster === undefined && fromConfig !== undefined
        ? {
            ...fromConfig,
            password: fromConfig.password ?? settings.redisPassword,
            sentinelPassword: fromConfig.sentinelPassword ?? settings.redisSentinelPassword,
          }
        : undefined),
    slotGroups: config.store.slotGroups,
  };
}

/** `host:port,host:port` as nodes. */
export function parseHostPorts(list: string): { host: string; port: number }[] {
  return list.split(',').map((hp) => {
    const i = hp.lastIndexOf(':');
    return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) };
  });
}

function clusterFromEnv(e: z.infer<typeof serveEnvSchema>): RedisClusterSettings | undefined {
  if (e.REDIS_CLUSTER === undefined) return undefined;
  return {
    nodes: parseHostPorts(e.REDIS_CLUSTER),
    ...(e.REDIS_PASSWORD !== undefined ? { password: e.REDIS_PASSWORD } : {}),
    ...(e.REDIS_TLS === '1' ? { tls: true } : {}),
  };
}

function sentinelFromEnv(e: z.infer<typeof serveEnvSchema>): RedisSentinelSettings | undefined {
  if (e.REDIS_SENTINELS === undefined) return undefined;
  if (e.REDIS_SENTINEL_NAME === undefined)
    throw new ConfigError(ErrorCode.CONFIG_INVALID, 'environment', [
      { path: 'REDIS_SENTINEL_NAME', message: 'required with REDIS_SENTINELS (the monitored primary)' },
    ]);
  return {
    sentinels: e.REDIS_SENTINELS.split(',').map((hp) => {
      const i = hp.lastIndexOf(':');
      return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) };
    }),
    name: e.REDIS_SENTINEL_NAME,
    ...(e.REDIS_SENTINEL_PASSWORD !== undefined ? { sentinelPassword: e.REDIS_SENTINEL_PASSWORD } : {}),
    ...(e.REDIS_PASSWORD !== undefined ? { password: e.REDIS_PASSWORD } : {}),
    ...(e.REDIS_TLS === '1' ? { tls: true } : {}),
  };
}

/**
 * A dispatcher id for one process start: the given name (default `<hostname>-<pid>`) and a random
 * suffix, so an owner id is never reused across restarts.
 */
export function newDispatcherId(random: string, name?: string): string {
  const base =
    name ??
    `${
      hostname()
        .replace(/[^A-Za-z0-9._:-]/g, '-')
        .slice(0, 64) || 'host'
    }-${process.pid}`;
  return `${base}-${random}`;
}
