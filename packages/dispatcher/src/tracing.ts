import {
  type Attributes,
  type Context,
  context,
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

let httpClientInstrumented = false;

/**
 * Whether outgoing HTTP calls are traced by the undici instrumentation (set by the telemetry):
 * it then adds the trace context to the engine call's headers itself, from its own HTTP span.
 */
export function setHttpClientInstrumented(on: boolean): void {
  httpClientInstrumented = on;
}

const propagator = new W3CTraceContextPropagator();

/** The context of a client's W3C `traceparent` / `tracestate` headers (the root context if none). */
export function extractTraceContext(headers: Record<string, string | string[] | undefined>): Context {
  return propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
}

/**
 * Adds `traceparent` (and `tracestate`) for `span` to outgoing request headers, unless the undici
 * instrumentation does it for the HTTP span it opens under `span`.
 */
export function injectTraceContext(span: Span, headers: Record<string, string>): Record<string, string> {
  if (!httpClientInstrumented)
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

  /**
   * Runs `fn` with `span` (a child of this request) as the active span, so what instrumented
   * libraries do inside it (a Redis call, an HTTP call) is traced under it. Without a context
   * manager (no SDK started) it just runs `fn`.
   */
  within<T>(span: Span | undefined, fn: () => T): T {
    return span === undefined ? fn() : context.with(trace.setSpan(this.#parent, span), fn);
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
