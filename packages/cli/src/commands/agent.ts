import { networkInterfaces } from 'node:os';
import {
  type AdvertisedUrl,
  chooseAdvertiseUrl,
  EngineProcess,
  isWildcardKvEventsEndpoint,
  KV_EVENTS_ENDPOINT,
  NodeAgent,
} from '@fairway/agent';
import { type Bus, NatsBus } from '@fairway/bus';
import { createLogger, type Logger, redactUrls, systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { type Command, Option } from 'commander';
import { positiveWholeNumber } from '../cli-args.ts';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import { addNatsFlags, type NatsFlags, natsSecurityOf } from '../nats-flags.ts';
import { shutdownTimeoutMs, stopOnSignals } from '../shutdown.ts';

/** Options of {@link startAgent}. */
export interface StartAgentOptions {
  readonly bus: Bus;
  /** Base URL of the engine's OpenAI server, as the agent reaches it. */
  readonly engineUrl: string;
  /** URL registered for dispatchers on any host to use. @default `engineUrl` */
  readonly advertiseUrl?: string;
  readonly replicaId: string;
  readonly pool: string;
  /** The model name clients send (the engine's served model name). */
  readonly model: string;
  readonly logger: Logger;
  /** `--max-num-seqs` of the engine. @default 256 */
  readonly maxNumSeqs?: number;
  readonly gpu?: string;
  /** Tensor-parallel degree of the engine. @default 1 */
  readonly tp?: number;
  /** @default 200 */
  readonly heartbeatIntervalMs?: number;
  /** The engine process, when the agent runs it. */
  readonly process?: EngineProcess;
  /** The engine's KV cache events endpoint, relayed onto the bus when given (e.g. `tcp://127.0.0.1:5557`). */
  readonly kvEventsEndpoint?: string;
  /** The engine's KV events topic. @default '' */
  readonly kvEventsTopic?: string;
  /** Bind the KV events endpoint for an engine that connects to it. @default false */
  readonly kvEventsBind?: boolean;
}

/** A running node agent and the engine client it owns. */
export interface AgentHandle {
  readonly agent: NodeAgent;
  /** Leaves the fleet (`gone`) and closes the engine client. */
  stop(): Promise<void>;
}

/** Starts a node agent beside an engine (shared by `fairway agent`, `engine-sim` and `up`). */
export async function startAgent(o: StartAgentOptions): Promise<AgentHandle> {
  const engine = new VllmClient({ url: o.engineUrl, modelName: o.model });
  const agent = new NodeAgent({
    bus: o.bus,
    engine,
    clock: systemClock,
    logger: o.logger,
    replicaId: o.replicaId,
    pool: o.pool,
    model: o.model,
    heartbeatIntervalMs: o.heartbeatIntervalMs ?? 200,
    ...(o.advertiseUrl !== undefined ? { url: o.advertiseUrl } : {}),
    ...(o.maxNumSeqs !== undefined ? { maxNumSeqs: o.maxNumSeqs } : {}),
    ...(o.gpu !== undefined ? { gpu: o.gpu } : {}),
    ...(o.tp !== undefined ? { tp: o.tp } : {}),
    ...(o.process !== undefined ? { process: o.process } : {}),
    ...(o.kvEventsEndpoint !== undefined ? { kvEventsEndpoint: o.kvEventsEndpoint } : {}),
    ...(o.kvEventsTopic !== undefined ? { kvEventsTopic: o.kvEventsTopic } : {}),
    ...(o.kvEventsBind !== undefined ? { kvEventsBind: o.kvEventsBind } : {}),
  });
  await agent.start();
  return {
    agent,
    async stop() {
      await agent.stop();
      await engine.close();
    },
  };
}

/**
 * The URL an agent started by a command registers (`--advertise-url`, else the engine's own URL
 * when other hosts can use it; see `chooseAdvertiseUrl`), logging a warning when only this host can.
 */
export function advertisedEngineUrl(
  advertiseUrl: string | undefined,
  engineUrl: string,
  engineUrlFlag: string,
  logger: Logger,
): AdvertisedUrl {
  const advertised = chooseAdvertiseUrl({
    advertiseUrl,
    engineUrl,
    engineUrlFlag,
    interfaces: networkInterfaces(),
  });
  if (advertised.warning !== undefined) logger.warn({ url: advertised.url }, advertised.warning);
  return advertised;
}

/** Flags of `fairway agent`. */
interface AgentFlags extends NatsFlags {
  engineUrl?: string;
  advertiseUrl?: string;
  replicaId: string;
  pool?: string;
  model: string;
  natsUrl: string;
  prefix: string;
  maxNumSeqs?: number;
  gpu?: string;
  tp?: number;
  heartbeatMs: number;
  kvEventsEndpoint?: string;
  kvEventsTopic?: string;
  kvEventsBind?: boolean;
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
}

/** Adds `fairway agent` to the program. */
export function registerAgentCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  const cmd = program
    .command('agent')
    .description(
      'node agent beside one engine: registers it over NATS, heartbeats its capacity, serves drain/evict/sleep/LoRA/swap commands; give the engine command after -- to run and restart it',
    )
    .argument('[command...]', 'engine command line to run (e.g. vllm serve …), after --')
    .option('--engine-url <url>', 'base URL of the engine (default http://127.0.0.1:8000)')
    .option(
      '--advertise-url <url>',
      "URL dispatchers on other hosts reach the engine at (env FAIRWAY_ADVERTISE_URL; default: --engine-url, a wildcard host replaced by this host's first non-internal IPv4 address)",
      process.env.FAIRWAY_ADVERTISE_URL,
    )
    .requiredOption('--replica-id <id>', 'replica id, unique in the fleet')
    .requiredOption('--model <name>', 'model name clients send (served model name)')
    .option('--pool <id>', 'pool the replica serves in (default: the model)')
    .option('--nats-url <url>', 'NATS server', process.env.NATS_URL ?? 'nats://127.0.0.1:4222')
    .option('--prefix <prefix>', 'NATS subject prefix', process.env.FAIRWAY_PREFIX ?? 'fairway')
    .option('--max-num-seqs <n>', "the engine's --max-num-seqs", positiveWholeNumber)
    .option('--gpu <name>', 'GPU type, e.g. A100-80GB')
    .option(
      '--tp <n>',
      "the engine's tensor-parallel size (vLLM --tensor-parallel-size; default 1): with --gpu, what a performance model is matched on",
      positiveWholeNumber,
    )
    .option('--heartbeat-ms <ms>', 'heartbeat spacing', positiveWholeNumber, 200)
    .option(
      '--kv-events-endpoint <url>',
      "the engine's KV cache events (vLLM --kv-events-config endpoint) as this host reaches it, e.g. tcp://127.0.0.1:5557: relayed onto the bus for prefix-cache routing",
    )
    .option('--kv-events-topic <topic>', "the engine's KV events topic (default: none)")
    .option(
      '--kv-events-bind',
      'bind --kv-events-endpoint (e.g. tcp://*:5557) for an engine that connects its publisher to it (a vLLM endpoint without a wildcard)',
    )
    .addOption(
      new Option('--log-level <level>', 'log level')
        .choices(['debug', 'info', 'warn', 'error', 'silent'])
        .default('info'),
    );
  addNatsFlags(cmd).action(async (command: string[], flags: AgentFlags) => {
    const logger = createLogger({ level: flags.logLevel, name: 'agent' });
    const timeoutMs = shutdownTimeoutMs(process.env);
    const engineUrl = flags.engineUrl ?? 'http://127.0.0.1:8000';
    if (!/^https?:\/\/\S+$/.test(engineUrl)) throw new UsageError(['--engine-url: must be an http(s) URL']);
    const kvEndpoint = flags.kvEventsEndpoint;
    if (kvEndpoint !== undefined && !KV_EVENTS_ENDPOINT.test(kvEndpoint))
      throw new UsageError(['--kv-events-endpoint: must be a ZMQ endpoint such as tcp://127.0.0.1:5557']);
    if (kvEndpoint !== undefined && !flags.kvEventsBind && isWildcardKvEventsEndpoint(kvEndpoint))
      throw new UsageError([
        `--kv-events-endpoint: ${kvEndpoint} is a wildcard address the agent cannot connect to: give the engine host's address, e.g. tcp://127.0.0.1:5557 (or --kv-events-bind)`,
      ]);
    const advertised = advertisedEngineUrl(flags.advertiseUrl, engineUrl, '--engine-url', logger);
    const bus = await NatsBus.connect({
      servers: flags.natsUrl,
      prefix: flags.prefix,
      logger,
      name: `agent ${flags.replicaId}`,
      security: natsSecurityOf(flags),
    });
    const probe = new VllmClient({ url: engineUrl });
    const [bin, ...args] = command;
    const proc =
      bin === undefined
        ? undefined
        : new EngineProcess({ command: bin, args, probe: () => probe.health(), logger });
    const handle = await startAgent({
      bus,
      engineUrl,
      advertiseUrl: advertised.url,
      replicaId: flags.replicaId,
      pool: flags.pool ?? flags.model,
      model: flags.model,
      logger,
      heartbeatIntervalMs: flags.heartbeatMs,
      ...(flags.maxNumSeqs !== undefined ? { maxNumSeqs: flags.maxNumSeqs } : {}),
      ...(flags.gpu !== undefined ? { gpu: flags.gpu } : {}),
      ...(flags.tp !== undefined ? { tp: flags.tp } : {}),
      ...(proc !== undefined ? { process: proc } : {}),
      ...(flags.kvEventsEndpoint !== undefined ? { kvEventsEndpoint: flags.kvEventsEndpoint } : {}),
      ...(flags.kvEventsTopic !== undefined ? { kvEventsTopic: flags.kvEventsTopic } : {}),
      ...(flags.kvEventsBind === true ? { kvEventsBind: true } : {}),
    });
    io.out(
      `fairway agent: replica ${flags.replicaId} (${flags.model}) at ${engineUrl}, registered as ${advertised.url}, on ${redactUrls(flags.natsUrl)}\n`,
    );
    stopOnSignals({
      stop: async () => {
        await handle.stop();
        await probe.close();
        await bus.close();
      },
      force: () => bus.closeNow(),
      timeoutMs,
      logger,
    });
    setCode(ExitCode.OK);
  });
}
