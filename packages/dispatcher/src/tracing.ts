import type { FairwayConfig, Logger } from '@fairway/core';
import {
  type Attributes,
  type Context,
  defaultTextMapGetter,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as OtlpJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OtlpProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  type SpanExporter,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import { DispatcherError, DispatcherErrorCode } from './errors.ts';

/** The name spans are recorded under (instrumentation scope). */
export const TRACER_NAME = '@fairway/dispatcher';

/** Tracing of a running dispatcher: the tracer requests use, and how to flush it on exit. */
export interface TracingHandle {
  /** Undefined when tracing is off: the request path then builds no span at all. */
  readonly tracer: Tracer | undefined;
  /** Exports what is buffered and stops the exporter. */
  shutdown(): Promise<void>;
}

const OFF: TracingHandle = { tracer: undefined, shutdown: async () => undefined };

/**
 * Whether tracing is on: `telemetry.tracing.enabled`, or an OTLP endpoint in the environment (as
 * any OTel SDK exports when one is set); `OTEL_SDK_DISABLED=true` turns it off regardless.
 */
export function tracingEnabled(config: FairwayConfig, env: Readonly<Record<string, string | undefined>>) {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  return (
    config.telemetry.tracing.enabled ||
    (env.OTEL_EXPORTER_OTLP_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? '') !== ''
  );
}

/** The OTLP exporter for `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` (default `http/protobuf`, per the spec). */
function otlpExporter(env: Readonly<Record<string, string | undefined>>): SpanExporter {
  const protocol = (
    env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ??
    env.OTEL_EXPORTER_OTLP_PROTOCOL ??
    'http/protobuf'
  ).trim();
  // The same environment decides where, whether and how (the exporters would read process.env).
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const url = traces ?? (base === undefined ? undefined : `${base.replace(/\/+$/, '')}/v1/traces`);
  const options = url === undefined ? {} : { url };
  if (protocol === 'http/json') return new OtlpJsonExporter(options);
  if (protocol === 'http/protobuf') return new OtlpProtoExporter(options);
  throw new DispatcherError(
    DispatcherErrorCode.TRACING_INVALID,
    protocol,
    `OTEL_EXPORTER_OTLP_PROTOCOL "${protocol}" is not supported: use http/protobuf or http/json`,
  );
}

/**
 * Starts the OpenTelemetry SDK for a dispatcher process when tracing is on (see
 * {@link tracingEnabled}): a tracer provider with the `OTEL_*` resource (`OTEL_SERVICE_NAME`,
 * `OTEL_RESOURCE_ATTRIBUTES`), the OTLP exporter of `OTEL_EXPORTER_OTLP_*` behind a batch processor,
 * and a parent-based ratio sampler of `telemetry.tracing.sampleRatio` unless `OTEL_TRACES_SAMPLER`
 * names one. Nothing is registered globally: the tracer is handed to the dispatcher.
 */
export function startTracing(
  config: FairwayConfig,
  env: Readonly<Record<string, string | undefined>>,
  logger: Logger,
): TracingHandle {
  if (!tracingEnabled(config, env)) return OFF;
  const resource = resourceFromAttributes({ 'service.name': 'fairway-dispatcher' }).merge(
    detectResources({ detectors: [envDetector] }),
  );
  const ratio = config.telemetry.tracing.sampleRatio;
  const provider = new BasicTracerProvider({
    resource,
    // Unset: the SDK reads OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG itself.
    ...(env.OTEL_TRACES_SAMPLER === undefined
      ? { sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) }) }
      : {}),
    spanProcessors: [new BatchSpanProcessor(otlpExporter(env))],
  });
  logger.info({ sampleRatio: env.OTEL_TRACES_SAMPLER ?? ratio }, 'dispatcher: tracing on (OTLP)');
  return {
    tracer: provider.getTracer(TRACER_NAME),
    shutdown: () => provider.shutdown().catch(() => undefined),
  };
}

const propagator = new W3CTraceContextPropagator();

/** The context of a client's W3C `traceparent` / `tracestate` headers (the root context if none). */
export function extractTraceContext(headers: Record<string, string | string[] | undefined>): Context {
  return propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
}

/** Adds `traceparent` (and `tracestate`) for `span` to outgoing request headers. */
export function injectTraceContext(span: Span, headers: Record<string, string>): Record<string, string> {
  propagator.inject(trace.setSpan(ROOT_CONTEXT, span), headers, defaultTextMapSetter);
  return headers;
}

/**
 * The spans of one request: a server span for the HTTP request and its children (admission,
 * queue, dispatch, engine call, stream, settle). Children are parented explicitly — no context
 * manager is needed on the request path. Children still open when the response ends (an error
 * was thrown, the client left) are ended then, marked failed.
 */
export class RequestTrace {
  readonly server: Span;
  readonly #tracer: Tracer;
  readonly #parent: Context;
  readonly #open = new Set<Span>();

  constructor(tracer: Tracer, name: string, parent: Context, attributes: Attributes) {
    this.#tracer = tracer;
    this.server = tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent);
    this.#parent = trace.setSpan(parent, this.server);
  }

  /** Whether the request is sampled: attributes are worth building only then. */
  get recording(): boolean {
    return this.server.isRecording();
  }

  /**
   * Starts a child of the server span (or of `under`). `tracked` children are ended with the
   * response if still open; an untracked one (settling, which outlives the response) is the caller's.
   */
  child(name: string, kind: SpanKind = SpanKind.INTERNAL, under?: Span, tracked = true): Span {
    const parent = under === undefined ? this.#parent : trace.setSpan(this.#parent, under);
    const span = this.#tracer.startSpan(name, { kind }, parent);
    if (tracked) this.#open.add(span);
    return span;
  }

  /** Ends a child started with {@link child}. */
  close(span: Span | undefined): void {
    if (span === undefined) return;
    this.#open.delete(span);
    span.end();
  }

  /** Ends a child as failed with `err`'s message (errors carry neither prompts nor keys). */
  fail(span: Span | undefined, err: unknown): void {
    if (span === undefined) return;
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
    this.close(span);
  }

  /** Ends the server span with the response status (5xx or an unfinished response mark it failed). */
  end(status: number, finished: boolean): void {
    for (const span of this.#open) {
      span.setStatus({
        code: SpanStatusCode.ERROR,
        message: finished ? `answered ${status}` : 'client closed',
      });
      span.end();
    }
    this.#open.clear();
    this.server.setAttribute('http.response.status_code', status);
    if (status >= 500 || !finished)
      this.server.setStatus({
        code: SpanStatusCode.ERROR,
        ...(finished ? {} : { message: 'client closed' }),
      });
    this.server.end();
  }
}
