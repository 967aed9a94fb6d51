import { batchApi, batchEnv } from '@fairway/batch';
import { createLogger, type FairwayConfig, loadConfig, redactUrls } from '@fairway/core';
import {
  parseHostPorts,
  type ServeOverrides,
  type ServeSettings,
  serveSettings,
  startDispatcher,
} from '@fairway/dispatcher';
import type { Command } from 'commander';
import { wholeNumber } from '../cli-args.ts';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import { addNatsFlags, type NatsFlags, natsFlagSecurity } from '../nats-flags.ts';
import { shutdownTimeoutMs, stopOnSignals } from '../shutdown.ts';

/** Flags of `fairway serve`; each overrides its environment variable. */
interface ServeFlags extends NatsFlags {
  operatorPublicKey?: string[];
  adminTokenFile?: string;
  operatorKey?: string;
  config?: string;
  port?: number;
  host?: string;
  operatorPort?: number;
  operatorHost?: string;
  redisUrl?: string;
  redisCluster?: string;
  natsUrl?: string;
  prefix?: string;
  id?: string;
  leaseMs?: number;
  shutdownTimeout?: number;
}

/** Adds `fairway serve` to the program: one stateless dispatcher on Redis and NATS. */
export function registerServeCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  const cmd = program
    .command('serve')
    .description(
      'run one dispatcher (OpenAI-compatible API) on the shared Redis store and NATS bus; engines are discovered from their agents',
    )
    .option('-c, --config <file>', 'fairway config file (env FAIRWAY_CONFIG)')
    .option('-p, --port <port>', 'port to listen on (env PORT, default 8080)', wholeNumber)
    .option('--host <host>', 'interface to listen on (env HOST, default 127.0.0.1)')
    .option(
      '--operator-port <port>',
      'port of /metrics and health, apart from the API (env FAIRWAY_OPERATOR_PORT, config server.operatorPort, default 9464; 0 disables)',
      wholeNumber,
    )
    .option(
      '--operator-host <host>',
      'interface of the operator port (env FAIRWAY_OPERATOR_HOST, config server.operatorHost, default 127.0.0.1)',
    )
    .option('--redis-url <url>', 'Redis (env REDIS_URL, default redis://127.0.0.1:6379)')
    .option(
      '--redis-cluster <host:port,...>',
      "a Redis Cluster's seed nodes instead of --redis-url (env REDIS_CLUSTER); the config's store.slotGroups spread pools over its primaries",
    )
    .option('--nats-url <url>', 'NATS (env NATS_URL, default nats://127.0.0.1:4222)')
    .option('--prefix <prefix>', 'Redis key and NATS subject prefix (env FAIRWAY_PREFIX, default fairway)')
    .option(
      '--id <name>',
      'dispatcher name, suffixed with a random token per start (env FAIRWAY_DISPATCHER_ID, default host-pid)',
    )
    .option('--lease-ms <ms>', 'lease on what this dispatcher holds (env FAIRWAY_LEASE_MS)', wholeNumber)
    .option(
      '--shutdown-timeout <ms>',
      'on SIGTERM/SIGINT, time to finish gracefully before connections are dropped and the process exits 1 (env FAIRWAY_SHUTDOWN_TIMEOUT_MS, default 10000)',
      wholeNumber,
    )
    .option(
      '--operator-public-key <file...>',
      'operator public key(s) whose signed admin events apply (env FAIRWAY_OPERATOR_PUBLIC_KEY_FILE; without any, admin events are refused)',
    )
    .option(
      '--admin-token-file <file>',
      'bearer token of the admin API (/admin/v1 on the operator port) (env FAIRWAY_ADMIN_TOKEN_FILE; without it the admin API is off)',
    )
    .option(
      '--operator-key <file>',
      'operator private key the admin API signs its changes with (env FAIRWAY_OPERATOR_KEY_FILE; without it admin API writes are refused on NATS)',
    );
  addNatsFlags(cmd).action(async (flags: ServeFlags) => {
    const timeoutMs = shutdownTimeoutMs(process.env, flags.shutdownTimeout);
    const overrides: ServeOverrides = {
      ...(flags.config !== undefined ? { configPath: flags.config } : {}),
      ...(flags.port !== undefined ? { port: flags.port } : {}),
      ...(flags.host !== undefined ? { host: flags.host } : {}),
      ...(flags.operatorPort !== undefined ? { operatorPort: flags.operatorPort } : {}),
      ...(flags.operatorHost !== undefined ? { operatorHost: flags.operatorHost } : {}),
      ...(flags.prefix !== undefined ? { prefix: flags.prefix } : {}),
      ...(flags.id !== undefined ? { dispatcherId: flags.id } : {}),
      ...(flags.leaseMs !== undefined ? { options: { leaseMs: flags.leaseMs } } : {}),
      ...(flags.operatorPublicKey !== undefined ? { operatorPublicKeyFiles: flags.operatorPublicKey } : {}),
      ...(flags.adminTokenFile !== undefined ? { adminTokenFile: flags.adminTokenFile } : {}),
      ...(flags.operatorKey !== undefined ? { operatorKeyFile: flags.operatorKey } : {}),
      natsSecurity: natsFlagSecurity(flags),
      ...(flags.redisUrl !== undefined ? { redisUrl: flags.redisUrl } : {}),
      ...(flags.redisCluster !== undefined
        ? { redisCluster: { nodes: clusterNodes(flags.redisCluster) } }
        : {}),
      natsUrl: flags.natsUrl ?? process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    };
    let settings = serveSettings(process.env, overrides);
    if (settings.configPath === undefined)
      throw new UsageError(['--config: required (or set FAIRWAY_CONFIG), e.g. infra/fairway.example.yaml']);
    const config = loadConfig(settings.configPath);
    // The local Redis unless a URL, sentinels (REDIS_SENTINELS) or the config's store.redis say otherwise.
    if (
      settings.redisUrl === undefined &&
      settings.redisSentinel === undefined &&
      settings.redisCluster === undefined &&
      config.store.redis === undefined
    )
      settings = { ...settings, redisUrl: 'redis://127.0.0.1:6379' };
    const logger = createLogger({ level: settings.logLevel, name: 'dispatcher' });
    const running = await startDispatcher({
      settings,
      config,
      logger,
      plugins: [batchApi({ config, prefix: settings.prefix, logger, ...batchEnv(process.env) })],
    });
    io.out(
      `fairway serve: dispatcher ${running.id} listening on ${running.url} (store ${describeStore(settings, config)}, bus ${redactUrls(settings.natsUrl ?? '')}, prefix ${settings.prefix})${running.operatorUrl === undefined ? '' : `; metrics on ${running.operatorUrl}/metrics`}\n`,
    );
    stopOnSignals({ stop: () => running.close(), force: () => running.forceClose(), timeoutMs, logger });
    setCode(ExitCode.OK);
  });
}

/** `--redis-cluster host:port,…` as nodes; a clear usage error otherwise. */
function clusterNodes(list: string): { host: string; port: number }[] {
  if (!/^[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*$/.test(list))
    throw new UsageError([`--redis-cluster: must be host:port,host:port (got "${list}")`]);
  return parseHostPorts(list);
}

/** Where the store is, for the start-up line (no password). */
function describeStore(settings: ServeSettings, config: FairwayConfig): string {
  const groups = Object.keys(config.store.slotGroups).length;
  const slots = groups === 0 ? '' : `, ${groups + 1} slot groups`;
  if (settings.redisCluster !== undefined)
    return `cluster ${settings.redisCluster.nodes.map((n) => `${n.host}:${n.port}`).join(',')}${slots}`;
  if (settings.redisUrl !== undefined) return `${redactUrls(settings.redisUrl)}${slots}`;
  return `sentinel ${(settings.redisSentinel ?? config.store.redis)?.name ?? ''}${slots}`;
}
