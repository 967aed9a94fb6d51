import type { IncomingHttpHeaders } from 'node:http';
import type { VllmMetrics } from './metrics-parser.ts';
import type { EngineUsage, SseDataLine } from './sse.ts';

/** Which OpenAI endpoint a generation goes to: `/v1/chat/completions` or `/v1/completions`. */
export type CompletionEndpoint = 'chat' | 'completions';

/** A JSON request body as the client sent it; fields the engine does not know are passed through. */
export type CompletionBody = Readonly<Record<string, unknown>>;

/**
 * What aborts a call: an `AbortSignal`, or any object with its `aborted`, `reason` and abort
 * listeners (undici takes either). A dispatcher passes a plain object of its own per request:
 * Node promotes every `AbortSignal` to the old generation.
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason?: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** Per-call options of a generation. */
export interface GenerateOptions {
  /** Aborting closes the connection, which makes vLLM abort the request and free its KV blocks. */
  readonly signal?: AbortSignalLike;
  /** Extra request headers (e.g. `x-request-id`). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Overrides the client's headers timeout for this call, ms. */
  readonly headersTimeoutMs?: number;
  /** Overrides the client's body idle timeout for this call, ms (0 disables it). */
  readonly bodyTimeoutMs?: number;
}

/** Options of a streamed generation. */
export interface StreamOptions extends GenerateOptions {
  /**
   * Ask vLLM for `usage` on every chunk (`stream_options.continuous_usage_stats`), so streamed
   * tokens are counted by the engine itself. @default true
   */
  readonly continuousUsage?: boolean;
  /** Called for every `data:` line as the bytes pass (the scanner's view, no JSON parsing). */
  readonly onLine?: (line: SseDataLine) => void;
}

/** A non-streamed completion. */
export interface CompletionResult {
  readonly status: number;
  /** The body's bytes as the engine sent them, for a proxy to forward without re-serialising. */
  readonly bytes: Uint8Array;
  /** The parsed body. */
  readonly body: Readonly<Record<string, unknown>>;
  readonly usage: EngineUsage;
  /** `finish_reason` of the first choice. */
  readonly finishReason: string | undefined;
}

/** A `POST /v1/embeddings` answer, as the engine sent it. */
export interface EmbeddingResult {
  readonly status: number;
  /** The body's bytes as the engine sent them, for a proxy to forward without re-serialising. */
  readonly bytes: Uint8Array;
  /** The parsed body. */
  readonly body: Readonly<Record<string, unknown>>;
  /** `usage.prompt_tokens`: every input's tokens (an embedding has no output). */
  readonly promptTokens: number;
}

/**
 * A streamed completion. Iterating yields the engine's raw SSE bytes, chunk by chunk as they
 * arrive, while a scanner keeps the counts below up to date. Iteration throws a typed
 * `EngineError` when the connection breaks, the stream ends without `[DONE]` or a timeout expires.
 */
export interface EngineStream extends AsyncIterable<Uint8Array> {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** Output tokens so far: the engine's `usage` when it sent one, else content chunks. */
  readonly completionTokens: number;
  /** The latest `usage` the engine sent. */
  readonly usage: EngineUsage | undefined;
  readonly finishReason: string | undefined;
  /** True once `data: [DONE]` was read. */
  readonly done: boolean;
  /** Closes the connection (vLLM aborts the request); a running iteration ends with `EngineAbortedError`. */
  abort(): void;
}

/** One entry of `GET /v1/models`: the base model or a loaded LoRA adapter. */
export interface EngineModelCard {
  readonly id: string;
  /** Path or name the model was loaded from. */
  readonly root: string | undefined;
  /** For a LoRA adapter, the base model it applies to. */
  readonly parent: string | undefined;
  readonly maxModelLen: number | undefined;
}

/**
 * One replica's inference engine, as the dispatcher and the node agent use it: generation (with
 * raw-byte streaming for proxies), introspection and the serving operations QLM section 5 needs
 * (sleep/wake for model swaps, LoRA load/unload). Implemented for real vLLM by `VllmClient`.
 */
export interface Engine {
  /** Base URL, e.g. `http://10.0.0.5:8000`. */
  readonly url: string;
  /** A non-streamed chat or text completion. */
  complete(
    endpoint: CompletionEndpoint,
    body: CompletionBody,
    options?: GenerateOptions,
  ): Promise<CompletionResult>;
  /**
   * A streamed completion; resolves once the response headers arrived (no body bytes are
   * buffered). `stream_options.include_usage` is always injected.
   */
  stream(endpoint: CompletionEndpoint, body: CompletionBody, options?: StreamOptions): Promise<EngineStream>;
  /**
   * A non-streamed `POST /v1/responses` (OpenAI's Responses API as vLLM serves it); `usage` is read
   * from the body's `usage.input_tokens` and `usage.output_tokens`, `finishReason` is its `status`.
   */
  respond(body: Readonly<Record<string, unknown>>, options?: GenerateOptions): Promise<CompletionResult>;
  /**
   * A streamed `POST /v1/responses`: typed events, counted by a `ResponsesScanner` (usage from
   * `response.completed`); resolves once the response headers arrived.
   */
  streamResponse(body: Readonly<Record<string, unknown>>, options?: GenerateOptions): Promise<EngineStream>;
  /** `POST /v1/embeddings` (an embedding model's pooling pass). */
  embed(body: Readonly<Record<string, unknown>>, options?: GenerateOptions): Promise<EmbeddingResult>;
  /**
   * `POST /tokenize`: the token ids the engine would prefill for a chat body (`messages`, rendered
   * with its chat template) or a completion body (`prompt`).
   */
  tokenize(body: Readonly<Record<string, unknown>>, options?: GenerateOptions): Promise<readonly number[]>;
  /** `GET /v1/models`. */
  models(): Promise<readonly EngineModelCard[]>;
  /** `GET /health`: resolves when healthy, throws an `EngineError` otherwise. */
  health(): Promise<void>;
  /** `GET /metrics`, parsed. */
  metrics(): Promise<VllmMetrics>;
  /** `POST /sleep?level=`: level 1 offloads weights to CPU, level 2 discards them (and adapters). */
  sleep(level: 1 | 2): Promise<void>;
  /** `POST /wake_up`. */
  wakeUp(): Promise<void>;
  /** `GET /is_sleeping`. */
  isSleeping(): Promise<boolean>;
  /** `POST /v1/load_lora_adapter`. */
  loadLoraAdapter(name: string, path: string): Promise<void>;
  /** `POST /v1/unload_lora_adapter`. */
  unloadLoraAdapter(name: string): Promise<void>;
  /** Closes pooled connections. */
  close(): Promise<void>;
}
