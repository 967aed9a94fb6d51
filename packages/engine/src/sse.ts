/**
 * An incremental scanner for the server-sent events of vLLM's OpenAI server. A proxy forwards the
 * engine's bytes untouched and feeds the same chunks to the scanner, which finds `data:` lines and
 * reads what accounting needs (content chunks, `finish_reason`, `usage`, `[DONE]`) with byte
 * searches instead of parsing every chunk as JSON; only a `usage` object is parsed, lazily.
 */

/** Token counts as vLLM reports them in `usage`. */
export interface EngineUsage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly totalTokens: number;
  /**
   * Prompt tokens served from the engine's prefix cache (`prompt_tokens_details.cached_tokens`,
   * or `input_tokens_details.cached_tokens` in the Responses API); absent when the engine does
   * not report it (vLLM without `--enable-prompt-tokens-details`).
   */
  readonly cachedTokens?: number | undefined;
}

/**
 * The cached-token count of a usage object's details (`prompt_tokens_details` or
 * `input_tokens_details`): a non-negative integer, else undefined.
 */
export function cachedTokensOf(details: unknown): number | undefined {
  if (typeof details !== 'object' || details === null) return undefined;
  const c = (details as { cached_tokens?: unknown }).cached_tokens;
  return Number.isSafeInteger(c) && (c as number) >= 0 ? (c as number) : undefined;
}

/** What the scanner saw in one `data:` line. */
export interface SseDataLine {
  /** The line's payload after `data:` and optional space, without the line end, as the engine sent it. */
  readonly payload: Uint8Array;
  /** True for the terminating `data: [DONE]`. */
  readonly done: boolean;
  /** True when the chunk carries non-empty `delta.content` (chat) or `text` (completions). */
  readonly hasContent: boolean;
  /** True when the chunk carries a `usage` object. */
  readonly hasUsage: boolean;
  /** True when the chunk is an error object (vLLM sends `data: {"error": ...}` mid-stream). */
  readonly isError: boolean;
}

const DATA = 'data:';
const DONE = '[DONE]';
const CONTENT_KEY = '"content":';
const TEXT_KEY = '"text":';
const USAGE_KEY = '"usage":';
const FINISH_KEY = '"finish_reason":';
const ERROR_KEY = '"error":';
const SPACE = 0x20;
const TAB = 0x09;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const CR = 0x0d;

// Lines are handled as latin1 strings: one char per byte, so offsets are byte offsets and V8's
// string search does the work without crossing into native code per lookup.

function skipSpace(line: string, i: number): number {
  let c = line.charCodeAt(i);
  while (c === SPACE || c === TAB) c = line.charCodeAt(++i);
  return i;
}

/** Index of the first char after `key` and optional spaces, or -1 when `key` is absent. */
function valueAfter(line: string, key: string): number {
  const at = line.indexOf(key);
  return at < 0 ? -1 : skipSpace(line, at + key.length);
}

/** True when a JSON string value starts at `i` and is not empty. */
function nonEmptyStringAt(line: string, i: number): boolean {
  return i >= 0 && line.charCodeAt(i) === QUOTE && i + 1 < line.length && line.charCodeAt(i + 1) !== QUOTE;
}

/** End (exclusive) of the JSON object starting at `start`, or -1 when unbalanced. */
function objectEnd(line: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACE) depth++;
    else if (c === CLOSE_BRACE) {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

function readUsage(json: string): EngineUsage | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const u = parsed as Record<string, unknown>;
  const prompt = u.prompt_tokens;
  const completion = u.completion_tokens;
  if (typeof prompt !== 'number' || typeof completion !== 'number') return undefined;
  const total = typeof u.total_tokens === 'number' ? u.total_tokens : prompt + completion;
  const cached = cachedTokensOf(u.prompt_tokens_details);
  return {
    promptTokens: prompt,
    completionTokens: completion,
    totalTokens: total,
    ...(cached === undefined ? {} : { cachedTokens: cached }),
  };
}

/**
 * Scans an SSE byte stream chunk by chunk. Lines may span chunks; a partial line is kept until its
 * end arrives. State is read through getters at any time, e.g. to charge streamed tokens.
 */
export class SseScanner {
  #carry = '';
  #contentChunks = 0;
  #dataLines = 0;
  #done = false;
  #finishReason: string | undefined;
  #usage: EngineUsage | undefined;
  #errorPayload: string | undefined;
  /** The latest content line, not yet searched for usage and finish reason (see #line). */
  #pending: string | undefined;
  /** The content key to try first: `"content":` for chat, `"text":` once a completion chunk is seen. */
  #contentKey = CONTENT_KEY;
  #otherKey = TEXT_KEY;
  readonly #onLine: ((line: SseDataLine) => void) | undefined;

  /** @param onLine called for every `data:` line, in order (optional; the getters need no callback). */
  constructor(onLine?: (line: SseDataLine) => void) {
    this.#onLine = onLine;
  }

  /** Feeds the next chunk of the response body. */
  push(chunk: Uint8Array): void {
    const buf = Buffer.isBuffer(chunk)
      ? chunk
      : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const text = this.#carry.length > 0 ? this.#carry + buf.toString('latin1') : buf.toString('latin1');
    let start = 0;
    for (;;) {
      const nl = text.indexOf('\n', start);
      if (nl < 0) break;
      const end = nl > start && text.charCodeAt(nl - 1) === CR ? nl - 1 : nl;
      if (end > start) this.#line(text.slice(start, end));
      start = nl + 1;
    }
    this.#carry = start < text.length ? text.slice(start) : '';
  }

  /** Number of `data:` lines seen, `[DONE]` included. */
  get dataLines(): number {
    return this.#dataLines;
  }

  /** Chunks that carried non-empty content: one per token with vLLM's default stream interval. */
  get contentChunks(): number {
    return this.#contentChunks;
  }

  /** True once `data: [DONE]` was seen. */
  get done(): boolean {
    return this.#done;
  }

  /** The first non-null `finish_reason` seen (`stop`, `length`, `abort`, …). */
  get finishReason(): string | undefined {
    this.#flush();
    return this.#finishReason;
  }

  /** The latest `usage` seen (every chunk with `continuous_usage_stats`, else the final chunk). */
  get usage(): EngineUsage | undefined {
    this.#flush();
    return this.#usage;
  }

  /**
   * Output tokens so far: the engine's own count when it sent `usage`, else the number of content
   * chunks (exact for vLLM's one token per chunk).
   */
  get completionTokens(): number {
    const u = this.usage;
    return u ? Math.max(u.completionTokens, this.#contentChunks) : this.#contentChunks;
  }

  /** The payload of an error chunk the engine sent mid-stream, if any. */
  get errorPayload(): string | undefined {
    return this.#errorPayload;
  }

  /**
   * Token chunks only need the content test. A newer content line carries newer usage (with
   * continuous usage stats) or none (without), so only the latest is kept and searched when a
   * getter asks or a non-content line (finish, usage, error, [DONE]) follows it.
   */
  #line(line: string): void {
    if (!line.startsWith(DATA)) return; // comments (`: ping`), `event:`, `id:`, `retry:`
    const at = skipSpace(line, DATA.length);
    this.#dataLines++;
    if (line.startsWith(DONE, at) && skipSpace(line, at + DONE.length) === line.length) {
      this.#flush();
      this.#done = true;
      this.#onLine?.({
        payload: Buffer.from(line.slice(at), 'latin1'),
        done: true,
        hasContent: false,
        hasUsage: false,
        isError: false,
      });
      return;
    }
    let hasContent = nonEmptyStringAt(line, valueAfter(line, this.#contentKey));
    if (!hasContent && nonEmptyStringAt(line, valueAfter(line, this.#otherKey))) {
      hasContent = true;
      const k = this.#contentKey;
      this.#contentKey = this.#otherKey;
      this.#otherKey = k;
    }
    if (hasContent && !this.#onLine) {
      this.#contentChunks++;
      this.#pending = line;
      return;
    }
    if (hasContent) this.#contentChunks++;
    this.#flush();
    const { hasUsage, isError } = this.#examine(line, at);
    this.#onLine?.({
      payload: Buffer.from(line.slice(at), 'latin1'),
      done: false,
      hasContent,
      hasUsage,
      isError,
    });
  }

  #flush(): void {
    const p = this.#pending;
    if (p === undefined) return;
    this.#pending = undefined;
    this.#examine(p, skipSpace(p, DATA.length));
  }

  /** Reads usage, finish reason and error from one data line. */
  #examine(line: string, at: number): { hasUsage: boolean; isError: boolean } {
    let isError = false;
    if (line.charCodeAt(at) === OPEN_BRACE && line.startsWith(ERROR_KEY, skipSpace(line, at + 1))) {
      isError = true;
      this.#errorPayload = Buffer.from(line.slice(at), 'latin1').toString('utf8');
    }
    if (this.#finishReason === undefined) {
      const f = valueAfter(line, FINISH_KEY);
      if (f >= 0 && line.charCodeAt(f) === QUOTE) {
        const close = line.indexOf('"', f + 1);
        if (close > f) this.#finishReason = line.slice(f + 1, close);
      }
    }
    let hasUsage = false;
    const u = valueAfter(line, USAGE_KEY);
    if (u >= 0 && line.charCodeAt(u) === OPEN_BRACE) {
      const end = objectEnd(line, u);
      const usage = end > u ? readUsage(line.slice(u, end)) : undefined;
      if (usage) {
        hasUsage = true;
        this.#usage = usage;
      }
    }
    return { hasUsage, isError };
  }
}

/**
 * The payloads of a server-sent event stream's `data:` lines (after `data:`, trimmed), read from
 * its bytes as they arrive: a line split between two chunks waits for its end, and a character
 * split between two chunks is decoded whole. For rewriting an engine's events (another API's
 * shapes), where every payload is read.
 */
export class SseDataLines {
  readonly #decoder = new TextDecoder();
  #pending = '';

  /** The payloads of the lines `bytes` completes, in order. */
  push(bytes: Uint8Array | string): string[] {
    const text =
      this.#pending + (typeof bytes === 'string' ? bytes : this.#decoder.decode(bytes, { stream: true }));
    const out: string[] = [];
    let from = 0;
    for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', from)) {
      const line = text.slice(from, nl).trim();
      from = nl + 1;
      if (line.startsWith('data:')) out.push(line.slice(5).trim());
    }
    this.#pending = text.slice(from);
    return out;
  }
}
