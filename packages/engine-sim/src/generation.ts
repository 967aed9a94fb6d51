import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { EngineEvent, EngineSeqInput } from '@fairway/perf';
import type { FaultPlan } from './faults.ts';
import type { EngineSimMetrics, FinishedReason, RequestTimings } from './metrics.ts';
import { chatLogprobs, completionLogprobs, type OutputPlan } from './output-plan.ts';
import type { RealtimeDriver } from './realtime-driver.ts';
import {
  ChunkWriter,
  completionBody,
  plannedBody,
  type ResponseIdentity,
  tokenText,
} from './response-format.ts';
import type { Flushable, StreamFlusher } from './stream-flusher.ts';

/** Everything one generation request needs to run and answer. */
export interface GenerationInit {
  readonly identity: ResponseIdentity;
  readonly seq: EngineSeqInput;
  /** Index of the first output token: tokens a continuation already has (0 for a new request). */
  readonly firstToken?: number;
  /** `stop` when the request ends by itself, `length` when `max_tokens` cuts it. */
  readonly finishReason: 'stop' | 'length' | 'tool_calls';
  readonly stream: boolean;
  /**
   * Choices (`n`): the sequence's output is every choice's tokens, interleaved (token k belongs to
   * choice k mod n), each choice as long as the others. @default 1
   */
  readonly choices?: number;
  /** What the answer says when its sampling parameters shape it (tools, JSON, stop, logprobs). */
  readonly plan?: OutputPlan;
  /** `stream_options.include_usage`. */
  readonly includeUsage: boolean;
  /** `stream_options.continuous_usage_stats`. */
  readonly continuousUsage: boolean;
  /**
   * `--enable-prompt-tokens-details`: the final usage reports the prompt tokens found in the prefix
   * cache, when there are any (vLLM omits `prompt_tokens_details` when none were). @default false
   */
  readonly promptTokensDetails?: boolean;
  readonly fault: FaultPlan;
  readonly res: ServerResponse;
  readonly driver: RealtimeDriver;
  readonly metrics: EngineSimMetrics;
  /** Coalesces streamed chunks into periodic writes; absent, each step's chunk is written at once. */
  readonly flusher?: StreamFlusher;
  /** Called once the request no longer needs the server (finished, aborted or its connection closed). */
  readonly onSettled: (g: Generation) => void;
}

type State = 'waiting' | 'running' | 'finished' | 'aborted';

/** Real ms between the last token sent and the injected connection drop. */
const DROP_GRACE_MS = 10;

/**
 * One request inside the simulated engine: submits its sequence to the real-time driver, turns the
 * model's events into vLLM-shaped SSE chunks (or one JSON body), applies its injected fault, and
 * aborts the sequence, freeing its KV blocks, when the client disconnects.
 */
export class Generation implements Flushable {
  readonly id: string;
  readonly #init: GenerationInit;
  readonly #chunks: ChunkWriter | undefined;
  /** Model ms (the driver's clock) of arrival, first scheduling and first and last tokens. */
  readonly #arrivalMs: number;
  #scheduledMs: number | undefined;
  #firstTokenMs: number | undefined;
  #lastTokenMs = 0;
  #state: State = 'waiting';
  #generated = 0;
  #silent = false;
  /** The injected drop point was reached; the connection is about to be destroyed. */
  #dropping = false;
  /** Chunks waiting for the flusher. */
  #pending = '';
  /**
   * The connection, when the response uses chunked encoding: chunks are framed and written to it
   * directly, one `write` per flush, skipping Node's per-write HTTP machinery (cork, nextTick,
   * three-buffer writev). `res.end()` still writes the terminating chunk.
   */
  #socket: Socket | undefined;
  #settled = false;

  constructor(init: GenerationInit) {
    this.#init = init;
    this.id = init.seq.id;
    this.#chunks = init.stream ? new ChunkWriter(init.identity, init.seq.inputTokens) : undefined;
    this.#arrivalMs = init.driver.arrivalModelMs();
  }

  /** Sends the response headers (streaming) and hands the sequence to the engine. */
  start(): void {
    const { res, stream } = this.#init;
    if (res.destroyed) {
      // The client left while the request waited (e.g. an injected headers delay).
      this.#state = 'aborted';
      this.#settle();
      return;
    }
    res.on('close', this.#onClose);
    if (stream) {
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        'x-request-id': this.id,
      });
      // Headers go out now, as vLLM's StreamingResponse does, before the first token exists.
      res.flushHeaders();
      if (res.chunkedEncoding && res.socket) this.#socket = res.socket;
    }
    this.#init.driver.submit(this.#init.seq, this.#onEvent);
  }

  /** Ends the request from the server side (sleep, shutdown): aborts it and closes its connection. */
  abort(): void {
    this.#abortSequence();
    this.#init.res.destroy();
  }

  readonly #onEvent = (ev: EngineEvent): void => {
    const { driver } = this.#init;
    switch (ev.kind) {
      case 'scheduled':
        if (this.#state === 'waiting') {
          this.#state = 'running';
          // Scheduled when its step began; a request never runs before it arrived.
          this.#scheduledMs ??= Math.max(this.#arrivalMs, this.#stepMs(driver, 'start'));
        }
        return;
      case 'first-token':
        return;
      case 'preempted':
        return;
      case 'token':
        this.#onToken(ev.generated);
        return;
      case 'finished':
        // An ignored sequence (its prompt can never fit in the KV cache) ends at once, as vLLM's
        // scheduler does with a `length` finish.
        this.#onFinished(ev.generated, ev.ignored === true, ev.cachedTokens);
        return;
    }
  };

  #onToken(generated: number): void {
    if (generated <= this.#generated || this.#state === 'finished' || this.#state === 'aborted') return;
    const { metrics, driver, fault, res, seq } = this.#init;
    // A token exists when the step that produced it ends.
    const now = Math.max(this.#arrivalMs, this.#stepMs(driver, 'end'));
    if (this.#generated === 0) {
      this.#firstTokenMs = now;
      this.#scheduledMs ??= this.#arrivalMs;
      metrics.observeTtft((now - this.#arrivalMs) / 1000);
    } else metrics.observeInterToken((now - this.#lastTokenMs) / 1000);
    this.#lastTokenMs = now;
    const previous = this.#generated;
    this.#generated = generated;
    this.#state = 'running';
    if (this.#dropping) return;
    if (fault.kind === 'hang' && generated > fault.afterTokens) this.#silent = true;
    // Tokens past a drop point are never sent.
    const upTo = fault.kind === 'drop' ? Math.min(generated, fault.afterTokens) : generated;
    if (this.#chunks && !this.#silent && upTo > previous) {
      const c = this.#chunks;
      const usage = this.#init.continuousUsage;
      const choices = this.#init.choices ?? 1;
      const plan = this.#init.plan;
      let out = '';
      if (plan !== undefined) {
        if (previous === 0 && this.#init.identity.kind === 'chat') out += c.roleChunk(usage);
        for (let n = previous + 1; n <= upTo; n++) {
          const last = n === seq.outputTokens ? this.#init.finishReason : null;
          out += c.choiceChunk(this.#plannedChoice(plan, n - 1, last), usage, n);
        }
      } else if (previous === 0 && this.#init.identity.kind === 'chat')
        for (let i = 0; i < choices; i++) out += i === 0 ? c.roleChunk(usage) : c.roleChunkAt(i, usage);
      if (plan !== undefined) {
        // Written above.
      } else if (choices === 1)
        for (let n = previous + 1; n <= upTo; n++) {
          const last = n === seq.outputTokens ? this.#init.finishReason : null;
          out += c.tokenChunk(tokenText((this.#init.firstToken ?? 0) + n - 1), last, usage, n);
        }
      else
        for (let n = previous + 1; n <= upTo; n++) {
          const last = n > seq.outputTokens - choices ? this.#init.finishReason : null;
          const k = Math.floor((n - 1) / choices);
          out += c.tokenChunkAt((n - 1) % choices, tokenText(k), last, usage, n);
        }
      if (this.#init.flusher && fault.kind !== 'drop') {
        this.#pending += out;
        this.#init.flusher.mark(this);
      } else this.#send(this.#takePending() + out);
    }
    if (fault.kind === 'drop' && generated >= fault.afterTokens) {
      this.#dropping = true;
      // Cut the connection a moment after the last token left, so the client has read what was
      // sent (a reset can make the receiver discard data it has not consumed yet).
      setTimeout(() => res.destroy(), fault.afterTokens === 0 ? 0 : DROP_GRACE_MS);
    }
  }

  #onFinished(generated: number, ignored: boolean, cachedTokens: number | undefined): void {
    if (this.#state === 'finished' || this.#state === 'aborted') return;
    if (generated > this.#generated) this.#onToken(generated);
    if ((this.#state as State) === 'aborted' || this.#init.res.destroyed || this.#dropping) return;
    this.#state = 'finished';
    const finishReason = ignored ? 'length' : this.#init.finishReason;
    const { metrics, driver, res, identity, seq } = this.#init;
    // The engine stopped by itself for a tool call too (the API names it `tool_calls`).
    metrics.observeFinished(
      this.#timings(Math.max(this.#lastTokenMs, this.#stepMs(driver, 'end'))),
      finishReason === 'tool_calls' ? 'stop' : finishReason,
    );
    // A hanging response stays open until the client gives up; the engine is done with it.
    if (
      this.#silent ||
      (this.#init.fault.kind === 'hang' && this.#generated >= this.#init.fault.afterTokens)
    ) {
      return;
    }
    const cached = this.#init.promptTokensDetails && cachedTokens ? cachedTokens : undefined;
    const c = this.#chunks;
    if (c) {
      let out = '';
      // The model stopped short of the planned length (it should not): still close the choice.
      if (this.#generated < seq.outputTokens) {
        out += c.tokenChunk('', finishReason, this.#init.continuousUsage, this.#generated);
      }
      if (this.#init.includeUsage) out += c.usageChunk(this.#generated, cached);
      out += ChunkWriter.DONE;
      this.#send(this.#takePending() + out);
      res.end();
    } else {
      const body = this.#init.plan
        ? plannedBody(identity, this.#init.plan, seq.inputTokens, this.#generated, finishReason, cached)
        : completionBody(
            identity,
            seq.inputTokens,
            this.#generated,
            finishReason,
            this.#init.firstToken ?? 0,
            this.#init.choices ?? 1,
            cached,
          );
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'x-request-id': this.id,
      });
      res.end(body);
    }
  }

  /** The choice of output token `i`'s chunk, as the plan shapes it. */
  #plannedChoice(plan: OutputPlan, i: number, finish: string | null): string {
    const f = finish === null ? 'null' : `"${finish}"`;
    const piece = plan.piece(i);
    if (this.#init.identity.kind === 'completions') {
      const lp =
        plan.topLogprobs === undefined ? 'null' : completionLogprobs(plan, i, i + 1, plan.text(i).length);
      const sr =
        finish === 'stop' && plan.stopReason !== undefined ? JSON.stringify(plan.stopReason) : 'null';
      return `{"index":0,"text":"${piece}","logprobs":${lp},"finish_reason":${f},"stop_reason":${sr}}`;
    }
    const call = plan.toolCall;
    const delta =
      call === undefined
        ? `{"content":"${piece}"}`
        : i === 0
          ? `{"tool_calls":[{"index":0,"id":${JSON.stringify(call.id)},"type":"function","function":{"name":${JSON.stringify(call.name)},"arguments":"${piece}"}}]}`
          : `{"tool_calls":[{"index":0,"function":{"arguments":"${piece}"}}]}`;
    const lp = plan.topLogprobs === undefined ? 'null' : chatLogprobs(plan, i, i + 1);
    return `{"index":0,"delta":${delta},"logprobs":${lp},"finish_reason":${f}}`;
  }

  /** Writes the chunks buffered for the flusher. */
  flush(): void {
    const out = this.#takePending();
    if (out.length > 0 && !this.#init.res.destroyed) this.#send(out);
  }

  #send(text: string): void {
    // An empty chunk would read as the end of the body.
    if (text.length === 0) return;
    const socket = this.#socket;
    if (socket) socket.write(`${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`);
    else this.#init.res.write(text);
  }

  #takePending(): string {
    const out = this.#pending;
    if (out.length > 0) {
      this.#pending = '';
      this.#init.flusher?.forget(this);
    }
    return out;
  }

  readonly #onClose = (): void => {
    // 'close' also follows a normal end; only an unfinished request is aborted.
    if (this.#state !== 'finished') this.#abortSequence();
    this.#settle();
  };

  #abortSequence(): void {
    if (this.#state === 'finished' || this.#state === 'aborted') return;
    this.#state = 'aborted';
    const { driver, metrics } = this.#init;
    driver.abort(this.id);
    metrics.observeFinished(this.#timings(driver.modelNowMs()), 'abort' satisfies FinishedReason);
    this.#settle();
  }

  /** Model ms at which the step being delivered started or ends; now, outside a delivery. */
  #stepMs(driver: RealtimeDriver, which: 'start' | 'end'): number {
    const step = driver.currentStepModelMs();
    if (step === undefined) return driver.modelNowMs();
    return which === 'start' ? step.startMs : step.endMs;
  }

  /** The request's phase durations, seconds, finishing at model ms `finishMs`. */
  #timings(finishMs: number): RequestTimings {
    const s = (ms: number): number => Math.max(0, ms) / 1000;
    const sched = this.#scheduledMs;
    const first = this.#firstTokenMs;
    return {
      e2eS: s(finishMs - this.#arrivalMs),
      queueS: sched === undefined ? undefined : s(sched - this.#arrivalMs),
      prefillS: sched === undefined || first === undefined ? undefined : s(first - sched),
      decodeS: first === undefined ? undefined : s(this.#lastTokenMs - first),
      inferenceS: sched === undefined || first === undefined ? undefined : s(this.#lastTokenMs - sched),
      generated: this.#generated,
    };
  }

  #settle(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#pending = '';
    this.#init.flusher?.forget(this);
    this.#init.onSettled(this);
  }
}
