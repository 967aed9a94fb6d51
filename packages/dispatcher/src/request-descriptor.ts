import {
  countEmbeddingInputTokens,
  countPromptTokens,
  countSystemPromptTokens,
  GATEWAY_OWNED_FIELDS,
  RESTRICTED_ENGINE_FIELDS,
  type RequestDescriptor,
  type SloClass,
  type TokenCounter,
  tenantUserId,
} from '@fairway/core';
import { mayChooseClass, mayUseEngineField, type Principal } from './auth.ts';
import { ApiError } from './errors.ts';
import {
  type ChatCompletionBody,
  type CompletionBody,
  DROPPED_FIELDS,
  type EmbeddingBody,
} from './openai-schemas.ts';
import { promptPrefix } from './prompt-prefix.ts';
import type { FairwayHeaderValues } from './request-headers.ts';
import { type ResponsesBody, responsesMessages } from './responses-api.ts';

/** Which OpenAI endpoint a request came in on. */
export type Endpoint = 'chat' | 'completions' | 'embeddings' | 'responses';

/** The GenAI semantic conventions' name of an endpoint's operation (traces). */
export function operationName(endpoint: Endpoint): string {
  return endpoint === 'chat' || endpoint === 'responses'
    ? 'chat'
    : endpoint === 'completions'
      ? 'text_completion'
      : 'embeddings';
}

/** A validated request body of any endpoint. */
export type RequestBody = ChatCompletionBody | CompletionBody | EmbeddingBody | ResponsesBody;

/** What the scheduler sees of a request, and the body forwarded to the engine. */
export interface DescribedRequest {
  readonly descriptor: RequestDescriptor;
  /** The client's body, with `max_tokens` injected when the client gave no output cap. */
  readonly forwardBody: Record<string, unknown>;
  readonly stream: boolean;
  /** Whether the client asked for `usage` in the stream (`stream_options.include_usage`). */
  readonly wantsUsage: boolean;
  /** Whether the client asked for `usage` on every chunk (`stream_options.continuous_usage_stats`). */
  readonly wantsContinuousUsage: boolean;
}

/** Inputs of {@link describeRequest}. */
export interface DescribeInput {
  readonly id: string;
  readonly endpoint: Endpoint;
  readonly body: RequestBody;
  readonly principal: Principal;
  readonly headers: FairwayHeaderValues;
  readonly arrivalMs: number;
  readonly sloClasses: ReadonlyMap<string, SloClass>;
  /** Class used when neither the header nor the key nor the tenant names one. */
  readonly defaultSloClass: string;
  /** Output cap injected when the client gives none, tokens. */
  readonly defaultMaxTokens: number;
  /** Most choices (`n`) a request may ask for (`pools[].maxChoices`). @default 8 */
  readonly maxChoices?: number | undefined;
  /**
   * Output tokens per choice a request without a cap reserves (`pools[].reserveOutputTokens`).
   * @default defaultMaxTokens (the whole cap)
   */
  readonly reserveOutputTokens?: number | undefined;
  /** The pool's tokenizer, when one is configured (see {@link PoolTokenizer}). */
  readonly tokenizer?: PoolTokenizer | undefined;
  /** The pool's engines order their queue by vLLM `priority`: fairway sets it from the class band. */
  readonly enginePriority?: boolean | undefined;
  /** The pool places by prefix-cache affinity: the descriptor carries the prompt's prefix keys. */
  readonly prefixKeys?: boolean | undefined;
}

/**
 * The SLO class a request runs in. A key's class (else its tenant's, else the default) is granted;
 * `x-fairway-slo-class` may only choose a class served after it (an equal or higher band) or one
 * the key or tenant is granted by name (`sloClasses` in the config). Claiming a class ahead of the
 * grant is refused (403), so no key raises its own priority.
 */
export function grantedSloClass(
  principal: Principal,
  asked: string | undefined,
  classes: ReadonlyMap<string, SloClass>,
  defaultClass: string,
): string {
  const granted = principal.sloClass ?? defaultClass;
  if (asked === undefined || asked === granted) return granted;
  const want = classes.get(asked);
  if (want === undefined) {
    throw new ApiError(
      'INVALID_HEADER',
      `unknown SLO class "${asked}"; known: ${[...classes.keys()].join(', ')}`,
      { param: 'x-fairway-slo-class' },
    );
  }
  const own = classes.get(granted);
  if (own !== undefined && want.band < own.band && !mayChooseClass(principal, asked)) {
    throw new ApiError(
      'FORBIDDEN',
      `this API key's SLO class is "${granted}"; it may choose a class served after it, not "${asked}" (an operator grants further classes with the key's sloClasses)`,
      { param: 'x-fairway-slo-class' },
    );
  }
  return asked;
}

/**
 * Refuses engine fields the key may not send: a gateway-owned field always (400), a restricted
 * one unless the key or its tenant is granted it (403). See `RESTRICTED_ENGINE_FIELDS` in core.
 */
export function refuseEngineFields(body: Record<string, unknown>, principal: Principal): void {
  for (const f of GATEWAY_OWNED_FIELDS)
    if (body[f] !== undefined)
      throw new ApiError(
        'INVALID_REQUEST',
        `"${f}" is set by fairway from the request's SLO class; choose a class with the x-fairway-slo-class header`,
        { param: f },
      );
  for (const f of RESTRICTED_ENGINE_FIELDS)
    if (body[f] !== undefined && !mayUseEngineField(principal, f))
      throw new ApiError(
        'FORBIDDEN',
        `this API key may not send "${f}" (an operator grants it with the key's or tenant's engineFields)`,
        { param: f },
      );
}

/**
 * A pool's real tokenizer and the largest prompt it is used for: tokenizing costs about 5 µs per
 * character in JavaScript, so a prompt whose estimate is above `maxTokens` is counted by the
 * estimate instead (it still pays its estimated tokens against limits and reservations).
 */
export interface PoolTokenizer {
  readonly counter: TokenCounter;
  readonly maxTokens: number;
}

/**
 * Prompt tokens as admission, token limits and the engine reservation count them: the estimate of
 * every field the engine tokenizes (`countPromptTokens` in core), or the pool's tokenizer over the
 * approximately rendered chat template when one is configured and the prompt is not too large.
 */
export function promptTokens(endpoint: Endpoint, body: RequestBody, tokenizer?: PoolTokenizer): number {
  if (endpoint === 'embeddings') {
    const input = (body as EmbeddingBody).input;
    return counted((counter) => countEmbeddingInputTokens(input, counter), tokenizer);
  }
  if (endpoint === 'responses') {
    const chat = { messages: responsesMessages(body as ResponsesBody) };
    return counted((counter) => countPromptTokens('chat', chat, counter), tokenizer);
  }
  return counted((counter) => countPromptTokens(endpoint, body, counter), tokenizer);
}

/** `count` with the pool's tokenizer when one is configured and the estimate is not too large. */
function counted(count: (counter?: TokenCounter) => number, tokenizer?: PoolTokenizer): number {
  const estimate = count();
  if (tokenizer === undefined || estimate > tokenizer.maxTokens) return estimate;
  return count(tokenizer.counter);
}

/** A chat request's system-prompt tokens, counted as {@link promptTokens} counts the prompt. */
function systemPromptTokens(body: RequestBody, tokenizer?: PoolTokenizer): number {
  return counted((counter) => countSystemPromptTokens(body, counter), tokenizer);
}

/**
 * Builds the scheduler's descriptor of a validated request (DESIGN.md request path, steps 1–2):
 * the tenant from the key; the app from the key, else `x-fairway-app` (a key bound to an app
 * may not claim another: 403); the user (scoped by the tenant) and interaction from headers; the SLO class
 * by {@link grantedSloClass}; restricted engine fields by {@link refuseEngineFields}; input tokens by {@link promptTokens}
 * (every field the engine tokenizes; the engine's usage settles them); the output reserved from
 * `max_completion_tokens` or `max_tokens` times `n`; without either, the pool's
 * `reserveOutputTokens` is reserved and `defaultMaxTokens` injected as the engine's cap (`outputCap`,
 * lowered at admission to what the caller's token budgets hold).
 */
export function describeRequest(input: DescribeInput): DescribedRequest {
  const { body, principal, headers } = input;
  if (principal.app !== undefined && headers.app !== undefined && headers.app !== principal.app) {
    throw new ApiError(
      'FORBIDDEN',
      `this API key is bound to app "${principal.app}" and may not act as app "${headers.app}"`,
      { param: 'x-fairway-app' },
    );
  }
  refuseEngineFields(body, principal);
  const sloClass = grantedSloClass(principal, headers.sloClass, input.sloClasses, input.defaultSloClass);
  if (input.endpoint === 'embeddings') return describeEmbedding(input, sloClass);
  if (input.endpoint === 'responses') return describeResponse(input, sloClass);
  const gen = body as ChatCompletionBody | CompletionBody;
  const given =
    input.endpoint === 'chat'
      ? ((gen as ChatCompletionBody).max_completion_tokens ?? gen.max_tokens)
      : gen.max_tokens;
  const choices = gen.n ?? 1;
  const maxChoices = input.maxChoices ?? 8;
  if (choices > maxChoices)
    throw new ApiError(
      'INVALID_REQUEST',
      `n is ${choices}; this model's pool serves at most ${maxChoices} choices per request`,
      { param: 'n' },
    );
  // Every choice may generate up to the cap: the request reserves, and is admitted for, all of
  // them. Without a cap it reserves the pool's default and the engine may go on to the cap.
  const reservedPerChoice =
    given ?? Math.min(input.reserveOutputTokens ?? input.defaultMaxTokens, input.defaultMaxTokens);
  const maxTokens = reservedPerChoice * choices;
  const outputCap = given == null ? input.defaultMaxTokens * choices : undefined;
  const forwardBody: Record<string, unknown> =
    given == null ? { ...gen, max_tokens: input.defaultMaxTokens } : { ...gen };
  for (const f of DROPPED_FIELDS) delete forwardBody[f];
  const band = input.enginePriority === true ? input.sloClasses.get(sloClass)?.band : undefined;
  if (band !== undefined) forwardBody.priority = band;
  const stream = gen.stream === true;
  const so = gen.stream_options ?? undefined;
  const identity = identityOf(input, sloClass, band);
  const systemTokens = input.endpoint === 'chat' ? systemPromptTokens(body, input.tokenizer) : 0;
  const descriptor: RequestDescriptor = {
    ...identity,
    // Part of the prompt: FairServe's WSC prices it at its own weight (β).
    ...(systemTokens > 0 ? { systemTokens: Math.min(systemTokens, identity.inputTokens) } : {}),
    maxTokens,
    ...(outputCap !== undefined ? { outputCap } : {}),
    ...(choices > 1 ? { choices } : {}),
  };
  return {
    descriptor,
    forwardBody,
    stream,
    wantsUsage: so?.include_usage === true,
    wantsContinuousUsage: so?.continuous_usage_stats === true,
  };
}

/** The descriptor fields every endpoint's request has: who, what model and class, its prompt. */
function identityOf(input: DescribeInput, sloClass: string, band: number | undefined) {
  const { principal, headers, body } = input;
  return {
    id: input.id,
    tenant: principal.tenant,
    ...(principal.keyId !== undefined ? { keyId: principal.keyId } : {}),
    model: body.model,
    sloClass,
    inputTokens: promptTokens(input.endpoint, body, input.tokenizer),
    arrivalMs: input.arrivalMs,
    ...((principal.app ?? headers.app) !== undefined ? { app: principal.app ?? headers.app } : {}),
    // The user is the tenant's own: two tenants' "alice" are two users (flows, windows, throttles).
    ...(headers.user !== undefined ? { user: tenantUserId(principal.tenant, headers.user) } : {}),
    ...(headers.interaction !== undefined ? { interactionId: headers.interaction } : {}),
    ...(band !== undefined ? { priority: band } : {}),
    ...prefixKeysOf(input),
  };
}

/**
 * `{ prefixKeys, prefixTokens }` of a request of a pool that places by prefix affinity, if its
 * prompt has any.
 */
function prefixKeysOf(input: DescribeInput): { prefixKeys?: string[]; prefixTokens?: number[] } {
  if (input.prefixKeys !== true) return {};
  const prefix = promptPrefix(input.endpoint, input.body);
  return prefix.keys.length > 0 ? { prefixKeys: prefix.keys, prefixTokens: prefix.tokens } : {};
}

/**
 * A Responses API request: one output, capped by `max_output_tokens` (reserved as chat reserves
 * `max_tokens`; without it the pool's `reserveOutputTokens` is reserved and `defaultMaxTokens`
 * sent as the engine's cap). Usage comes from the engine's response, not from `stream_options`.
 */
function describeResponse(input: DescribeInput, sloClass: string): DescribedRequest {
  const body = input.body as ResponsesBody;
  const given = body.max_output_tokens ?? undefined;
  const maxTokens =
    given ?? Math.min(input.reserveOutputTokens ?? input.defaultMaxTokens, input.defaultMaxTokens);
  const forwardBody: Record<string, unknown> =
    given === undefined ? { ...body, max_output_tokens: input.defaultMaxTokens } : { ...body };
  for (const f of DROPPED_FIELDS) delete forwardBody[f];
  const band = input.enginePriority === true ? input.sloClasses.get(sloClass)?.band : undefined;
  if (band !== undefined) forwardBody.priority = band;
  return {
    descriptor: {
      ...identityOf(input, sloClass, band),
      maxTokens,
      ...(given === undefined ? { outputCap: input.defaultMaxTokens } : {}),
    },
    forwardBody,
    stream: body.stream === true,
    wantsUsage: false,
    wantsContinuousUsage: false,
  };
}

/**
 * An embeddings request: its inputs' tokens are all it costs (no output is generated or reserved),
 * admitted, queued and charged like any request of its tenant.
 */
function describeEmbedding(input: DescribeInput, sloClass: string): DescribedRequest {
  const forwardBody: Record<string, unknown> = { ...input.body };
  const band = input.enginePriority === true ? input.sloClasses.get(sloClass)?.band : undefined;
  if (band !== undefined) forwardBody.priority = band;
  return {
    descriptor: { ...identityOf(input, sloClass, band), maxTokens: 0 },
    forwardBody,
    stream: false,
    wantsUsage: false,
    wantsContinuousUsage: false,
  };
}
