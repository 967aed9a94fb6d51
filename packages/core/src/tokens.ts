/**
 * Deterministic prompt-size estimate used before a tokenizer has run. The gateway uses it to check
 * token limits and to reserve capacity on an engine; the engine's `usage` settles the true count
 * afterwards. It covers every part of a request the engine turns into prompt tokens: message text
 * and content parts, tool calls, tool results, the `tools` / `functions` schemas the chat template
 * renders, structured-output schemas, and the template's own tokens per message.
 * docs/contributors/benchmarks.md ("Admission token estimate") measures it against engine-reported
 * usage.
 */

/** Characters of prose per token (Llama, GPT tokenizers: 3–4.5 on English). */
export const CHARS_PER_TOKEN = 4;

/**
 * Characters of compact JSON per token for schemas the chat template renders (`tools`,
 * `functions`, structured-output schemas). vLLM's tool templates render each tool with
 * `tojson(indent=4)`: the indentation and the quote/colon/brace runs make a compact JSON character
 * worth about half a token with a Llama tokenizer (measured: 13,271 compact characters rendered to
 * 7,433 tokens, 1.8 characters per token), so schemas are counted at 2 characters per token.
 */
export const JSON_CHARS_PER_TOKEN = 2;

/** Template tokens added per chat message (role markers, turn separators). */
export const TOKENS_PER_MESSAGE = 4;

/** Template tokens around each tool definition or tool call (its header and separators). */
export const TOKENS_PER_TOOL = 8;

/**
 * Prompt tokens counted for one non-text content part. The encoder's token count depends on the
 * model and the media's size, which the gateway does not decode, so each part costs a fixed,
 * deliberately generous amount: an image 1,024 tokens (LLaVA-1.5 uses 576, LLaVA-NeXT up to
 * 2,880, Qwen2-VL about 1 per 28×28 pixels), an audio clip 750 (Whisper-style encoders: 30 s),
 * a video 4,096. Any other part type is counted by its JSON text.
 */
export const MEDIA_PART_TOKENS: ReadonlyMap<string, number> = new Map([
  ['image_url', 1024],
  ['input_image', 1024],
  ['image_embeds', 1024],
  ['input_audio', 750],
  ['audio_url', 750],
  ['video_url', 4096],
]);

/** Most non-text content parts one request may carry (the dispatcher refuses more: 400). */
export const MAX_MEDIA_PARTS = 32;

/** The endpoints whose prompts are estimated. */
export type PromptEndpoint = 'chat' | 'completions';

/** Counts the tokens of a piece of text with a real tokenizer (loaded from a `tokenizer.json`). */
export interface TokenCounter {
  count(text: string): number;
}

/**
 * Estimated tokens of a piece of text (at least 1 for non-empty text), made to bound what a
 * tokenizer counts rather than to match prose on average: ASCII letters and spaces at
 * {@link CHARS_PER_TOKEN} (words), every other ASCII character as a token of its own (Llama and
 * GPT tokenizers split digits one by one and give most punctuation its own token), and every
 * other character as many tokens as its UTF-8 bytes (a byte-level tokenizer never needs more;
 * Llama-2 falls back to one token per byte for the CJK characters outside its vocabulary). One
 * pass over the characters, no allocation.
 */
export function estimateTextTokens(text: string): number {
  let words = 0;
  let other = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x20 || (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a)) words++;
    else if (c < 0x80) other++;
    // A surrogate pair (4 UTF-8 bytes) is two code units of 2 each.
    else other += c < 0x800 ? 2 : c >= 0xd800 && c <= 0xdfff ? 2 : 3;
  }
  return Math.ceil(words / CHARS_PER_TOKEN) + other;
}

/** Estimated tokens of a JSON value the template renders (a tool, a schema). */
export function estimateJsonTokens(value: unknown): number {
  if (value == null) return 0;
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
  return text.length === 0 ? 0 : Math.ceil(text.length / JSON_CHARS_PER_TOKEN);
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Prompt tokens of a non-text part's media (a fixed cost per kind) or JSON text (anything else). */
function partTokens(part: Json, counter: TokenCounter | undefined): number {
  const type = typeof part.type === 'string' ? part.type : '';
  const media = MEDIA_PART_TOKENS.get(type);
  if (media !== undefined) return media;
  const text = JSON.stringify(part) ?? '';
  return counter === undefined ? Math.ceil(text.length / JSON_CHARS_PER_TOKEN) : counter.count(text);
}

/**
 * The text a chat template would render for a request, in a generic form (role markers, tools as
 * JSON), and the tokens of the parts that are not text (media, at {@link MEDIA_PART_TOKENS}). Used
 * with a real tokenizer: the model's own template differs by a few tokens per message.
 */
export interface RenderedPrompt {
  readonly text: string;
  readonly mediaTokens: number;
}

/**
 * Renders a chat request's prompt approximately: each message as `<|role|>\n…\n`, its tool calls
 * as `name(arguments)`, and the `tools` / `functions` / structured-output schemas as indented JSON
 * in front (as vLLM's tool templates render them), then the generation prompt.
 */
export function renderChatPrompt(body: Json, counter?: TokenCounter): RenderedPrompt {
  const out: string[] = [];
  let mediaTokens = 0;
  for (const schema of schemaParts(body)) out.push(`<|tools|>\n${JSON.stringify(schema, null, 4)}\n`);
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (const m of messages) {
    if (!isObject(m)) continue;
    out.push(`<|${typeof m.role === 'string' ? m.role : 'user'}|>\n`);
    if (typeof m.name === 'string') out.push(`${m.name}: `);
    const content = m.content;
    if (typeof content === 'string') out.push(content);
    else if (Array.isArray(content))
      for (const p of content) {
        if (!isObject(p)) continue;
        if (typeof p.text === 'string' && (p.type === 'text' || p.type === 'input_text')) out.push(p.text);
        else mediaTokens += partTokens(p, counter);
      }
    for (const call of toolCalls(m)) out.push(`\n${call.name}(${call.arguments})`);
    if (typeof m.tool_call_id === 'string') out.push(`\n[${m.tool_call_id}]`);
    out.push('\n');
  }
  out.push('<|assistant|>\n');
  return { text: out.join(''), mediaTokens };
}

interface ToolCall {
  readonly name: string;
  readonly arguments: string;
}

/** An assistant message's `tool_calls` (and legacy `function_call`), as name and argument text. */
function toolCalls(m: Json): ToolCall[] {
  const calls: ToolCall[] = [];
  const add = (fn: unknown): void => {
    if (!isObject(fn)) return;
    const args = fn.arguments;
    calls.push({
      name: typeof fn.name === 'string' ? fn.name : '',
      arguments: typeof args === 'string' ? args : (JSON.stringify(args) ?? ''),
    });
  };
  if (Array.isArray(m.tool_calls)) for (const c of m.tool_calls) if (isObject(c)) add(c.function);
  add(m.function_call);
  return calls;
}

/**
 * The JSON the template or the structured-output backend is given: each tool of `tools` and
 * `functions`, the `response_format` JSON schema, `guided_json` and `structured_outputs.json`.
 */
function schemaParts(body: Json): unknown[] {
  const parts: unknown[] = [];
  if (Array.isArray(body.tools)) parts.push(...body.tools);
  if (Array.isArray(body.functions)) parts.push(...body.functions);
  const rf = body.response_format;
  if (isObject(rf) && rf.type === 'json_schema' && rf.json_schema !== undefined) parts.push(rf.json_schema);
  if (body.guided_json != null) parts.push(body.guided_json);
  const so = body.structured_outputs;
  if (isObject(so) && so.json != null) parts.push(so.json);
  return parts;
}

/** Top-level fields read elsewhere, or that carry nothing the engine turns into prompt tokens. */
const NOT_PROMPT = new Set([
  'messages',
  'prompt',
  'tools',
  'functions',
  'response_format',
  'guided_json',
  'structured_outputs',
  'model',
  'stream',
  'stream_options',
  'user',
  'n',
  'max_tokens',
  'max_completion_tokens',
]);

/** Message fields read elsewhere ({@link estimateChatPromptTokens}, {@link renderChatPrompt}). */
const MESSAGE_READ = new Set(['role', 'content', 'name', 'tool_calls', 'tool_call_id', 'function_call']);

/**
 * Tokens of the fields no template rule above reads but the engine may still render or process
 * (`documents`, `chat_template_kwargs`, `prediction`, `guided_regex`, a message's
 * `reasoning_content`, …): each string by {@link estimateTextTokens} (or `counter`), anything else
 * by its JSON. Numbers and booleans carry nothing of size. A client cannot hide text from the
 * estimate by putting it in a field the estimate does not know.
 */
function otherFieldTokens(obj: Json, skip: ReadonlySet<string>, counter: TokenCounter | undefined): number {
  let n = 0;
  for (const key in obj) {
    if (skip.has(key)) continue;
    const v = obj[key];
    if (v == null || typeof v === 'number' || typeof v === 'boolean') continue;
    if (typeof v === 'string') n += counter === undefined ? estimateTextTokens(v) : counter.count(v);
    else {
      const text = JSON.stringify(v) ?? '';
      n += counter === undefined ? Math.ceil(text.length / JSON_CHARS_PER_TOKEN) : counter.count(text);
    }
  }
  return n;
}

/** {@link otherFieldTokens} of a request and of each of its messages. */
function unreadTokens(body: Json, counter: TokenCounter | undefined): number {
  let n = otherFieldTokens(body, NOT_PROMPT, counter);
  if (Array.isArray(body.messages))
    for (const m of body.messages) if (isObject(m)) n += otherFieldTokens(m, MESSAGE_READ, counter);
  return n;
}

/**
 * Estimated prompt tokens of a chat request: message text at {@link CHARS_PER_TOKEN}, tool-call
 * arguments and every schema the template renders at {@link JSON_CHARS_PER_TOKEN}, media parts at
 * {@link MEDIA_PART_TOKENS}, plus the template's tokens per message and per tool. Reads only the
 * lengths of strings; serialises just the schemas and non-text parts (never the whole body).
 */
export function estimateChatPromptTokens(body: Json): number {
  let n = TOKENS_PER_MESSAGE; // the generation prompt
  for (const schema of schemaParts(body)) n += estimateJsonTokens(schema) + TOKENS_PER_TOOL;
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (const m of messages) {
    if (!isObject(m)) continue;
    n += TOKENS_PER_MESSAGE;
    if (typeof m.name === 'string') n += estimateTextTokens(m.name);
    const content = m.content;
    if (typeof content === 'string') n += estimateTextTokens(content);
    else if (Array.isArray(content))
      for (const p of content) {
        if (!isObject(p)) continue;
        if (typeof p.text === 'string' && (p.type === 'text' || p.type === 'input_text'))
          n += estimateTextTokens(p.text);
        else n += partTokens(p, undefined);
      }
    for (const call of toolCalls(m))
      n += estimateTextTokens(call.name) + estimateJsonTokens(call.arguments) + TOKENS_PER_TOOL;
    if (typeof m.tool_call_id === 'string') n += estimateTextTokens(m.tool_call_id);
  }
  return n + unreadTokens(body, undefined);
}

/**
 * Tokens of a chat request's system prompt (FairServe's n_sys): the text of its `system` and
 * `developer` messages, counted with `counter` or estimated, plus the template's tokens per
 * message. 0 for a request without one.
 */
export function countSystemPromptTokens(body: Json, counter?: TokenCounter): number {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const count = (t: string) => (counter === undefined ? estimateTextTokens(t) : counter.count(t));
  let n = 0;
  for (const m of messages) {
    if (!isObject(m) || (m.role !== 'system' && m.role !== 'developer')) continue;
    n += TOKENS_PER_MESSAGE;
    const content = m.content;
    if (typeof content === 'string') n += count(content);
    else if (Array.isArray(content))
      for (const p of content) if (isObject(p) && typeof p.text === 'string') n += count(p.text);
  }
  return n;
}

/** The text of a text-completion prompt (a string, or a one-element array of strings). */
function completionText(body: Json): string {
  const p = body.prompt;
  if (typeof p === 'string') return p;
  if (Array.isArray(p) && typeof p[0] === 'string') return p[0];
  return '';
}

/**
 * Prompt tokens of a chat or completion request, as admission, token limits and the engine
 * reservation count them: with `counter` (the pool's real tokenizer) over the rendered prompt
 * (see {@link renderChatPrompt}), otherwise estimated ({@link estimateChatPromptTokens}). At least 1.
 */
export function countPromptTokens(endpoint: PromptEndpoint, body: Json, counter?: TokenCounter): number {
  if (endpoint === 'completions') {
    const text = completionText(body);
    const schemas = schemaParts(body);
    let n = counter === undefined ? estimateTextTokens(text) : counter.count(text);
    for (const s of schemas) n += estimateJsonTokens(s) + TOKENS_PER_TOOL;
    return Math.max(1, n + unreadTokens(body, counter));
  }
  if (counter === undefined) return Math.max(1, estimateChatPromptTokens(body));
  const rendered = renderChatPrompt(body, counter);
  return Math.max(1, counter.count(rendered.text) + rendered.mediaTokens + unreadTokens(body, counter));
}

/**
 * Input tokens of an embeddings request (`input`: a text, texts, token ids or lists of token ids),
 * as admission, token limits and the engine reservation count them: token ids exactly, texts with
 * `counter` (the pool's tokenizer) or estimated, plus the one special token the engine adds to
 * each. At least 1.
 */
export function countEmbeddingInputTokens(input: unknown, counter?: TokenCounter): number {
  const text = (t: string): number => (counter === undefined ? estimateTextTokens(t) : counter.count(t)) + 1;
  if (typeof input === 'string') return Math.max(1, text(input));
  if (!Array.isArray(input)) return 1;
  if (input.length > 0 && typeof input[0] === 'number') return Math.max(1, input.length);
  let n = 0;
  for (const item of input) {
    if (typeof item === 'string') n += text(item);
    else if (Array.isArray(item)) n += item.length;
  }
  return Math.max(1, n);
}
