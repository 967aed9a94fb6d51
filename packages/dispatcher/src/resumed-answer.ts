import type { Usage } from '@fairway/core';
import type { CompletionBody, CompletionEndpoint, EngineStream, SseDataLine } from '@fairway/engine';

interface ToolCallDelta {
  index?: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}

/** Completions `logprobs`, as each chunk carries its tokens' part. */
interface CompletionLogprobs {
  tokens?: unknown[];
  token_logprobs?: unknown[];
  top_logprobs?: unknown[];
  text_offset?: unknown[];
}

interface Chunk {
  id?: string;
  created?: number;
  model?: string;
  choices?: {
    index?: number;
    text?: string;
    delta?: { role?: string; content?: string | null; tool_calls?: ToolCallDelta[] | null };
    logprobs?: ({ content?: unknown[] | null } & CompletionLogprobs) | null;
    finish_reason?: string | null;
    stop_reason?: unknown;
  }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number } | null;
}

/** What one choice of a non-streamed answer gathers from the chunks (besides its text). */
interface ChoiceParts {
  text: string;
  finishReason: string | undefined;
  stopReason: unknown;
  /** Tool calls by their index, arguments joined. */
  toolCalls?: Map<number, { id?: string; type?: string; name: string; arguments: string }>;
  /** Chat logprobs entries, or completions logprobs lists, joined. */
  logprobs?: { content: unknown[] } | Required<CompletionLogprobs>;
}

/** Adds a chunk's tool-call deltas and logprobs to what a choice gathered. */
function gather(parts: ChoiceParts, choice: NonNullable<Chunk['choices']>[number], chat: boolean): void {
  if (choice.stop_reason !== undefined && choice.stop_reason !== null) parts.stopReason = choice.stop_reason;
  for (const d of choice.delta?.tool_calls ?? []) {
    parts.toolCalls ??= new Map();
    const at = d.index ?? 0;
    const call = parts.toolCalls.get(at) ?? { name: '', arguments: '' };
    if (d.id !== undefined) call.id = d.id;
    if (d.type !== undefined) call.type = d.type;
    if (d.function?.name !== undefined) call.name += d.function.name;
    if (d.function?.arguments !== undefined) call.arguments += d.function.arguments;
    parts.toolCalls.set(at, call);
  }
  const lp = choice.logprobs;
  if (lp === undefined || lp === null) return;
  if (chat) {
    parts.logprobs ??= { content: [] };
    const into = parts.logprobs as { content: unknown[] };
    if (Array.isArray(lp.content)) into.content.push(...lp.content);
    return;
  }
  parts.logprobs ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  const into = parts.logprobs as Required<CompletionLogprobs>;
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) {
    const v = lp[k];
    if (Array.isArray(v)) into[k].push(...v);
  }
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
 * The client's side of a request served in several engine runs (evicted and resumed, QLM section
 * 5): what the client sees reads as one response — one id, one role chunk, usage counting every
 * run's output — and the text so far is kept for the next continuation. A streamed request's
 * first run is forwarded as the engine sent it and read here only if it is evicted
 * ({@link ResumedAnswer.replay}); the chunks of later runs are parsed and rewritten
 * ({@link ResumedAnswer.line}). A non-streamed one is read from its first run on, and answered
 * once at the end ({@link ResumedAnswer.body}).
 */
export class ResumedAnswer {
  readonly #endpoint: CompletionEndpoint;
  readonly #wantsUsage: boolean;
  /** Whether chunks are rewritten for a streamed client (else only read). */
  readonly #streamed: boolean;
  #id: string | undefined;
  #created: number | undefined;
  #model: string | undefined;
  /** Text of every run so far. */
  text = '';
  /** Tool calls, logprobs and stop reason of the first choice (`text` and `finishReason` hold the rest). */
  readonly #first: ChoiceParts = { text: '', finishReason: undefined, stopReason: undefined };
  /** Choices after the first of a request with n > 1, by index. */
  readonly #others = new Map<number, ChoiceParts>();
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

  constructor(endpoint: CompletionEndpoint, wantsUsage: boolean, streamed: boolean) {
    this.#endpoint = endpoint;
    this.#wantsUsage = wantsUsage;
    this.#streamed = streamed;
  }

  /**
   * Reads the SSE bytes already forwarded to the client as the engine sent them (a first run,
   * evicted): the text, id and usage they carry. Nothing is written for them again.
   */
  replay(sent: readonly Uint8Array[]): void {
    const text = Buffer.concat(sent).toString('utf8');
    let from = 0;
    while (from < text.length) {
      let end = text.indexOf('\n', from);
      if (end < 0) end = text.length;
      const line = text.slice(from, end).trim();
      from = end + 1;
      if (!line.startsWith('data:')) continue;
      const payload = line.slice(5).trim();
      if (payload === '[DONE]') continue;
      this.#read(payload, false);
    }
  }

  /** Starts a run that follows `generated` tokens of output. */
  nextRun(generated: number): void {
    this.before = generated;
    this.partUsage = undefined;
  }

  /** Reads one `data:` line of the engine's stream (rewritten for the client when streamed). */
  line(l: SseDataLine): void {
    if (l.done) return;
    const raw = decoder.decode(l.payload);
    if (l.isError) {
      this.error = raw;
      return;
    }
    this.#read(raw, this.#streamed);
  }

  #read(raw: string, write: boolean): void {
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
    const index = choice.index ?? 0;
    const chat = this.#endpoint === 'chat';
    if (index !== 0) {
      // Another choice of a request with n > 1 (never resumed: only its answer is rebuilt).
      const other = this.#others.get(index) ?? { text: '', finishReason: undefined, stopReason: undefined };
      if (typeof content === 'string') other.text += content;
      if (choice.finish_reason) other.finishReason = choice.finish_reason;
      if (!this.#streamed) gather(other, choice, chat);
      this.#others.set(index, other);
      return;
    }
    if (!this.#streamed) gather(this.#first, choice, chat);
    if (typeof content === 'string') this.text += content;
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    if (!write) return;
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
    const choiceOf = (index: number, text: string, finishReason: string | undefined, parts: ChoiceParts) => {
      const calls =
        parts.toolCalls === undefined ? undefined : [...parts.toolCalls].sort((a, b) => a[0] - b[0]);
      const common = {
        logprobs: parts.logprobs ?? null,
        finish_reason: finishReason ?? 'stop',
        stop_reason: parts.stopReason ?? null,
      };
      if (this.#endpoint !== 'chat') return { index, text, ...common };
      return {
        index,
        message: {
          role: 'assistant',
          content: calls !== undefined && text === '' ? null : text,
          ...(calls === undefined
            ? {}
            : {
                tool_calls: calls.map(([, c]) => ({
                  id: c.id,
                  type: c.type ?? 'function',
                  function: { name: c.name, arguments: c.arguments },
                })),
              }),
        },
        ...common,
      };
    };
    const choices = [choiceOf(0, this.text, this.finishReason, this.#first)];
    for (const [i, o] of [...this.#others].sort((a, b) => a[0] - b[0]))
      choices.push(choiceOf(i, o.text, o.finishReason, o));
    return JSON.stringify({
      id: this.#id,
      object: this.#endpoint === 'chat' ? 'chat.completion' : 'text_completion',
      created: this.#created,
      model: this.#model,
      choices,
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
