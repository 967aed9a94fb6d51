import { FairwayError } from '@fairway/core';

/** Stable error codes of the engine package. */
export const EngineErrorCode = {
  /** The engine could not be reached: connection refused, reset before a response, DNS failure. */
  UNREACHABLE: 'FAIRWAY_ENGINE_UNREACHABLE',
  /** A connect, headers or body-idle timeout expired, or the engine stopped answering altogether. */
  TIMEOUT: 'FAIRWAY_ENGINE_TIMEOUT',
  /** The engine answered with a non-2xx status; the error body it sent is kept. */
  HTTP_STATUS: 'FAIRWAY_ENGINE_HTTP_STATUS',
  /** The engine answered 2xx with something that is not what the vLLM API promises. */
  BAD_RESPONSE: 'FAIRWAY_ENGINE_BAD_RESPONSE',
  /** The connection broke, or the stream ended before `data: [DONE]`, after the response started. */
  CONNECTION_LOST: 'FAIRWAY_ENGINE_CONNECTION_LOST',
  /** The caller aborted the request (its `AbortSignal` fired or it called `abort()`). */
  ABORTED: 'FAIRWAY_ENGINE_ABORTED',
  /** A `/metrics` page is not Prometheus text or lacks a metric vLLM always exports. */
  METRICS_INVALID: 'FAIRWAY_ENGINE_METRICS_INVALID',
  /** A profiling run could not measure enough to fit a performance model. */
  PROFILE_FAILED: 'FAIRWAY_ENGINE_PROFILE_FAILED',
  /** A `tokenizer.json` could not be read or is not a tokenizer Tokenizers.js can build. */
  TOKENIZER_INVALID: 'FAIRWAY_ENGINE_TOKENIZER_INVALID',
} as const;
export type EngineErrorCode = (typeof EngineErrorCode)[keyof typeof EngineErrorCode];

/** Base class of every error the engine client raises; `url` is the engine's base URL. */
export class EngineError extends FairwayError {
  override readonly name: string = 'EngineError';
  readonly url: string;
  /** Method and path of the failed call, e.g. `POST /v1/chat/completions`. */
  readonly operation: string;

  constructor(
    code: EngineErrorCode,
    url: string,
    operation: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(code, `${operation} on ${url}: ${message}`, options);
    this.url = url;
    this.operation = operation;
  }
}

/** The engine could not be reached (nothing listens, the host is down, the socket reset at once). */
export class EngineUnreachableError extends EngineError {
  override readonly name = 'EngineUnreachableError';

  constructor(url: string, operation: string, options?: { cause?: unknown }) {
    const why = options?.cause instanceof Error ? options.cause.message : 'cannot connect';
    super(EngineErrorCode.UNREACHABLE, url, operation, `engine unreachable (${why})`, options);
  }
}

/**
 * Which timeout expired; `hung`: the engine answered none of the health checks made while the call
 * waited, each bounded by `timeoutMs` (the engine stopped answering altogether); `stalled`: it
 * answers, but its counters showed no progress for `timeoutMs` with requests running.
 */
export type EngineTimeoutPhase = 'connect' | 'headers' | 'body' | 'hung' | 'stalled';

/**
 * A timeout expired: `phase` says whether connecting, waiting for headers, waiting for body bytes,
 * or whether the engine stopped answering or making progress altogether.
 */
export class EngineTimeoutError extends EngineError {
  override readonly name = 'EngineTimeoutError';
  readonly phase: EngineTimeoutPhase;
  /** The limit that expired, ms. */
  readonly timeoutMs: number;

  constructor(
    url: string,
    operation: string,
    phase: EngineTimeoutPhase,
    timeoutMs: number,
    options?: { cause?: unknown },
  ) {
    super(
      EngineErrorCode.TIMEOUT,
      url,
      operation,
      phase === 'hung'
        ? `the engine stopped answering (no health check answered within ${timeoutMs} ms)`
        : phase === 'stalled'
          ? `the engine made no progress for ${timeoutMs} ms with requests running`
          : `${phase} timeout after ${timeoutMs} ms`,
      options,
    );
    this.phase = phase;
    this.timeoutMs = timeoutMs;
  }
}

/** The engine answered with a non-2xx status. `body` is its error body, `engineMessage` the message in it. */
export class EngineHttpError extends EngineError {
  override readonly name = 'EngineHttpError';
  readonly status: number;
  /** The raw body, as text (vLLM sends `{"error": {...}}` or, older, `{"object":"error",...}`). */
  readonly body: string;
  /** The `message` field of the error body, or the body itself when it is not JSON. */
  readonly engineMessage: string;
  /** The `type` field of the error body (e.g. `NotFoundError`), when present. */
  readonly engineType: string | undefined;

  constructor(
    url: string,
    operation: string,
    status: number,
    body: string,
    engineMessage: string,
    engineType: string | undefined,
  ) {
    super(EngineErrorCode.HTTP_STATUS, url, operation, `HTTP ${status}: ${engineMessage}`);
    this.status = status;
    this.body = body;
    this.engineMessage = engineMessage;
    this.engineType = engineType;
  }
}

/** The engine answered 2xx with a body that does not match the vLLM API. */
export class EngineBadResponseError extends EngineError {
  override readonly name = 'EngineBadResponseError';

  constructor(url: string, operation: string, message: string, options?: { cause?: unknown }) {
    super(EngineErrorCode.BAD_RESPONSE, url, operation, `bad response: ${message}`, options);
  }
}

/** The connection broke after the response started, or a stream ended without `data: [DONE]`. */
export class EngineConnectionLostError extends EngineError {
  override readonly name = 'EngineConnectionLostError';

  constructor(url: string, operation: string, message: string, options?: { cause?: unknown }) {
    super(EngineErrorCode.CONNECTION_LOST, url, operation, `connection lost: ${message}`, options);
  }
}

/** The caller aborted the request. */
export class EngineAbortedError extends EngineError {
  override readonly name = 'EngineAbortedError';

  constructor(url: string, operation: string, options?: { cause?: unknown }) {
    super(EngineErrorCode.ABORTED, url, operation, 'aborted by the caller', options);
  }
}

/** A `/metrics` page could not be read as vLLM metrics; `metric` names the missing or bad one. */
export class MetricsFormatError extends FairwayError {
  override readonly name = 'MetricsFormatError';
  readonly metric: string | undefined;

  constructor(message: string, metric?: string, options?: { cause?: unknown }) {
    super(EngineErrorCode.METRICS_INVALID, message, options);
    this.metric = metric;
  }
}

/** `fairway profile` could not measure enough of an engine to fit its performance model. */
export class EngineProfileError extends FairwayError {
  override readonly name = 'EngineProfileError';
  readonly url: string;

  constructor(url: string, message: string, options?: { cause?: unknown }) {
    super(EngineErrorCode.PROFILE_FAILED, `profiling ${url}: ${message}`, options);
    this.url = url;
  }
}

/** A model's tokenizer files could not be loaded; `path` is the `tokenizer.json` given. */
export class TokenizerLoadError extends FairwayError {
  override readonly name = 'TokenizerLoadError';
  readonly path: string;

  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(EngineErrorCode.TOKENIZER_INVALID, `cannot load tokenizer ${path}: ${message}`, options);
    this.path = path;
  }
}
