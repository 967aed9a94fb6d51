import type { ServerResponse } from 'node:http';
import type { Clock, Usage } from '@fairway/core';
import type { CompletionEndpoint, Engine, EngineStream } from '@fairway/engine';
import { type Span, SpanKind } from '@opentelemetry/api';
import { engineApiError, isReplicaFailure } from './error-mapping.ts';
import { ApiError } from './errors.ts';
import type { GatewayRuntime } from './gateway-runtime.ts';
import type { DescribedRequest } from './request-descriptor.ts';
import type { Ticket } from './ticket.ts';
import { injectTraceContext, type RequestTrace } from './tracing.ts';
import { UsageChunkFilter } from './usage-chunk-filter.ts';

/** Timing headers fairway adds to every proxied response (`x-request-id` is on every response already). */
export interface TimingHeaders {
  'x-fairway-overhead-ms': string;
  'x-fairway-queue-ms': string;
}

/** What the proxy needs for one dispatched request. */
export interface ProxyCall {
  readonly runtime: GatewayRuntime;
  readonly engine: Engine;
  readonly endpoint: CompletionEndpoint;
  readonly ticket: Ticket;
  readonly described: DescribedRequest;
  /** Aborted when the client goes away or the request is evicted; closes the engine connection. */
  readonly signal: AbortSignal;
  /** Monotonic ms clock. */
  readonly timer: Clock;
  /** Monotonic ms at which the request reached the dispatcher. */
  readonly arrivedAt: number;
  /**
   * Asked when the engine call failed before anything reached the client in a way another replica
   * may not (see `isReplicaFailure`); resolves true once the request is back in the queue to be
   * dispatched again — the proxy then neither settles nor answers. Absent: no retry.
   */
  readonly retry?: (() => Promise<boolean>) | undefined;
  /** The request's spans (tracing on): the engine call, stream and settle are traced under it. */
  readonly trace?: RequestTrace | undefined;
  /** The engine's `host:port`, for the engine span's `server.address`. */
  readonly engineAddress?: string | undefined;
  /**
   * Told when the engine call failed in a way that is the replica's fault (see
   * `isReplicaFailure`), before or during the response, so the replica is held out of placement.
   */
  readonly replicaFailed?: ((err: unknown) => void) | undefined;
}

/** What happened, for metrics and logs. */
export interface ProxyResult {
  readonly usage: Usage;
  /** ms the gateway itself added before the first byte went out (queueing and engine time excluded). */
  readonly overheadMs: number;
  /** ms from arrival to the first byte sent to the client. */
  readonly firstByteMs: number | undefined;
  /** `retried`: the engine failed before answering and the request was re-queued (see `retry`). */
  readonly outcome: 'completed' | 'failed' | 'cancelled' | 'retried';
  /** Why the last engine call failed, for `retried` (what the client gets if no retry succeeds). */
  readonly failure?: ApiError;
}

/** The response headers saying what the gateway added (`overheadMs`) and how long it queued. */
export function timingHeaders(call: ProxyCall, overheadMs: number): TimingHeaders {
  return {
    'x-fairway-overhead-ms': overheadMs.toFixed(3),
    'x-fairway-queue-ms': call.ticket.queueMs().toFixed(1),
  };
}

/**
 * Opens the engine call's client span (GenAI conventions) when tracing, and the headers of the
 * engine request: fairway's request id and, traced, the W3C `traceparent` of that span.
 */
export function openEngineCall(call: ProxyCall): { span: Span | undefined; headers: Record<string, string> } {
  const headers: Record<string, string> = { 'x-request-id': call.ticket.id };
  const tr = call.trace;
  if (tr === undefined) return { span: undefined, headers };
  const op = call.endpoint === 'chat' ? 'chat' : 'text_completion';
  const req = call.ticket.req;
  const span = tr.child(`${op} ${req.model}`, SpanKind.CLIENT);
  if (span.isRecording())
    span.setAttributes({
      'gen_ai.operation.name': op,
      'gen_ai.system': 'vllm',
      'gen_ai.request.model': req.model,
      'gen_ai.request.max_tokens': req.maxTokens,
      'server.address': call.engineAddress ?? '',
      'fairway.replica': call.ticket.replica ?? '',
    });
  injectTraceContext(span, headers);
  return { span, headers };
}

/** Ends the engine span with the usage the engine reported (and its response id, when known). */
export function closeEngineCall(
  call: ProxyCall,
  span: Span | undefined,
  usage: Usage,
  responseId?: unknown,
): void {
  if (span === undefined) return;
  if (span.isRecording()) {
    span.setAttributes({
      'gen_ai.usage.input_tokens': usage.inputTokens,
      'gen_ai.usage.output_tokens': usage.outputTokens,
    });
    if (typeof responseId === 'string') span.setAttribute('gen_ai.response.id', responseId);
  }
  call.trace?.close(span);
}

/** Settles a completed request with the store (`finish`), traced as `fairway.settle`. */
export function settle(call: ProxyCall, usage: Usage): void {
  const span = call.trace?.child('fairway.settle', SpanKind.INTERNAL, undefined, false);
  const done = call.runtime.finish(call.ticket, usage);
  if (span !== undefined) void done.finally(() => span.end());
}

function timing(call: ProxyCall, engineMs: number): { overheadMs: number; headers: TimingHeaders } {
  const overheadMs = Math.max(0, call.timer.now() - call.arrivedAt - call.ticket.queueMs() - engineMs);
  return { overheadMs, headers: timingHeaders(call, overheadMs) };
}

/**
 * Forwards a non-streamed completion: the engine's JSON body goes to the client byte for byte,
 * then the request settles with the engine's `usage`. Throws an `ApiError` (after settling) when
 * the engine fails; the caller answers with it.
 */
export async function proxyCompletion(
  call: ProxyCall,
  send: (headers: TimingHeaders, body: Uint8Array) => void,
): Promise<ProxyResult> {
  const t0 = call.timer.now();
  const engineCall = openEngineCall(call);
  let result: Awaited<ReturnType<Engine['complete']>>;
  try {
    result = await call.engine.complete(call.endpoint, call.described.forwardBody, {
      signal: call.signal,
      headers: engineCall.headers,
    });
  } catch (err) {
    call.trace?.fail(engineCall.span, err);
    return failedBeforeAnswer(call, err);
  }
  const { overheadMs, headers } = timing(call, call.timer.now() - t0);
  send(headers, result.bytes);
  const usage = { inputTokens: result.usage.promptTokens, outputTokens: result.usage.completionTokens };
  closeEngineCall(call, engineCall.span, usage, result.body.id);
  settle(call, usage);
  return { usage, overheadMs, firstByteMs: call.timer.now() - call.arrivedAt, outcome: 'completed' };
}

/**
 * The engine call failed before anything reached the client: re-queued for another replica when
 * the failure is the replica's and `retry` allows it; else settled with the input it was sent,
 * and thrown as the client's error (or `cancelled` when the client left).
 */
async function failedBeforeAnswer(call: ProxyCall, err: unknown): Promise<ProxyResult> {
  const usage = { inputTokens: call.ticket.req.inputTokens, outputTokens: 0 };
  const replicaFault = !call.signal.aborted && isReplicaFailure(err);
  if (replicaFault) call.replicaFailed?.(err);
  if (replicaFault && call.retry !== undefined && (await call.retry()))
    return {
      usage: { inputTokens: 0, outputTokens: 0 },
      overheadMs: 0,
      firstByteMs: undefined,
      outcome: 'retried',
      failure: engineApiError(err),
    };
  await call.runtime.abandon(call.ticket, usage);
  if (clientGone(call)) return { usage, overheadMs: 0, firstByteMs: undefined, outcome: 'cancelled' };
  throw call.signal.aborted ? evicted() : engineApiError(err);
}

/** The client went away (as opposed to an eviction, which also aborts the engine call). */
function clientGone(call: ProxyCall): boolean {
  return call.signal.aborted && !call.ticket.evicted;
}

function evicted(): ApiError {
  return new ApiError('NOT_READY', 'the request was evicted from its replica; retry', { retryAfterS: 1 });
}

/** Waits until `res` can take more bytes, is closed, or `signal` aborts (client gone, eviction). */
export function drained(res: ServerResponse, signal: AbortSignal): Promise<void> {
  if (res.destroyed || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** An error as the SSE event that ends a stream which already started. */
export function sseError(err: ApiError): string {
  return `data: ${JSON.stringify(err.body())}\n\n`;
}

/**
 * Forwards a streamed completion (DESIGN.md request path, step 5). The engine is asked for usage
 * (`include_usage`), and each network chunk is written to the client as it arrives — no event is
 * parsed or re-serialised. If the client did not ask for usage, the one usage-only event is cut out
 * by {@link UsageChunkFilter}. `continuous_usage_stats` is injected only when the client asked for
 * it: with it vLLM puts `usage` on every chunk, which a client that did not ask would otherwise see
 * (stripping it would mean rewriting every chunk); streamed tokens are counted from content chunks
 * instead, and the final usage settles the exact count.
 *
 * Headers go out with the first bytes the engine streams, so a request the engine refused, or
 * dropped before producing anything, still gets a proper status (or is retried on another
 * replica); after that, failures end the stream with an OpenAI-shaped `data: {"error": …}`.
 */
export async function proxyStream(
  call: ProxyCall,
  open: (headers: TimingHeaders) => ServerResponse,
): Promise<ProxyResult> {
  const { ticket, runtime } = call;
  const t0 = call.timer.now();
  const engineCall = openEngineCall(call);
  let stream: EngineStream;
  try {
    stream = await call.engine.stream(call.endpoint, call.described.forwardBody, {
      signal: call.signal,
      continuousUsage: call.described.wantsContinuousUsage,
      headers: engineCall.headers,
    });
  } catch (err) {
    call.trace?.fail(engineCall.span, err);
    return failedBeforeAnswer(call, err);
  }
  const { overheadMs, headers } = timing(call, call.timer.now() - t0);
  // Opened with the first bytes (not buffered: they are written at once), so an engine that dies
  // before producing anything is still a failure before the answer, retried elsewhere.
  let res: ServerResponse | undefined;
  const filter = call.described.wantsUsage ? undefined : new UsageChunkFilter();
  const streaming = call.trace?.child('fairway.stream', SpanKind.INTERNAL, engineCall.span);
  let firstByteMs: number | undefined;
  const write = async (bytes: Uint8Array): Promise<void> => {
    if (firstByteMs === undefined) {
      firstByteMs = call.timer.now() - call.arrivedAt;
      streaming?.addEvent('gen_ai.first_token');
    }
    res ??= open(headers);
    if (!res.write(bytes)) await drained(res, call.signal);
  };
  runtime.meter(ticket, () => stream.completionTokens);
  try {
    for await (const chunk of stream) {
      const out = filter ? filter.push(chunk) : chunk;
      if (out !== undefined && out.length > 0) await write(out);
    }
    const rest = filter?.end();
    if (rest !== undefined && rest.length > 0) await write(rest);
    (res ?? open(headers)).end();
  } catch (err) {
    call.trace?.fail(streaming, err);
    call.trace?.fail(engineCall.span, err);
    if (res === undefined && !call.signal.aborted) return failedBeforeAnswer(call, err);
    res ??= open(headers);
    const used = {
      inputTokens: stream.usage?.promptTokens ?? ticket.req.inputTokens,
      outputTokens: stream.completionTokens,
    };
    void runtime.abandon(ticket, used);
    const gone = clientGone(call);
    // A stream cut by its engine: the replica is no longer counted as room (its streams just ended).
    if (!call.signal.aborted && isReplicaFailure(err)) call.replicaFailed?.(err);
    if (!gone && !res.destroyed && !res.writableEnded)
      res.end(sseError(call.signal.aborted ? evicted() : engineApiError(err)));
    return { usage: used, overheadMs, firstByteMs, outcome: gone ? 'cancelled' : 'failed' };
  }
  const u = stream.usage;
  const usage = {
    inputTokens: u?.promptTokens ?? ticket.req.inputTokens,
    outputTokens: u?.completionTokens ?? stream.completionTokens,
  };
  call.trace?.close(streaming);
  closeEngineCall(call, engineCall.span, usage);
  settle(call, usage);
  return { usage, overheadMs, firstByteMs, outcome: 'completed' };
}
