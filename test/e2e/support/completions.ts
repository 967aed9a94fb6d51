import { engineMetric } from './chat.ts';
import type { FairwayProcess } from './processes.ts';

/** A streamed completion under way: output tokens so far, when its first token came and when it ended. */
export interface CompletionStream {
  tokens: number;
  firstTokenAt: number | undefined;
  endedAt: number | undefined;
  readonly done: Promise<void>;
  /** Closes the connection (the request is cancelled); `done` then resolves. */
  stop(): void;
}

/**
 * Streams one completion of `model` from `url` (a gateway, with `key`, or an engine) that ends after
 * exactly `output` tokens (engine-sim's `fairway_output_tokens`). `done` rejects if it is not
 * answered 200, unless it was stopped.
 */
export function streamCompletion(
  url: string,
  o: {
    readonly model: string;
    readonly prompt: string;
    readonly maxTokens: number;
    readonly output: number;
    readonly key?: string | undefined;
  },
): CompletionStream {
  const ctl = new AbortController();
  const s = {
    tokens: 0,
    firstTokenAt: undefined as number | undefined,
    endedAt: undefined as number | undefined,
    stop: () => ctl.abort(),
  };
  const run = async () => {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      signal: ctl.signal,
      headers: {
        'content-type': 'application/json',
        ...(o.key === undefined ? {} : { authorization: `Bearer ${o.key}` }),
      },
      body: JSON.stringify({
        model: o.model,
        prompt: o.prompt,
        max_tokens: o.maxTokens,
        fairway_output_tokens: o.output,
        stream: true,
      }),
    });
    if (res.status !== 200 || res.body === null)
      throw new Error(`answered ${res.status}: ${await res.text()}`);
    const decoder = new TextDecoder();
    let buffered = '';
    for await (const bytes of res.body) {
      buffered += decoder.decode(bytes as Uint8Array, { stream: true });
      const events = buffered.split('\n\n');
      buffered = events.pop() ?? '';
      for (const e of events) {
        if (!e.startsWith('data: {')) continue;
        const chunk = JSON.parse(e.slice(6)) as { choices?: { text?: string }[] };
        if (chunk.choices?.[0]?.text) {
          s.tokens++;
          s.firstTokenAt ??= Date.now();
        }
      }
    }
    s.endedAt = Date.now();
  };
  const done = run().catch((err: unknown) => {
    if (!ctl.signal.aborted) throw err;
  });
  return Object.assign(s, { done });
}

/** Waits until `check` holds, polling every 10 ms; fails naming `what` after `timeoutMs`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The access log line a dispatcher wrote for the request that had `completionTokens` tokens (the
 * line is written as the response ends: it may follow the last byte by a moment).
 */
export async function accessLineOf(
  d: FairwayProcess,
  completionTokens: number,
): Promise<{ readonly replica?: string; readonly movedFrom?: readonly string[] } | undefined> {
  for (const deadline = Date.now() + 5000; Date.now() < deadline; ) {
    for (const line of d.output) {
      if (!line.includes('"msg":"request"') || !line.includes(`"completionTokens":${completionTokens},`))
        continue;
      return JSON.parse(line) as { replica?: string; movedFrom?: string[] };
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return undefined;
}

/** A chat message. */
export interface ChatMessage {
  readonly role: string;
  readonly content: string;
}

/** What a non-streamed chat completion answered: its text and its usage's prompt tokens. */
export interface ChatAnswer {
  readonly content: string;
  readonly promptTokens: number;
  /** `usage.prompt_tokens_details.cached_tokens` (0 when absent). */
  readonly cachedTokens: number;
}

/**
 * One non-streamed chat completion of `model` from `url` (a gateway, with `key`, or an engine)
 * that ends after exactly `output` tokens (engine-sim's `fairway_output_tokens`); throws unless it
 * is answered 200.
 */
export async function chatAnswer(
  url: string,
  o: {
    readonly model: string;
    readonly messages: readonly ChatMessage[];
    readonly output: number;
    readonly key?: string | undefined;
  },
): Promise<ChatAnswer> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(o.key === undefined ? {} : { authorization: `Bearer ${o.key}` }),
    },
    body: JSON.stringify({
      model: o.model,
      messages: o.messages,
      max_tokens: o.output,
      fairway_output_tokens: o.output,
    }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`chat answered ${res.status}: ${text}`);
  const body = JSON.parse(text) as {
    choices: { message: { content: string } }[];
    usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } | null };
  };
  return {
    content: body.choices[0]?.message.content ?? '',
    cachedTokens: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
    promptTokens: body.usage.prompt_tokens,
  };
}

/**
 * Runs `send` (one request to a fleet of `engineUrls`) and returns its result with the index of
 * the engine that served it: the one whose finished-request count (`vllm:request_success_total`)
 * rose, which an engine counts as the answer leaves (waited for up to 5 s).
 */
export async function servedBy<T>(
  engineUrls: readonly string[],
  send: () => Promise<T>,
): Promise<T & { engine: number }> {
  const finished = () => Promise.all(engineUrls.map((u) => engineMetric(u, 'vllm:request_success_total')));
  const before = await finished();
  const result = await send();
  for (let deadline = Date.now() + 5000; ; ) {
    const after = await finished();
    const engine = after.findIndex((n, i) => n > (before[i] ?? 0));
    if (engine >= 0) return { ...result, engine };
    if (Date.now() > deadline) throw new Error('no engine counted the request');
    await new Promise((r) => setTimeout(r, 20));
  }
}
