import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { batchApi, batchEnv } from '@fairway/batch';
import { mergeNatsSecurity } from '@fairway/bus';
import { createLogger, type FairwayConfig, type Logger, loadConfig, systemClock } from '@fairway/core';
import {
  connectInfrastructure,
  type RunningDispatcher,
  type ServeOverrides,
  type StartDispatcherInput,
  serveSettings,
  startDispatcher,
  storeConnection,
} from '@fairway/dispatcher';
import { type EngineSimHandle, smallestFittingTp, startEngineSim } from '@fairway/engine-sim';
import { type Command, Option } from 'commander';
import { positiveNumber, wholeNumber } from '../cli-args.ts';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import { addNatsFlags, type NatsFlags, natsFlagSecurity } from '../nats-flags.ts';
import { shutdownTimeoutMs, stopOnSignals } from '../shutdown.ts';
import { type AgentHandle, startAgent } from './agent.ts';

/** The example config `fairway up` runs with when given none. */
export const EXAMPLE_CONFIG = fileURLToPath(
  new URL('../../../../infra/fairway.example.yaml', import.meta.url),
);

/** Options of {@link startUp}. */
export interface UpOptions {
  /** Config file. @default {@link EXAMPLE_CONFIG} */
  readonly configPath?: string;
  /** @default 8080 (0 picks a free port) */
  readonly port?: number;
  /** @default '127.0.0.1' */
  readonly host?: string;
  /** Operator port (`/metrics`, health); 0 disables it. @default config `server.operatorPort` (9464) */
  readonly operatorPort?: number;
  /** Simulated engines to start when no engine URLs are given. @default 2 */
  readonly engines?: number;
  /** Real engines (vLLM servers) to put agents beside instead of simulated ones. */
  readonly engineUrls?: readonly string[];
  /** Speed factor of the simulated engines (model ms per real ms). @default 1 */
  readonly speed?: number;
  /** KV capacity of each simulated engine, tokens. @default from its GPU preset */
  readonly kvCapacityTokens?: number;
  /** `--max-num-seqs` of each simulated engine. @default 256 */
  readonly maxNumSeqs?: number;
  /**
   * Redis and NATS; in-memory store and in-process bus when absent (and, for the store, when the
   * environment names no sentinels or cluster and the config no `store.redis`).
   */
  readonly redisUrl?: string;
  readonly natsUrl?: string;
  /** @default 'fairway' */
  readonly prefix?: string;
  /** Dispatcher tuning from the environment is applied first; these win. */
  readonly settings?: ServeOverrides;
  /** @default the process environment */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly logger?: Logger;
  /**
   * The admin API's token. @default the one in `FAIRWAY_ADMIN_TOKEN_FILE` (or the settings'
   * `adminTokenFile`), else a random one made for this start, as a notebook server does
   */
  readonly adminToken?: string;
  /** Traces the dispatcher's requests with this tracer (tests). @default from config and `OTEL_*` */
  readonly tracer?: StartDispatcherInput['tracer'];
}

/** A demo key a user can paste. */
export interface DemoKey {
  readonly tenant: string;
  readonly key: string;
  readonly app: string | undefined;
}

/** The running embedded stack. */
export interface UpHandle {
  readonly url: string;
  readonly model: string;
  readonly keys: readonly DemoKey[];
  readonly dispatcher: RunningDispatcher;
  readonly engines: readonly EngineSimHandle[];
  readonly agents: readonly AgentHandle[];
  readonly config: FairwayConfig;
  /**
   * The admin API's token when it was not read from a file (given, or made for this start); the
   * console's link carries it. Undefined with a token file or without an operator port.
   */
  readonly adminToken: string | undefined;
  /** Where the token came from, for the banner: made for this start, given, or the file's path. */
  readonly adminTokenSource: 'generated' | 'given' | { readonly file: string } | undefined;
  close(): Promise<void>;
  /** Drops every connection still open, for a {@link UpHandle.close} that ran out of time. */
  forceClose(): Promise<void>;
}

const SIM_PRESETS = new Set(['llama-2-7b', 'llama-2-13b', 'llama-2-70b']);

/** The plain demo keys of a config (hashed keys cannot be shown). */
export function demoKeys(config: FairwayConfig): DemoKey[] {
  return config.tenants.flatMap((t) =>
    t.keys.flatMap((k) => (k.key === undefined ? [] : [{ tenant: t.id, key: k.key, app: k.app }])),
  );
}

async function waitServing(running: RunningDispatcher, model: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const reg = running.infrastructure.registry;
  while (!reg.list({ model }).some((v) => v.acceptsWork)) {
    if (Date.now() > deadline)
      throw new UsageError([`no engine serving "${model}" registered within ${timeoutMs} ms`]);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Starts the embedded default in one process: dispatcher, in-memory store, in-process bus and a
 * few simulated engines, each with a node agent — or, with Redis/NATS URLs and engine URLs, the
 * same dispatcher on real infrastructure. Resolves once an engine serves the first pool's model.
 */
export async function startUp(o: UpOptions = {}): Promise<UpHandle> {
  const configPath = o.configPath ?? EXAMPLE_CONFIG;
  const config = loadConfig(configPath);
  const pool = config.pools[0];
  if (pool === undefined) throw new UsageError([`${configPath}: pools: fairway up needs at least one pool`]);
  const settings = serveSettings(o.env ?? process.env, {
    ...o.settings,
    configPath,
    port: o.port ?? o.settings?.port ?? 8080,
    host: o.host ?? o.settings?.host ?? '127.0.0.1',
    ...(o.operatorPort !== undefined ? { operatorPort: o.operatorPort } : {}),
    ...(o.redisUrl !== undefined ? { redisUrl: o.redisUrl } : {}),
    ...(o.natsUrl !== undefined ? { natsUrl: o.natsUrl } : {}),
    ...(o.prefix !== undefined ? { prefix: o.prefix } : {}),
  });
  const logger = o.logger ?? createLogger({ level: settings.logLevel, name: 'fairway-up' });
  // The console and admin API are on the operator port: without one there is nothing to sign in to.
  const operatorPort = settings.operatorPort ?? config.server.operatorPort;
  const adminTokenSource: UpHandle['adminTokenSource'] =
    o.adminToken !== undefined
      ? 'given'
      : settings.adminTokenFile !== undefined
        ? { file: settings.adminTokenFile }
        : operatorPort === 0
          ? undefined
          : 'generated';
  const adminToken =
    o.adminToken ?? (adminTokenSource === 'generated' ? randomBytes(24).toString('base64url') : undefined);
  const infra = await connectInfrastructure({
    // The Redis `serve` would connect to: URL, sentinels, cluster, or the config's store.redis.
    ...storeConnection(settings, config),
    natsUrl: settings.natsUrl,
    prefix: settings.prefix,
    defaultLeaseMs: settings.options.leaseMs ?? 10_000,
    staleAfterMs: settings.staleAfterMs,
    name: 'fairway up',
    clock: systemClock,
    logger,
    natsSecurity: mergeNatsSecurity(settings.natsSecurity, config.bus.nats),
    allowedReplicas: config.bus.allowedReplicas,
  });
  const engines: EngineSimHandle[] = [];
  const agents: AgentHandle[] = [];
  const closeAll = async (): Promise<void> => {
    for (const a of agents.splice(0)) await a.stop().catch(() => undefined);
    for (const e of engines.splice(0)) await e.close().catch(() => undefined);
  };
  let running: RunningDispatcher;
  try {
    const urls = o.engineUrls ?? config.engines.map((e) => e.url);
    if (urls.length > 0) {
      for (const [i, url] of urls.entries()) {
        const configured = config.engines.find((e) => e.url === url);
        const enginePool = config.pools.find((p) => p.id === configured?.pool) ?? pool;
        agents.push(
          await startAgent({
            bus: infra.bus,
            engineUrl: url,
            replicaId: configured?.id ?? `engine-${i + 1}`,
            pool: enginePool.id,
            model: enginePool.model,
            logger,
            ...(configured?.gpu !== undefined ? { gpu: configured.gpu } : {}),
            ...(configured !== undefined ? { tp: configured.tp } : {}),
          }),
        );
      }
    } else {
      const count = o.engines ?? 2;
      const preset = SIM_PRESETS.has(pool.model) ? pool.model : 'llama-2-7b';
      for (let i = 0; i < count; i++) {
        const sim = await startEngineSim({
          model: preset,
          // A model too large for one GPU runs split over as many as it needs, as it would be served.
          tp: smallestFittingTp(preset) ?? 1,
          servedModelName: pool.model,
          speed: o.speed ?? 1,
          seed: i,
          ...(o.kvCapacityTokens !== undefined ? { kvCapacityTokens: o.kvCapacityTokens } : {}),
          ...(o.maxNumSeqs !== undefined ? { maxNumSeqs: o.maxNumSeqs } : {}),
          logger,
        });
        engines.push(sim);
        agents.push(
          await startAgent({
            bus: infra.bus,
            engineUrl: sim.url,
            replicaId: `sim-${i + 1}`,
            pool: pool.id,
            model: sim.servedModelName,
            gpu: sim.gpu,
            tp: sim.tp,
            logger,
            maxNumSeqs: o.maxNumSeqs ?? 256,
          }),
        );
      }
    }
    running = await startDispatcher({
      settings,
      config,
      logger,
      infrastructure: infra,
      ...(adminToken === undefined ? {} : { adminToken }),
      plugins: [batchApi({ config, prefix: settings.prefix, logger, ...batchEnv(o.env ?? process.env) })],
      ...(o.tracer === undefined ? {} : { tracer: o.tracer }),
      ...(o.env === undefined ? {} : { env: o.env }),
    });
  } catch (err) {
    // The failure to report is `err`; a cleanup step that fails too must not replace it.
    await closeAll();
    await infra.close().catch(() => undefined);
    throw err;
  }
  try {
    await waitServing(running, pool.model, 10_000);
  } catch (err) {
    await running.close().catch(() => undefined);
    await closeAll();
    await infra.close().catch(() => undefined);
    throw err;
  }
  return {
    url: running.url,
    model: pool.model,
    keys: demoKeys(config),
    dispatcher: running,
    engines,
    agents,
    config,
    adminToken,
    adminTokenSource,
    async close() {
      await running.close();
      await closeAll();
      await infra.close();
    },
    async forceClose() {
      await running.forceClose();
      await infra.forceClose();
    },
  };
}

/** The start-up banner: URL, keys, a curl line and an OpenAI SDK snippet. */
export function upBanner(h: UpHandle, what: string): string {
  const key = h.keys[0]?.key ?? '<your key>';
  const width = Math.max(6, ...h.keys.map((k) => k.tenant.length));
  const keyLines = h.keys
    .map((k) => `  ${k.tenant.padEnd(width)}  ${k.key}${k.app ? `  (app ${k.app})` : ''}`)
    .join('\n');
  return `fairway is up: ${h.url}  (${what})

model   ${h.model}
keys
${keyLines}

try it with curl:
  curl ${h.url}/v1/chat/completions \\
    -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\
    -d '{"model":"${h.model}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":64}'

or with the OpenAI SDK (npm install openai):
  import OpenAI from 'openai';
  const client = new OpenAI({ baseURL: '${h.url}/v1', apiKey: '${key}' });
  const stream = await client.chat.completions.create({
    model: '${h.model}', messages: [{ role: 'user', content: 'Hello!' }], stream: true,
  });
  for await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta?.content ?? '');

${operatorLines(h)}
Ctrl+C to stop
`;
}

/** The banner's lines about the operator port: metrics, and the console with how to sign in. */
function operatorLines(h: UpHandle): string {
  const base = h.dispatcher.operatorUrl;
  if (base === undefined) return 'operator port disabled (no metrics, console or admin API)';
  const source = h.adminTokenSource;
  // The token goes in the fragment, which the browser never sends: the page moves it to the tab's
  // sessionStorage and takes it out of the address.
  const console =
    h.adminToken !== undefined
      ? `console  ${base}/console#token=${h.adminToken}\n         (${source === 'generated' ? 'admin token made for this start; ' : ''}the link signs you in)`
      : typeof source === 'object'
        ? `console  ${base}/console  (sign in with the admin token in ${source.file})`
        : `console  ${base}/console`;
  return `metrics  ${base}/metrics\n${console}`;
}

interface UpFlags extends NatsFlags {
  operatorPublicKey?: string[];
  adminTokenFile?: string;
  operatorKey?: string;
  config?: string;
  port: number;
  host: string;
  operatorPort?: number;
  engines: number;
  engineUrl?: string[];
  speed: number;
  redisUrl?: string;
  natsUrl?: string;
  prefix?: string;
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  shutdownTimeout?: number;
}

/** Adds `fairway up` to the program. */
export function registerUpCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  const cmd = program
    .command('up')
    .description(
      'run the whole stack in one process: dispatcher, in-memory store and bus, simulated engines with agents, demo tenants',
    )
    .option('-c, --config <file>', 'fairway config file (default: infra/fairway.example.yaml)')
    .option('-p, --port <port>', 'port to listen on (0 picks a free one)', wholeNumber, 8080)
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option(
      '--operator-port <port>',
      'port of /metrics and health, apart from the API (env FAIRWAY_OPERATOR_PORT, default 9464; 0 disables)',
      wholeNumber,
    )
    .option('--engines <n>', 'simulated engines to start', wholeNumber, 2)
    .option('--engine-url <url...>', 'real engine URLs (vLLM) to use instead of simulated ones')
    .option('--speed <factor>', 'simulated engine speed (model ms per real ms)', positiveNumber, 1)
    .option('--redis-url <url>', 'use Redis for the store (env REDIS_URL)')
    .option('--nats-url <url>', 'use NATS for the bus (env NATS_URL)')
    .option(
      '--operator-public-key <file...>',
      'with --nats-url: operator public key(s) whose signed admin events apply (env FAIRWAY_OPERATOR_PUBLIC_KEY_FILE)',
    )
    .option(
      '--admin-token-file <file>',
      'bearer token of the admin API and console (/admin/v1, /console on the operator port) (env FAIRWAY_ADMIN_TOKEN_FILE; without it a random one is made per start and the printed console link carries it)',
    )
    .option(
      '--operator-key <file>',
      'with --nats-url: operator private key the admin API signs its changes with (env FAIRWAY_OPERATOR_KEY_FILE)',
    )
    .option('--prefix <prefix>', 'Redis key and NATS subject prefix')
    .option(
      '--shutdown-timeout <ms>',
      'on SIGTERM/SIGINT, time to finish gracefully before connections are dropped and the process exits 1 (env FAIRWAY_SHUTDOWN_TIMEOUT_MS, default 10000)',
      wholeNumber,
    )
    .addOption(
      new Option('--log-level <level>', 'log level (logs go to stderr)')
        .choices(['debug', 'info', 'warn', 'error', 'silent'])
        .default('warn'),
    );
  addNatsFlags(cmd).action(async (flags: UpFlags) => {
    if (flags.engines < 1 && (flags.engineUrl ?? []).length === 0)
      throw new UsageError(['--engines: must be at least 1 without --engine-url']);
    const timeoutMs = shutdownTimeoutMs(process.env, flags.shutdownTimeout);
    const logger = createLogger({ level: flags.logLevel, name: 'fairway-up' });
    const handle = await startUp({
      ...(flags.config !== undefined ? { configPath: flags.config } : {}),
      port: flags.port,
      host: flags.host,
      ...(flags.operatorPort !== undefined ? { operatorPort: flags.operatorPort } : {}),
      engines: flags.engines,
      ...(flags.engineUrl !== undefined ? { engineUrls: flags.engineUrl } : {}),
      speed: flags.speed,
      ...(flags.redisUrl !== undefined ? { redisUrl: flags.redisUrl } : {}),
      ...(flags.natsUrl !== undefined ? { natsUrl: flags.natsUrl } : {}),
      ...(flags.prefix !== undefined ? { prefix: flags.prefix } : {}),
      settings: {
        natsSecurity: natsFlagSecurity(flags),
        ...(flags.operatorPublicKey !== undefined ? { operatorPublicKeyFiles: flags.operatorPublicKey } : {}),
        ...(flags.adminTokenFile !== undefined ? { adminTokenFile: flags.adminTokenFile } : {}),
        ...(flags.operatorKey !== undefined ? { operatorKeyFile: flags.operatorKey } : {}),
      },
      logger,
    });
    const infra = handle.dispatcher.infrastructure;
    const engines =
      handle.engines.length > 0
        ? `${handle.engines.length} simulated engines`
        : `${handle.agents.length} engines`;
    const store = infra.storeKind === 'redis' ? 'Redis store' : 'in-memory store';
    const bus = infra.busKind === 'nats' ? 'NATS bus' : 'in-process bus';
    io.out(upBanner(handle, `${store}, ${bus}, ${engines}`));
    stopOnSignals({ stop: () => handle.close(), force: () => handle.forceClose(), timeoutMs, logger });
    setCode(ExitCode.OK);
  });
}
