import {
  type Bus,
  describeNatsSecurity,
  MemoryBus,
  NatsBus,
  type NatsSecurity,
  ReplicaRegistry,
} from '@fairway/bus';
import {
  type Clock,
  type Logger,
  LogThrottle,
  parseWith,
  type RedisSentinelConfig,
  redactSecrets,
  redactUrls,
  redisSentinelConfigSchema,
} from '@fairway/core';
import {
  MemoryStore,
  type RedisClient,
  RedisStore,
  redisSlotGroupStore,
  type SchedulingStore,
} from '@fairway/store';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { DispatcherError, DispatcherErrorCode } from './errors.ts';
import { type LeaseBackend, MemoryLeaseBackend, RedisLeaseBackend } from './leader-lease.ts';

/** The shared state and messaging a dispatcher runs on. */
export interface Infrastructure {
  readonly store: SchedulingStore;
  readonly bus: Bus;
  /** Started; fed by agents' registrations and heartbeats. */
  readonly registry: ReplicaRegistry;
  /**
   * The control plane's leader lease: a key under the store's prefix in Redis (one leader among
   * the dispatchers sharing the store), or memory (the dispatchers of this process).
   */
  readonly lease: LeaseBackend;
  /** `redis` (one Redis or a Redis Cluster) or `memory`, for start-up messages. */
  readonly storeKind: 'redis' | 'memory';
  readonly busKind: 'nats' | 'memory';
  /**
   * The store's Redis connection (closed with the infrastructure): one Redis (or a Sentinel-managed
   * primary) or a Redis Cluster client (`instanceof Cluster`); undefined on the in-memory store.
   * A plugin on a cluster keeps the keys of each of its commands, scripts and transactions in one
   * hash slot.
   */
  readonly redis: RedisClient | undefined;
  /** Releases everything gracefully: leaves the bus by draining it, says goodbye to Redis. */
  close(): Promise<void>;
  /**
   * Drops every connection now, for a shutdown whose graceful part ran out of time: Redis sockets
   * closed without a goodbye, the NATS connection closed without draining (waiting at most
   * `timeoutMs` for it). Safe during or after {@link close}.
   */
  forceClose(timeoutMs?: number): Promise<void>;
}

/**
 * Redis behind Redis Sentinel: ioredis asks the sentinels for the primary named `name`, and asks
 * again when the connection drops or the primary turns into a replica (a fail-over), so the store
 * follows the primary without a restart. The config file's `store.redis`.
 */
export type RedisSentinelSettings = RedisSentinelConfig;

/**
 * A Redis Cluster: ioredis learns the slot map from any of `nodes` and follows it (MOVED, fail-overs).
 * `REDIS_CLUSTER` / `--redis-cluster`.
 */
export interface RedisClusterSettings {
  /** Seed nodes (any primaries or replicas of the cluster). */
  readonly nodes: readonly { readonly host: string; readonly port: number }[];
  /** Password of the cluster's nodes. @default none */
  readonly password?: string | undefined;
  /** TLS to the nodes. @default false */
  readonly tls?: boolean | undefined;
}

/** Options of {@link connectInfrastructure}. */
export interface InfrastructureOptions {
  /** Redis URL; the in-memory store when absent (and no `redisSentinel`). */
  readonly redisUrl?: string | undefined;
  /** Password for `redisUrl` when the URL carries none; the URL's own wins. @default none */
  readonly redisPassword?: string | undefined;
  /** Redis through Sentinel instead of `redisUrl`. */
  readonly redisSentinel?: RedisSentinelSettings | undefined;
  /** A Redis Cluster instead of `redisUrl`. */
  readonly redisCluster?: RedisClusterSettings | undefined;
  /**
   * Slot groups (config `store.slotGroups`): group → pools; each group a store in its own hash
   * slot (see `SlotGroupStore`). @default {} (one store, every pool in one slot)
   */
  readonly slotGroups?: Readonly<Record<string, readonly string[]>> | undefined;
  /** NATS URL; the in-process bus when absent. */
  readonly natsUrl?: string | undefined;
  /** NATS credentials and TLS. @default none */
  readonly natsSecurity?: NatsSecurity | undefined;
  /** Replica ids whose registrations are accepted. @default every replica id */
  readonly allowedReplicas?: readonly string[] | undefined;
  /** Key and subject prefix. */
  readonly prefix: string;
  /** Lease granted on a first admission before any renewal, ms. */
  readonly defaultLeaseMs: number;
  /** Replica staleness limit, ms. */
  readonly staleAfterMs: number;
  /** Name shown in NATS monitoring and discover requests. */
  readonly name: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** How long the first connection may take, ms. @default 5000 */
  readonly connectTimeoutMs?: number;
  /**
   * How long one Redis command may go unanswered, ms; then it fails (an admission answers
   * `503 not_ready`, and what the store may still run later is removed, see `Recovery.forget`).
   * A Redis that hangs or a network that drops packets keeps the connection open, so without it a
   * request would wait as long as the hang. @default 5000
   */
  readonly redisCommandTimeoutMs?: number | undefined;
}

/** Where to connect: a URL, a primary found through Sentinel, or a cluster. */
type RedisTarget =
  | { readonly url: string; readonly password?: string | undefined }
  | { readonly sentinel: RedisSentinelSettings }
  | { readonly cluster: RedisClusterSettings };

function describeTarget(t: RedisTarget): string {
  return 'url' in t
    ? t.url
    : 'cluster' in t
      ? `cluster ${t.cluster.nodes.map((x) => `${x.host}:${x.port}`).join(',')}`
      : `sentinel ${t.sentinel.name}@${t.sentinel.sentinels.map((x) => `${x.host}:${x.port}`).join(',')}`;
}

/**
 * `url` with `password` in it when the URL carries none (its own password wins): ioredis reads a
 * URL's empty password (`redis://user@host`) as given, so an option beside it would be ignored.
 */
function urlWithPassword(url: string, password: string | undefined): string {
  if (password === undefined) return url;
  const u = new URL(url);
  if (u.password !== '') return url;
  u.password = encodeURIComponent(password);
  return u.toString();
}

/** A write to a primary that became a replica: reconnect (through Sentinel, to the new primary) and resend. */
function readOnlyAfterFailover(err: Error): 2 | false {
  return err.message.startsWith('READONLY') ? 2 : false;
}

async function connectRedis(
  target: RedisTarget,
  timeoutMs: number,
  commandTimeoutMs: number,
  logger: Logger,
  purpose: 'requests' | 'control',
): Promise<Redis | Cluster> {
  const common: RedisOptions = {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    commandTimeout: commandTimeoutMs,
    maxRetriesPerRequest: 2,
    reconnectOnError: readOnlyAfterFailover,
    // Not ioredis's auto-pipelining: the store corks its connection for one loop turn instead
    // (RedisStore's `send`), and a Pipeline per turn was what the dispatcher promoted.
    enableAutoPipelining: false,
  };
  let redis: Redis | Cluster;
  if ('url' in target) redis = new Redis(urlWithPassword(target.url, target.password), common);
  else if ('cluster' in target) {
    const c = target.cluster;
    const { enableAutoPipelining: _single, lazyConnect, ...perNode } = common;
    redis = new Cluster(
      c.nodes.map((x) => ({ host: x.host, port: x.port })),
      {
        lazyConnect,
        // A cluster's connections are its own (not corked): its non-script commands are
        // auto-pipelined.
        enableAutoPipelining: true,
        // ioredis batches auto-pipelined commands by their first argument, for FCALL the function
        // name (for EVAL the script): calls to slots on different primaries in one batch would
        // fail (see the store's checkClient).
        autoPipeliningIgnoredCommands: ['fcall', 'eval', 'evalsha'],
        redisOptions: {
          ...perNode,
          ...(c.password !== undefined ? { password: c.password } : {}),
          ...(c.tls === true ? { tls: {} } : {}),
        },
      },
    );
  } else {
    const s = target.sentinel;
    redis = new Redis({
      ...common,
      sentinels: s.sentinels.map((x) => ({ host: x.host, port: x.port })),
      name: s.name,
      ...(s.sentinelPassword !== undefined ? { sentinelPassword: s.sentinelPassword } : {}),
      ...(s.password !== undefined ? { password: s.password } : {}),
      ...(s.tls === true ? { tls: {}, sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
    });
  }
  const url = describeTarget(target);
  // Until connected, the first socket error is the useful one (ECONNREFUSED, ENOTFOUND, auth).
  let first: Error | undefined;
  const onError = (err: Error): void => {
    first ??= err;
  };
  redis.on('error', onError);
  // A client that keeps retrying (sentinels that refuse it, a cluster that never forms) would
  // leave the start waiting for good: it has timeoutMs to connect and answer.
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no connection within ${timeoutMs} ms`)), timeoutMs);
  });
  const attempt = (async () => {
    await redis.connect();
    await redis.ping();
  })();
  // Once the deadline has won, the attempt's own failure has no one to tell.
  attempt.catch(() => undefined);
  try {
    await Promise.race([attempt, deadline]);
    // Later drops are retried by the client; say so rather than crash or stay silent, but once per
    // interval with a count: a reconnect loop fails several times a second for as long as Redis is away.
    const throttle = new LogThrottle();
    redis.on('error', (err: Error) =>
      throttle.warn(logger, 'error', { err: err.message, connection: purpose }, 'redis connection error'),
    );
    return redis;
  } catch (cause) {
    redis.disconnect();
    const reason = (first ?? (cause instanceof Error ? cause : new Error(String(cause)))).message;
    // The URL may carry a password: never in an error or a log line.
    const shown = redactSecrets(url);
    throw new DispatcherError(
      DispatcherErrorCode.STORE_UNREACHABLE,
      shown,
      `cannot reach Redis at ${shown}: ${redactSecrets(reason)}`,
      {
        cause: first ?? cause,
      },
    );
  } finally {
    clearTimeout(timer);
    redis.off('error', onError);
  }
}

/**
 * Connects the store (Redis, or memory) and the bus (NATS, or in-process) and starts a replica
 * registry on the bus. Unreachable servers fail here, at start-up, with the URL in the message.
 */
export async function connectInfrastructure(o: InfrastructureOptions): Promise<Infrastructure> {
  const timeoutMs = o.connectTimeoutMs ?? 5000;
  const commandTimeoutMs = o.redisCommandTimeoutMs ?? 5000;
  let redis: Redis | Cluster | undefined;
  let control: Redis | Cluster | undefined;
  let store: SchedulingStore;
  const target: RedisTarget | undefined =
    o.redisCluster !== undefined
      ? { cluster: o.redisCluster }
      : o.redisSentinel !== undefined
        ? { sentinel: parseWith(redisSentinelConfigSchema, o.redisSentinel, 'redisSentinel') }
        : o.redisUrl !== undefined
          ? { url: o.redisUrl, password: o.redisPassword }
          : undefined;
  if (target !== undefined) {
    redis = await connectRedis(target, timeoutMs, commandTimeoutMs, o.logger, 'requests');
    // Lease renewals, reclaims, snapshots and the leader lease on a connection of their own, so a
    // burst of admissions never holds a heartbeat back past its lease.
    control = await connectRedis(target, timeoutMs, commandTimeoutMs, o.logger, 'control').catch(
      (err: unknown) => {
        redis?.disconnect();
        throw err;
      },
    );
    // The gateway validates each request (parseRequest) and computes every other store input;
    // re-checking them with zod on each call was ~9% of what a request allocated (bench:overhead).
    const storeOptions = {
      redis,
      control,
      prefix: o.prefix,
      defaultLeaseMs: o.defaultLeaseMs,
      validate: false,
    };
    // Without slot groups, one store in one slot: today's keys, no routing.
    store =
      Object.keys(o.slotGroups ?? {}).length === 0
        ? new RedisStore(storeOptions)
        : redisSlotGroupStore({ ...storeOptions, slotGroups: o.slotGroups });
  } else {
    store = new MemoryStore({ defaultLeaseMs: o.defaultLeaseMs });
  }
  let bus: Bus;
  try {
    bus =
      o.natsUrl !== undefined
        ? await NatsBus.connect({
            servers: o.natsUrl,
            prefix: o.prefix,
            logger: o.logger,
            name: o.name,
            connectTimeoutMs: timeoutMs,
            ...(o.natsSecurity !== undefined ? { security: o.natsSecurity } : {}),
          })
        : new MemoryBus({ prefix: o.prefix, logger: o.logger });
  } catch (cause) {
    await store.close();
    redis?.disconnect();
    control?.disconnect();
    throw new DispatcherError(
      DispatcherErrorCode.BUS_UNREACHABLE,
      redactUrls(o.natsUrl ?? 'memory'),
      redactUrls(cause instanceof Error ? cause.message : String(cause)),
      { cause },
    );
  }
  if (o.natsUrl !== undefined)
    o.logger.info(
      { bus: redactUrls(o.natsUrl), auth: describeNatsSecurity(o.natsSecurity ?? {}, o.natsUrl) },
      'bus: connected to NATS',
    );
  const registry = new ReplicaRegistry({
    bus,
    clock: o.clock,
    logger: o.logger,
    staleAfterMs: o.staleAfterMs,
    name: o.name,
    ...(o.allowedReplicas !== undefined ? { allowedReplicas: o.allowedReplicas } : {}),
  });
  registry.start();
  return {
    store,
    bus,
    registry,
    lease: control
      ? new RedisLeaseBackend(control, `{${o.prefix}}:control-leader`)
      : new MemoryLeaseBackend(o.clock),
    storeKind: redis ? 'redis' : 'memory',
    busKind: o.natsUrl !== undefined ? 'nats' : 'memory',
    redis,
    async close() {
      registry.stop();
      await bus.close();
      await store.close();
      await Promise.all([redis, control].map((c) => (c === undefined ? undefined : closeRedis(c))));
    },
    async forceClose(timeoutMs = 1000) {
      registry.stop();
      redis?.disconnect();
      control?.disconnect();
      await closeWithin(bus instanceof NatsBus ? bus.closeNow() : bus.close(), timeoutMs);
    },
  };
}

/**
 * Says goodbye (QUIT) to a connected Redis; a connection that is down only drops its socket, since a
 * QUIT would wait in the offline queue for a server that may never come back.
 */
export async function closeRedis(redis: Redis | Cluster): Promise<void> {
  if (redis.status === 'ready') await redis.quit().catch(() => redis.disconnect());
  else redis.disconnect();
}

/** Waits for `closing` at most `timeoutMs`; a close that fails or outlasts it is given up on. */
async function closeWithin(closing: Promise<void>, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    closing.catch(() => undefined),
    new Promise<void>((r) => {
      timer = setTimeout(r, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
}
