import OpenAI from 'openai';
import type { ChatCompletionCreateParamsStreaming } from 'openai/resources';

/** What one streamed request did, as the client saw it. */
export interface StreamRecord {
  readonly tenant: string;
  readonly dispatcher: number;
  readonly startMs: number;
  /** ms from sending to the first content token; undefined if none arrived. */
  readonly ttftMs: number | undefined;
  /** ms from sending to the end of the stream. */
  readonly endMs: number;
  /** `x-fairway-queue-ms`: how long the gateway held the request waiting for capacity. */
  readonly queueMs: number | undefined;
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly error: unknown;
}

/** Options of one streamed chat request. */
export interface StreamOptions {
  readonly client: OpenAI;
  readonly tenant: string;
  readonly dispatcher: number;
  readonly model: string;
  readonly prompt: string;
  /** max_tokens and (through engine-sim's hook) the exact output length. */
  readonly tokens: number;
  /** Clock origin of the run, ms (performance.now()). */
  readonly origin: number;
}

/** Sends one streamed chat completion (asking for usage) and records what happened. */
export async function streamOnce(o: StreamOptions): Promise<StreamRecord> {
  const t0 = performance.now();
  let ttft: number | undefined;
  let promptTokens = 0;
  let completionTokens = 0;
  let queueMs: number | undefined;
  let error: unknown;
  try {
    const body: ChatCompletionCreateParamsStreaming & { fairway_output_tokens: number } = {
      model: o.model,
      messages: [{ role: 'user', content: o.prompt }],
      max_tokens: o.tokens,
      fairway_output_tokens: o.tokens,
      stream: true,
      stream_options: { include_usage: true },
    };
    const { data, response } = await o.client.chat.completions.create(body).withResponse();
    const q = response.headers.get('x-fairway-queue-ms');
    if (q !== null) queueMs = Number(q);
    for await (const chunk of data) {
      if (ttft === undefined && chunk.choices[0]?.delta?.content) ttft = performance.now() - t0;
      if (chunk.usage) {
        promptTokens = chunk.usage.prompt_tokens;
        completionTokens = chunk.usage.completion_tokens;
      }
    }
  } catch (err) {
    error = err;
  }
  return {
    tenant: o.tenant,
    dispatcher: o.dispatcher,
    startMs: t0 - o.origin,
    ttftMs: ttft,
    endMs: performance.now() - o.origin,
    queueMs,
    promptTokens,
    completionTokens,
    error,
  };
}

/** A closed-loop load: `workers` clients each sending one request after another until stopped. */
export class ClosedLoop {
  readonly records: StreamRecord[] = [];
  #running = true;
  readonly #done: Promise<void>[] = [];

  /**
   * @param next builds request `i` of worker `w` (which dispatcher, client, prompt…)
   * @param stopOnError a worker stops at its first failed request (its dispatcher died)
   */
  constructor(workers: number, next: (w: number, i: number) => StreamOptions, stopOnError = false) {
    for (let w = 0; w < workers; w++) {
      this.#done.push(
        (async () => {
          for (let i = 0; this.#running; i++) {
            const r = await streamOnce(next(w, i));
            this.records.push(r);
            if (r.error !== undefined && stopOnError) return;
          }
        })(),
      );
    }
  }

  /** Stops sending; resolves when every worker's last request has ended. */
  async stop(): Promise<void> {
    this.#running = false;
    await Promise.all(this.#done);
  }
}

/** The p-th percentile (0–100) of numbers, by nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** An OpenAI client with retries off (a test must see every failure). */
export function openai(baseURL: string, apiKey: string): OpenAI {
  return new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
}
