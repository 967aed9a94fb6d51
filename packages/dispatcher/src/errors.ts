import { FairwayError } from '@fairway/core';

/**
 * The dispatcher's error catalogue: every error a client can see, with a stable code, its HTTP
 * status and OpenAI's error `type`. Bodies follow OpenAI's shape
 * `{ error: { message, type, param, code } }`; no stack trace ever reaches a client.
 */
export const ApiErrors = {
  INVALID_REQUEST: { status: 400, type: 'invalid_request_error', code: 'invalid_request' },
  INVALID_JSON: { status: 400, type: 'invalid_request_error', code: 'invalid_json' },
  INVALID_HEADER: { status: 400, type: 'invalid_request_error', code: 'invalid_header' },
  CONTEXT_TOO_LONG: { status: 400, type: 'invalid_request_error', code: 'context_length_exceeded' },
  EXCEEDS_LIMIT: { status: 400, type: 'invalid_request_error', code: 'tokens_exceed_limit' },
  MISSING_API_KEY: { status: 401, type: 'authentication_error', code: 'missing_api_key' },
  INVALID_API_KEY: { status: 401, type: 'authentication_error', code: 'invalid_api_key' },
  FORBIDDEN: { status: 403, type: 'permission_error', code: 'forbidden' },
  ADMIN_API_DISABLED: { status: 403, type: 'permission_error', code: 'admin_api_disabled' },
  ADMIN_WRITES_DISABLED: { status: 403, type: 'permission_error', code: 'admin_writes_disabled' },
  MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error', code: 'model_not_found' },
  ROUTE_NOT_FOUND: { status: 404, type: 'invalid_request_error', code: 'not_found' },
  RESOURCE_NOT_FOUND: { status: 404, type: 'invalid_request_error', code: 'not_found' },
  METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error', code: 'method_not_allowed' },
  NOT_FOUND: { status: 404, type: 'invalid_request_error', code: 'not_found' },
  BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error', code: 'request_too_large' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, type: 'invalid_request_error', code: 'unsupported_media_type' },
  HEADERS_TOO_LARGE: { status: 431, type: 'invalid_request_error', code: 'request_header_fields_too_large' },
  CLIENT_TIMEOUT: { status: 408, type: 'invalid_request_error', code: 'request_timeout' },
  RPM_LIMITED: { status: 429, type: 'requests', code: 'rate_limit_exceeded' },
  TPM_LIMITED: { status: 429, type: 'tokens', code: 'rate_limit_exceeded' },
  THROTTLED: { status: 429, type: 'requests', code: 'throttled_overloaded' },
  QUEUE_FULL: { status: 429, type: 'requests', code: 'queue_full' },
  /** The queue ahead would hold the request past its SLO class's queue deadline. */
  OVER_DEADLINE: { status: 429, type: 'requests', code: 'queue_deadline_exceeded' },
  /** A token or spend budget is used up for its window (OpenAI's name for it). */
  QUOTA_EXCEEDED: { status: 429, type: 'insufficient_quota', code: 'insufficient_quota' },
  /** A tenant's Files and Batch storage (bytes, files, open batches) is used up. */
  STORAGE_QUOTA_EXCEEDED: { status: 429, type: 'insufficient_quota', code: 'storage_quota_exceeded' },
  NO_REPLICA: { status: 503, type: 'service_unavailable', code: 'no_replica' },
  NOT_READY: { status: 503, type: 'service_unavailable', code: 'not_ready' },
  NOT_IMPLEMENTED: { status: 501, type: 'invalid_request_error', code: 'not_implemented' },
  /** The store's memory is nearly full: new files and batches wait, chat keeps its room. */
  INSUFFICIENT_STORAGE: { status: 507, type: 'server_error', code: 'insufficient_storage' },
  ENGINE_ERROR: { status: 502, type: 'server_error', code: 'engine_error' },
  QUEUE_TIMEOUT: { status: 504, type: 'timeout', code: 'queue_timeout' },
  ENGINE_TIMEOUT: { status: 504, type: 'timeout', code: 'engine_timeout' },
  INTERNAL: { status: 500, type: 'server_error', code: 'internal_error' },
} as const;
export type ApiErrorName = keyof typeof ApiErrors;

/** The JSON body of every error response. */
export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

/** An error meant for the client: catalogue entry, message, the offending parameter, retry hint. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  readonly kind: ApiErrorName;
  readonly status: number;
  readonly param: string | null;
  /** Seconds until a retry may succeed; sent as `Retry-After` (429, 503). */
  readonly retryAfterS: number | undefined;

  constructor(
    kind: ApiErrorName,
    message: string,
    options: { param?: string; retryAfterS?: number; cause?: unknown } = {},
  ) {
    // An answer to the client needs no stack (a cause keeps its own), and capturing one is a
    // good part of what refusing a request costs the dispatcher.
    const depth = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message, { cause: options.cause });
    Error.stackTraceLimit = depth;
    this.kind = kind;
    this.status = ApiErrors[kind].status;
    this.param = options.param ?? null;
    this.retryAfterS = options.retryAfterS;
  }

  /** The OpenAI-shaped body for this error. */
  body(): OpenAIErrorBody {
    const entry = ApiErrors[this.kind];
    return { error: { message: this.message, type: entry.type, param: this.param, code: entry.code } };
  }
}

/** Stable codes of the dispatcher's own (non-client) failures. */
export const DispatcherErrorCode = {
  /** The store (Redis) could not be reached at start-up. */
  STORE_UNREACHABLE: 'FAIRWAY_DISPATCHER_STORE_UNREACHABLE',
  /** The bus (NATS) could not be reached at start-up. */
  BUS_UNREACHABLE: 'FAIRWAY_DISPATCHER_BUS_UNREACHABLE',
  /** An operator key file (public or private) or the admin token file is missing or holds no usable secret. */
  OPERATOR_KEY_INVALID: 'FAIRWAY_DISPATCHER_OPERATOR_KEY_INVALID',
  /** The operator listener (metrics) cannot listen where it is configured (port in use, foreign host). */
  OPERATOR_PORT_INVALID: 'FAIRWAY_DISPATCHER_OPERATOR_PORT_INVALID',
  /** The tracing exporter is configured with a protocol fairway does not speak (`OTEL_EXPORTER_OTLP_PROTOCOL`). */
  TRACING_INVALID: 'FAIRWAY_DISPATCHER_TRACING_INVALID',
  /** A request's lifecycle was asked for a transition its state does not allow (a programming error). */
  ILLEGAL_TRANSITION: 'FAIRWAY_DISPATCHER_ILLEGAL_TRANSITION',
} as const;
export type DispatcherErrorCode = (typeof DispatcherErrorCode)[keyof typeof DispatcherErrorCode];

/** A dispatcher failure that is not a client's fault, with the endpoint involved and a cause. */
export class DispatcherError extends FairwayError {
  override readonly name = 'DispatcherError';
  /** Where the dispatcher tried to connect, e.g. `redis://127.0.0.1:6379`. */
  readonly endpoint: string;

  constructor(code: DispatcherErrorCode, endpoint: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.endpoint = endpoint;
  }
}

/**
 * A request's lifecycle was asked to move where its state does not lead (settle twice, stream
 * while queued, …): a programming error, thrown before the store is touched, so nothing is settled
 * twice.
 */
export class LifecycleError extends FairwayError {
  override readonly name = 'LifecycleError';
  readonly requestId: string;
  /** The state the request was in. */
  readonly from: string;
  /** The state it was asked to move to. */
  readonly to: string;

  constructor(requestId: string, from: string, to: string) {
    super(
      DispatcherErrorCode.ILLEGAL_TRANSITION,
      `request ${requestId}: no transition from ${from} to ${to}`,
    );
    this.requestId = requestId;
    this.from = from;
    this.to = to;
  }
}
