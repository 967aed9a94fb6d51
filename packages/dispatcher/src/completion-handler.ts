import {
  type Clock,
  type CostFunction,
  type EngineTimeoutsConfig,
  type Logger,
  type PoolConfig,
  queueDeadlineMs,
  type SloClass,
} from '@fairway/core';
import { type Span, SpanKind } from '@opentelemetry/api';
import type { FastifyReply } from 'fastify';
import type { ActivityLog } from './activity-log.ts';
import type { AnswerShape } from './answer-shape.ts';
import type { Authenticator } from './auth.ts';
import type { ResolvedDispatcherOptions } from './dispatcher-options.ts';
import type { EnginePool } from './engine-pool.ts';
import { type ProxyResult, proxy, type Resume } from './engine-proxy.ts';
import { rejectionError, validationError } from './error-mapping.ts';
import { ApiError } from './errors.ts';
import { type EndOutcome, type GatewayMetrics, refusalOutcome } from './gateway-metrics.ts';
import type { GatewayRuntime } from './gateway-runtime.ts';
import { AliasedAnswer } from './model-aliases.ts';
import {
  CHAT_FIELDS,
  type ChatCompletionBody,
  COMPLETION_FIELDS,
  type CompletionBody,
  chatCompletionSchema,
  completionSchema,
  EMBEDDING_FIELDS,
  embeddingSchema,
  plainValidBody,
  refuseUnknownFields,
} from './openai-schemas.ts';
import { grantedOutput } from './quotas.ts';
import { setRateLimitHeaders } from './rate-limit-headers.ts';
import type { RegistryReplicaSource } from './replica-source.ts';
import {
  type DescribedRequest,
  describeRequest,
  type Endpoint,
  operationName,
  type PoolTokenizer,
  type RequestBody,
} from './request-descriptor.ts';
import { readFairwayHeaders } from './request-headers.ts';
import { RECORD, type RecordedRequest, RequestRecord } from './request-record.ts';
import { RESPONSES_FIELDS, refuseStatefulFields, responsesSchema } from './responses-api.ts';
import { StopSignal } from './stop-signal.ts';
import type { Ticket } from './ticket.ts';

/** What the completion routes share (built once per dispatcher). */
export interface CompletionContext {
  readonly runtime: GatewayRuntime;
  readonly replicas: RegistryReplicaSource;
  readonly engines: EnginePool;
  /** Who a request is (API key, or an in-process caller's key id). */
  readonly auth: Authenticator;
  readonly metrics: GatewayMetrics;
  /** What the live console lists: service per tenant, throttles. */
  readonly activity: ActivityLog;
  readonly options: ResolvedDispatcherOptions;
  readonly sloClasses: ReadonlyMap<string, SloClass>;
  readonly defaultSloClass: string;
  readonly cost: CostFunction;
  /** The pool serving `model`, or undefined for a model nothing serves or is configured for. */
  readonly poolFor: (model: string) => string | undefined;
  /** The model an alias (`models.aliases`) stands for; undefined when `model` is no alias. */
  readonly aliasOf: (model: string) => string | undefined;
  /** The real tokenizer configured for a pool (`pools[].tokenizer`), if any. */
  readonly tokenizerFor: (pool: string) => PoolTokenizer | undefined;
  /** Whether a pool's engines schedule by vLLM `priority` (`pools[].enginePriority`). */
  readonly enginePriorityFor: (pool: string) => boolean;
  /** A pool's configuration (`maxChoices`, `reserveOutputTokens`), when the pool is configured. */
  readonly poolConfigFor: (pool: string) => PoolConfig | undefined;
  /** A pool's `engineTimeouts`. */
  readonly timeoutsFor: (pool: string) => EngineTimeoutsConfig | undefined;
  /**
   * Models the control plane may swap a replica to (`policy.control.swappable` with swapping on):
   * their requests are queued while no replica serves them, so the planner sees the demand.
   */
  readonly swapTargets: ReadonlySet<string>;
  /** The store's clock (ms). */
  readonly clock: Clock;
  /** Monotonic ms clock for timings. */
  readonly timer: Clock;
  readonly newId: () => string;
  readonly logger: Logger;
  /** How evicted requests resume, when an SLO-class control plane routes this dispatcher. */
  readonly resume: Resume | undefined;
}

/**
 * A request of another API served as a chat completion (Anthropic's Messages API): the chat body
 * it translates to, and how the engine's answer is rewritten for its client.
 */
export interface TranslatedRequest {
  /** The chat completions body, validated and described as a client's would be. */
  readonly body: unknown;
  readonly shape: AnswerShape;
}

/**
 * Serves `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/embeddings` and `POST /v1/responses` along DESIGN.md's request path:
 * authenticate, validate, describe, admit and enqueue (one store round trip), hold until a replica
 * has room, proxy, settle. Every failure before the response starts is thrown as an `ApiError`.
 * With `translated`, its body is served instead of the request's and the answer is reshaped.
 */
export async function handleCompletion(
  ctx: CompletionContext,
  endpoint: Endpoint,
  request: RecordedRequest,
  reply: FastifyReply,
  translated?: TranslatedRequest,
): Promise<void> {
  const record = request[RECORD] ?? new RequestRecord(ctx.timer.now(), undefined);
  const arrivedAt = record.arrivedAt;
  const tr = record.trace;
  // Authentication, validation and admission (closed with the response if they throw).
  const admission = tr?.child('fairway.admission');
  // The client may leave at any time: a queued request leaves the queue, a running one's engine
  // call is aborted (`Ticket.stopCall`; the ticket's call also stops when the request is evicted).
  const gone = new StopSignal();
  let held: Ticket | undefined;
  const leave = (): void => {
    gone.abort('client closed');
    held?.stopCall('client closed');
  };
  // Told by the app's close listener on the response (request-record.ts); in-process callers
  // without a record get a listener of their own.
  if (request[RECORD] !== undefined) record.clientLeft = leave;
  else
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) leave();
    });
  const principal = ctx.auth.principal(request.headers);
  record.tenant = principal.tenant;
  const headers = readFairwayHeaders(request.headers);
  const raw = translated === undefined ? request.body : translated.body;
  refuseUnknownFields(
    raw,
    endpoint === 'chat'
      ? CHAT_FIELDS
      : endpoint === 'completions'
        ? COMPLETION_FIELDS
        : endpoint === 'responses'
          ? RESPONSES_FIELDS
          : EMBEDDING_FIELDS,
  );
  const body = validBody(endpoint, raw);
  // An alias is served as its model: admitted, queued and charged in that model's pool.
  const asked = body.model;
  const aliased = ctx.aliasOf(asked);
  if (aliased !== undefined) body.model = aliased;
  const shape = translated?.shape ?? (aliased === undefined ? undefined : new AliasedAnswer(aliased, asked));
  const pool = ctx.poolFor(body.model);
  const poolConfig = pool === undefined ? undefined : ctx.poolConfigFor(pool);

  record.model = body.model;

  const described = describeRequest({
    // The request id when fairway made it; a client's own id need not be unique in the fleet.
    id: request.headers['x-request-id'] === request.id ? ctx.newId() : request.id,
    endpoint,
    body,
    principal,
    headers,
    arrivalMs: ctx.clock.now(),
    sloClasses: ctx.sloClasses,
    defaultSloClass: ctx.defaultSloClass,
    defaultMaxTokens: ctx.options.defaultMaxTokens,
    tokenizer: pool === undefined ? undefined : ctx.tokenizerFor(pool),
    enginePriority: pool !== undefined && ctx.enginePriorityFor(pool),
    maxChoices: poolConfig?.maxChoices,
    reserveOutputTokens: poolConfig?.reserveOutputTokens,
    // A pool the config does not name (its replicas registered themselves) has the default mode.
    prefixKeys: pool !== undefined && (poolConfig?.prefixAffinity ?? 'bounded') !== 'off',
  });
  const req = described.descriptor;
  if (req.id !== request.id) record.schedulerId = req.id;
  record.inputTokens = req.inputTokens;
  if (tr?.recording === true) {
    const attrs = {
      'gen_ai.operation.name': operationName(endpoint),
      'gen_ai.request.model': req.model,
      'gen_ai.request.max_tokens': req.maxTokens,
      'fairway.tenant': req.tenant,
      'fairway.slo_class': req.sloClass,
    };
    tr.server.setAttributes(attrs);
    admission?.setAttributes({ ...attrs, 'gen_ai.usage.input_tokens': req.inputTokens });
  }
  const m = ctx.metrics;
  const tenant = m.tenantLabel(req.tenant);
  if (pool === undefined)
    throw new ApiError('MODEL_NOT_FOUND', `model "${asked}" does not exist`, { param: 'model' });
  if (!ctx.runtime.serving(pool) && !ctx.swapTargets.has(req.model)) {
    m.requests.inc({ tenant, outcome: 'unavailable' });
    throw new ApiError('NO_REPLICA', `no replica serves model "${req.model}" now`, { retryAfterS: 1 });
  }

  let sub: Awaited<ReturnType<GatewayRuntime['submit']>>;
  try {
    // Under the admission span: an instrumented store client traces its calls there.
    sub = await (tr === undefined
      ? ctx.runtime.submit(req, pool)
      : tr.within(admission, () => ctx.runtime.submit(req, pool)));
  } catch (err) {
    ctx.logger.error({ err: (err as Error).message }, 'dispatcher: admission failed');
    throw new ApiError('NOT_READY', 'the scheduling store is unavailable; retry', {
      retryAfterS: 1,
      cause: err,
    });
  }
  if (!sub.ok) {
    setRateLimitHeaders(reply, sub.rateLimits);
    m.requests.inc({ tenant, outcome: refusalOutcome(sub.code) });
    m.throttles.inc({ tenant, reason: sub.code });
    ctx.activity.throttled(req.tenant, sub.code, ctx.clock.now());
    throw rejectionError(sub.code, sub.retryAfterMs, sub.key, sub);
  }
  m.requests.inc({ tenant, outcome: 'admitted' });
  tr?.close(admission);
  setRateLimitHeaders(reply, sub.admission?.rateLimits);
  // A request without an output cap may generate what its token budgets still hold.
  const share = sub.admission?.quotaShare;
  const granted = share === undefined ? undefined : grantedOutput(req, share);
  if (granted !== undefined)
    described.forwardBody[endpoint === 'responses' ? 'max_output_tokens' : 'max_tokens'] = granted;
  held = sub.ticket;
  // Every admitted request ends with exactly one outcome, however it leaves (returned or thrown).
  let end: EndOutcome | undefined;
  let result: ProxyResult | undefined;
  try {
    result = await serveAdmitted(ctx, {
      ticket: sub.ticket,
      described,
      endpoint,
      request,
      reply,
      record,
      gone,
      leave,
      shape,
      setEnd: (e) => {
        end = e;
      },
    });
    // `retried` never comes out: the loop goes on until another outcome.
    if (result !== undefined) end = result.outcome === 'retried' ? 'failed' : result.outcome;
  } catch (err) {
    end ??= endOf(err);
    throw err;
  } finally {
    m.requests.inc({ tenant, outcome: end ?? 'failed' });
  }
  // The client left while it was queued: nothing was served.
  if (result === undefined) return;
  record.outcome = result.outcome;
  record.outputTokens = result.usage.outputTokens;
  record.inputTokens = result.usage.inputTokens;
  if (result.firstByteMs !== undefined) record.ttftMs = Math.round(result.firstByteMs * 10) / 10;
  if (tr?.recording === true)
    tr.server.setAttributes({
      'gen_ai.usage.input_tokens': result.usage.inputTokens,
      'gen_ai.usage.output_tokens': result.usage.outputTokens,
    });
  observeServed(ctx, req, tenant, result, described.stream, arrivedAt);
}

/** The request body as the endpoint's schema accepts it, or the validation error thrown. */
function validBody(endpoint: Endpoint, body: unknown): RequestBody {
  if (endpoint === 'embeddings') {
    const parsed = embeddingSchema.safeParse(body);
    if (!parsed.success) throw validationError(parsed.error);
    return parsed.data;
  }
  if (endpoint === 'responses') {
    const parsed = responsesSchema.safeParse(body);
    if (!parsed.success) throw validationError(parsed.error);
    refuseStatefulFields(parsed.data);
    return parsed.data;
  }
  if (plainValidBody(endpoint, body)) return body as ChatCompletionBody | CompletionBody;
  const parsed = (endpoint === 'chat' ? chatCompletionSchema : completionSchema).safeParse(body);
  if (!parsed.success) throw validationError(parsed.error);
  return parsed.data;
}

/** The end of an admitted request that left with `err` thrown (set explicitly where known). */
function endOf(err: unknown): EndOutcome {
  if (err instanceof ApiError) {
    if (err.kind === 'NO_REPLICA') return 'no_replica';
    // The engine refused it (prompt too long for the model, a parameter it rejects).
    if (err.status < 500) return 'engine_rejected';
  }
  return 'failed';
}

/** Token counters, latency, TTFT, TPOT, SLO attainment and overhead of a request that was served. */
function observeServed(
  ctx: CompletionContext,
  req: { model: string; sloClass: string; tenant: string },
  tenant: string,
  result: ProxyResult,
  stream: boolean,
  arrivedAt: number,
): void {
  const m = ctx.metrics;
  const { inputTokens, outputTokens } = result.usage;
  const model = req.model;
  const cost = ctx.cost.cost(inputTokens, outputTokens);
  m.service.inc({ tenant }, cost);
  ctx.activity.served(req.tenant, cost);
  m.inputTokens.inc({ tenant, model }, inputTokens);
  m.outputTokens.inc({ tenant, model }, outputTokens);
  if (result.firstByteMs === undefined) return;
  const ttftS = result.firstByteMs / 1000;
  m.ttft.observe({ slo_class: req.sloClass, model }, ttftS);
  m.overhead.observe({ stream: stream ? 'true' : 'false' }, result.overheadMs / 1000);
  if (result.outcome !== 'completed') return;
  const totalS = (ctx.timer.now() - arrivedAt) / 1000;
  m.latency.observe({ model }, totalS);
  // Streamed: the first byte is the first token; a whole body arrives at once (no TPOT).
  const tpotS = stream && outputTokens > 1 ? Math.max(0, totalS - ttftS) / (outputTokens - 1) : undefined;
  if (tpotS !== undefined) m.tpot.observe({ model }, tpotS);
  const cls = ctx.sloClasses.get(req.sloClass);
  if (cls !== undefined) {
    const met = ttftS <= cls.ttftS && (cls.atgtS === undefined || tpotS === undefined || tpotS <= cls.atgtS);
    m.slo.inc({ slo_class: req.sloClass, attained: met ? 'true' : 'false' });
  }
}

/** An admitted request on its way to an engine, and how it leaves. */
interface Admitted {
  readonly ticket: Ticket;
  readonly described: DescribedRequest;
  readonly endpoint: Endpoint;
  readonly request: RecordedRequest;
  readonly reply: FastifyReply;
  readonly record: RequestRecord;
  /** Aborted when the client leaves. */
  readonly gone: StopSignal;
  readonly leave: () => void;
  /** Rewrites the answer for a client of another API. */
  readonly shape: AnswerShape | undefined;
  /** Told the outcome of the paths that end the request with an error thrown. */
  readonly setEnd: (end: EndOutcome) => void;
}

/**
 * Serves an admitted request: waits for its dispatch, proxies it (retrying on another replica when
 * the engine failed before answering) and returns what happened; `setEnd` is told the outcome of
 * the paths that end it with an error thrown.
 */
async function serveAdmitted(ctx: CompletionContext, a: Admitted): Promise<ProxyResult | undefined> {
  const { ticket, described, endpoint, request, reply, record, gone, leave, setEnd, shape } = a;
  const req = described.descriptor;
  const m = ctx.metrics;
  const tr = record.trace;
  const arrivedAt = record.arrivedAt;

  if (request.raw.socket?.destroyed === true) leave();
  const attempts = ctx.options.engineAttempts;
  let result: ProxyResult | undefined;
  // Why the last engine call failed, when it is being retried on another replica.
  let failure: ApiError | undefined;
  // Replicas this request failed on: never its next place while another replica takes work.
  let failedOn: Set<string> | undefined;
  // Set when a failed request found no other replica of its pool taking work.
  let noneLeft = false;
  // Times it was placed again where it had failed (by a dispatcher that had not heard yet).
  let misplaced = 0;
  // The first wait ends at the class's queue deadline: admission refuses what it predicts would
  // start later, and this refuses what its prediction let through (later arrivals of a class served
  // first, a drain slower than measured) — no request waits past its deadline.
  const cls = ctx.sloClasses.get(req.sloClass);
  const deadlineMs = queueDeadlineMs(cls, ctx.options.queueTimeoutMs);
  const deadlineBinds = deadlineMs < ctx.options.queueTimeoutMs;
  for (let attempt = 1; result === undefined; attempt++) {
    const queue = tr === undefined ? undefined : queueSpan(ctx, record, req, attempt);
    const bound =
      attempt === 1 && deadlineBinds
        ? Math.max(0, deadlineMs - (ctx.timer.now() - arrivedAt))
        : ctx.options.queueTimeoutMs;
    const waited = await ctx.runtime.waitForDispatch(ticket, bound, gone);
    tr?.close(queue);
    if (waited !== 'dispatched') {
      if (waited === 'timeout') {
        setEnd(failure === undefined ? 'timed_out' : 'failed');
        if (failure === undefined && attempt === 1 && deadlineBinds)
          throw new ApiError(
            'OVER_DEADLINE',
            `the fleet is overloaded: this request did not start within its SLO class's queue deadline (${deadlineMs / 1000} s); retry after the time given`,
            { retryAfterS: Math.max(1, Math.ceil(deadlineMs / 1000)) },
          );
        throw failure ?? new ApiError('QUEUE_TIMEOUT', `no capacity within ${ctx.options.queueTimeoutMs} ms`);
      }
      if (waited === 'shutdown') {
        setEnd('shutdown');
        throw new ApiError('NOT_READY', 'this dispatcher is shutting down; retry', { retryAfterS: 1 });
      }
      if (waited === 'no_replica') {
        setEnd('no_replica');
        throw noReplica(
          req.model,
          failure ??
            new ApiError(
              'NO_REPLICA',
              `no replica has taken work for ${ctx.options.noReplicaWaitMs / 1000} s`,
            ),
        );
      }
      setEnd('cancelled');
      record.outcome = 'cancelled';
      reply.hijack();
      reply.raw.destroy();
      return undefined;
    }
    if (attempt === 1 && misplaced === 0)
      m.queueWait.observe({ slo_class: req.sloClass }, ticket.queueMs() / 1000);
    const retry =
      attempt < attempts
        ? async (): Promise<boolean> => {
            const outcome = await ctx.runtime.retry(ticket);
            noneLeft = outcome === 'no_replica';
            return outcome === 'requeued';
          }
        : undefined;
    record.queueMs = Math.round(ticket.queueMs() * 10) / 10;
    const replica = ticket.replica ?? '';
    record.replica = replica;
    record.affinity = ticket.affinity;
    // Placed again where it failed, by a dispatcher that had not yet heard of the failure: back to
    // the queue without spending an engine call (a bounded number of times).
    if (failedOn?.has(replica) === true && misplaced < attempts) {
      misplaced++;
      if ((await ctx.runtime.retry(ticket)) === 'requeued') {
        attempt--;
        continue;
      }
    }
    const url = ctx.replicas.urlOf(replica);
    // Only the engine span reads it.
    const engineAddress = url === undefined || tr === undefined ? undefined : hostOf(url);
    if (tr !== undefined) {
      const dispatch = tr.child('fairway.dispatch');
      if (dispatch.isRecording()) {
        dispatch.setAttributes({ 'fairway.replica': replica, 'fairway.attempt': attempt });
        if (engineAddress !== undefined) dispatch.setAttribute('server.address', engineAddress);
        tr.server.setAttribute('fairway.replica', replica);
      }
      tr.close(dispatch);
    }
    if (url === undefined) {
      failure = new ApiError('NO_REPLICA', 'the replica chosen for this request left the fleet; retry', {
        retryAfterS: 1,
      });
      if (retry !== undefined && (await retry())) continue;
      await ctx.runtime.abandon(ticket, { inputTokens: req.inputTokens, outputTokens: 0 });
      throw failure;
    }
    const r = await proxy({
      runtime: ctx.runtime,
      engine: ctx.engines.get(url),
      endpoint,
      ticket,
      described,
      reply,
      gone,
      timer: ctx.timer,
      arrivedAt,
      retry,
      trace: tr,
      engineAddress,
      replicaFailed: (err: unknown) => {
        failedOn ??= new Set();
        failedOn.add(replica);
        ctx.runtime.replicaFailed(replica, err);
      },
      resume: ctx.resume,
      timeouts: ctx.timeoutsFor(ticket.pool),
      shape,
    }).catch((err: unknown) => {
      // Nowhere left to retry: say so (503) rather than pass on this replica's failure.
      throw noneLeft && err instanceof ApiError && err.status >= 500 ? noReplica(req.model, err) : err;
    });
    if (r.outcome === 'retried') {
      m.engineRetries.inc();
      ctx.logger.warn(
        { requestId: req.id, replica, err: r.failure?.message },
        'dispatcher: engine call failed before answering; retrying on another replica',
      );
      failure = r.failure;
      continue;
    }
    result = r;
  }
  return result;
}

/** The 503 of a request that failed and found no other replica of its pool taking work. */
function noReplica(model: string, cause: ApiError): ApiError {
  return new ApiError(
    'NO_REPLICA',
    `every replica serving model "${model}" failed or is unavailable (${cause.message}); retry`,
    { retryAfterS: 1, cause },
  );
}

/** `host:port` of an engine URL (the engine span's `server.address`). */
function hostOf(url: string): string {
  const i = url.indexOf('://');
  return url.slice(i < 0 ? 0 : i + 3).replace(/\/.*$/, '');
}

/** The queue-wait span of a dispatch attempt, with the flow and band the fairness decision uses. */
function queueSpan(
  ctx: CompletionContext,
  record: RequestRecord,
  req: { tenant: string; app?: string | undefined; sloClass: string },
  attempt: number,
): Span | undefined {
  const tr = record.trace;
  if (tr === undefined) return undefined;
  const span = tr.child('fairway.queue', SpanKind.INTERNAL);
  if (span.isRecording())
    span.setAttributes({
      'fairway.flow': req.app === undefined ? req.tenant : `${req.tenant}/${req.app}`,
      'fairway.band': ctx.sloClasses.get(req.sloClass)?.band ?? 0,
      'fairway.attempt': attempt,
    });
  return span;
}
