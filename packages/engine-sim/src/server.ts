import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import {
  type Clock,
  ConfigError,
  createRng,
  ErrorCode,
  type LengthSampler,
  type Logger,
  lengthSampler,
  modelSpec,
  parseWith,
  type Rng,
  silentLogger,
  systemClock,
} from '@fairway/core';
import { loadTokenizer } from '@fairway/engine';
import { type EngineConfig, EngineModel, type EngineModelApi, resolveEngineConfig } from '@fairway/perf';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { z } from 'zod';
import { base64Vector, embeddingInputs, embeddingRequestSchema, embeddingVector } from './embeddings.ts';
import { FaultInjector, faultPatchSchema } from './faults.ts';
import { Generation } from './generation.ts';
import { KvEventPublisher } from './kv-event-publisher.ts';
import { type EngineSimEnv, intBlockHashes } from './kv-events-config.ts';
import { EngineSimMetrics } from './metrics.ts';
import { type EngineSimOptions, type EngineSimOptionsInput, engineSimOptionsSchema } from './options.ts';
import { planOutput } from './output-plan.ts';
import {
  chatPromptTokenList,
  completionPromptTokenList,
  promptBlockHashes,
  promptTokenIds,
  type Tokenize,
} from './prompt-blocks.ts';
import { chatPromptTokens, completionPromptTokens, wordPieceCounter, wordPieces } from './prompt-tokens.ts';
import { RealtimeDriver } from './realtime-driver.ts';
import {
  type ChatRequest,
  type CompletionRequest,
  chatRequestSchema,
  completionRequestSchema,
  messageText,
} from './request-schema.ts';
import { errorBody, type ResponseKind, syntheticPrefixTokens } from './response-format.ts';
import { responsesRoute } from './responses.ts';
import { StreamFlusher } from './stream-flusher.ts';
import { tokenizeRoute } from './tokenize-route.ts';

/** What {@link buildEngineSimApp} needs: validated options and the engine model it serves. */
export interface EngineSimDeps {
  readonly options: EngineSimOptions;
  /** The engine model that decides timing, KV usage and preemption. */
  readonly model: EngineModelApi;
  /** Natural output lengths of requests that do not give one. */
  readonly outputLength: LengthSampler;
  /** Seeded randomness for output lengths, faults and ids. */
  readonly rng: Rng;
  /** Wall clock for `created` timestamps and the slow-start window. @default systemClock */
  readonly clock?: Clock;
  readonly logger?: Logger;
  /**
   * Environment variables read as vLLM reads them: `PYTHONHASHSEED`, the hash seed of
   * `sha256_cbor` block hashes (random per process when unset). @default process.env
   */
  readonly env?: EngineSimEnv;
  /**
   * Publisher of the KV cache events, already told by the engine model's prefix cache what it
   * stores and evicts: the app gives it the requests' token ids, sends one batch per engine step
   * and closes it with the server.
   */
  readonly kvEvents?: KvEventPublisher;
}

/** A built (not yet listening) simulated engine. */
export interface EngineSimApp {
  readonly app: FastifyInstance;
  readonly driver: RealtimeDriver;
  readonly faults: FaultInjector;
  /**
   * The W3C `traceparent` headers of the latest generation requests (up to 256, oldest first), so a
   * test can check that the gateway propagated its trace to the engine, as vLLM would receive it.
   */
  readonly traceparents: readonly string[];
  /** Stops the engine loop, drops every open request and closes the server. */
  close(): Promise<void>;
}

/** A running simulated engine. */
export interface EngineSimHandle {
  /** Base URL, e.g. `http://127.0.0.1:43817`. */
  readonly url: string;
  readonly port: number;
  /** The model name clients use. */
  readonly servedModelName: string;
  /** GPU preset it simulates, and its tensor-parallel degree: what its agent registers. */
  readonly gpu: string;
  readonly tp: number;
  /** See {@link EngineSimApp.traceparents}. */
  readonly traceparents: readonly string[];
  /**
   * Where the KV cache events are published (`--kv-events-config`), when they are: the ZMQ
   * endpoint as bound (with the port it got; `bound`) or connected to, and the topic.
   */
  readonly kvEvents?: { readonly endpoint: string; readonly topic: string; readonly bound: boolean };
  close(): Promise<void>;
}

const sleepQuerySchema = z.object({ level: z.enum(['1', '2']).default('1') });
const loadLoraSchema = z.looseObject({ lora_name: z.string().min(1), lora_path: z.string().min(1) });
const unloadLoraSchema = z.looseObject({ lora_name: z.string().min(1) });

function sendError(reply: FastifyReply, status: number, type: string, message: string): FastifyReply {
  return reply
    .code(status)
    .header('content-type', 'application/json')
    .send(errorBody(status, type, message));
}

function headerInt(req: FastifyRequest, name: string): number | undefined {
  const raw = req.headers[name];
  if (typeof raw !== 'string') return undefined;
  const n = Number(raw);
  return Number.isInteger(n) && n >= 0 ? n : undefined;
}

function describeIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ');
}

/**
 * Builds the simulated vLLM server: OpenAI chat and text completions (streamed like vLLM, one
 * token per chunk), the Responses API over them, `/v1/models`, `/health`, `/metrics`, sleep/wake, LoRA load/unload, and the
 * private `/fairway/faults`. Timing, KV usage and preemption come from the engine model, run in
 * real time by a {@link RealtimeDriver}.
 */
export function buildEngineSimApp(deps: EngineSimDeps): EngineSimApp {
  const { options, model } = deps;
  const clock = deps.clock ?? systemClock;
  const logger = deps.logger ?? silentLogger;
  const servedModelName = options.servedModelName ?? options.model;
  const maxModelLen = Math.min(
    options.maxModelLen ?? modelSpec(options.model).maxModelLen,
    model.config.kvCapacityTokens,
  );
  const outputRng = deps.rng.fork('output-length');
  // Prompts are counted with the model's tokenizer when one is given, else a word-piece stand-in.
  const loaded = options.tokenizer === undefined ? undefined : loadTokenizer(options.tokenizer);
  const tokens = loaded ?? wordPieceCounter;
  const tokenize: Tokenize = loaded === undefined ? wordPieces : (text) => loaded.encode(text);
  const kvEvents = deps.kvEvents;
  const hashSeed = prefixHashSeed(options, deps.env ?? process.env, logger);
  const faults = new FaultInjector(options.faults, deps.rng.fork('faults'));
  const readyAtMs = clock.now() + options.faults.slowStartMs;
  const metrics = new EngineSimMetrics(servedModelName, () => model.stats());
  const driver = new RealtimeDriver(model, {
    speed: options.speed,
    maxLagMs: options.maxLagMs,
    onStep: (step) => {
      let generated = 0;
      for (const e of step.events) if (e.kind === 'token') generated++;
      metrics.observeIteration(step.shape.prefillTokens + generated);
      kvEvents?.flush();
    },
    onListenerError: (error, event) => logger.error({ err: error, event }, 'engine-sim listener failed'),
  });
  driver.stall(options.faults.stalled);
  const adapters = new Map<string, string>();
  const inflight = new Set<Generation>();
  const flusher = options.streamFlushMs > 0 ? new StreamFlusher(options.streamFlushMs) : undefined;
  let sleeping: 0 | 1 | 2 = 0;
  const createdS = Math.floor(clock.now() / 1000);

  const app = Fastify({ logger: false, bodyLimit: 64 * 1024 * 1024, forceCloseConnections: true });

  const notReady = (): boolean => clock.now() < readyAtMs;

  const generate = async (kind: ResponseKind, req: FastifyRequest, reply: FastifyReply): Promise<unknown> => {
    if (notReady()) return sendError(reply, 503, 'ServiceUnavailableError', 'The engine is starting up.');
    if (sleeping) return sendError(reply, 503, 'ServiceUnavailableError', 'The engine is sleeping.');
    if (options.task === 'embed')
      return sendError(
        reply,
        400,
        'BadRequestError',
        `The model does not support ${kind === 'chat' ? 'Chat Completions' : 'Completions'} API`,
      );
    const schema = kind === 'chat' ? chatRequestSchema : completionRequestSchema;
    const parsed = schema.safeParse(req.body);
    if (!parsed.success) return sendError(reply, 400, 'BadRequestError', describeIssues(parsed.error));
    const body = parsed.data;
    const requested = body.model ?? servedModelName;
    let adapter: string | undefined;
    if (requested !== servedModelName) {
      if (!adapters.has(requested)) {
        return sendError(reply, 404, 'NotFoundError', `The model \`${requested}\` does not exist.`);
      }
      adapter = requested;
    }
    const priority = body.priority ?? 0;
    if (priority !== 0 && options.schedulingPolicy !== 'priority') {
      return sendError(
        reply,
        400,
        'BadRequestError',
        `Got priority ${priority} but Priority scheduling is not enabled.`,
      );
    }
    const promptTokens =
      headerInt(req, 'x-fairway-input-tokens') ??
      (kind === 'chat'
        ? chatPromptTokens(body as ChatRequest, tokens)
        : completionPromptTokens(body as CompletionRequest, tokens));
    const maxCompletion = kind === 'chat' ? (body as ChatRequest).max_completion_tokens : undefined;
    const requestedMax = body.max_tokens ?? maxCompletion ?? undefined;
    if (
      promptTokens >= maxModelLen ||
      (requestedMax !== undefined && promptTokens + requestedMax > maxModelLen)
    ) {
      const total = promptTokens + (requestedMax ?? 0);
      return sendError(
        reply,
        400,
        'BadRequestError',
        `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${total} tokens (${promptTokens} in the messages, ${requestedMax ?? 0} in the completion). Please reduce the length of the messages or completion.`,
      );
    }
    const maxTokens = requestedMax ?? maxModelLen - promptTokens;
    // The prompt's identity for the prefix cache: its tokens' chained block hashes.
    const promptTokenList = options.enablePrefixCaching
      ? kind === 'chat'
        ? chatPromptTokenList(body as ChatRequest, tokenize)
        : completionPromptTokenList(body as CompletionRequest, tokenize)
      : undefined;
    const blockHashes =
      promptTokenList === undefined
        ? undefined
        : promptBlockHashes(promptTokenList, model.config.blockSize, options.prefixCachingHashAlgo, hashSeed);
    // A continuation goes on where the partial answer it carries stopped, as the model would: the
    // tokens it already has count toward the request's natural length and the text continues.
    let firstToken = headerInt(req, 'x-fairway-resumed-tokens') ?? 0;
    if (kind === 'chat') {
      const chat = body as ChatRequest;
      if (chat.continue_final_message === true) {
        if (chat.add_generation_prompt === true)
          return sendError(
            reply,
            400,
            'BadRequestError',
            'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
          );
        const last = chat.messages[chat.messages.length - 1];
        if (last?.role !== 'assistant')
          return sendError(
            reply,
            400,
            'BadRequestError',
            'continue_final_message is set but the final message is not an assistant message.',
          );
        firstToken = syntheticPrefixTokens(messageText(last.content));
      }
    }
    const natural = Math.max(
      1,
      (body.fairway_output_tokens ?? headerInt(req, 'x-fairway-output-tokens') ?? outputLength()) -
        firstToken,
    );
    let outputTokens = body.ignore_eos ? maxTokens : Math.min(natural, maxTokens);
    let finishReason: 'stop' | 'length' | 'tool_calls' =
      outputTokens === maxTokens && (body.ignore_eos || natural >= maxTokens) ? 'length' : 'stop';
    // n choices run as one sequence of n × the output (KV and time grow as n sequences' would).
    const choices = body.n ?? 1;
    // Random per request, as vLLM's are: not drawn from the seeded RNG (neighbouring seeds of one
    // fleet's engines nearly coincide) nor counted (a client could guess its neighbours' ids).
    const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(12).toString('hex')}`;
    // Tools, response_format, stop and logprobs shape what one choice says (and how long it is).
    const plan =
      choices === 1
        ? planOutput({ kind, body: body as Record<string, unknown>, firstToken, outputTokens, id })
        : undefined;
    if (plan?.length !== undefined) {
      finishReason = plan.length > maxTokens ? 'length' : plan.finishReason;
      outputTokens = Math.min(plan.length, maxTokens);
    }

    if (faults.config.headersDelayMs > 0) {
      await new Promise((r) => setTimeout(r, faults.config.headersDelayMs));
      if (sleeping) return sendError(reply, 503, 'ServiceUnavailableError', 'The engine is sleeping.');
    }
    const fault = faults.plan();
    if (fault.kind === 'error') {
      return sendError(reply, 500, 'InternalServerError', 'Injected fault: internal server error.');
    }
    reply.hijack();
    const generation = new Generation({
      identity: { kind, id, created: Math.floor(clock.now() / 1000), model: requested },
      seq: {
        id,
        inputTokens: promptTokens,
        outputTokens: outputTokens * choices,
        maxTokens: maxTokens * choices,
        ...(options.schedulingPolicy === 'priority' ? { priority } : {}),
        ...(adapter === undefined ? {} : { adapter }),
        ...(blockHashes === undefined ? {} : { blockHashes }),
      },
      finishReason,
      promptTokensDetails: options.enablePromptTokensDetails,
      ...(firstToken > 0 ? { firstToken } : {}),
      stream: body.stream === true,
      ...(choices > 1 ? { choices } : {}),
      ...(plan !== undefined ? { plan } : {}),
      includeUsage: body.stream_options?.include_usage === true,
      continuousUsage: body.stream_options?.continuous_usage_stats === true,
      fault,
      res: reply.raw,
      driver,
      metrics,
      ...(flusher ? { flusher } : {}),
      onSettled: (g) => {
        inflight.delete(g);
        kvEvents?.untrack(id);
      },
    });
    inflight.add(generation);
    if (kvEvents && promptTokenList && blockHashes)
      kvEvents.track(id, blockHashes, promptTokenIds(promptTokenList));
    try {
      generation.start();
    } catch (err) {
      inflight.delete(generation);
      kvEvents?.untrack(id);
      logger.error({ err, id }, 'engine-sim could not start a request');
      if (!reply.raw.headersSent) {
        reply.raw.writeHead(500, { 'content-type': 'application/json' });
        reply.raw.end(errorBody(500, 'InternalServerError', (err as Error).message));
      } else reply.raw.destroy();
    }
    return reply;
  };

  function outputLength(): number {
    return deps.outputLength.sample(outputRng);
  }

  const traceparents: string[] = [];
  const received = (req: FastifyRequest): void => {
    const tp = req.headers.traceparent;
    if (typeof tp !== 'string') return;
    if (traceparents.length >= 256) traceparents.shift();
    traceparents.push(tp);
  };
  app.post('/v1/chat/completions', (req, reply) => {
    received(req);
    return generate('chat', req, reply);
  });
  app.post('/v1/completions', (req, reply) => {
    received(req);
    return generate('completions', req, reply);
  });

  responsesRoute(app, servedModelName);

  tokenizeRoute(app, {
    tokenize,
    maxModelLen,
    serves: (name) => name === servedModelName || adapters.has(name),
  });

  // An embedding model (`task: embed`) answers at once: a pooling pass is one prefill, far
  // shorter than the generation the engine model times; its vectors are deterministic.
  app.post('/v1/embeddings', async (req, reply) => {
    received(req);
    if (notReady()) return sendError(reply, 503, 'ServiceUnavailableError', 'The engine is starting up.');
    if (sleeping) return sendError(reply, 503, 'ServiceUnavailableError', 'The engine is sleeping.');
    if (options.task !== 'embed')
      return sendError(reply, 400, 'BadRequestError', 'The model does not support Embeddings API');
    const parsed = embeddingRequestSchema.safeParse(req.body);
    if (!parsed.success) return sendError(reply, 400, 'BadRequestError', describeIssues(parsed.error));
    const body = parsed.data;
    const requested = body.model ?? servedModelName;
    if (requested !== servedModelName)
      return sendError(reply, 404, 'NotFoundError', `The model \`${requested}\` does not exist.`);
    const full = options.embeddingDimensions;
    const dims = body.dimensions ?? full;
    if (body.dimensions != null && !options.matryoshka)
      return sendError(
        reply,
        400,
        'BadRequestError',
        `Model "${servedModelName}" does not support matryoshka representation, changing output dimensions will lead to poor results.`,
      );
    if (dims > full)
      return sendError(reply, 400, 'BadRequestError', `dimensions must be at most ${full}, the model's size`);
    const inputs = embeddingInputs(body.input);
    let promptTokens = 0;
    for (const input of inputs) {
      const n = typeof input === 'string' ? tokens.count(input) + 1 : input.length;
      if (n > maxModelLen)
        return sendError(
          reply,
          400,
          'BadRequestError',
          `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${n} tokens in the input for embedding generation. Please reduce the length of the input.`,
        );
      promptTokens += n;
    }
    const base64 = body.encoding_format === 'base64';
    return reply.header('content-type', 'application/json').send({
      id: `embd-${randomBytes(12).toString('hex')}`,
      object: 'list',
      created: Math.floor(clock.now() / 1000),
      model: requested,
      data: inputs.map((input, index) => {
        const v = embeddingVector(input, full, dims);
        return { index, object: 'embedding', embedding: base64 ? base64Vector(v) : v };
      }),
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
    });
  });

  app.get('/v1/models', async () => ({
    object: 'list',
    data: [
      {
        id: servedModelName,
        object: 'model',
        created: createdS,
        owned_by: 'vllm',
        root: options.model,
        parent: null,
        max_model_len: maxModelLen,
      },
      ...[...adapters].map(([name, path]) => ({
        id: name,
        object: 'model',
        created: createdS,
        owned_by: 'vllm',
        root: path,
        parent: servedModelName,
        max_model_len: null,
      })),
    ],
  }));

  app.get('/health', async (_req, reply) => {
    if (notReady()) return sendError(reply, 503, 'ServiceUnavailableError', 'The engine is starting up.');
    return reply.code(200).send('');
  });

  app.get('/version', async () => ({ version: 'fairway-engine-sim' }));

  app.get('/metrics', async (_req, reply) => {
    const text = await metrics.render();
    return reply.header('content-type', metrics.contentType).send(text);
  });

  app.post('/sleep', async (req, reply) => {
    const q = sleepQuerySchema.safeParse(req.query);
    if (!q.success) return sendError(reply, 400, 'BadRequestError', `level: must be 1 or 2`);
    const level = Number(q.data.level) as 1 | 2;
    sleeping = level;
    // Sleeping discards the KV cache: whatever runs is lost.
    for (const g of [...inflight]) g.abort();
    if (level === 2) adapters.clear();
    logger.info({ level }, 'engine-sim sleeping');
    return reply.code(200).send('');
  });

  app.post('/wake_up', async (_req, reply) => {
    sleeping = 0;
    return reply.code(200).send('');
  });

  app.get('/is_sleeping', async () => ({ is_sleeping: sleeping !== 0 }));

  app.post('/v1/load_lora_adapter', async (req, reply) => {
    const b = loadLoraSchema.safeParse(req.body);
    if (!b.success) {
      return sendError(reply, 400, 'InvalidUserInput', "Both 'lora_name' and 'lora_path' must be provided.");
    }
    const { lora_name: name, lora_path: path } = b.data;
    if (adapters.has(name)) {
      return sendError(reply, 400, 'InvalidUserInput', `The lora adapter '${name}' has already been loaded.`);
    }
    adapters.set(name, path);
    return reply.code(200).type('text/plain').send(`Success: LoRA adapter '${name}' added successfully.`);
  });

  app.post('/v1/unload_lora_adapter', async (req, reply) => {
    const b = unloadLoraSchema.safeParse(req.body);
    if (!b.success) return sendError(reply, 400, 'InvalidUserInput', "'lora_name' must be provided.");
    const name = b.data.lora_name;
    if (!adapters.delete(name)) {
      return sendError(reply, 404, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
    }
    return reply.code(200).type('text/plain').send(`Success: LoRA adapter '${name}' removed successfully.`);
  });

  app.get('/fairway/faults', async () => faults.config);

  // Private: how the real-time loop keeps up with its speed factor (benchmarks, debugging).
  app.get('/fairway/stats', async () => ({
    speed: options.speed,
    realMs: driver.modelNowMs() / options.speed,
    modelBusyMs: driver.modelBusyMs,
    steps: driver.steps,
    inflight: inflight.size,
  }));

  app.post('/fairway/faults', async (req, reply) => {
    const b = faultPatchSchema.safeParse(req.body ?? {});
    if (!b.success) return sendError(reply, 400, 'BadRequestError', describeIssues(b.error));
    const patch = Object.fromEntries(Object.entries(b.data).filter(([, v]) => v !== undefined));
    const config = faults.update(patch);
    driver.stall(config.stalled);
    return config;
  });

  return {
    app,
    driver,
    faults,
    traceparents,
    async close() {
      driver.close();
      flusher?.close();
      for (const g of [...inflight]) g.abort();
      await app.close();
      await kvEvents?.close();
    },
  };
}

/**
 * The seed of `sha256_cbor` block hashes, as vLLM's `NONE_HASH`: `PYTHONHASHSEED`, else random per
 * process (with vLLM's warning), so that nobody else can compute the engine's hashes.
 */
function prefixHashSeed(options: EngineSimOptions, env: EngineSimEnv, logger: Logger): string {
  const seed = env.PYTHONHASHSEED;
  if (seed !== undefined) return seed;
  if (options.enablePrefixCaching && options.prefixCachingHashAlgo === 'sha256_cbor')
    logger.warn(
      'PYTHONHASHSEED is not set: sha256_cbor block hashes are random per process and nobody else can reproduce them; set PYTHONHASHSEED to a fixed value to make them reproducible',
    );
  return randomBytes(32).toString('hex');
}

/**
 * The smallest tensor-parallel degree (1, 2, 4 or 8) at which `model`'s weights leave room for a
 * KV cache on `gpu`, as a deployment of that model would choose; undefined when none does.
 */
export function smallestFittingTp(model: string, gpu = 'A100-80GB'): number | undefined {
  return [1, 2, 4, 8].find((tp) => resolveEngineConfig({ model, gpu, tp }).kvCapacityTokens > 0);
}

/** Options of {@link startEngineSim}: the engine-sim options plus a logger and the environment. */
export type StartEngineSimOptions = EngineSimOptionsInput & {
  readonly logger?: Logger;
  /** Environment variables read as vLLM reads them (see {@link EngineSimDeps.env}). @default process.env */
  readonly env?: EngineSimEnv;
};

/**
 * Starts a simulated vLLM engine on `host:port` (port 0 picks a free one) running the simulator's
 * `EngineModel` in real time. Throws a `ConfigError` naming the field when an option is invalid.
 */
export async function startEngineSim(input: StartEngineSimOptions = {}): Promise<EngineSimHandle> {
  const { logger, env = process.env, ...rest } = input;
  const options = parseWith(engineSimOptionsSchema, rest, 'engine-sim options');
  const config: EngineConfig = {
    gpu: options.gpu,
    model: options.model,
    tp: options.tp,
    priorityScheduling: options.schedulingPolicy === 'priority',
    ...(options.kvCapacityTokens === undefined ? {} : { kvCapacityTokens: options.kvCapacityTokens }),
    ...(options.blockSize === undefined ? {} : { blockSize: options.blockSize }),
    ...(options.maxNumSeqs === undefined ? {} : { maxNumSeqs: options.maxNumSeqs }),
    ...(options.maxNumBatchedTokens === undefined
      ? {}
      : { maxNumBatchedTokens: options.maxNumBatchedTokens }),
    ...(options.batchPolicy === undefined ? {} : { batchPolicy: options.batchPolicy }),
    ...(options.chunkedPrefill === undefined ? {} : { chunkedPrefill: options.chunkedPrefill }),
    ...(options.preemption === undefined ? {} : { preemption: options.preemption }),
    enablePrefixCaching: options.enablePrefixCaching,
  };
  const model = new EngineModel(config);
  // vLLM refuses to start when the weights leave no memory for the KV cache; so does the simulation.
  if (model.config.kvCapacityTokens <= 0)
    throw new ConfigError(ErrorCode.CONFIG_INVALID, 'engine-sim options', [
      {
        path: 'tp',
        message: `${options.model} on ${options.tp} × ${options.gpu} leaves no memory for the KV cache: use more GPUs (--tp) or a larger GPU`,
      },
    ]);
  const kvEvents = await openKvEvents(options, model, env, logger);
  let sim: EngineSimApp;
  try {
    sim = buildEngineSimApp({
      options,
      model,
      outputLength: lengthSampler(options.outputTokens),
      rng: createRng(options.seed),
      env,
      ...(kvEvents === undefined ? {} : { kvEvents }),
      ...(logger === undefined ? {} : { logger }),
    });
  } catch (err) {
    await kvEvents?.close();
    throw err;
  }
  try {
    // uvicorn's default backlog: thousands of clients connecting at once must queue, not be dropped.
    await sim.app.listen({ host: options.host, port: options.port, backlog: 2048 });
  } catch (err) {
    await sim.close();
    throw err;
  }
  const address = sim.app.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  logger?.info({ url, model: options.model, gpu: options.gpu, speed: options.speed }, 'engine-sim listening');
  return {
    url,
    port: address.port,
    servedModelName: options.servedModelName ?? options.model,
    gpu: options.gpu,
    tp: options.tp,
    traceparents: sim.traceparents,
    ...(kvEvents === undefined
      ? {}
      : {
          kvEvents: {
            endpoint: kvEvents.endpoint,
            topic: kvEvents.topic,
            bound: kvEvents.bound,
          },
        }),
    close: () => sim.close(),
  };
}

/**
 * The KV cache event publisher `--kv-events-config` asks for (enabled, `zmq` publisher), watching
 * the engine model's prefix cache; undefined when events are off.
 */
async function openKvEvents(
  options: EngineSimOptions,
  model: EngineModel,
  env: EngineSimEnv,
  logger: Logger | undefined,
): Promise<KvEventPublisher | undefined> {
  const config = options.kvEventsConfig;
  if (config === undefined || !config.enable_kv_cache_events || config.publisher !== 'zmq') return undefined;
  const intHashes = intBlockHashes(env);
  if (!options.enablePrefixCaching)
    logger?.warn(
      'KV cache events are enabled without --enable-prefix-caching: no block is cached, so none is reported',
    );
  if (config.replay_endpoint != null)
    logger?.warn(
      { replayEndpoint: config.replay_endpoint },
      'engine-sim does not serve the KV events replay endpoint: a subscriber that misses a batch sees a gap in seq',
    );
  const blocks = Math.floor(model.config.kvCapacityTokens / model.config.blockSize);
  const publisher = await KvEventPublisher.open({
    config,
    blockSize: model.config.blockSize,
    intHashes,
    maxTrackedBlocks: Math.max(4096, 8 * blocks),
    ...(logger === undefined ? {} : { logger }),
  });
  model.watchCache(publisher.listener);
  logger?.info(
    { endpoint: publisher.endpoint, topic: config.topic },
    'engine-sim publishing KV cache events',
  );
  return publisher;
}
