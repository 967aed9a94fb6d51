import { formatPath } from '@fairway/core';
import {
  EngineConnectionLostError,
  EngineError,
  EngineHttpError,
  EngineTimeoutError,
  EngineUnreachableError,
} from '@fairway/engine';
import type { AdmitRejectCode } from '@fairway/store';
import { ZodError } from 'zod';
import { ApiError, type ApiErrorName } from './errors.ts';

/** Why the scheduler refused a request (`SubmitResult` codes). */
export type RejectCode = AdmitRejectCode | 'context_too_long' | 'exceeds_limit' | 'over_deadline';

const REJECT: Record<RejectCode, ApiErrorName> = {
  rpm_limited: 'RPM_LIMITED',
  tpm_limited: 'TPM_LIMITED',
  throttled: 'THROTTLED',
  queue_full: 'QUEUE_FULL',
  quota_exceeded: 'QUOTA_EXCEEDED',
  duplicate: 'INTERNAL',
  context_too_long: 'CONTEXT_TOO_LONG',
  exceeds_limit: 'EXCEEDS_LIMIT',
  over_deadline: 'OVER_DEADLINE',
};

const REJECT_MESSAGE: Record<RejectCode, string> = {
  rpm_limited: 'request rate limit reached',
  tpm_limited: 'token rate limit reached',
  throttled: 'the fleet is overloaded and this user or app is over its share; retry later',
  queue_full: 'too many requests are waiting',
  quota_exceeded: 'insufficient quota',
  duplicate: 'duplicate request id',
  context_too_long: 'the prompt does not fit the context of any replica serving this model',
  exceeds_limit: 'this request alone needs more tokens than its token limit allows per window',
  over_deadline:
    "the fleet is overloaded: the requests ahead would keep this one waiting past its SLO class's queue deadline; retry after the time given",
};

/** The client error for an admission rejection; 429s carry `Retry-After` (at least one second). */
export function rejectionError(
  code: RejectCode,
  retryAfterMs: number,
  key: string,
  sizes?: { readonly needed?: number | undefined; readonly limit?: number | undefined },
): ApiError {
  const kind = REJECT[code];
  const retryAfterS =
    kind === 'CONTEXT_TOO_LONG' || kind === 'EXCEEDS_LIMIT'
      ? undefined
      : Math.max(1, Math.ceil(retryAfterMs / 1000));
  // The window key names the limit (`rpm:tenant:acme`); it holds only config ids and safe header values.
  const why =
    code === 'exceeds_limit' && sizes?.needed !== undefined && sizes.limit !== undefined
      ? `: about ${sizes.needed} tokens (prompt estimate and output cap) against a limit of ${sizes.limit}; shorten the prompt, tools or max_tokens`
      : '';
  const message =
    code === 'quota_exceeded'
      ? quotaMessage(key, retryAfterMs)
      : code === 'exceeds_limit' && key.startsWith('quota:')
        ? overBudgetMessage(key, sizes)
        : `${REJECT_MESSAGE[code]} (${key})${why}`;
  return new ApiError(kind, message, retryAfterS === undefined ? {} : { retryAfterS });
}

/** What a request larger than a whole budget is told: it can never fit, whatever the wait. */
function overBudgetMessage(
  key: string,
  sizes: { readonly needed?: number | undefined; readonly limit?: number | undefined } | undefined,
): string {
  const [, scope, window, kind] = key.split(':');
  const whose = scope === 'key' ? "this API key's" : "your organization's";
  const period = window === 'month' ? 'monthly' : 'daily';
  const amount = (n: number | undefined): string =>
    kind === 'spend' ? `${Number((n ?? 0).toPrecision(4))} (spend)` : `${n ?? 0} tokens`;
  return `this request alone needs about ${amount(sizes?.needed)} (prompt estimate and output cap), more than ${whose} whole ${period} budget of ${amount(sizes?.limit)} (${key}); it can never fit: lower max_tokens or shorten the prompt`;
}

/**
 * What a `quota_exceeded` refusal tells the client: which of its own budgets (`quota:<scope>:
 * <window>:<kind>`, always the caller's key or tenant) is used up and when its window resets.
 */
function quotaMessage(key: string, retryAfterMs: number): string {
  const [, scope, window, kind] = key.split(':');
  const whose = scope === 'key' ? "this API key's" : "your organization's";
  const period = window === 'month' ? 'monthly' : 'daily';
  const what = kind === 'spend' ? 'spend' : 'token';
  const hours = Math.max(1, Math.ceil(retryAfterMs / 3_600_000));
  return `You exceeded your current quota: ${whose} ${period} ${what} budget is used up (${key}); it resets in about ${hours} h (UTC ${window === 'month' ? 'month' : 'day'} end)`;
}

/** The client error for a failed engine call: its 4xx passed on as a 400, timeouts 504, the rest 502. */
export function engineApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof EngineHttpError) {
    if (err.status >= 400 && err.status < 500 && err.status !== 429)
      return new ApiError('INVALID_REQUEST', `the engine rejected the request: ${err.engineMessage}`, {
        cause: err,
      });
    return new ApiError('ENGINE_ERROR', `the engine answered ${err.status}`, { cause: err });
  }
  if (err instanceof EngineTimeoutError)
    return new ApiError('ENGINE_TIMEOUT', `the engine did not answer in time (${err.phase})`, { cause: err });
  if (err instanceof EngineError)
    return new ApiError('ENGINE_ERROR', 'the engine failed while serving the request', { cause: err });
  return new ApiError('INTERNAL', 'internal error', { cause: err });
}

/**
 * Whether a failed engine call is worth sending to another replica: the engine could not be
 * reached (refused, no route, connect timeout), dropped the connection before answering, or
 * answered 5xx, or stayed silent past the pool's `engineTimeouts` — a fault of that replica, not
 * of the request (a timed-out call is aborted, which makes vLLM drop the request). A 4xx is the
 * request's own fault.
 */
export function isReplicaFailure(err: unknown): boolean {
  if (err instanceof EngineUnreachableError || err instanceof EngineConnectionLostError) return true;
  // Connect, first-byte and idle timeouts alike: an engine that stops answering is hung.
  if (err instanceof EngineTimeoutError) return true;
  return err instanceof EngineHttpError && err.status >= 500;
}

/**
 * Whether a replica failure says its engine is down (refused, reset, unreachable), as opposed to an
 * engine that answers but failed this call (5xx): the first keeps the replica out for `suspectMs`,
 * the second only until its next health probe.
 */
export function isEngineDown(err: unknown): boolean {
  if (err instanceof EngineUnreachableError || err instanceof EngineConnectionLostError) return true;
  return err instanceof EngineTimeoutError;
}

/** A 400 naming the first offending body field of a failed validation. */
export function validationError(err: ZodError): ApiError {
  const issue = err.issues[0];
  const path = issue ? formatPath(issue.path) : '';
  const more = err.issues.length > 1 ? ` (and ${err.issues.length - 1} more)` : '';
  return new ApiError('INVALID_REQUEST', `${path || 'body'}: ${issue?.message ?? 'invalid'}${more}`, {
    ...(path ? { param: path } : {}),
  });
}

interface HttpishError {
  readonly code?: unknown;
  readonly statusCode?: unknown;
}

/**
 * Maps anything thrown while handling a request to a client error: our own `ApiError`s, zod
 * failures, and fastify's parser and limit errors (413 body too large, 415 media type, 400 bad
 * JSON). Everything else is a 500 whose body says only "internal error".
 */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof ZodError) return validationError(err);
  const e = (typeof err === 'object' && err !== null ? err : {}) as HttpishError;
  const code = typeof e.code === 'string' ? e.code : '';
  const status = typeof e.statusCode === 'number' ? e.statusCode : 500;
  switch (code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('BODY_TOO_LARGE', 'request body is too large', { cause: err });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError('UNSUPPORTED_MEDIA_TYPE', 'send the body as application/json', { cause: err });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('INVALID_JSON', 'request body is empty', { cause: err });
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new ApiError('INVALID_JSON', 'request body is not valid JSON', { cause: err });
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new ApiError('INVALID_REQUEST', 'content-length does not match the body', { cause: err });
    default:
      break;
  }
  if (err instanceof SyntaxError && status === 400)
    return new ApiError('INVALID_JSON', 'request body is not valid JSON', { cause: err });
  if (status === 413) return new ApiError('BODY_TOO_LARGE', 'request body is too large', { cause: err });
  if (status === 415)
    return new ApiError('UNSUPPORTED_MEDIA_TYPE', 'send the body as application/json', { cause: err });
  if (status >= 400 && status < 500)
    return new ApiError('INVALID_REQUEST', 'malformed request', { cause: err });
  return new ApiError('INTERNAL', 'internal error', { cause: err });
}
