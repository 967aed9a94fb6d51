import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Clock, EngineTimeoutsConfig, Usage } from '@fairway/core';
import type {
  CompletionEndpoint,
  Engine,
  EngineStream,
  EngineUsage,
  GenerateOptions,
  SseDataLine,
} from '@fairway/engine';
import { type Span, SpanKind } from '@opentelemetry/api';
import type { FastifyReply } from 'fastify';
import type { AnswerShape } from './answer-shape.ts';
import { ApiError } from './errors.ts';
import { type DescribedRequest, type Endpoint, operationName } from './request-descriptor.ts';
import { continuationBody, ResumedAnswer } from './resumed-answer.ts';
import type { StopSignal } from './stop-signal.ts';
import { engineHungOf, type Ticket } from './ticket.ts';
import { injectTraceContext, type RequestTrace } from './tracing.ts';
import { UsageChunkFilter } from './usage-chunk-filter.ts';

/**
 * What the proxy tells the request's lifecycle (`request-lifecycle.ts`), which decides what each
 * event means for the request — settled, abandoned, retried elsewhere or resumed — and answers
 * with what the proxy does next: drop the client (`cancelled`), tell it an error, go on.
 */
export interface ProxyEvents {
  /** An engine call starts: its signal aborts when the request is evicted or the client leaves. */
  startCall(): StopSignal;
  /** The engine answered; a stream's output is metered from here (after `before` earlier tokens). */
  answering(stream: { readonly completionTokens: number } | undefined, before: number): void;
  /** The answer reached the client whole, with the engine's `usage`. */
  completed(usage: Usage): void;
  /** The engine call failed (or was stopped) before anything reached the client. */
  failedBeforeAnswer(err: unknown, signal: StopSignal): Promise<'retried' | 'cancelled' | ApiError>;
  /** The engine call ended early (or was stopped) after the answer started, having used `used`. */
  cutShort(err: unknown, signal: StopSignal, used: Usage): 'cancelled' | ApiError;
  /**
   * A resumable run was stopped while the client is still there (an eviction) after `generated`
   * output tokens: the engine to resume on, or how the request ends.
   */
  evicted(
    err: unknown,
    signal: StopSignal,
    generated: number,
    used: Usage,
  ): Promise<'cancelled' | ApiError | Engine>;
}

/** What the proxy reads of the request's ticket (and `answered`, which it sets). */
export type TicketView = Pick<Ticket, 'id' | 'req' | 'replica' | 'queueMs' | 'moveTo' | 'answered'>;

/** What the proxy needs for one dispatched request. */
export interface ProxyCall {
  /** Told what happens to the engine call; it decides what that means for the request. */
  readonly events: ProxyEvents;
  readonly engine: Engine;
  readonly endpoint: Endpoint;
  readonly ticket: TicketView;
  readonly described: DescribedRequest;
  /** The client's reply: the answer is written to its raw response. */
  readonly reply: FastifyReply;
  /** Aborted when the client goes away (it also stops the engine call, see `Ticket.stopCall`). */
  readonly gone: StopSignal;
  /** Monotonic ms clock. */
  readonly timer: Clock;
  /** Monotonic ms at which the request reached the dispatcher. */
  readonly arrivedAt: number;
  /** The request's spans (tracing on): the engine call, stream and settle are traced under it. */
  readonly trace?: RequestTrace | undefined;
  /** The engine's `host:port`, for the engine span's `server.address`. */
  readonly engineAddress?: string | undefined;
  /**
   * Whether an evicted request resumes on another replica (an SLO-class control plane routes this
   * dispatcher): chat and completions are then streamed from the engine, so a run cut short can go on.
   */
  readonly resumable: boolean;
  /** The pool's `engineTimeouts`: how long the engine may stay silent before it counts as hung. */
  readonly timeouts?: EngineTimeoutsConfig | undefined;
  /** Rewrites the answer for a client of another API (Anthropic Messages); absent, sent as is. */
  readonly shape?: AnswerShape | undefined;
}

/** What happened, for metrics and logs. */
export interface ProxyResult {
  readonly usage: Usage;
  /** ms the gateway itself added before the first byte went out (queueing and engine time excluded). */
  readonly overheadMs: number;
  /** ms from arrival to the first byte sent to the client. */
  readonly firstByteMs: number | undefined;
  /** `retried`: the engine failed before answering and the request was queued again for another replica. */
  readonly outcome: 'completed' | 'failed' | 'cancelled' | 'retried';
}

/** The answer of a call whose request went back to the queue for another replica. */
const RETRIED: ProxyResult = {
  usage: { inputTokens: 0, outputTokens: 0 },
  overheadMs: 0,
  firstByteMs: undefined,
  outcome: 'retried',
};

/**
 * Forwards a dispatched request to its engine and the answer to its client (DESIGN.md request
 * path, step 5), telling `call.events` what happens — one path for every request: a non-streamed
 * one the engine answers whole is sent byte for byte; a streamed one is forwarded chunk by chunk
 * as it arrives; under a control plane (`call.resumable`) a request the leader evicts resumes on
 * its next replica and reads as one response. Throws the `ApiError` the events return when the
 * engine fails before anything reached the client; the caller answers with it.
 */
export function proxy(call: ProxyCall): Promise<ProxyResult> {
  if (call.endpoint === 'embeddings') return proxyEmbedding(call);
  if (call.endpoint === 'responses')
    return call.described.stream ? proxyResponseStream(call) : proxyResponseWhole(call);
  return !call.resumable && !call.described.stream ? proxyWhole(call) : proxyRuns(call);
}

/**
 * Forwards an embeddings request: the engine's JSON body goes to the client byte for byte, then
 * the request settles with the input tokens the engine counted (an embedding has no output). An
 * eviction under a control plane fails it like any request that cannot resume.
 */
async function proxyEmbedding(call: ProxyCall): Promise<ProxyResult> {
  return proxyAnswer(
    call,
    (options) => call.engine.embed(call.described.forwardBody, options),
    (result) => ({ inputTokens: result.promptTokens, outputTokens: 0 }),
  );
}

/**
 * Forwards a non-streamed Responses API request: the engine's `response` object goes to the client
 * byte for byte, then the request settles with its `usage` (`input_tokens`, `output_tokens`).
 */
async function proxyResponseWhole(call: ProxyCall): Promise<ProxyResult> {
  return proxyAnswer(
    call,
    (options) => call.engine.respond(call.described.forwardBody, options),
    (result) => settledUsage(result.usage),
  );
}

/**
 * Forwards a streamed Responses API request: the engine's typed events are written as they arrive,
 * output tokens are metered from `response.output_text.delta` events, and the request settles at
 * `response.completed`'s `response.usage`. A failure after the stream started ends it with an
 * `error` event; an eviction under a control plane fails it (the engine's Responses API cannot
 * continue an answer: where evictions resume requests, a response chat can express is served as
 * chat instead, through `responsesOverChat`).
 */
async function proxyResponseStream(call: ProxyCall): Promise<ProxyResult> {
  const { ticket, events } = call;
  const t0 = call.timer.now();
  const engineCall = openEngineCall(call, 0);
  const signal = events.startCall();
  let stream: EngineStream;
  try {
    stream = await call.engine.streamResponse(call.described.forwardBody, {
      signal,
      headers: engineCall.headers,
      ...(call.timeouts === undefined
        ? {}
        : { headersTimeoutMs: call.timeouts.firstByteMs, bodyTimeoutMs: call.timeouts.streamIdleMs }),
    });
  } catch (err) {
    call.trace?.fail(engineCall.span, err);
    return failedBeforeAnswer(call, signal, err);
  }
  const overheadMs = overheadOf(call, call.timer.now() - t0);
  let res: ServerResponse | undefined;
  let firstByteMs: number | undefined;
  events.answering(stream, 0);
  try {
    for await (const chunk of stream) {
      if (chunk.length === 0) continue;
      if (firstByteMs === undefined) firstByteMs = call.timer.now() - call.arrivedAt;
      const out = call.shape === undefined ? chunk : call.shape.chunk(chunk);
      if (out.length === 0) continue;
      res ??= openResponse(call, answerHeaders(call, overheadMs, SSE_TYPE));
      if (!res.write(out)) await drained(res, signal);
    }
  } catch (err) {
    call.trace?.fail(engineCall.span, err);
    const used = {
      inputTokens: stream.usage?.promptTokens ?? ticket.req.inputTokens,
      outputTokens: stream.completionTokens,
      cachedTokens: stream.usage?.cachedTokens,
    };
    if (res === undefined && failedRatherThanStopped(call, signal) && !call.gone.aborted)
      return failedBeforeAnswer(call, signal, err);
    const api = events.cutShort(err, signal, used);
    if (api === 'cancelled') {
      dropClient(call);
      return { usage: used, overheadMs, firstByteMs, outcome: 'cancelled' };
    }
    res ??= openResponse(call, answerHeaders(call, overheadMs, SSE_TYPE));
    if (!res.destroyed && !res.writableEnded) {
      const e = api.body().error;
      res.end(
        `event: error\ndata: ${JSON.stringify({ type: 'error', code: e.code, message: e.message, param: e.param })}\n\n`,
      );
    }
    return { usage: used, overheadMs, firstByteMs, outcome: 'failed' };
  }
  (res ?? openResponse(call, answerHeaders(call, overheadMs, SSE_TYPE))).end();
  const usage = {
    inputTokens: stream.usage?.promptTokens ?? ticket.req.inputTokens,
    outputTokens: stream.usage?.completionTokens ?? stream.completionTokens,
    cachedTokens: stream.usage?.cachedTokens,
  };
  closeEngineCall(call, engineCall.span, usage);
  events.completed(usage);
  return { usage, overheadMs, firstByteMs, outcome: 'completed' };
}

/**
 * A whole engine body as the client receives it (rewritten by `call.shape`), or — when the shape
 * cannot read it — the request failed as an engine error before anything reached the client.
 */
function reshaped(
  call: ProxyCall,
  bytes: Uint8Array,
  span: Span | undefined,
  signal: StopSignal,
): Uint8Array | string | Promise<ProxyResult> {
  if (call.shape === undefined) return bytes;
  try {
    return call.shape.whole(bytes);
  } catch (err) {
    call.trace?.fail(span, err);
    return failedBeforeAnswer(call, signal, err);
  }
}

/**
 * Opens the engine call's client span (GenAI conventions) when tracing, and the headers of the
 * engine request: fairway's request id, for a resumed run the output it follows
 * (`x-fairway-resumed-tokens`) and, traced, the W3C `traceparent` of that span.
 */
function openEngineCall(
  call: ProxyCall,
  resumedTokens: number,
): { span: Span | undefined; headers: Record<string, string> } {
  const headers: Record<string, string> = { 'x-request-id': call.ticket.id };
  if (resumedTokens > 0) headers['x-fairway-resumed-tokens'] = String(resumedTokens);
  const tr = call.trace;
  if (tr === undefined) return { span: undefined, headers };
  const op = operationName(call.endpoint);
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
function closeEngineCall(call: ProxyCall, span: Span | undefined, usage: Usage, responseId?: unknown): void {
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

/** ms the gateway itself added: since arrival, less queueing and `engineMs` of engine time. */
function overheadOf(call: ProxyCall, engineMs: number): number {
  return Math.max(0, call.timer.now() - call.arrivedAt - call.ticket.queueMs() - engineMs);
}

/**
 * The response headers of an answer: its content type and what the gateway added
 * (`x-fairway-overhead-ms`) and how long it queued (`x-fairway-queue-ms`). `x-request-id` is on
 * the response already.
 */
function answerHeaders(call: ProxyCall, overheadMs: number, contentType: string): OutgoingHttpHeaders {
  return {
    'content-type': contentType,
    'x-fairway-overhead-ms': overheadMs.toFixed(3),
    'x-fairway-queue-ms': call.ticket.queueMs().toFixed(1),
  };
}

const JSON_TYPE = 'application/json';
const SSE_TYPE = 'text/event-stream; charset=utf-8';

/** Takes the client's response over from fastify and writes its status and headers. */
function openResponse(call: ProxyCall, headers: OutgoingHttpHeaders): ServerResponse {
  call.ticket.answered = true;
  call.reply.hijack();
  const res = call.reply.raw;
  if (headers['content-type'] === SSE_TYPE) headers['cache-control'] = 'no-cache';
  // Headers hooks set on the reply (CORS) go out too: fastify no longer writes them once hijacked.
  const set = call.reply.getHeaders();
  for (const name in set) {
    const v = set[name];
    if (v !== undefined && headers[name] === undefined) res.setHeader(name, v);
  }
  res.writeHead(200, headers);
  return res;
}

/** Closes the client's connection (it left, or its request was cancelled). */
function dropClient(call: ProxyCall): void {
  call.reply.hijack();
  call.reply.raw.destroy();
}

/**
 * The usage a request settles with, from the engine's own: its prompt and output counts and the
 * prompt tokens its prefix cache served (which only the engine knows; the client cannot set it).
 */
function settledUsage(u: EngineUsage): Usage {
  return { inputTokens: u.promptTokens, outputTokens: u.completionTokens, cachedTokens: u.cachedTokens };
}

/**
 * Forwards a non-streamed completion: the engine's JSON body goes to the client byte for byte,
 * then the request settles with the engine's `usage`.
 */
async function proxyWhole(call: ProxyCall): Promise<ProxyResult> {
  return proxyAnswer(
    call,
    (options) =>
      call.engine.complete(call.endpoint as CompletionEndpoint, call.described.forwardBody, options),
    (result) => settledUsage(result.usage),
  );
}

/**
 * One whole (non-streamed) engine answer: `send` calls the engine under the engine span (an
 * instrumented HTTP client traces the call there), the body is reshaped for the client before the
 * response opens (a body that cannot be read fails as an engine error) and written whole, and the
 * request settles with the usage `usageOf` reads from it.
 */
async function proxyAnswer<
  R extends { readonly bytes: Uint8Array; readonly body: { readonly id?: unknown } },
>(
  call: ProxyCall,
  send: (options: GenerateOptions) => Promise<R>,
  usageOf: (result: R) => Usage,
): Promise<ProxyResult> {
  const t0 = call.timer.now();
  const engineCall = openEngineCall(call, 0);
  const signal = call.events.startCall();
  const options: GenerateOptions = {
    signal,
    headers: engineCall.headers,
    ...(call.timeouts === undefined
      ? {}
      : { headersTimeoutMs: call.timeouts.answerMs, bodyTimeoutMs: call.timeouts.streamIdleMs }),
  };
  let result: R;
  try {
    result = await (call.trace === undefined
      ? send(options)
      : call.trace.within(engineCall.span, () => send(options)));
  } catch (err) {
    call.trace?.fail(engineCall.span, err);
    return failedBeforeAnswer(call, signal, err);
  }
  const overheadMs = overheadOf(call, call.timer.now() - t0);
  call.events.answering(undefined, 0);
  const answer = reshaped(call, result.bytes, engineCall.span, signal);
  if (typeof answer !== 'string' && !(answer instanceof Uint8Array)) return answer;
  openResponse(call, answerHeaders(call, overheadMs, JSON_TYPE)).end(answer);
  const usage = usageOf(result);
  closeEngineCall(call, engineCall.span, usage, result.body.id);
  call.events.completed(usage);
  return { usage, overheadMs, firstByteMs: call.timer.now() - call.arrivedAt, outcome: 'completed' };
}

/**
 * The engine call failed before anything reached the client: the request's lifecycle retries it
 * elsewhere (`retried`), or the client is dropped (it left) or answered with the error thrown.
 */
async function failedBeforeAnswer(call: ProxyCall, signal: StopSignal, err: unknown): Promise<ProxyResult> {
  const next = await call.events.failedBeforeAnswer(err, signal);
  if (next === 'retried') return RETRIED;
  if (next !== 'cancelled') throw next;
  dropClient(call);
  const usage = { inputTokens: call.ticket.req.inputTokens, outputTokens: 0 };
  return { usage, overheadMs: 0, firstByteMs: undefined, outcome: 'cancelled' };
}

/** The engine call was stopped to move the request to another replica (`Ticket.move`). */
function movedAway(call: ProxyCall): boolean {
  return call.ticket.moveTo !== undefined && !call.gone.aborted;
}

/**
 * Whether an engine call that ended before the answer opened goes to the lifecycle as a failure:
 * it was not stopped, or was stopped to move the request, or because its engine stopped answering
 * (`Ticket.failOver`) — not by the client leaving or an eviction.
 */
function failedRatherThanStopped(call: ProxyCall, signal: StopSignal): boolean {
  return !signal.aborted || movedAway(call) || engineHungOf(signal) !== undefined;
}

/** Waits until `res` can take more bytes, is closed, or `signal` aborts (client gone, eviction). */
function drained(res: ServerResponse, signal: StopSignal): Promise<void> {
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
    signal.addEventListener('abort', done);
  });
}

/** An error as the SSE event that ends a stream which already started. */
function sseError(err: ApiError): string {
  return `data: ${JSON.stringify(err.body())}\n\n`;
}

/**
 * Serves a request from the engine's stream, in one engine run or — evicted under a control plane
 * (QLM section 5) — several: the engine call is aborted, the request's lifecycle puts it back at
 * the head of its flow charged for what it was served (`ProxyEvents.evicted`), and once it is
 * dispatched again a continuation (the prompt plus the text so far) is sent to its new replica
 * and streamed on to the same client connection.
 *
 * Streamed to the client, the first run's network chunks are written as they arrive — none is
 * held back, parsed or re-serialised. The engine is asked for usage (`include_usage`); if the
 * client did not ask for it, the one usage-only event is cut out by {@link UsageChunkFilter}.
 * `continuous_usage_stats` is injected only when the client asked for it: with it vLLM puts `usage`
 * on every chunk, which a client that did not ask would otherwise see; streamed tokens are counted
 * from content chunks instead, and the final usage settles the exact count. Only the chunks of a
 * resumed run are rewritten ({@link ResumedAnswer}), so the client sees one id and usage over the
 * whole output. A non-streamed request under a control plane is streamed from the engine and
 * answered once, with every run's text joined.
 *
 * Headers go out with the first bytes, so a request the engine refused, or dropped before producing
 * anything, still gets a proper status (or is retried on another replica); after that, failures
 * end the stream with an OpenAI-shaped `data: {"error": …}`.
 */
async function proxyRuns(call: ProxyCall): Promise<ProxyResult> {
  const { ticket, events, described } = call;
  const endpoint = call.endpoint as CompletionEndpoint;
  const streamed = described.stream;
  const t0 = call.timer.now();
  let engine = call.engine;
  let res: ServerResponse | undefined;
  let firstByteMs: number | undefined;
  let overheadMs = 0;
  // Read (and, for a streamed client, rewritten) from the first run on when the client is answered
  // at the end; for a streamed one, only from the first eviction on.
  let answer = streamed ? undefined : new ResumedAnswer(endpoint, described.wantsUsage, false);
  // What a streamed first run forwarded, kept while an eviction may need its text.
  let sent: Uint8Array[] | undefined = streamed && call.resumable ? [] : undefined;
  // Resumable: only whole lines are forwarded, so a run cut short ends on a line boundary.
  const filter =
    streamed && (!described.wantsUsage || call.resumable)
      ? new UsageChunkFilter(!described.wantsUsage)
      : undefined;
  // Output tokens of the runs before this one.
  let before = 0;

  const fail = (err: ApiError, usage: Usage): ProxyResult => {
    if (res === undefined) throw err;
    if (!res.destroyed && !res.writableEnded)
      res.end(call.shape === undefined ? sseError(err) : call.shape.error(err));
    return { usage, overheadMs, firstByteMs, outcome: 'failed' };
  };
  const write = async (engineBytes: Uint8Array | string, signal: StopSignal): Promise<void> => {
    const bytes = call.shape === undefined ? engineBytes : call.shape.chunk(engineBytes);
    if (bytes.length === 0) return;
    if (firstByteMs === undefined) firstByteMs = call.timer.now() - call.arrivedAt;
    res ??= openResponse(call, answerHeaders(call, overheadMs, SSE_TYPE));
    if (!res.write(bytes)) await drained(res, signal);
  };

  for (let run = 0; ; run++) {
    const signal = events.startCall();
    // One engine span per run; a run cut short by an eviction is ended, failed, with the response.
    const engineCall = openEngineCall(call, before);
    const body =
      answer === undefined || before === 0
        ? described.forwardBody
        : continuationBody(endpoint, described.forwardBody, answer.text, before);
    const reader = answer;
    let stream: EngineStream | undefined;
    let streaming: Span | undefined;
    try {
      const open = () =>
        engine.stream(endpoint, body, {
          signal,
          continuousUsage: described.wantsContinuousUsage,
          headers: engineCall.headers,
          ...(call.timeouts === undefined
            ? {}
            : { headersTimeoutMs: call.timeouts.firstByteMs, bodyTimeoutMs: call.timeouts.streamIdleMs }),
          ...(reader === undefined ? {} : { onLine: (l: SseDataLine) => reader.line(l) }),
        });
      // Under the engine span: an instrumented HTTP client traces the call there.
      stream = await (call.trace === undefined ? open() : call.trace.within(engineCall.span, open));
      if (run === 0) overheadMs = overheadOf(call, call.timer.now() - t0);
      streaming = call.trace?.child('fairway.stream', SpanKind.INTERNAL, engineCall.span);
      events.answering(stream, before);
      for await (const chunk of stream) {
        if (!streamed) continue;
        if (reader !== undefined) {
          await write(reader.take(), signal);
          continue;
        }
        const out = filter === undefined ? chunk : filter.push(chunk);
        if (out === undefined || out.length === 0) continue;
        if (firstByteMs === undefined) streaming?.addEvent('gen_ai.first_token');
        sent?.push(out);
        await write(out, signal);
      }
      if (reader?.error !== undefined) throw new Error(reader.error);
      if (reader === undefined) {
        const rest = filter?.end();
        if (rest !== undefined) await write(rest, signal);
      }
    } catch (err) {
      call.trace?.fail(streaming, err);
      call.trace?.fail(engineCall.span, err);
      const generated = before + (stream?.completionTokens ?? 0);
      const used = {
        inputTokens:
          (answer === undefined ? stream?.usage?.promptTokens : answer.promptTokens) ??
          ticket.req.inputTokens,
        outputTokens: generated,
      };
      if (res === undefined && run === 0 && failedRatherThanStopped(call, signal))
        return failedBeforeAnswer(call, signal, err);
      // Stopped with the client still there: evicted. Under a control plane the request resumes
      // on the engine it is dispatched to next, its answer read back and continued.
      const next =
        signal.aborted && !call.gone.aborted
          ? await events.evicted(err, signal, generated, used)
          : events.cutShort(err, signal, used);
      if (next === 'cancelled') {
        dropClient(call);
        return { usage: used, overheadMs, firstByteMs, outcome: 'cancelled' };
      }
      if (next instanceof ApiError) return fail(next, used);
      if (answer === undefined) {
        answer = new ResumedAnswer(endpoint, described.wantsUsage, true);
        answer.replay(sent ?? []);
        sent = undefined;
      }
      answer.nextRun(generated);
      before = generated;
      engine = next;
      continue;
    }
    const u = stream.usage;
    const usage =
      answer === undefined
        ? {
            inputTokens: u?.promptTokens ?? ticket.req.inputTokens,
            outputTokens: u?.completionTokens ?? stream.completionTokens,
            cachedTokens: u?.cachedTokens,
          }
        : answer.usage(ticket.req.inputTokens, stream);
    if (!streamed) {
      const text = (answer as ResumedAnswer).body(usage);
      firstByteMs = call.timer.now() - call.arrivedAt;
      openResponse(call, answerHeaders(call, overheadMs, JSON_TYPE)).end(
        call.shape === undefined ? text : call.shape.whole(text),
      );
    } else {
      if (answer !== undefined) await write(answer.take() + answer.end(usage), signal);
      (res ?? openResponse(call, answerHeaders(call, overheadMs, SSE_TYPE))).end();
    }
    call.trace?.close(streaming);
    closeEngineCall(call, engineCall.span, usage);
    events.completed(usage);
    return { usage, overheadMs, firstByteMs, outcome: 'completed' };
  }
}
