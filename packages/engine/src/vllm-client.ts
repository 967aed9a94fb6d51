import type { IncomingHttpHeaders } from 'node:http';
import { parseWith } from '@fairway/core';
import { type Dispatcher, Pool } from 'undici';
import { z } from 'zod';
import type {
  AbortSignalLike,
  CompletionBody,
  CompletionEndpoint,
  CompletionResult,
  EmbeddingResult,
  Engine,
  EngineModelCard,
  EngineStream,
  GenerateOptions,
  StreamOptions,
} from './engine.ts';
import {
  EngineAbortedError,
  EngineBadResponseError,
  EngineConnectionLostError,
  type EngineError,
  EngineHttpError,
  EngineTimeoutError,
  EngineUnreachableError,
  MetricsFormatError,
} from './errors.ts';
import { parseVllmMetrics, type VllmMetrics } from './metrics-parser.ts';
import { ResponsesScanner } from './responses-scanner.ts';
import { cachedTokensOf, type EngineUsage, SseScanner } from './sse.ts';

const optionsSchema = z
  .object({
    url: z.url({ message: 'must be an http(s) URL' }),
    apiKey: z.string().min(1).optional(),
    modelName: z.string().min(1).optional(),
    connections: z.number().int().positive().default(4096),
    connectTimeoutMs: z.number().int().positive().default(2_000),
    headersTimeoutMs: z.number().int().nonnegative().default(600_000),
    bodyTimeoutMs: z.number().int().nonnegative().default(300_000),
    controlTimeoutMs: z.number().int().positive().default(5_000),
    keepAliveTimeoutMs: z.number().int().positive().default(4_000),
  })
  .strict();

/** Options of {@link VllmClient}. */
export interface VllmClientOptions {
  /** Base URL of the vLLM OpenAI server, e.g. `http://10.0.0.5:8000`. */
  readonly url: string;
  /** Sent as `Authorization: Bearer` when vLLM runs with `--api-key`. */
  readonly apiKey?: string;
  /** Served model name; `/metrics` series of other models are ignored. */
  readonly modelName?: string;
  /** Most keep-alive connections to the engine (one per concurrent stream). @default 4096 */
  readonly connections?: number;
  /** TCP connect timeout, ms. @default 2000 */
  readonly connectTimeoutMs?: number;
  /**
   * Time to wait for response headers of a generation, ms (undici enforces its headers and body
   * timeouts with about one second of granularity). vLLM sends streaming headers at once
   * but non-streamed headers only when the whole completion is done. @default 600000
   */
  readonly headersTimeoutMs?: number;
  /**
   * Longest silence between body bytes of a generation, ms; a request queued inside vLLM sends
   * nothing until it is scheduled. 0 disables it. @default 300000
   */
  readonly bodyTimeoutMs?: number;
  /** Headers and body timeout of control calls (health, metrics, models, sleep, LoRA), ms. @default 5000 */
  readonly controlTimeoutMs?: number;
  /** How long an idle pooled connection is kept, ms (uvicorn closes idle ones after 5 s). @default 4000 */
  readonly keepAliveTimeoutMs?: number;
}

const ENDPOINT_PATH: Record<CompletionEndpoint, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
};

const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'EADDRNOTAVAIL',
]);

function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { code?: unknown; errors?: unknown; cause?: unknown };
  if (typeof e.code === 'string') return e.code;
  // Happy-eyeballs connects fail with an AggregateError of per-address errors.
  if (Array.isArray(e.errors) && e.errors.length > 0) return errorCode(e.errors[0]);
  return undefined;
}

interface CallContext {
  readonly url: string;
  readonly operation: string;
  readonly connectTimeoutMs: number;
  readonly headersTimeoutMs: number;
  readonly bodyTimeoutMs: number;
  /** The caller's signal, if any; when fired, errors become EngineAbortedError. */
  readonly signal: AbortSignalLike | undefined;
  /** Set by `EngineStream.abort()`: errors after it are EngineAbortedError too. */
  streamAborted: boolean;
}

/** Maps an undici / socket failure to a typed engine error. `started`: response headers were received. */
function mapError(err: unknown, ctx: CallContext, started: boolean): EngineError {
  if (err instanceof EngineHttpError || err instanceof EngineBadResponseError) return err;
  const { url, operation } = ctx;
  if (ctx.signal?.aborted === true || ctx.streamAborted)
    return new EngineAbortedError(url, operation, { cause: err });
  const code = errorCode(err);
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
      return new EngineTimeoutError(url, operation, 'connect', ctx.connectTimeoutMs, { cause: err });
    case 'UND_ERR_HEADERS_TIMEOUT':
      return new EngineTimeoutError(url, operation, 'headers', ctx.headersTimeoutMs, { cause: err });
    case 'UND_ERR_BODY_TIMEOUT':
      return new EngineTimeoutError(url, operation, 'body', ctx.bodyTimeoutMs, { cause: err });
    case 'UND_ERR_ABORTED':
    case 'ABORT_ERR':
      return new EngineAbortedError(url, operation, { cause: err });
    default:
      break;
  }
  if (code !== undefined && UNREACHABLE_CODES.has(code))
    return new EngineUnreachableError(url, operation, { cause: err });
  const message = err instanceof Error ? err.message : String(err);
  if (!started && code === undefined) return new EngineUnreachableError(url, operation, { cause: err });
  return new EngineConnectionLostError(url, operation, message, { cause: err });
}

/** Reads vLLM's error body: `{"error": {message, type}}`, the older flat form, or FastAPI's `detail`. */
function describeErrorBody(text: string): { message: string; type: string | undefined } {
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === 'object' && parsed !== null) {
      const o = parsed as Record<string, unknown>;
      const inner =
        typeof o.error === 'object' && o.error !== null ? (o.error as Record<string, unknown>) : o;
      if (typeof inner.message === 'string') {
        return { message: inner.message, type: typeof inner.type === 'string' ? inner.type : undefined };
      }
      if (o.detail !== undefined) {
        return {
          message: typeof o.detail === 'string' ? o.detail : JSON.stringify(o.detail),
          type: undefined,
        };
      }
    }
  } catch {
    // Not JSON: the text itself is the message.
  }
  return { message: text.trim().slice(0, 500) || '(empty body)', type: undefined };
}

const isCount = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0;

/**
 * What a non-streamed completion body must hold — `choices` and integer `usage` counts — read
 * without a schema: this runs once per request on the hot path, where zod's parse (copying the
 * whole body) was 1% of a dispatcher's CPU (bench:overhead --cpu-prof). Usage counts are
 * non-negative integers, `total_tokens` optional. Returns the path of the first missing or
 * malformed field instead when there is one.
 */
function readCompletionBody(
  parsed: unknown,
): { usage: CompletionResult['usage']; finishReason: string | undefined } | string {
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return 'fields';
  const o = parsed as { choices?: unknown; usage?: unknown };
  if (!Array.isArray(o.choices)) return 'choices';
  const first: unknown = o.choices[0];
  if (first !== undefined && (typeof first !== 'object' || first === null)) return 'choices.0';
  const reason = (first as { finish_reason?: unknown } | undefined)?.finish_reason;
  if (reason !== undefined && reason !== null && typeof reason !== 'string') return 'choices.0.finish_reason';
  const u = o.usage;
  if (typeof u !== 'object' || u === null) return 'usage';
  const {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: total,
  } = u as Record<string, unknown>;
  if (!isCount(prompt)) return 'usage.prompt_tokens';
  if (!isCount(completion)) return 'usage.completion_tokens';
  if (total !== undefined && !isCount(total)) return 'usage.total_tokens';
  const cached = cachedTokensOf((u as Record<string, unknown>).prompt_tokens_details);
  return {
    usage: {
      promptTokens: prompt,
      completionTokens: completion,
      totalTokens: (total as number | undefined) ?? prompt + completion,
      ...(cached === undefined ? {} : { cachedTokens: cached }),
    },
    finishReason: reason ?? undefined,
  };
}

const modelsSchema = z.looseObject({
  data: z.array(
    z.looseObject({
      id: z.string(),
      root: z.string().nullish(),
      parent: z.string().nullish(),
      max_model_len: z.number().int().nullish(),
    }),
  ),
});

const isSleepingSchema = z.looseObject({ is_sleeping: z.boolean() });

/** The streamed response: raw bytes out, counts through the scanner. */
class VllmStream implements EngineStream {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly #body: Dispatcher.ResponseData['body'];
  readonly #scanner: SseScanner | ResponsesScanner;
  readonly #ctx: CallContext;
  #iterated = false;

  constructor(res: Dispatcher.ResponseData, scanner: SseScanner | ResponsesScanner, ctx: CallContext) {
    this.status = res.statusCode;
    this.headers = res.headers;
    this.#body = res.body;
    this.#scanner = scanner;
    this.#ctx = ctx;
  }

  get completionTokens(): number {
    return this.#scanner.completionTokens;
  }

  get usage(): EngineUsage | undefined {
    return this.#scanner.usage;
  }

  get finishReason(): string | undefined {
    return this.#scanner.finishReason;
  }

  get done(): boolean {
    return this.#scanner.done;
  }

  abort(): void {
    // Destroying the body closes the connection (undici), which is what makes vLLM stop.
    this.#ctx.streamAborted = true;
    this.#body.destroy();
  }

  [Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    if (this.#iterated) throw new TypeError('an engine stream can be iterated only once');
    this.#iterated = true;
    return this.#iterate();
  }

  async *#iterate(): AsyncGenerator<Uint8Array> {
    try {
      try {
        for await (const chunk of this.#body as AsyncIterable<Buffer>) {
          this.#scanner.push(chunk);
          yield chunk;
        }
      } catch (err) {
        throw mapError(err, this.#ctx, true);
      }
      if (!this.#scanner.done) {
        throw new EngineConnectionLostError(
          this.#ctx.url,
          this.#ctx.operation,
          this.#scanner instanceof ResponsesScanner
            ? 'stream ended before response.completed'
            : 'stream ended before data: [DONE]',
        );
      }
    } finally {
      // Breaking out early, or failing, must close the connection so vLLM aborts the request.
      if (!this.#scanner.done && !this.#body.destroyed) this.#body.destroy();
    }
  }
}

/**
 * Client for one vLLM OpenAI-compatible server (real vLLM or `fairway engine-sim`), over a pool of
 * keep-alive connections. Every failure surfaces as a typed `EngineError`.
 */
export class VllmClient implements Engine {
  readonly url: string;
  readonly #options: z.infer<typeof optionsSchema>;
  readonly #pool: Pool;
  readonly #auth: Record<string, string>;

  constructor(options: VllmClientOptions) {
    this.#options = parseWith(optionsSchema, options, 'VllmClient options');
    this.url = this.#options.url.replace(/\/+$/, '');
    this.#pool = new Pool(new URL(this.url).origin, {
      connections: this.#options.connections,
      connect: { timeout: this.#options.connectTimeoutMs },
      keepAliveTimeout: this.#options.keepAliveTimeoutMs,
      headersTimeout: this.#options.headersTimeoutMs,
      bodyTimeout: this.#options.bodyTimeoutMs,
    });
    this.#auth = this.#options.apiKey ? { authorization: `Bearer ${this.#options.apiKey}` } : {};
  }

  async complete(
    endpoint: CompletionEndpoint,
    body: CompletionBody,
    options: GenerateOptions = {},
  ): Promise<CompletionResult> {
    const path = ENDPOINT_PATH[endpoint];
    const payload = JSON.stringify({ ...body, stream: false });
    const { res, ctx, bytes, parsed } = await this.#postJson(path, payload, options);
    const read = readCompletionBody(parsed);
    if (typeof read === 'string')
      throw new EngineBadResponseError(this.url, ctx.operation, `body lacks ${read}`);
    return {
      status: res.statusCode,
      bytes,
      body: parsed as Record<string, unknown>,
      usage: read.usage,
      finishReason: read.finishReason,
    };
  }

  async respond(
    body: Readonly<Record<string, unknown>>,
    options: GenerateOptions = {},
  ): Promise<CompletionResult> {
    const payload = JSON.stringify({ ...body, stream: false });
    const { res, ctx, bytes, parsed } = await this.#postJson('/v1/responses', payload, options);
    const o = parsed as {
      status?: unknown;
      usage?: { input_tokens?: unknown; output_tokens?: unknown; input_tokens_details?: unknown } | null;
    };
    const input = o.usage?.input_tokens;
    const output = o.usage?.output_tokens;
    if (!isCount(input))
      throw new EngineBadResponseError(this.url, ctx.operation, 'body lacks usage.input_tokens');
    if (!isCount(output))
      throw new EngineBadResponseError(this.url, ctx.operation, 'body lacks usage.output_tokens');
    const cached = cachedTokensOf(o.usage?.input_tokens_details);
    return {
      status: res.statusCode,
      bytes,
      body: parsed as Record<string, unknown>,
      usage: {
        promptTokens: input,
        completionTokens: output,
        totalTokens: input + output,
        ...(cached === undefined ? {} : { cachedTokens: cached }),
      },
      finishReason: typeof o.status === 'string' ? o.status : undefined,
    };
  }

  async streamResponse(
    body: Readonly<Record<string, unknown>>,
    options: GenerateOptions = {},
  ): Promise<EngineStream> {
    const payload = JSON.stringify({ ...body, stream: true });
    return this.#openStream('/v1/responses', payload, options, new ResponsesScanner());
  }

  async embed(
    body: Readonly<Record<string, unknown>>,
    options: GenerateOptions = {},
  ): Promise<EmbeddingResult> {
    const { res, ctx, bytes, parsed } = await this.#postJson('/v1/embeddings', JSON.stringify(body), options);
    const o = parsed as { data?: unknown; usage?: { prompt_tokens?: unknown } };
    if (!Array.isArray(o.data)) throw new EngineBadResponseError(this.url, ctx.operation, 'body lacks data');
    const prompt = o.usage?.prompt_tokens;
    if (typeof prompt !== 'number' || !Number.isSafeInteger(prompt) || prompt < 0)
      throw new EngineBadResponseError(this.url, ctx.operation, 'body lacks usage.prompt_tokens');
    return { status: res.statusCode, bytes, body: parsed as Record<string, unknown>, promptTokens: prompt };
  }

  async tokenize(
    body: Readonly<Record<string, unknown>>,
    options: GenerateOptions = {},
  ): Promise<readonly number[]> {
    const { ctx, parsed } = await this.#postJson('/tokenize', JSON.stringify(body), options);
    const tokens = (parsed as { tokens?: unknown }).tokens;
    if (!Array.isArray(tokens) || !tokens.every((t) => Number.isSafeInteger(t) && t >= 0))
      throw new EngineBadResponseError(this.url, ctx.operation, 'body lacks tokens');
    return tokens as number[];
  }

  async stream(
    endpoint: CompletionEndpoint,
    body: CompletionBody,
    options: StreamOptions = {},
  ): Promise<EngineStream> {
    const path = ENDPOINT_PATH[endpoint];
    const given =
      typeof body.stream_options === 'object' && body.stream_options !== null
        ? (body.stream_options as Record<string, unknown>)
        : {};
    const payload = JSON.stringify({
      ...body,
      stream: true,
      stream_options: {
        ...given,
        include_usage: true,
        continuous_usage_stats: options.continuousUsage ?? true,
      },
    });
    return this.#openStream(path, payload, options, new SseScanner(options.onLine));
  }

  async models(): Promise<readonly EngineModelCard[]> {
    const data = await this.#controlJson('GET', '/v1/models', undefined, modelsSchema);
    return data.data.map((m) => ({
      id: m.id,
      root: m.root ?? undefined,
      parent: m.parent ?? undefined,
      maxModelLen: m.max_model_len ?? undefined,
    }));
  }

  async health(): Promise<void> {
    await this.#controlText('GET', '/health');
  }

  async metrics(): Promise<VllmMetrics> {
    const text = await this.#controlText('GET', '/metrics');
    try {
      return parseVllmMetrics(
        text,
        this.#options.modelName === undefined ? {} : { modelName: this.#options.modelName },
      );
    } catch (cause) {
      if (cause instanceof MetricsFormatError) {
        throw new EngineBadResponseError(this.url, 'GET /metrics', cause.message, { cause });
      }
      throw cause;
    }
  }

  async sleep(level: 1 | 2): Promise<void> {
    await this.#controlText('POST', `/sleep?level=${level}`);
  }

  async wakeUp(): Promise<void> {
    await this.#controlText('POST', '/wake_up');
  }

  async isSleeping(): Promise<boolean> {
    const data = await this.#controlJson('GET', '/is_sleeping', undefined, isSleepingSchema);
    return data.is_sleeping;
  }

  async loadLoraAdapter(name: string, path: string): Promise<void> {
    await this.#controlText('POST', '/v1/load_lora_adapter', { lora_name: name, lora_path: path });
  }

  async unloadLoraAdapter(name: string): Promise<void> {
    await this.#controlText('POST', '/v1/unload_lora_adapter', { lora_name: name });
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }

  /** POSTs `payload` and reads the answer's whole body as JSON (its bytes kept for the client). */
  async #postJson(
    path: string,
    payload: string,
    options: GenerateOptions,
  ): Promise<{ res: Dispatcher.ResponseData; ctx: CallContext; bytes: Buffer; parsed: unknown }> {
    const { res, ctx } = await this.#send('POST', path, payload, options, false);
    let bytes: Buffer;
    try {
      bytes = Buffer.from(await res.body.arrayBuffer());
    } catch (err) {
      throw mapError(err, ctx, true);
    }
    try {
      return { res, ctx, bytes, parsed: JSON.parse(bytes.toString('utf8')) };
    } catch (cause) {
      throw new EngineBadResponseError(this.url, ctx.operation, 'body is not JSON', { cause });
    }
  }

  /** POSTs `payload` for a streamed answer, checks that it is an event stream, and reads it with `scanner`. */
  async #openStream(
    path: string,
    payload: string,
    options: GenerateOptions,
    scanner: SseScanner | ResponsesScanner,
  ): Promise<EngineStream> {
    const { res, ctx } = await this.#send('POST', path, payload, options, true);
    const type = String(res.headers['content-type'] ?? '');
    if (!type.startsWith('text/event-stream')) {
      const text = await res.body.text().catch(() => '');
      throw new EngineBadResponseError(
        this.url,
        ctx.operation,
        `expected text/event-stream, got "${type}": ${text.slice(0, 200)}`,
      );
    }
    return new VllmStream(res, scanner, ctx);
  }

  /**
   * Sends a request and checks its status. Non-2xx bodies are read and thrown as EngineHttpError.
   * The caller's signal goes to undici as it is: no controller or listener of the client's own
   * per call (`EngineStream.abort` destroys the body, which closes the connection).
   */
  async #send(
    method: 'GET' | 'POST',
    path: string,
    payload: string | undefined,
    options: GenerateOptions & { control?: boolean },
    streaming: boolean,
  ): Promise<{ res: Dispatcher.ResponseData; ctx: CallContext }> {
    const o = this.#options;
    const signal = options.signal;
    const headersTimeoutMs = options.control
      ? o.controlTimeoutMs
      : (options.headersTimeoutMs ?? o.headersTimeoutMs);
    const bodyTimeoutMs = options.control ? o.controlTimeoutMs : (options.bodyTimeoutMs ?? o.bodyTimeoutMs);
    const ctx: CallContext = {
      url: this.url,
      operation: `${method} ${path}`,
      connectTimeoutMs: o.connectTimeoutMs,
      headersTimeoutMs,
      bodyTimeoutMs,
      signal,
      streamAborted: false,
    };
    const headers: Record<string, string> = { ...this.#auth, ...options.headers };
    if (payload !== undefined) headers['content-type'] = 'application/json';
    if (streaming) headers.accept = 'text/event-stream';
    let res: Dispatcher.ResponseData;
    try {
      res = await this.#pool.request({
        method,
        path,
        headers,
        body: payload,
        // undici takes any object with abort listeners; its types name only AbortSignal.
        signal: signal as AbortSignal | undefined,
        headersTimeout: headersTimeoutMs,
        bodyTimeout: bodyTimeoutMs,
      });
    } catch (err) {
      throw mapError(err, ctx, false);
    }
    if (res.statusCode < 200 || res.statusCode >= 300) {
      let text = '';
      try {
        text = await res.body.text();
      } catch {
        // The status alone is the error.
      }
      const { message, type } = describeErrorBody(text);
      throw new EngineHttpError(this.url, ctx.operation, res.statusCode, text, message, type);
    }
    return { res, ctx };
  }

  async #controlText(method: 'GET' | 'POST', path: string, json?: unknown): Promise<string> {
    const payload = json === undefined ? undefined : JSON.stringify(json);
    const { res, ctx } = await this.#send(method, path, payload, { control: true }, false);
    try {
      return await res.body.text();
    } catch (err) {
      throw mapError(err, ctx, true);
    }
  }

  async #controlJson<S extends z.ZodType>(
    method: 'GET' | 'POST',
    path: string,
    json: unknown,
    schema: S,
  ): Promise<z.infer<S>> {
    const text = await this.#controlText(method, path, json);
    const operation = `${method} ${path}`;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (cause) {
      throw new EngineBadResponseError(this.url, operation, 'body is not JSON', { cause });
    }
    const checked = schema.safeParse(parsed);
    if (!checked.success) {
      const issue = checked.error.issues[0];
      throw new EngineBadResponseError(
        this.url,
        operation,
        `${issue?.path.join('.') || 'body'}: ${issue?.message ?? 'invalid'}`,
        { cause: checked.error },
      );
    }
    return checked.data;
  }
}
