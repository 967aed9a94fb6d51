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
}

/** What the scanner saw in one `data:` line. */
export interface SseDataLine {
  /** The line's payload after `data:` and optional space, without the line end (a view, not a copy). */
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

const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const TAB = 0x09;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

const DATA = Buffer.from('data:');
const DONE = Buffer.from('[DONE]');
const CONTENT_KEY = Buffer.from('"content":');
const TEXT_KEY = Buffer.from('"text":');
const USAGE_KEY = Buffer.from('"usage":');
const FINISH_KEY = Buffer.from('"finish_reason":');
const ERROR_KEY = Buffer.from('"error":');

function skipSpace(buf: Uint8Array, i: number): number {
  while (i < buf.length && (buf[i] === SPACE || buf[i] === TAB)) i++;
  return i;
}

function startsWith(buf: Uint8Array, prefix: Uint8Array, at = 0): boolean {
  if (buf.length - at < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (buf[at + i] !== prefix[i]) return false;
  return true;
}

/** Index of the first byte after `key` followed by optional spaces, or -1 when `key` is absent. */
function valueAfter(line: Buffer, key: Uint8Array): number {
  const at = line.indexOf(key);
  return at < 0 ? -1 : skipSpace(line, at + key.length);
}

/** True when a JSON string value starts at `i` and is not empty. */
function nonEmptyStringAt(line: Buffer, i: number): boolean {
  return i >= 0 && line[i] === QUOTE && i + 1 < line.length && line[i + 1] !== QUOTE;
}

/** End (exclusive) of the JSON object starting at `start`, or -1 when unbalanced. */
function objectEnd(line: Uint8Array, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < line.length; i++) {
    const c = line[i];
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

function readUsage(bytes: Uint8Array): EngineUsage | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const u = parsed as Record<string, unknown>;
  const prompt = u.prompt_tokens;
  const completion = u.completion_tokens;
  if (typeof prompt !== 'number' || typeof completion !== 'number') return undefined;
  const total = typeof u.total_tokens === 'number' ? u.total_tokens : prompt + completion;
  return { promptTokens: prompt, completionTokens: completion, totalTokens: total };
}

/**
 * Scans an SSE byte stream chunk by chunk. Lines may span chunks; a partial line is kept until its
 * end arrives. State is read through getters at any time, e.g. to charge streamed tokens.
 */
export class SseScanner {
  #carry: Buffer | undefined;
  #contentChunks = 0;
  #dataLines = 0;
  #done = false;
  #finishReason: string | undefined;
  #usageBytes: Uint8Array | undefined;
  #usage: EngineUsage | undefined;
  #usageParsed = true;
  #errorPayload: string | undefined;
  readonly #onLine: ((line: SseDataLine) => void) | undefined;

  /** @param onLine called for every `data:` line, in order (optional; the getters need no callback). */
  constructor(onLine?: (line: SseDataLine) => void) {
    this.#onLine = onLine;
  }

  /** Feeds the next chunk of the response body. */
  push(chunk: Uint8Array): void {
    let buf: Buffer = Buffer.isBuffer(chunk)
      ? chunk
      : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.#carry) {
      buf = Buffer.concat([this.#carry, buf]);
      this.#carry = undefined;
    }
    let start = 0;
    for (;;) {
      const nl = buf.indexOf(LF, start);
      if (nl < 0) break;
      const end = nl > start && buf[nl - 1] === CR ? nl - 1 : nl;
      if (end > start) this.#line(buf.subarray(start, end));
      start = nl + 1;
    }
    // Copy the tail: the caller may reuse or retain its chunk.
    if (start < buf.length) this.#carry = Buffer.from(buf.subarray(start));
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
    return this.#finishReason;
  }

  /** The latest `usage` seen (every chunk with `continuous_usage_stats`, else the final chunk). */
  get usage(): EngineUsage | undefined {
    if (!this.#usageParsed && this.#usageBytes) {
      this.#usage = readUsage(this.#usageBytes) ?? this.#usage;
      this.#usageParsed = true;
    }
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

  #line(line: Buffer): void {
    if (!startsWith(line, DATA)) return; // comments (`: ping`), `event:`, `id:`, `retry:`
    const at = skipSpace(line, DATA.length);
    const payload = line.subarray(at);
    this.#dataLines++;
    if (startsWith(payload, DONE) && skipSpace(payload, DONE.length) === payload.length) {
      this.#done = true;
      this.#onLine?.({ payload, done: true, hasContent: false, hasUsage: false, isError: false });
      return;
    }
    let isError = false;
    if (payload[0] === OPEN_BRACE) {
      const e = skipSpace(payload, 1);
      if (startsWith(payload, ERROR_KEY, e)) {
        isError = true;
        this.#errorPayload = payload.toString('utf8');
      }
    }
    let hasContent = nonEmptyStringAt(line, valueAfter(line, CONTENT_KEY));
    if (!hasContent) hasContent = nonEmptyStringAt(line, valueAfter(line, TEXT_KEY));
    if (hasContent) this.#contentChunks++;
    if (this.#finishReason === undefined) {
      const f = valueAfter(line, FINISH_KEY);
      if (f >= 0 && line[f] === QUOTE) {
        const close = line.indexOf(QUOTE, f + 1);
        if (close > f) this.#finishReason = line.toString('utf8', f + 1, close);
      }
    }
    let hasUsage = false;
    const u = valueAfter(line, USAGE_KEY);
    if (u >= 0 && line[u] === OPEN_BRACE) {
      const end = objectEnd(line, u);
      if (end > u) {
        hasUsage = true;
        this.#usageBytes = line.subarray(u, end);
        this.#usageParsed = false;
      }
    }
    this.#onLine?.({ payload, done: false, hasContent, hasUsage, isError });
  }
}
