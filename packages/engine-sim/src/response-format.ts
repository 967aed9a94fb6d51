import { chatLogprobs, completionLogprobs, type OutputPlan } from './output-plan.ts';

/**
 * vLLM's OpenAI response shapes, built as strings from per-request prefixes so that streaming one
 * token costs a string concatenation, not a `JSON.stringify` of a chunk object.
 */

/** Which endpoint a response belongs to. */
export type ResponseKind = 'chat' | 'completions';

/** Synthetic vocabulary: the text is filler, the token count is what the engine model says. */
const WORDS = [
  ' the',
  ' of',
  ' and',
  ' to',
  ' in',
  ' a',
  ' is',
  ' that',
  ' for',
  ' it',
  ' as',
  ' was',
  ' with',
  ' be',
  ' by',
  ' on',
  ' not',
  ' he',
  ' this',
  ' are',
  ' or',
  ' his',
  ' from',
  ' at',
  ' which',
  ' but',
  ' have',
  ' an',
  ' had',
  ' they',
  ' you',
  ' were',
  ' their',
  ' one',
  ' all',
  ' we',
  ' can',
  ' her',
  ' has',
  ' there',
  ' been',
  ' if',
  ' more',
  ' when',
  ' will',
  ' would',
  ' who',
  ' so',
  ' no',
  ' out',
  ' up',
  ' into',
  ' than',
  ' them',
  ' some',
  ' time',
  ' only',
  ' new',
  ' about',
  ' then',
  ' also',
  ' its',
  ' other',
  ' two',
];

/** The text of output token `index` (0-based); JSON-safe, so it needs no escaping. */
export function tokenText(index: number): string {
  return WORDS[index % WORDS.length]!;
}

/** The text of `count` output tokens, starting at token `from` (a continuation's first). */
export function syntheticText(count: number, from = 0): string {
  let s = '';
  for (let i = from; i < from + count; i++) s += tokenText(i);
  return s;
}

/**
 * How many of the engine's own output tokens `text` begins with: the length of a partial answer
 * a continuation (`continue_final_message`) hands back, so the engine goes on where it stopped.
 */
export function syntheticPrefixTokens(text: string): number {
  let pos = 0;
  let n = 0;
  for (;;) {
    const t = tokenText(n);
    if (!text.startsWith(t, pos)) return n;
    pos += t.length;
    n++;
  }
}

/**
 * `usage` as vLLM serialises it; `cachedTokens`, when given, as `prompt_tokens_details` (which
 * vLLM reports under `--enable-prompt-tokens-details` when some of the prompt was cached).
 */
export function usageJson(promptTokens: number, completionTokens: number, cachedTokens?: number): string {
  const details =
    cachedTokens === undefined ? '' : `,"prompt_tokens_details":{"cached_tokens":${cachedTokens}}`;
  return `{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens + completionTokens},"completion_tokens":${completionTokens}${details}}`;
}

/** Identity of one response. */
export interface ResponseIdentity {
  readonly kind: ResponseKind;
  readonly id: string;
  /** Unix seconds. */
  readonly created: number;
  readonly model: string;
}

/** Builds the SSE events of one streamed response. */
export class ChunkWriter {
  readonly #head: string;
  readonly #contentOpen: string;
  readonly #kind: ResponseKind;
  readonly #promptTokens: number;

  constructor(identity: ResponseIdentity, promptTokens: number) {
    const object = identity.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    this.#kind = identity.kind;
    this.#head = `data: {"id":${JSON.stringify(identity.id)},"object":"${object}","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":[`;
    this.#contentOpen =
      identity.kind === 'chat'
        ? `${this.#head}{"index":0,"delta":{"content":"`
        : `${this.#head}{"index":0,"text":"`;
    this.#promptTokens = promptTokens;
  }

  /** The chunk vLLM sends before the first chat token: the assistant role with empty content. */
  roleChunk(continuousUsage: boolean): string {
    const usage = continuousUsage ? `,"usage":${usageJson(this.#promptTokens, 0)}` : '';
    return `${this.#head}{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${usage}}\n\n`;
  }

  /**
   * One token's chunk. `finishReason` is set on the last token, as vLLM does; `completionTokens`
   * is the count including this token, reported when `continuousUsage` is on.
   */
  tokenChunk(
    text: string,
    finishReason: string | null,
    continuousUsage: boolean,
    completionTokens: number,
  ): string {
    const finish = finishReason === null ? 'null' : `"${finishReason}"`;
    const tail =
      this.#kind === 'chat'
        ? `"},"logprobs":null,"finish_reason":${finish}}]`
        : `","logprobs":null,"finish_reason":${finish},"stop_reason":null}]`;
    const usage = continuousUsage ? `,"usage":${usageJson(this.#promptTokens, completionTokens)}` : '';
    return `${this.#contentOpen}${text}${tail}${usage}}\n\n`;
  }

  /** The role chunk of choice `index` of a request with n > 1. */
  roleChunkAt(index: number, continuousUsage: boolean): string {
    const usage = continuousUsage ? `,"usage":${usageJson(this.#promptTokens, 0)}` : '';
    return `${this.#head}{"index":${index},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${usage}}\n\n`;
  }

  /** One token's chunk of choice `index` of a request with n > 1 (see {@link tokenChunk}). */
  tokenChunkAt(
    index: number,
    text: string,
    finishReason: string | null,
    continuousUsage: boolean,
    completionTokens: number,
  ): string {
    const chunk = this.tokenChunk(text, finishReason, continuousUsage, completionTokens);
    return index === 0 ? chunk : chunk.replace('{"index":0,', `{"index":${index},`);
  }

  /** A chunk of one choice given as JSON (`{"index":…}`), with usage when `continuousUsage`. */
  choiceChunk(choice: string, continuousUsage: boolean, completionTokens: number): string {
    const usage = continuousUsage ? `,"usage":${usageJson(this.#promptTokens, completionTokens)}` : '';
    return `${this.#head}${choice}]${usage}}\n\n`;
  }

  /** The final chunk with `usage` and no choices (`stream_options.include_usage`). */
  usageChunk(completionTokens: number, cachedTokens?: number): string {
    return `${this.#head}],"usage":${usageJson(this.#promptTokens, completionTokens, cachedTokens)}}\n\n`;
  }

  /** The terminating event. */
  static readonly DONE = 'data: [DONE]\n\n';
}

/** The body of a non-streamed completion. */
export function completionBody(
  identity: ResponseIdentity,
  promptTokens: number,
  completionTokens: number,
  finishReason: string,
  firstToken = 0,
  choices = 1,
  cachedTokens?: number,
): string {
  // Every choice has the same synthetic text: `completionTokens` counts them all.
  const text = JSON.stringify(syntheticText(Math.ceil(completionTokens / choices), firstToken));
  const head = `{"id":${JSON.stringify(identity.id)},"object":"${identity.kind === 'chat' ? 'chat.completion' : 'text_completion'}","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":[`;
  const out: string[] = [];
  for (let i = 0; i < choices; i++)
    out.push(
      identity.kind === 'chat'
        ? `{"index":${i},"message":{"role":"assistant","content":${text},"tool_calls":[]},"logprobs":null,"finish_reason":"${finishReason}","stop_reason":null}`
        : `{"index":${i},"text":${text},"logprobs":null,"finish_reason":"${finishReason}","stop_reason":null,"prompt_logprobs":null}`,
    );
  return `${head}${out.join(',')}],"usage":${usageJson(promptTokens, completionTokens, cachedTokens)},"prompt_logprobs":null}`;
}

/** The body of a non-streamed answer shaped by an output plan (tool call, JSON, stop, logprobs). */
export function plannedBody(
  identity: ResponseIdentity,
  plan: OutputPlan,
  promptTokens: number,
  completionTokens: number,
  finishReason: string,
  cachedTokens?: number,
): string {
  const text = plan.text(completionTokens);
  const stopReason =
    finishReason === 'stop' && plan.stopReason !== undefined ? JSON.stringify(plan.stopReason) : 'null';
  const head = `{"id":${JSON.stringify(identity.id)},"object":"${identity.kind === 'chat' ? 'chat.completion' : 'text_completion'}","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":[`;
  let choice: string;
  if (identity.kind === 'chat') {
    const logprobs = plan.topLogprobs === undefined ? 'null' : chatLogprobs(plan, 0, completionTokens);
    const call = plan.toolCall;
    const message =
      call === undefined
        ? `{"role":"assistant","content":${JSON.stringify(text)},"tool_calls":[]}`
        : `{"role":"assistant","content":null,"tool_calls":[{"id":${JSON.stringify(call.id)},"type":"function","function":{"name":${JSON.stringify(call.name)},"arguments":${JSON.stringify(text)}}}]}`;
    choice = `{"index":0,"message":${message},"logprobs":${logprobs},"finish_reason":"${finishReason}","stop_reason":${stopReason}}`;
  } else {
    const logprobs =
      plan.topLogprobs === undefined ? 'null' : completionLogprobs(plan, 0, completionTokens, 0);
    choice = `{"index":0,"text":${JSON.stringify(text)},"logprobs":${logprobs},"finish_reason":"${finishReason}","stop_reason":${stopReason},"prompt_logprobs":null}`;
  }
  return `${head}${choice}],"usage":${usageJson(promptTokens, completionTokens, cachedTokens)},"prompt_logprobs":null}`;
}

/** vLLM's error body (the OpenAI shape vLLM uses since 0.10). */
export function errorBody(status: number, type: string, message: string): string {
  return JSON.stringify({ error: { message, type, param: null, code: status } });
}
