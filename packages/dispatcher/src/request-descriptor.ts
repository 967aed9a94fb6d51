import {
  countPromptTokens,
  type RequestDescriptor,
  type SloClass,
  type TokenCounter,
  tenantUserId,
} from '@fairway/core';
import type { Principal } from './auth.ts';
import { ApiError } from './errors.ts';
import type { ChatCompletionBody, CompletionBody } from './openai-schemas.ts';
import type { FairwayHeaderValues } from './request-headers.ts';

/** Which OpenAI endpoint a request came in on. */
export type Endpoint = 'chat' | 'completions';

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
  readonly body: ChatCompletionBody | CompletionBody;
  readonly principal: Principal;
  readonly headers: FairwayHeaderValues;
  readonly arrivalMs: number;
  readonly sloClasses: ReadonlyMap<string, SloClass>;
  /** Class used when neither the header nor the key nor the tenant names one. */
  readonly defaultSloClass: string;
  /** Output cap injected when the client gives none, tokens. */
  readonly defaultMaxTokens: number;
  /** The pool's tokenizer, when one is configured (see {@link PoolTokenizer}). */
  readonly tokenizer?: PoolTokenizer | undefined;
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
export function promptTokens(
  endpoint: Endpoint,
  body: ChatCompletionBody | CompletionBody,
  tokenizer?: PoolTokenizer,
): number {
  const estimate = countPromptTokens(endpoint, body);
  if (tokenizer === undefined || estimate > tokenizer.maxTokens) return estimate;
  return countPromptTokens(endpoint, body, tokenizer.counter);
}

/**
 * Builds the scheduler's descriptor of a validated request (DESIGN.md request path, steps 1–2):
 * the tenant from the key; the app from the key, else `x-fairway-app` (a key bound to an app
 * may not claim another: 403); the user (scoped by the tenant) and interaction from headers; the SLO class from
 * `x-fairway-slo-class`, else the key's or tenant's default; input tokens by {@link promptTokens}
 * (every field the engine tokenizes; the engine's usage settles them); the output cap from
 * `max_completion_tokens` or `max_tokens`, else injected so the reservation bounds what the
 * engine may generate.
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
  const sloClass = headers.sloClass ?? principal.sloClass ?? input.defaultSloClass;
  if (!input.sloClasses.has(sloClass)) {
    throw new ApiError(
      'INVALID_HEADER',
      `unknown SLO class "${sloClass}"; known: ${[...input.sloClasses.keys()].join(', ')}`,
      { param: 'x-fairway-slo-class' },
    );
  }
  const given =
    input.endpoint === 'chat'
      ? ((body as ChatCompletionBody).max_completion_tokens ?? body.max_tokens)
      : body.max_tokens;
  const maxTokens = given ?? input.defaultMaxTokens;
  const forwardBody: Record<string, unknown> =
    given == null ? { ...body, max_tokens: input.defaultMaxTokens } : { ...body };
  const stream = body.stream === true;
  const so = body.stream_options ?? undefined;
  const descriptor: RequestDescriptor = {
    id: input.id,
    tenant: principal.tenant,
    ...(principal.keyId !== undefined ? { keyId: principal.keyId } : {}),
    model: body.model,
    sloClass,
    inputTokens: promptTokens(input.endpoint, body, input.tokenizer),
    maxTokens,
    arrivalMs: input.arrivalMs,
    ...((principal.app ?? headers.app) !== undefined ? { app: principal.app ?? headers.app } : {}),
    // The user is the tenant's own: two tenants' "alice" are two users (flows, windows, throttles).
    ...(headers.user !== undefined ? { user: tenantUserId(principal.tenant, headers.user) } : {}),
    ...(headers.interaction !== undefined ? { interactionId: headers.interaction } : {}),
    ...(body.priority !== undefined ? { priority: body.priority } : {}),
  };
  return {
    descriptor,
    forwardBody,
    stream,
    wantsUsage: so?.include_usage === true,
    wantsContinuousUsage: so?.continuous_usage_stats === true,
  };
}
