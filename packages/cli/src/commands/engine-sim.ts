import { localKvEventsEndpoint } from '@fairway/agent';
import { NatsBus } from '@fairway/bus';
import { createLogger } from '@fairway/core';
import { addEngineSimFlags, engineSimOptionsFromFlags, startEngineSim } from '@fairway/engine-sim';
import type { Command } from 'commander';
import { ExitCode } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import { addNatsFlags, type NatsFlags, natsSecurityOf } from '../nats-flags.ts';
import { shutdownTimeoutMs, stopOnSignals } from '../shutdown.ts';
import { type AgentHandle, advertisedEngineUrl, startAgent } from './agent.ts';

type EngineSimFlags = Parameters<typeof engineSimOptionsFromFlags>[0] &
  NatsFlags & {
    natsUrl?: string;
    advertiseUrl?: string;
    prefix: string;
    replicaId?: string;
    pool?: string;
    heartbeatMs?: string;
    logLevel?: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  };

/** Adds `fairway engine-sim` to the program: the simulated engine, optionally with its node agent. */
export function registerEngineSimCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  const cmd = program
    .command('engine-sim')
    .description(
      'a vLLM-compatible simulated engine whose timing comes from the engine model; with --nats-url it also runs its node agent',
    );
  addEngineSimFlags(cmd)
    .option(
      '--nats-url <url>',
      'run a node agent that registers this engine on NATS (credentials: --nats-user … or NATS_USER …)',
    )
    .option(
      '--advertise-url <url>',
      "URL the agent registers, for dispatchers on other hosts (env FAIRWAY_ADVERTISE_URL; default: the listen URL, a wildcard --host replaced by this host's first non-internal IPv4 address)",
      process.env.FAIRWAY_ADVERTISE_URL,
    )
    .option('--prefix <prefix>', 'NATS subject prefix', process.env.FAIRWAY_PREFIX ?? 'fairway')
    .option('--replica-id <id>', 'replica id for the agent (default: engine-sim-<port>)')
    .option('--pool <id>', 'pool the replica serves in (default: the served model name)')
    .option('--heartbeat-ms <ms>', 'agent heartbeat spacing (default 200)');
  addNatsFlags(cmd).action(async (flags: EngineSimFlags) => {
    const logger = createLogger({ level: flags.logLevel ?? 'info', name: 'engine-sim' });
    const timeoutMs = shutdownTimeoutMs(process.env);
    const handle = await startEngineSim({ ...engineSimOptionsFromFlags(flags), logger });
    let agent: AgentHandle | undefined;
    let bus: NatsBus | undefined;
    let registeredAs = '';
    const natsUrl = flags.natsUrl;
    if (natsUrl !== undefined) {
      // An agent that cannot start must not leave the engine serving in a process that stays up.
      try {
        registeredAs = advertisedEngineUrl(flags.advertiseUrl, handle.url, '--host', logger).url;
        const replicaId = flags.replicaId ?? `engine-sim-${handle.port}`;
        // The agent relays the engine's KV cache events: it connects to an endpoint the engine
        // binds (a wildcard host as this host's loopback), and binds one the engine connects to.
        const kvEvents = handle.kvEvents;
        bus = await NatsBus.connect({
          servers: natsUrl,
          prefix: flags.prefix,
          logger,
          name: replicaId,
          security: natsSecurityOf(flags),
        });
        agent = await startAgent({
          bus,
          engineUrl: handle.url,
          advertiseUrl: registeredAs,
          replicaId,
          pool: flags.pool ?? handle.servedModelName,
          model: handle.servedModelName,
          gpu: handle.gpu,
          tp: handle.tp,
          logger,
          maxNumSeqs: flags.maxNumSeqs ?? 256,
          ...(kvEvents === undefined
            ? {}
            : kvEvents.bound
              ? { kvEventsEndpoint: localKvEventsEndpoint(kvEvents.endpoint), kvEventsTopic: kvEvents.topic }
              : { kvEventsEndpoint: kvEvents.endpoint, kvEventsTopic: kvEvents.topic, kvEventsBind: true }),
          ...(flags.heartbeatMs !== undefined ? { heartbeatIntervalMs: Number(flags.heartbeatMs) } : {}),
        });
      } catch (err) {
        await bus?.close();
        await handle.close();
        throw err;
      }
    }
    io.out(
      `engine-sim ${handle.servedModelName} listening on ${handle.url}${agent ? ` (agent ${agent.agent.replicaId}, registered as ${registeredAs})` : ''}\n`,
    );
    stopOnSignals({
      stop: async () => {
        await agent?.stop();
        await bus?.close();
        await handle.close();
      },
      force: async () => bus?.closeNow(),
      timeoutMs,
      logger,
    });
    setCode(ExitCode.OK);
  });
}
