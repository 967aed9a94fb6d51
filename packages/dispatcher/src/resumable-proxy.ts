import type { ServerResponse } from 'node:http';
import type { Usage } from '@fairway/core';
import type { CompletionBody, CompletionEndpoint, Engine, EngineStream, SseDataLine } from '@fairway/engine';
import type { FastifyReply } from 'fastify';
import {
  closeEngineCall,
  drained,
  openEngineCall,
  type ProxyCall,
  type ProxyResult,
  settle,
  sseError,
  timingHeaders,
} from './engine-proxy.ts';
import { engineApiError, isReplicaFailure } from './error-mapping.ts';
import { ApiError } from './errors.ts';

/** What resuming needs beyond one engine call. */
export interface ResumeDeps {
  readonly reply: FastifyReply;
  /** The engine of a replica the request is dispatched to again; undefined if it left. */
  readonly engineFor: (replica: string) => Engine | undefined;
  /** How long a resumed request may wait for its next dispatch, ms. */
  readonly queueTimeoutMs: number;
  /** Aborted when the client goes away. */
  readonly gone: AbortSignal;
}

interface Chunk {
  id?: string;
  created?: number;
  model?: string;
  choices?: {
    index?: number;
    text?: string;
    delta?: { role?: string; content?: string | null };
    finish_reason?: string | null;
  }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number } | null;
}

const decoder = new TextDecoder();

/**
 * Whether a request can be continued after an eviction: the continuation re-sends the prompt with
 * the text so far, so it needs one choice and a text prompt (token-id prompts cannot be joined
 * with text).
 */
export function continuable(endpoint: CompletionEndpoint, body: CompletionBody): boolean {
  if (body.n !== undefined && body.n !== null && body.n !== 1) return false;
  if (endpoint === 'chat') return Array.isArray(body.messages);
  const p = body.prompt;
  return typeof p === 'string' || (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string');
}

/**
 * The continuation of a request that had produced `text` (`generated` tokens) when it was evicted:
 * chat appends the partial assistant message and asks vLLM to continue it
 * (`continue_final_message: true, add_generation_prompt: false`); a text completion appends the
 * text to the prompt. The output cap shrinks by what was generated.
 */
export function continuationBody(
  endpoint: CompletionEndpoint,
  body: CompletionBody,
  text: string,
  generated: number,
): CompletionBody {
  const cap = (v: unknown): number | undefined =>
    typeof v === 'number' ? Math.max(1, v - generated) : undefined;
  const out: Record<string, unknown> = { ...body };
  const maxTokens = cap(body.max_tokens);
  if (maxTokens !== undefined) out.max_tokens = maxTokens;
  const maxCompletion = cap(body.max_completion_tokens);
  if (maxCompletion !== undefined) out.max_completion_tokens = maxCompletion;
  if (endpoint === 'chat') {
    out.messages = [...(body.messages as unknown[]), { role: 'assistant', content: text }];
    out.continue_final_message = true;
    out.add_generation_prompt = false;
  } else {
    const p = body.prompt;
    out.prompt = `${typeof p === 'string' ? p : (p as string[])[0]}${text}`;
  }
  return out;
}

/**
 * The client's side of a resumable request: every engine run's chunks are parsed (QLM mode only,
 * so plain serving pays nothing), the text so far is kept for a continuation, and what the client
 * sees reads as one response — one id, one role chunk, usage counting every run's output.
 */
class ResumedAnswer {
  readonly #endpoint: CompletionEndpoint;
  readonly #wantsUsage: boolean;
  #id: string | undefined;
  #created: number | undefined;
  #model: string | undefined;
  /** Text of every run so far. */
  text = '';
  finishReason: string | undefined;
  /** Output tokens of runs before this one. */
  before = 0;
  /** Prompt tokens of the original request, once an engine reported them. */
  promptTokens: number | undefined;
  /** The last usage the engine sent in this run. */
  partUsage: { prompt: number; completion: number } | undefined;
  /** SSE bytes for the client, waiting to be written. */
  pending = '';
  error: string | undefined;

  constructor(endpoint: CompletionEndpoint, wantsUsage: boolean) {
    this.#endpoint = endpoint;
    this.#wantsUsage = wantsUsage;
  }

  /** Starts a run that follows `generated` tokens of output. */
  nextRun(generated: number): void {
    this.before = generated;
    this.partUsage = undefined;
  }

  /** Reads one `data:` line of the engine's stream. */
  line(l: SseDataLine): void {
    if (l.done) return;
    const raw = decoder.decode(l.payload);
    if (l.isError) {
      this.error = raw;
      return;
    }
    let c: Chunk;
    try {
      c = JSON.parse(raw) as Chunk;
    } catch {
      return;
    }
    if (c.usage) {
      this.partUsage = { prompt: c.usage.prompt_tokens ?? 0, completion: c.usage.completion_tokens ?? 0 };
      if (this.before === 0) this.promptTokens = c.usage.prompt_tokens;
    }
    const choice = c.choices?.[0];
    if (choice === undefined) return; // the usage-only chunk: sent once, at the very end
    this.#id ??= c.id;
    this.#created ??= c.created;
    this.#model ??= c.model;
    const content = this.#endpoint === 'chat' ? choice.delta?.content : choice.text;
    if (typeof content === 'string') this.text += content;
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    // A continuation's opening role chunk would read as a second message.
    if (this.before > 0 && choice.delta?.role !== undefined && !content && !choice.finish_reason) return;
    c.id = this.#id;
    c.created = this.#created;
    if (c.usage) c.usage = this.#usage(c.usage.prompt_tokens, c.usage.completion_tokens);
    this.pending += `data: ${JSON.stringify(c)}\n\n`;
  }

  /** Takes the bytes to write now. */
  take(): string {
    const out = this.pending;
    this.pending = '';
    return out;
  }

  /** Output tokens so far (every run). */
  generated(stream: EngineStream | undefined): number {
    return this.before + (stream?.completionTokens ?? 0);
  }

  /** The whole request's usage, once the last run finished. */
  usage(fallbackPrompt: number, stream: EngineStream): Usage {
    const completion = this.before + (this.partUsage?.completion ?? stream.completionTokens);
    const prompt =
      this.promptTokens ??
      (this.partUsage !== undefined ? Math.max(1, this.partUsage.prompt - this.before) : fallbackPrompt);
    return { inputTokens: prompt, outputTokens: completion };
  }

  #usage(prompt: number | undefined, completion: number | undefined) {
    const p = this.promptTokens ?? Math.max(1, (prompt ?? 0) - this.before);
    const c = this.before + (completion ?? 0);
    return { prompt_tokens: p, completion_tokens: c, total_tokens: p + c };
  }

  /** The end of the client's stream: usage (if asked for) and `[DONE]`. */
  end(usage: Usage): string {
    let out = '';
    if (this.#wantsUsage)
      out += `data: ${JSON.stringify({
        id: this.#id,
        object: this.#endpoint === 'chat' ? 'chat.completion.chunk' : 'text_completion',
        created: this.#created,
        model: this.#model,
        choices: [],
        usage: this.#usageOf(usage),
      })}\n\n`;
    return `${out}data: [DONE]\n\n`;
  }

  /** The non-streamed body: both runs' text joined, usage over the whole output. */
  body(usage: Usage): string {
    const choice =
      this.#endpoint === 'chat'
        ? {
            index: 0,
            message: { role: 'assistant', content: this.text },
            logprobs: null,
            finish_reason: this.finishReason ?? 'stop',
          }
        : { index: 0, text: this.text, logprobs: null, finish_reason: this.finishReason ?? 'stop' };
    return JSON.stringify({
      id: this.#id,
      object: this.#endpoint === 'chat' ? 'chat.completion' : 'text_completion',
      created: this.#created,
      model: this.#model,
      choices: [choice],
      usage: this.#usageOf(usage),
    });
  }

  #usageOf(u: Usage) {
    return {
      prompt_tokens: u.inputTokens,
      completion_tokens: u.outputTokens,
      total_tokens: u.inputTokens + u.outputTokens,
    };
  }
}

/**
 * Serves a request under the SLO-class control plane (`ordering: edf | qlm`), where the leader may
 * evict it from its replica (QLM section 5): when that happens the engine call is aborted, the
 * request goes back to the head of its flow charged for what it was served
 * ({@link GatewayRuntime.evict}), and once it is dispatched again a continuation — the prompt plus
 * the text so far — is sent to the new replica and streamed on to the same client connection. A
 * non-streamed request is streamed from the engine and answered with both parts joined. What the
 * client receives reads as one response whose usage counts the whole output.
 */
export async function proxyResumable(call: ProxyCall, deps: ResumeDeps): Promise<ProxyResult> {
  const { ticket, runtime, described, endpoint } = call;
  const answer = new ResumedAnswer(endpoint, described.wantsUsage);
  const canResume = continuable(endpoint, described.forwardBody);
  let engine: Engine = call.engine;
  let res: ServerResponse | undefined;
  let firstByteMs: number | undefined;
  // The gateway's own time before the first engine call (queueing excluded), as engine-proxy measures it.
  const overheadMs = Math.max(0, call.timer.now() - call.arrivedAt - ticket.queueMs());
  const fail = (err: ApiError, usage: Usage): ProxyResult => {
    if (res === undefined) throw err;
    if (!res.destroyed && !res.writableEnded) res.end(sseError(err));
    return { usage, overheadMs, firstByteMs, outcome: 'failed' };
  };
  const write = async (text: string): Promise<void> => {
    if (text.length === 0 || res === undefined) return;
    if (firstByteMs === undefined) firstByteMs = call.timer.now() - call.arrivedAt;
    if (!res.write(text)) await drained(res, call.signal);
  };

  for (;;) {
    const evicted = runtime.openRun(ticket);
    const signal = AbortSignal.any([call.signal, evicted]);
    const resumed = answer.before > 0;
    const body = resumed
      ? continuationBody(endpoint, described.forwardBody, answer.text, answer.before)
      : described.forwardBody;
    let stream: EngineStream | undefined;
    // One engine span per run; a run cut short by an eviction is ended, failed, with the response.
    const engineCall = openEngineCall(call);
    try {
      stream = await engine.stream(endpoint, body, {
        signal,
        continuousUsage: described.wantsContinuousUsage,
        headers: {
          ...engineCall.headers,
          ...(resumed ? { 'x-fairway-resumed-tokens': String(answer.before) } : {}),
        },
        onLine: (l) => answer.line(l),
      });
      if (described.stream && res === undefined) {
        deps.reply.hijack();
        res = deps.reply.raw;
        res.writeHead(200, {
          'content-type': 'text/event-stream; charset=utf-8',
          'cache-control': 'no-cache',
          ...timingHeaders(call, overheadMs),
        });
      }
      const s = stream;
      runtime.meter(ticket, () => answer.generated(s));
      for await (const _ of stream) if (described.stream) await write(answer.take());
      if (answer.error !== undefined) throw new Error(answer.error);
    } catch (err) {
      const used = {
        inputTokens: answer.promptTokens ?? ticket.req.inputTokens,
        outputTokens: answer.generated(stream),
      };
      if (deps.gone.aborted || !evicted.aborted) {
        if (!deps.gone.aborted && isReplicaFailure(err)) call.replicaFailed?.(err);
        await runtime.abandon(ticket, used);
        if (deps.gone.aborted) {
          res?.destroy();
          return { usage: used, overheadMs, firstByteMs, outcome: 'cancelled' };
        }
        return fail(engineApiError(err), used);
      }
      // Evicted: re-queue with the output so far and wait to be dispatched again.
      const generated = answer.generated(stream);
      if (!canResume || !(await runtime.evict(ticket, generated))) {
        await runtime.abandon(ticket, used);
        return fail(
          new ApiError('NOT_READY', 'the request was evicted from its replica; retry', { retryAfterS: 1 }),
          used,
        );
      }
      const waited = await runtime.waitForDispatch(ticket, deps.queueTimeoutMs, deps.gone);
      if (waited !== 'dispatched') {
        if (waited === 'aborted') {
          res?.destroy();
          return { usage: used, overheadMs, firstByteMs, outcome: 'cancelled' };
        }
        return fail(
          waited === 'no_replica'
            ? new ApiError('NO_REPLICA', 'evicted, and no replica takes work to resume it; retry', {
                retryAfterS: 1,
              })
            : new ApiError('QUEUE_TIMEOUT', `evicted, and not resumed within ${deps.queueTimeoutMs} ms`),
          used,
        );
      }
      const next = deps.engineFor(ticket.replica ?? '');
      if (next === undefined) {
        await runtime.abandon(ticket, used);
        return fail(
          new ApiError('NO_REPLICA', 'the replica chosen for this request left the fleet; retry', {
            retryAfterS: 1,
          }),
          used,
        );
      }
      engine = next;
      answer.nextRun(generated);
      continue;
    }
    const usage = answer.usage(ticket.req.inputTokens, stream);
    if (described.stream) {
      await write(answer.take() + answer.end(usage));
      res?.end();
    } else {
      const text = answer.body(usage);
      firstByteMs = call.timer.now() - call.arrivedAt;
      void deps.reply
        .code(200)
        .headers({ 'content-type': 'application/json', ...timingHeaders(call, overheadMs) })
        .send(text);
    }
    closeEngineCall(call, engineCall.span, usage);
    settle(call, usage);
    return { usage, overheadMs, firstByteMs, outcome: 'completed' };
  }
}
