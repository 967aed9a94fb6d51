import type { Clock, CostFunction, PoolConfig } from '@fairway/core';
import type { Span } from '@opentelemetry/api';
import type { FastifyReply } from 'fastify';
import type { ActivityLog } from './activity-log.ts';
import type { AnswerShape } from './answer-shape.ts';
import type { Authenticator } from './auth.ts';
import type { ProxyResult } from './engine-proxy.ts';
import { rejectionError, validationError } from './error-mapping.ts';
import { ApiError } from './errors.ts';
import { type EndOutcome, refusalOutcome } from './gateway-metrics.ts';
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
import type { PoolKvEvents } from './prompt-block-keys.ts';
import { grantedOutput } from './quotas.ts';
import { setRateLimitHeaders } from './rate-limit-headers.ts';
import {
  type DescribedRequest,
  describeRequest,
  type Endpoint,
  operationName,
  type PoolTokenizer,
  type RequestBody,
} from './request-descriptor.ts';
import { readFairwayHeaders } from './request-headers.ts';
import { type LifecycleContext, RequestLifecycle } from './request-lifecycle.ts';
import { RECORD, type RecordedRequest, RequestRecord } from './request-record.ts';
import { RESPONSES_FIELDS, refuseStatefulFields, responsesSchema } from './responses-api.ts';
import { StopSignal } from './stop-signal.ts';

/** What the completion routes share (built once per dispatcher). */
export interface CompletionContext extends LifecycleContext {
  /** Who a request is (API key, or an in-process caller's key id). */
  readonly auth: Authenticator;
  /** What the live console lists: service per tenant, throttles. */
  readonly activity: ActivityLog;
  readonly defaultSloClass: string;
  readonly cost: CostFunction;
  /** The pool serving `model`, or undefined for a model nothing serves or is configured for. */
  readonly poolFor: (model: string) => string | undefined;
  /** The model an alias (`models.aliases`) stands for; undefined when `model` is no alias. */
  readonly aliasOf: (model: string) => string | undefined;
  /** The models whose pools take `model`'s requests when its own cannot, in order (`models.fallbacks`). */
  readonly fallbacksOf: (model: string) => readonly string[];
  /** The real tokenizer configured for a pool (`pools[].tokenizer`), if any. */
  readonly tokenizerFor: (pool: string) => PoolTokenizer | undefined;
  /**
   * The KV block keys of a request's prompt for a pool placing by its engines' KV cache events
   * (`pools[].kvEvents`, given as `config`); resolves undefined when they cannot be had in time.
   */
  readonly blockKeysFor?: (
    pool: string,
    config: PoolKvEvents,
    endpoint: Endpoint,
    body: RequestBody,
  ) => Promise<string[] | undefined>;
  /** Whether a pool's engines schedule by vLLM `priority` (`pools[].enginePriority`). */
  readonly enginePriorityFor: (pool: string) => boolean;
  /** A pool's configuration (`maxChoices`, `reserveOutputTokens`), when the pool is configured. */
  readonly poolConfigFor: (pool: string) => PoolConfig | undefined;
  /**
   * Models the control plane may swap a replica to (`policy.control.swappable` with swapping on):
   * their requests are queued while no replica serves them, so the planner sees the demand.
   */
  readonly swapTargets: ReadonlySet<string>;
  /** The store's clock (ms). */
  readonly clock: Clock;
  readonly newId: () => string;
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
  // call is aborted (`RequestLifecycle.clientLeft`; the call also stops when the request is evicted).
  const gone = new StopSignal();
  let held: RequestLifecycle | undefined;
  const leave = (): void => {
    gone.abort('client closed');
    held?.clientLeft();
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
  const chain = [body.model, ...ctx.fallbacksOf(body.model)];
  // The request id when fairway made it; a client's own id need not be unique in the fleet.
  const id = request.headers['x-request-id'] === request.id ? ctx.newId() : request.id;
  const m = ctx.metrics;
  let admitted: Admission | undefined;
  // The pools of the model and of its fallbacks, in order, until one admits the request. A pool
  // that refuses it changed nothing in the store; the one that admits it charges it once.
  for (const [i, model] of chain.entries()) {
    const last = i === chain.length - 1;
    body.model = model;
    const attempt = await tryPool(ctx, {
      id,
      requestId: request.id,
      asked,
      endpoint,
      body,
      reply,
      record,
      principal,
      headers,
      admission,
      last,
    });
    if (attempt.kind === 'admitted') {
      admitted = attempt;
      break;
    }
    const next = chain[i + 1] as string;
    m.fallbacks.inc({ from_pool: attempt.pool, to_pool: ctx.poolFor(next) ?? next, reason: attempt.reason });
    record.fallbacks = [...(record.fallbacks ?? []), `${attempt.pool}:${attempt.reason}`];
    tr?.server.addEvent('fairway.fallback', {
      'fairway.fallback.from_pool': attempt.pool,
      'fairway.fallback.reason': attempt.reason,
      'gen_ai.request.model': next,
    });
  }
  if (admitted === undefined) throw new Error('unreachable: the last pool of a chain admits or throws');
  const { described, sub, tenant } = admitted;
  const req = described.descriptor;
  // The model that serves it, named as the client asked (an alias, or the model a fallback replaced).
  const servedAs = req.model === asked ? undefined : new AliasedAnswer(req.model, asked);
  if (req.model !== chain[0]) reply.header('x-fairway-fallback-model', req.model);
  const shape = translated?.shape ?? servedAs;
  m.requests.inc({ tenant, outcome: 'admitted' });
  tr?.close(admission);
  setRateLimitHeaders(reply, sub.admission?.rateLimits);
  // A request without an output cap may generate what its token budgets still hold.
  const share = sub.admission?.quotaShare;
  const granted = share === undefined ? undefined : grantedOutput(req, share);
  if (granted !== undefined)
    described.forwardBody[endpoint === 'responses' ? 'max_output_tokens' : 'max_tokens'] = granted;
  // From here the request's lifecycle waits for its dispatch, serves it and settles it once.
  const life = new RequestLifecycle(ctx, {
    ticket: sub.ticket,
    described,
    endpoint,
    request,
    reply,
    record,
    gone,
    leave,
    shape,
  });
  held = life;
  // Every admitted request ends with exactly one outcome, however it leaves (returned or thrown).
  let end: EndOutcome | undefined;
  let result: ProxyResult | undefined;
  try {
    result = await life.serve();
    end = life.end;
    // `retried` never comes out: the lifecycle goes on until another outcome.
    if (result !== undefined) end = result.outcome === 'retried' ? 'failed' : result.outcome;
  } catch (err) {
    end = life.end ?? endOf(err);
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

/** Why a pool passed a request on to the next of its model's fallbacks. */
type FallbackReason = 'no_replica' | 'queue_full' | 'over_deadline';

/** A request admitted in one pool of its chain. */
interface Admission {
  readonly kind: 'admitted';
  readonly described: DescribedRequest;
  readonly sub: Extract<Awaited<ReturnType<GatewayRuntime['submit']>>, { ok: true }>;
  /** The tenant's metrics label. */
  readonly tenant: string;
}

/** One pool of a request's chain: the model it is tried as, and whether a fallback follows. */
interface PoolAttempt {
  /** fairway's id of the request in the scheduler. */
  readonly id: string;
  /** The id the request is known by in headers and logs. */
  readonly requestId: string;
  /** The model the client named (an alias, perhaps). */
  readonly asked: string;
  readonly endpoint: Endpoint;
  readonly body: RequestBody;
  /** Given the caller's rate-limit headers when it is refused. */
  readonly reply: FastifyReply;
  readonly record: RequestRecord;
  readonly principal: ReturnType<Authenticator['principal']>;
  readonly headers: ReturnType<typeof readFairwayHeaders>;
  readonly admission: Span | undefined;
  /** No fallback follows: a refusal is the client's answer. */
  readonly last: boolean;
}

/**
 * Describes the request for the pool serving `a.body.model` and submits it there: admitted, or
 * passed on (`refused`, changing nothing) when the pool has no replica serving, its queue is full
 * or the request's SLO class cannot start in time and a fallback follows; every other refusal,
 * and any refusal of the chain's last pool, is thrown as the client's error.
 */
async function tryPool(
  ctx: CompletionContext,
  a: PoolAttempt,
): Promise<Admission | { readonly kind: 'refused'; readonly pool: string; readonly reason: FallbackReason }> {
  const { body, record } = a;
  const tr = record.trace;
  const pool = ctx.poolFor(body.model);
  const poolConfig = pool === undefined ? undefined : ctx.poolConfigFor(pool);
  record.model = body.model;
  const described = describeRequest({
    id: a.id,
    endpoint: a.endpoint,
    body,
    principal: a.principal,
    headers: a.headers,
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
  // Asked for by admission only once no refusal it can make alone applies (it costs an engine call).
  const blockKeysFor = ctx.blockKeysFor;
  const kvEvents = poolConfig?.prefixAffinity === 'off' ? undefined : poolConfig?.kvEvents;
  const options =
    pool === undefined || blockKeysFor === undefined || kvEvents === undefined
      ? undefined
      : { promptBlockKeys: () => blockKeysFor(pool, kvEvents, a.endpoint, body) };
  if (req.id !== a.requestId) record.schedulerId = req.id;
  record.inputTokens = req.inputTokens;
  if (tr?.recording === true) {
    const attrs = {
      'gen_ai.operation.name': operationName(a.endpoint),
      'gen_ai.request.model': req.model,
      'gen_ai.request.max_tokens': req.maxTokens,
      'fairway.tenant': req.tenant,
      'fairway.slo_class': req.sloClass,
    };
    tr.server.setAttributes(attrs);
    a.admission?.setAttributes({ ...attrs, 'gen_ai.usage.input_tokens': req.inputTokens });
  }
  const m = ctx.metrics;
  const tenant = m.tenantLabel(req.tenant);
  if (pool === undefined)
    throw new ApiError('MODEL_NOT_FOUND', `model "${a.asked}" does not exist`, { param: 'model' });
  if (!ctx.runtime.serving(pool) && !ctx.swapTargets.has(req.model)) {
    if (!a.last) return { kind: 'refused', pool, reason: 'no_replica' };
    m.requests.inc({ tenant, outcome: 'unavailable' });
    throw new ApiError('NO_REPLICA', `no replica serves model "${req.model}" now`, { retryAfterS: 1 });
  }
  let sub: Awaited<ReturnType<GatewayRuntime['submit']>>;
  try {
    // Under the admission span: an instrumented store client traces its calls there.
    sub = await (tr === undefined
      ? ctx.runtime.submit(req, pool, options)
      : tr.within(a.admission, () => ctx.runtime.submit(req, pool, options)));
  } catch (err) {
    ctx.logger.error({ err: (err as Error).message }, 'dispatcher: admission failed');
    throw new ApiError('NOT_READY', 'the scheduling store is unavailable; retry', {
      retryAfterS: 1,
      cause: err,
    });
  }
  if (sub.ok) return { kind: 'admitted', described, sub, tenant };
  // The pool's own bounds pass the request on; the tenant's (rates, budgets, its share of the
  // queue) are the tenant's answer in every pool.
  const poolBound =
    sub.code === 'over_deadline' || (sub.code === 'queue_full' && sub.key.startsWith('pool:'));
  if (poolBound && !a.last) return { kind: 'refused', pool, reason: sub.code as FallbackReason };
  setRateLimitHeaders(a.reply, sub.rateLimits);
  m.requests.inc({ tenant, outcome: refusalOutcome(sub.code) });
  m.throttles.inc({ tenant, reason: sub.code });
  ctx.activity.throttled(req.tenant, sub.code, ctx.clock.now());
  throw rejectionError(sub.code, sub.retryAfterMs, sub.key, sub);
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
