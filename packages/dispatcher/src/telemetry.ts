import { createRequire } from 'node:module';
import type { FairwayConfig, Logger } from '@fairway/core';
import type { Tracer } from '@opentelemetry/api';
import type { Sampler, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { FastifyInstance } from 'fastify';
import { DispatcherError, DispatcherErrorCode } from './errors.ts';
import type { PrometheusSource } from './prometheus-producer.ts';
import { setHttpClientInstrumented } from './tracing.ts';

/** The name spans are recorded under (instrumentation scope). */
export const TRACER_NAME = '@fairway/dispatcher';

type Env = Readonly<Record<string, string | undefined>>;

/** Libraries fairway can instrument, by the names `OTEL_NODE_ENABLED_INSTRUMENTATIONS` uses. */
export const INSTRUMENTATIONS = ['ioredis', 'undici', 'fastify'] as const;
/** One of {@link INSTRUMENTATIONS}. */
export type InstrumentationName = (typeof INSTRUMENTATIONS)[number];

/** What a running dispatcher's telemetry gives it, and how to flush it on exit. */
export interface TelemetryHandle {
  /** Undefined when tracing is off: the request path then builds no span at all. */
  readonly tracer: Tracer | undefined;
  /**
   * Hands the built dispatcher to the telemetry: its Prometheus registry to the OTLP metrics
   * export, its API app to the fastify instrumentation. Call before the app listens.
   */
  attach(dispatcher: PrometheusSource & { readonly app: FastifyInstance }): Promise<void>;
  /** Exports what is buffered, stops the exporters and takes the SDK out of the process. */
  shutdown(): Promise<void>;
}

/** A handle for a tracer given from outside (tests): no SDK, nothing exported by fairway. */
export function givenTracer(tracer: Tracer | undefined): TelemetryHandle {
  return { tracer, attach: async () => undefined, shutdown: async () => undefined };
}

const OFF = givenTracer(undefined);

const disabled = (env: Env) => env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true';
const list = (value: string | undefined): string[] =>
  (value ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '');

/**
 * Whether tracing is on: `telemetry.tracing.enabled`, or an OTLP endpoint in the environment (as
 * any OTel SDK exports when one is set), unless `OTEL_TRACES_EXPORTER=none`;
 * `OTEL_SDK_DISABLED=true` turns it off regardless.
 */
export function tracingEnabled(config: FairwayConfig, env: Env): boolean {
  if (disabled(env) || list(env.OTEL_TRACES_EXPORTER).includes('none')) return false;
  return (
    config.telemetry.tracing.enabled ||
    (env.OTEL_EXPORTER_OTLP_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? '') !== ''
  );
}

/**
 * Whether the dispatcher's metrics are also exported over OTLP: `OTEL_METRICS_EXPORTER` lists
 * `otlp` (opt-in: Prometheus's `/metrics` is the default way), and `OTEL_SDK_DISABLED` is not true.
 */
export function metricsExportEnabled(env: Env): boolean {
  return !disabled(env) && list(env.OTEL_METRICS_EXPORTER).includes('otlp');
}

/**
 * The libraries to instrument while tracing: `OTEL_NODE_ENABLED_INSTRUMENTATIONS` (default
 * `ioredis`: a request's trace shows its Redis calls) less `OTEL_NODE_DISABLED_INSTRUMENTATIONS`.
 * An unknown name is refused with a coded error.
 */
export function enabledInstrumentations(env: Env): Set<InstrumentationName> {
  const known = new Set<string>(INSTRUMENTATIONS);
  const named = (variable: string, value: string | undefined): InstrumentationName[] =>
    list(value).map((name) => {
      if (!known.has(name))
        throw new DispatcherError(
          DispatcherErrorCode.TRACING_INVALID,
          name,
          `${variable}: "${name}" is not an instrumentation fairway has (${INSTRUMENTATIONS.join(', ')})`,
        );
      return name as InstrumentationName;
    });
  const enabled =
    env.OTEL_NODE_ENABLED_INSTRUMENTATIONS === undefined
      ? (['ioredis'] as InstrumentationName[])
      : named('OTEL_NODE_ENABLED_INSTRUMENTATIONS', env.OTEL_NODE_ENABLED_INSTRUMENTATIONS);
  const off = new Set(named('OTEL_NODE_DISABLED_INSTRUMENTATIONS', env.OTEL_NODE_DISABLED_INSTRUMENTATIONS));
  return new Set(enabled.filter((name) => !off.has(name)));
}

/** `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`. */
function protocolOf(env: Env, signal: 'TRACES' | 'METRICS'): 'http/json' | 'http/protobuf' {
  const protocol = (
    env[`OTEL_EXPORTER_OTLP_${signal}_PROTOCOL`] ??
    env.OTEL_EXPORTER_OTLP_PROTOCOL ??
    'http/protobuf'
  ).trim();
  if (protocol === 'http/json' || protocol === 'http/protobuf') return protocol;
  throw new DispatcherError(
    DispatcherErrorCode.TRACING_INVALID,
    protocol,
    `OTEL_EXPORTER_OTLP_PROTOCOL "${protocol}" is not supported: use http/protobuf or http/json`,
  );
}

/** `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` as is, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/<signal>`. */
function urlOf(env: Env, signal: 'TRACES' | 'METRICS'): { url?: string } {
  const own = env[`OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`];
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const url =
    own ?? (base === undefined ? undefined : `${base.replace(/\/+$/, '')}/v1/${signal.toLowerCase()}`);
  return url === undefined ? {} : { url };
}

async function spanExporter(env: Env): Promise<SpanExporter> {
  if (list(env.OTEL_TRACES_EXPORTER).includes('console')) {
    const { ConsoleSpanExporter } = await import('@opentelemetry/sdk-trace-base');
    return new ConsoleSpanExporter();
  }
  const options = urlOf(env, 'TRACES');
  if (protocolOf(env, 'TRACES') === 'http/json') {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
    return new OTLPTraceExporter(options);
  }
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
  return new OTLPTraceExporter(options);
}

/**
 * The sampler: `OTEL_TRACES_SAMPLER` (with `OTEL_TRACES_SAMPLER_ARG`) when set, else a
 * parent-based ratio sampler of `telemetry.tracing.sampleRatio`.
 */
async function samplerOf(env: Env, ratio: number): Promise<Sampler> {
  const s = await import('@opentelemetry/sdk-trace-base');
  const arg = Number(env.OTEL_TRACES_SAMPLER_ARG ?? '1');
  const fraction = Number.isFinite(arg) && arg >= 0 && arg <= 1 ? arg : 1;
  const name = env.OTEL_TRACES_SAMPLER?.trim().toLowerCase();
  switch (name) {
    case undefined:
      return new s.ParentBasedSampler({ root: new s.TraceIdRatioBasedSampler(ratio) });
    case 'always_on':
      return new s.AlwaysOnSampler();
    case 'always_off':
      return new s.AlwaysOffSampler();
    case 'traceidratio':
      return new s.TraceIdRatioBasedSampler(fraction);
    case 'parentbased_always_on':
      return new s.ParentBasedSampler({ root: new s.AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new s.ParentBasedSampler({ root: new s.AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new s.ParentBasedSampler({ root: new s.TraceIdRatioBasedSampler(fraction) });
    default:
      throw new DispatcherError(
        DispatcherErrorCode.TRACING_INVALID,
        name,
        `OTEL_TRACES_SAMPLER "${name}" is not supported: use always_on, always_off, traceidratio or their parentbased_ forms`,
      );
  }
}

/**
 * Applies an instrumentation to modules that are already loaded: fairway imports ioredis before
 * its telemetry can start, so the usual hook on `require` would never see it. The instrumentation
 * patches the loaded module's exports (shared by every client made from them) and unpatches them
 * when disabled.
 */
function patchLoaded(instrumentation: object, require: NodeJS.Require): void {
  const definitions = (
    instrumentation as unknown as {
      getModuleDefinitions(): {
        name: string;
        moduleExports?: unknown;
        moduleVersion?: string;
        patch?: (exports: unknown, version?: string) => unknown;
      }[];
    }
  ).getModuleDefinitions();
  for (const definition of definitions) {
    const exports = require(definition.name) as unknown;
    // Loaded only now (through the instrumentation's own hook): already patched.
    if (definition.moduleExports !== undefined) continue;
    const version = (require(`${definition.name}/package.json`) as { version: string }).version;
    definition.moduleExports = definition.patch?.(exports, version) ?? exports;
    definition.moduleVersion = version;
  }
}

/**
 * Starts OpenTelemetry for a dispatcher process through `@opentelemetry/sdk-node`'s `NodeSDK`
 * when tracing or the OTLP metrics export is on; otherwise nothing of the SDK is loaded. Traces:
 * the OTLP exporter of `OTEL_EXPORTER_OTLP_*` (`http/protobuf` or `http/json`) behind a batch
 * processor, the sampler of {@link samplerOf}, the `OTEL_*` resource with `service.name`
 * `fairway-dispatcher` unless `OTEL_SERVICE_NAME` names one, and the instrumentations of
 * {@link enabledInstrumentations}. Metrics: the dispatcher's Prometheus registry read every
 * `OTEL_METRIC_EXPORT_INTERVAL` ms (default 60 000) and sent to the OTLP metrics endpoint.
 * The SDK is process-wide (it registers the global tracer provider and context manager): one
 * dispatcher per process, as production runs them.
 */
export async function startTelemetry(
  config: FairwayConfig,
  env: Env,
  logger: Logger,
): Promise<TelemetryHandle> {
  const tracing = tracingEnabled(config, env);
  const exportMetrics = metricsExportEnabled(env);
  if (!tracing && !exportMetrics) return OFF;
  const names = tracing ? enabledInstrumentations(env) : new Set<InstrumentationName>();
  const [{ NodeSDK }, api, resources] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/api'),
    import('@opentelemetry/resources'),
  ]);

  const spanProcessors = [];
  if (tracing) {
    const { BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
    spanProcessors.push(new BatchSpanProcessor(await spanExporter(env)));
  }

  let producer: import('./prometheus-producer.ts').PrometheusRegistryProducer | undefined;
  const metricReaders = [];
  if (exportMetrics) {
    const [{ PeriodicExportingMetricReader }, { PrometheusRegistryProducer }] = await Promise.all([
      import('@opentelemetry/sdk-metrics'),
      import('./prometheus-producer.ts'),
    ]);
    const exporter =
      protocolOf(env, 'METRICS') === 'http/json'
        ? new (await import('@opentelemetry/exporter-metrics-otlp-http')).OTLPMetricExporter(
            urlOf(env, 'METRICS'),
          )
        : new (await import('@opentelemetry/exporter-metrics-otlp-proto')).OTLPMetricExporter(
            urlOf(env, 'METRICS'),
          );
    const interval = Number(env.OTEL_METRIC_EXPORT_INTERVAL ?? '60000');
    producer = new PrometheusRegistryProducer(() => Date.now());
    metricReaders.push(
      new PeriodicExportingMetricReader({
        exporter,
        exportIntervalMillis: Number.isFinite(interval) && interval > 0 ? interval : 60_000,
        metricProducers: [producer],
      }),
    );
  }

  type Instrumentation = import('@opentelemetry/instrumentation-ioredis').IORedisInstrumentation;
  const instrumentations: Instrumentation[] = [];
  let ioredis: Instrumentation | undefined;
  let fastify: { plugin(): unknown } | undefined;
  if (names.has('ioredis')) {
    const { IORedisInstrumentation } = await import('@opentelemetry/instrumentation-ioredis');
    // Redis calls made inside a request's span only: control loops and heartbeats stay out.
    ioredis = new IORedisInstrumentation({ requireParentSpan: true });
    instrumentations.push(ioredis);
  }
  if (names.has('undici')) {
    const { UndiciInstrumentation } = await import('@opentelemetry/instrumentation-undici');
    instrumentations.push(
      new UndiciInstrumentation({ requireParentforSpans: true }) as unknown as Instrumentation,
    );
  }
  if (names.has('fastify')) {
    const { FastifyOtelInstrumentation } = await import('@fastify/otel');
    const instrumentation = new FastifyOtelInstrumentation();
    instrumentations.push(instrumentation as unknown as Instrumentation);
    fastify = instrumentation;
  }

  const resourceNamed =
    env.OTEL_SERVICE_NAME !== undefined || /(^|,)\s*service\.name=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? '');
  const sdk = new NodeSDK({
    ...(resourceNamed ? {} : { serviceName: 'fairway-dispatcher' }),
    // The environment's and the host's attributes; not the process detector's command line, which
    // may carry a password given as a flag. OTEL_NODE_RESOURCE_DETECTORS chooses otherwise.
    ...(env.OTEL_NODE_RESOURCE_DETECTORS === undefined
      ? { resourceDetectors: [resources.envDetector, resources.hostDetector] }
      : {}),
    spanProcessors,
    metricReaders,
    logRecordProcessors: [],
    sampler: await samplerOf(env, config.telemetry.tracing.sampleRatio),
    instrumentations,
  });
  sdk.start();
  if (ioredis !== undefined) patchLoaded(ioredis, createRequire(import.meta.url));
  setHttpClientInstrumented(names.has('undici'));
  logger.info(
    {
      tracing,
      metrics: exportMetrics,
      instrumentations: [...names],
      sampleRatio: env.OTEL_TRACES_SAMPLER ?? config.telemetry.tracing.sampleRatio,
    },
    'dispatcher: OpenTelemetry on (OTLP)',
  );
  let stopped: Promise<void> | undefined;
  return {
    tracer: tracing ? api.trace.getTracer(TRACER_NAME) : undefined,
    async attach(dispatcher) {
      producer?.attach(dispatcher);
      if (fastify !== undefined) await dispatcher.app.register(fastify.plugin() as never);
    },
    shutdown() {
      stopped ??= sdk
        .shutdown()
        .catch(() => undefined)
        .finally(() => {
          for (const instrumentation of instrumentations) instrumentation.disable();
          setHttpClientInstrumented(false);
          // A later start in this process (tests) registers its own providers.
          api.trace.disable();
          api.context.disable();
          api.propagation.disable();
          api.metrics.disable();
        });
      return stopped;
    },
  };
}
