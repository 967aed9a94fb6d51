import { SseDataLines } from '@fairway/engine';
import { z } from 'zod';
import type { AnswerShape } from './answer-shape.ts';
import { validationError } from './error-mapping.ts';
import type { ApiError } from './errors.ts';

/**
 * Anthropic's Messages API (`POST /v1/messages`) over the engine's chat completions: the request
 * schema, its translation to a chat body, and the engine's answer — whole or streamed — rewritten
 * as Anthropic's message and server-sent events. Nothing here does I/O.
 */

const MAX_TOKENS_CAP = 1_000_000;

const textBlock = z.object({ type: z.literal('text'), text: z.string() }).loose();
const imageBlock = z
  .object({
    type: z.literal('image'),
    source: z.discriminatedUnion('type', [
      z.object({ type: z.literal('base64'), media_type: z.string().max(128), data: z.string() }).loose(),
      z.object({ type: z.literal('url'), url: z.string().max(8192) }).loose(),
    ]),
  })
  .loose();
const toolUseBlock = z
  .object({
    type: z.literal('tool_use'),
    id: z.string().max(256),
    name: z.string().max(256),
    input: z.unknown(),
  })
  .loose();
const toolResultBlock = z
  .object({
    type: z.literal('tool_result'),
    tool_use_id: z.string().max(256),
    // Text only: a chat `tool` message carries no images (an image in a result is a 400, not dropped).
    content: z
      .union([z.string(), z.array(textBlock, { message: 'a tool_result holds text blocks only' }).max(1024)])
      .optional(),
    is_error: z.boolean().optional(),
  })
  .loose();
const contentBlock = z.discriminatedUnion('type', [textBlock, imageBlock, toolUseBlock, toolResultBlock], {
  message: 'content blocks are text, image, tool_use or tool_result',
});

const message = z.object({
  role: z.enum(['user', 'assistant']),
  content: z.union([z.string(), z.array(contentBlock).max(1024)]),
});

const tool = z
  .object({
    name: z.string().min(1).max(256),
    description: z.string().optional(),
    input_schema: z.looseObject({}),
  })
  .loose();

const toolChoice = z.discriminatedUnion('type', [
  z.object({ type: z.literal('auto') }).loose(),
  z.object({ type: z.literal('any') }).loose(),
  z.object({ type: z.literal('none') }).loose(),
  z.object({ type: z.literal('tool'), name: z.string().min(1).max(256) }).loose(),
]);

/** The request body `POST /v1/messages` accepts (fields outside it are refused by name). */
export const messagesSchema = z.strictObject({
  model: z.string().min(1, 'must be a non-empty string').max(256),
  max_tokens: z.number().int().min(1).max(MAX_TOKENS_CAP),
  messages: z.array(message).min(1, 'must contain at least one message').max(4096),
  system: z.union([z.string(), z.array(textBlock).max(1024)]).optional(),
  stop_sequences: z.array(z.string().min(1).max(1024)).max(16).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().min(1).optional(),
  stream: z.boolean().optional(),
  metadata: z
    .object({ user_id: z.string().max(256).nullable().optional() })
    .loose()
    .optional(),
  tools: z.array(tool).max(1024).optional(),
  tool_choice: toolChoice.optional(),
});
export type MessagesBody = z.infer<typeof messagesSchema>;

/** The body `POST /v1/messages/count_tokens` accepts: a message request without its output fields. */
export const countTokensSchema = messagesSchema.pick({
  model: true,
  messages: true,
  system: true,
  tools: true,
  tool_choice: true,
});

/** The body as {@link countTokensSchema} accepts it, or a 400 naming the field. */
export function validCountTokensBody(body: unknown): z.infer<typeof countTokensSchema> {
  const parsed = countTokensSchema.safeParse(body);
  if (!parsed.success) throw validationError(parsed.error);
  return parsed.data;
}

/** The body as {@link messagesSchema} accepts it, or a 400 naming the field. */
export function validMessagesBody(body: unknown): MessagesBody {
  const parsed = messagesSchema.safeParse(body);
  if (!parsed.success) throw validationError(parsed.error);
  return parsed.data;
}

type Block = z.infer<typeof contentBlock>;

function imageUrl(b: z.infer<typeof imageBlock>): { type: 'image_url'; image_url: { url: string } } {
  const s = b.source;
  return {
    type: 'image_url',
    image_url: { url: s.type === 'url' ? s.url : `data:${s.media_type};base64,${s.data}` },
  };
}

const joinText = (blocks: readonly { type: string; text?: string }[]): string =>
  blocks.map((b) => (b.type === 'text' ? (b.text ?? '') : '')).join('');

/** One Anthropic message as the chat messages it becomes (a tool result is a `tool` message). */
function chatMessages(m: z.infer<typeof message>): Record<string, unknown>[] {
  if (typeof m.content === 'string') return [{ role: m.role, content: m.content }];
  if (m.role === 'assistant') {
    const calls = m.content
      .filter((b): b is z.infer<typeof toolUseBlock> => b.type === 'tool_use')
      .map((b) => ({
        id: b.id,
        type: 'function',
        function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) },
      }));
    return [
      {
        role: 'assistant',
        content: joinText(m.content as Block[]),
        ...(calls.length > 0 ? { tool_calls: calls } : {}),
      },
    ];
  }
  const out: Record<string, unknown>[] = [];
  const parts: Record<string, unknown>[] = [];
  for (const b of m.content) {
    if (b.type === 'tool_result') {
      const c = b.content;
      out.push({
        role: 'tool',
        tool_call_id: b.tool_use_id,
        content: typeof c === 'string' ? c : c === undefined ? '' : joinText(c),
      });
    } else if (b.type === 'text') parts.push({ type: 'text', text: b.text });
    else if (b.type === 'image') parts.push(imageUrl(b));
  }
  if (parts.length > 0) out.push({ role: 'user', content: parts });
  return out;
}

/**
 * The chat completions body a Messages request is served as: `system` first, tool results as
 * `tool` messages, images as `image_url` parts, `stop_sequences` as `stop`, `metadata.user_id` as
 * `user`, tools as functions; streamed with usage (read back for `message_delta`).
 */
export function toChatBody(b: MessagesBody): Record<string, unknown> {
  const messages: Record<string, unknown>[] = [];
  if (b.system !== undefined) {
    const text = typeof b.system === 'string' ? b.system : joinText(b.system);
    if (text !== '') messages.push({ role: 'system', content: text });
  }
  for (const m of b.messages) messages.push(...chatMessages(m));
  const chat: Record<string, unknown> = { model: b.model, messages, max_tokens: b.max_tokens };
  if (b.stop_sequences !== undefined && b.stop_sequences.length > 0) chat.stop = b.stop_sequences;
  if (b.temperature !== undefined) chat.temperature = b.temperature;
  if (b.top_p !== undefined) chat.top_p = b.top_p;
  if (b.top_k !== undefined) chat.top_k = b.top_k;
  const user = b.metadata?.user_id;
  if (typeof user === 'string') chat.user = user;
  if (b.tools !== undefined && b.tools.length > 0 && b.tool_choice?.type !== 'none')
    chat.tools = b.tools.map((t) => ({
      type: 'function',
      function: {
        name: t.name,
        ...(t.description === undefined ? {} : { description: t.description }),
        parameters: t.input_schema,
      },
    }));
  const tc = b.tool_choice;
  if (tc !== undefined && chat.tools !== undefined)
    chat.tool_choice =
      tc.type === 'auto'
        ? 'auto'
        : tc.type === 'any'
          ? 'required'
          : tc.type === 'tool'
            ? { type: 'function', function: { name: tc.name } }
            : 'none';
  if (b.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true, continuous_usage_stats: true };
  }
  return chat;
}

/** Anthropic's reason a message ended, from a chat choice's `finish_reason` and vLLM's `stop_reason`. */
function stopOf(
  finish: unknown,
  matched: unknown,
  stops: readonly string[],
): { stop_reason: string; stop_sequence: string | null } {
  if (finish === 'length') return { stop_reason: 'max_tokens', stop_sequence: null };
  if (finish === 'tool_calls') return { stop_reason: 'tool_use', stop_sequence: null };
  if (typeof matched === 'string' && stops.includes(matched))
    return { stop_reason: 'stop_sequence', stop_sequence: matched };
  return { stop_reason: 'end_turn', stop_sequence: null };
}

function parseArguments(args: unknown): unknown {
  if (typeof args !== 'string') return args ?? {};
  try {
    return JSON.parse(args);
  } catch {
    return {};
  }
}

const messageId = (chatId: unknown): string =>
  `msg_${typeof chatId === 'string' ? chatId.replace(/^chatcmpl-/, '') : ''}`;

interface ChatUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
}

/**
 * A chat usage in the Messages API's terms: `input_tokens` are the prompt tokens the engine
 * prefilled and `cache_read_input_tokens` those its prefix cache served (present only when the
 * engine reports them), so that the two add up to the prompt as Anthropic's usage does.
 */
function messagesUsage(u: ChatUsage | undefined): Record<string, number> {
  const prompt = u?.prompt_tokens ?? 0;
  const c = u?.prompt_tokens_details?.cached_tokens;
  const cached = Number.isSafeInteger(c) && (c as number) > 0 ? Math.min(c as number, prompt) : undefined;
  return {
    input_tokens: prompt - (cached ?? 0),
    output_tokens: u?.completion_tokens ?? 0,
    ...(cached === undefined ? {} : { cache_read_input_tokens: cached }),
  };
}

const decoder = new TextDecoder();
const text = (bytes: Uint8Array | string): string =>
  typeof bytes === 'string' ? bytes : decoder.decode(bytes);

/** Anthropic's error `type` for a fairway error's status. */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

/** Anthropic's error body for a fairway error. */
export function anthropicErrorBody(err: ApiError): {
  type: 'error';
  error: { type: string; message: string };
} {
  return { type: 'error', error: { type: anthropicErrorType(err.status), message: err.message } };
}

/**
 * Rewrites the engine's chat answer as Anthropic's: a whole `chat.completion` becomes a `message`;
 * a stream of chunks becomes `message_start`, `content_block_start`, `ping`, `content_block_delta`
 * (`text_delta`, `input_json_delta`), `content_block_stop`, `message_delta` (stop reason and the
 * engine's usage) and `message_stop`. `model` is the name the client asked for.
 */
export class AnthropicAnswer implements AnswerShape {
  readonly #model: string;
  readonly #stops: readonly string[];
  readonly #lines = new SseDataLines();
  #started = false;
  #pinged = false;
  /** The open content block: its index, and the tool call index it carries (tool_use). */
  #open: { index: number; tool: number | undefined } | undefined;
  #blocks = 0;
  #finish: unknown;
  #matched: unknown;
  #usage: ChatUsage = {};
  #done = false;

  constructor(model: string, stopSequences: readonly string[] | undefined) {
    this.#model = model;
    this.#stops = stopSequences ?? [];
  }

  whole(bytes: Uint8Array | string): string {
    const body = JSON.parse(text(bytes)) as {
      id?: unknown;
      choices?: {
        message?: { content?: unknown; tool_calls?: unknown };
        finish_reason?: unknown;
        stop_reason?: unknown;
      }[];
      usage?: ChatUsage;
    };
    const choice = body.choices?.[0];
    const content: Record<string, unknown>[] = [];
    const said = choice?.message?.content;
    if (typeof said === 'string' && said !== '') content.push({ type: 'text', text: said });
    const calls = choice?.message?.tool_calls;
    if (Array.isArray(calls))
      for (const c of calls as { id?: string; function?: { name?: string; arguments?: unknown } }[])
        content.push({
          type: 'tool_use',
          id: c.id ?? '',
          name: c.function?.name ?? '',
          input: parseArguments(c.function?.arguments),
        });
    return JSON.stringify({
      id: messageId(body.id),
      type: 'message',
      role: 'assistant',
      model: this.#model,
      content,
      ...stopOf(choice?.finish_reason, choice?.stop_reason, this.#stops),
      usage: messagesUsage(body.usage),
    });
  }

  chunk(bytes: Uint8Array | string): string {
    let out = '';
    for (const data of this.#lines.push(bytes)) {
      if (data === '[DONE]') out += this.#end();
      else if (data !== '') out += this.#chunk(JSON.parse(data));
    }
    return out;
  }

  error(err: ApiError): string {
    return event('error', anthropicErrorBody(err));
  }

  #chunk(c: {
    id?: unknown;
    choices?: {
      delta?: {
        content?: unknown;
        tool_calls?: { index?: number; id?: string; function?: { name?: string; arguments?: string } }[];
      };
      finish_reason?: unknown;
      stop_reason?: unknown;
    }[];
    usage?: ChatUsage | null;
    error?: unknown;
  }): string {
    let out = '';
    if (c.usage != null) this.#usage = c.usage;
    if (!this.#started) {
      this.#started = true;
      out += event('message_start', {
        type: 'message_start',
        message: {
          id: messageId(c.id),
          type: 'message',
          role: 'assistant',
          model: this.#model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: this.#usage.prompt_tokens ?? 0, output_tokens: 0 },
        },
      });
    }
    const choice = c.choices?.[0];
    if (choice === undefined) return out;
    const said = choice.delta?.content;
    if (typeof said === 'string' && said !== '') {
      if (this.#open === undefined || this.#open.tool !== undefined)
        out += this.#openBlock({ type: 'text', text: '' }, undefined);
      out += event('content_block_delta', {
        type: 'content_block_delta',
        index: this.#open?.index,
        delta: { type: 'text_delta', text: said },
      });
    }
    for (const call of choice.delta?.tool_calls ?? []) {
      const at = call.index ?? 0;
      if (this.#open?.tool !== at)
        out += this.#openBlock(
          { type: 'tool_use', id: call.id ?? '', name: call.function?.name ?? '', input: {} },
          at,
        );
      const args = call.function?.arguments;
      if (typeof args === 'string' && args !== '')
        out += event('content_block_delta', {
          type: 'content_block_delta',
          index: this.#open?.index,
          delta: { type: 'input_json_delta', partial_json: args },
        });
    }
    if (choice.finish_reason != null) {
      this.#finish = choice.finish_reason;
      this.#matched = choice.stop_reason;
    }
    return out;
  }

  #openBlock(block: Record<string, unknown>, tool: number | undefined): string {
    let out = this.#closeBlock();
    const index = this.#blocks++;
    this.#open = { index, tool };
    out += event('content_block_start', { type: 'content_block_start', index, content_block: block });
    if (!this.#pinged) {
      this.#pinged = true;
      out += event('ping', { type: 'ping' });
    }
    return out;
  }

  #closeBlock(): string {
    if (this.#open === undefined) return '';
    const out = event('content_block_stop', { type: 'content_block_stop', index: this.#open.index });
    this.#open = undefined;
    return out;
  }

  #end(): string {
    if (this.#done) return '';
    this.#done = true;
    let out = this.#started ? '' : this.#chunk({});
    out += this.#closeBlock();
    out += event('message_delta', {
      type: 'message_delta',
      delta: stopOf(this.#finish, this.#matched, this.#stops),
      usage: messagesUsage(this.#usage),
    });
    out += event('message_stop', { type: 'message_stop' });
    return out;
  }
}

const event = (name: string, data: unknown): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
