import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { mergeNatsSecurity } from '@fairway/bus';
import { type Clock, type FairwayConfig, type Logger, systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import type { Tracer } from '@opentelemetry/api';
import { adminApiSettingsOf, adminTrustOf } from './admin-events.ts';
import { buildDispatcher, type Dispatcher } from './app.ts';
import type { EngineFactory } from './engine-pool.ts';
import { DispatcherError, DispatcherErrorCode } from './errors.ts';
import { connectInfrastructure, type Infrastructure } from './infrastructure.ts';
import { newDispatcherId, type ServeSettings, storeConnection } from './serve-settings.ts';
import { givenTracer, startTelemetry, type TelemetryHandle } from './telemetry.ts';
import { tuneV8ForRequestPath } from './v8-tuning.ts';

/** The real-time monotonic clock dispatchers time latencies with (ms, sub-ms resolution). */
export const monotonicTimer: Clock = { now: () => performance.now() };

/** `http://host:port`, with a wildcard host shown as loopback and IPv6 in brackets. */
function baseUrl(bindHost: string, port: number): string {
  const host = bindHost === '0.0.0.0' || bindHost === '::' ? '127.0.0.1' : bindHost;
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** Inputs of {@link startDispatcher}. */
export interface StartDispatcherInput {
  readonly settings: ServeSettings;
  readonly config: FairwayConfig;
  readonly logger: Logger;
  /** Shared store/bus/registry (embedded mode); connected from `settings` when absent. */
  readonly infrastructure?: Infrastructure;
  /** @default a `VllmClient` per engine URL */
  readonly engines?: EngineFactory;
  /**
   * Traces requests with this tracer (tests: an in-memory exporter). @default OpenTelemetry's
   * NodeSDK when `telemetry.tracing.enabled` or the `OTEL_*` environment turns tracing or the OTLP
   * metrics export on (see `startTelemetry`), else none
   */
  readonly tracer?: Tracer;
  /** Where the `OTEL_*` variables are read. @default the process environment */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /**
   * The admin API's bearer token, given directly rather than in `settings.adminTokenFile` (which
   * it overrides): `fairway up` makes one per start. @default the file's, else the API is off
   */
  readonly adminToken?: string;
  /** Add routes or workers (e.g. the Batch API) to the built dispatcher before it listens. @default none */
  readonly plugins?: readonly DispatcherPlugin[];
}

/**
 * Extends a built dispatcher before it listens: registers routes on `dispatcher.app` and hooks to
 * stop what it starts when the app closes.
 */
export type DispatcherPlugin = (dispatcher: Dispatcher, infrastructure: Infrastructure) => Promise<void>;

/** A listening dispatcher. */
export interface RunningDispatcher {
  readonly id: string;
  /** Base URL, e.g. `http://127.0.0.1:8080`. */
  readonly url: string;
  readonly port: number;
  /** Base URL of the operator listener (`/metrics`, health); undefined when disabled (port 0). */
  readonly operatorUrl: string | undefined;
  readonly dispatcher: Dispatcher;
  readonly infrastructure: Infrastructure;
  /** Stops accepting, lets running requests finish, releases connections it opened. */
  close(): Promise<void>;
  /**
   * Ends what {@link close} is still waiting for, when a shutdown has run out of time: drops the
   * clients' open connections on both listeners and every Redis and NATS connection it opened.
   */
  forceClose(): Promise<void>;
}

/**
 * Starts one dispatcher process's server: connects Redis and NATS (or uses the in-memory store
 * and bus, or the given infrastructure), builds the app and listens.
 */
export async function startDispatcher(input: StartDispatcherInput): Promise<RunningDispatcher> {
  const { settings, config, logger } = input;
  tuneV8ForRequestPath();
  const id = newDispatcherId(randomBytes(3).toString('hex'), settings.dispatcherId);
  const leaseMs = settings.options.leaseMs ?? 10_000;
  const owned = input.infrastructure === undefined;
  const infrastructure =
    input.infrastructure ??
    (await connectInfrastructure({
      ...storeConnection(settings, config),
      natsUrl: settings.natsUrl,
      prefix: settings.prefix,
      defaultLeaseMs: leaseMs,
      staleAfterMs: settings.staleAfterMs,
      name: `dispatcher ${id}`,
      clock: systemClock,
      logger,
      natsSecurity: mergeNatsSecurity(settings.natsSecurity, config.bus.nats),
      allowedReplicas: config.bus.allowedReplicas,
    }));
  const operatorPort = settings.operatorPort ?? config.server.operatorPort;
  const operatorHost = settings.operatorHost ?? config.server.operatorHost;
  let dispatcher: Dispatcher;
  let tracing: TelemetryHandle | undefined;
  try {
    tracing =
      input.tracer === undefined
        ? await startTelemetry(config, input.env ?? process.env, logger)
        : givenTracer(input.tracer);
    const adminTrust = adminTrustOf(
      infrastructure.busKind,
      settings.operatorPublicKeyFiles ?? config.bus.operatorPublicKeyFiles,
    );
    const adminApi =
      input.adminToken === undefined
        ? adminApiSettingsOf(settings.adminTokenFile, settings.operatorKeyFile)
        : { ...adminApiSettingsOf(undefined, settings.operatorKeyFile), token: input.adminToken };
    dispatcher = buildDispatcher({
      adminTrust,
      adminApi,
      id,
      config,
      store: infrastructure.store,
      bus: infrastructure.bus,
      registry: infrastructure.registry,
      lease: infrastructure.lease,
      engines: input.engines ?? ((url) => new VllmClient({ url })),
      clock: systemClock,
      timer: monotonicTimer,
      logger,
      options: settings.options,
      tracer: tracing.tracer,
    });
    // One dispatcher per process in production: Node's own metrics describe it.
    dispatcher.metrics.collectProcessMetrics();
    await tracing.attach({
      registry: dispatcher.metrics.registry,
      observe: dispatcher.observeMetrics,
      app: dispatcher.app,
    });
    const flushTraces = tracing.shutdown;
    dispatcher.app.addHook('onClose', async () => flushTraces());
    for (const plugin of input.plugins ?? []) await plugin(dispatcher, infrastructure);
    await dispatcher.app.listen({ host: settings.host, port: settings.port });
  } catch (err) {
    await tracing?.shutdown();
    if (owned) await infrastructure.close();
    throw err;
  }
  if (operatorPort !== 0) {
    try {
      await dispatcher.operator.listen({ host: operatorHost, port: operatorPort });
    } catch (err) {
      await dispatcher.app.close();
      if (owned) await infrastructure.close();
      const code = (err as NodeJS.ErrnoException).code ?? 'error';
      throw new DispatcherError(
        DispatcherErrorCode.OPERATOR_PORT_INVALID,
        `${operatorHost}:${operatorPort}`,
        `the operator port (metrics) cannot listen on ${operatorHost}:${operatorPort} (${code}): set --operator-port (or FAIRWAY_OPERATOR_PORT, server.operatorPort; 0 disables it) or --operator-host`,
        { cause: err },
      );
    }
  }
  const addr = dispatcher.app.server.address() as AddressInfo;
  return {
    id,
    url: baseUrl(settings.host, addr.port),
    port: addr.port,
    operatorUrl:
      operatorPort === 0
        ? undefined
        : baseUrl(operatorHost, (dispatcher.operator.server.address() as AddressInfo).port),
    dispatcher,
    infrastructure,
    async close() {
      await dispatcher.app.close();
      if (owned) await infrastructure.close();
    },
    async forceClose() {
      dispatcher.app.server.closeAllConnections();
      dispatcher.operator.server.closeAllConnections();
      if (owned) await infrastructure.forceClose();
    },
  };
}
