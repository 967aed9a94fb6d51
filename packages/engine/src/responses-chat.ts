/**
 * OpenAI's Responses API over chat completions: the chat body a Responses request amounts to, and
 * the engine's chat answer written as a Responses `response` object or as its typed events
 * (`response.created`, `response.in_progress`, `response.output_item.added`,
 * `response.content_part.added`, `response.output_text.delta`, `response.function_call_arguments.
 * delta`, the matching `.done` events, and `response.completed` with the usage). vLLM serves its
 * own Responses API the same way, over its chat machinery; engine-sim and the dispatcher both use
 * this one translation.
 */

/** An input item of a Responses request, as the translation reads it. */
export interface ResponsesInputItem {
  readonly type?: string | undefined;
  readonly role?: string | undefined;
  readonly content?:
    | string
    | readonly { readonly type: string; readonly text?: string | undefined }[]
    | undefined;
  readonly call_id?: unknown;
  readonly name?: unknown;
  readonly arguments?: unknown;
  readonly output?: unknown;
}

/** The Responses request fields the translation reads. */
export interface ResponsesRequestLike {
  readonly model?: string | undefined;
  readonly input: string | readonly ResponsesInputItem[];
  readonly instructions?: string | null | undefined;
  readonly max_output_tokens?: number | null | undefined;
  readonly temperature?: number | null | undefined;
  readonly top_p?: number | null | undefined;
  readonly stream?: boolean | null | undefined;
  readonly [field: string]: unknown;
}

/** Sampling and engine fields a Responses request passes to chat unchanged. */
const SAME_IN_CHAT = [
  'user',
  'parallel_tool_calls',
  'frequency_penalty',
  'presence_penalty',
  'top_k',
  'min_p',
  'repetition_penalty',
  'seed',
  'stop',
  'priority',
  'cache_salt',
  'prompt_cache_key',
  'safety_identifier',
  'fairway_output_tokens',
] as const;

const partText = (content: ResponsesInputItem['content']): string | Record<string, unknown>[] =>
  typeof content === 'string' || content === undefined
    ? (content ?? '')
    : content.map((p) =>
        p.type === 'input_image'
          ? { type: 'image_url', image_url: { url: (p as { image_url?: unknown }).image_url ?? '' } }
          : { type: 'text', text: p.text ?? '' },
      );

const isFunctionTool = (t: unknown): boolean =>
  typeof t === 'object' && t !== null && (t as { type?: unknown }).type === 'function';

/**
 * Whether chat completions express a Responses request whole: message, function-call and
 * function-output items, function tools, and text, JSON-object or JSON-schema output. Built-in
 * tools, reasoning, `include`, `top_logprobs`, `max_tool_calls` and `truncation: auto` do not.
 */
export function chatExpresses(b: ResponsesRequestLike): boolean {
  if (typeof b.input !== 'string')
    for (const item of b.input)
      if (![undefined, 'message', 'function_call', 'function_call_output'].includes(item.type)) return false;
  if (b.tools != null && !(Array.isArray(b.tools) && b.tools.every(isFunctionTool))) return false;
  if (b.reasoning != null || b.top_logprobs != null || b.max_tool_calls != null) return false;
  if (Array.isArray(b.include) && b.include.length > 0) return false;
  if (b.truncation === 'auto') return false;
  const format = (b.text as { format?: { type?: unknown } } | null | undefined)?.format?.type;
  return format === undefined || format === 'text' || format === 'json_object' || format === 'json_schema';
}

/** The chat messages of a Responses request's `instructions` and `input`. */
export function chatMessagesOf(b: ResponsesRequestLike): Record<string, unknown>[] {
  const messages: Record<string, unknown>[] = [];
  if (typeof b.instructions === 'string') messages.push({ role: 'system', content: b.instructions });
  if (typeof b.input === 'string') {
    messages.push({ role: 'user', content: b.input });
    return messages;
  }
  for (const item of b.input) {
    if (item.type === 'function_call') {
      const call = {
        id: String(item.call_id ?? ''),
        type: 'function',
        function: { name: String(item.name ?? ''), arguments: String(item.arguments ?? '') },
      };
      // Parallel calls of one turn are one assistant message with several tool calls.
      const last = messages.at(-1);
      if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) last.tool_calls.push(call);
      else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (item.type === 'function_call_output')
      messages.push({
        role: 'tool',
        tool_call_id: String(item.call_id ?? ''),
        content: String(item.output ?? ''),
      });
    else
      messages.push({
        role: item.role === 'developer' ? 'system' : (item.role ?? 'user'),
        content: partText(item.content),
      });
  }
  return messages;
}

/** The chat completions body a Responses request amounts to (streamed with usage when it is). */
export function chatBodyOf(b: ResponsesRequestLike): Record<string, unknown> {
  const chat: Record<string, unknown> = { messages: chatMessagesOf(b) };
  if (b.model !== undefined) chat.model = b.model;
  if (b.max_output_tokens != null) chat.max_tokens = b.max_output_tokens;
  if (b.temperature != null) chat.temperature = b.temperature;
  if (b.top_p != null) chat.top_p = b.top_p;
  for (const f of SAME_IN_CHAT) if (b[f] !== undefined && b[f] !== null) chat[f] = b[f];
  if (Array.isArray(b.tools) && b.tools.length > 0)
    chat.tools = (b.tools as Record<string, unknown>[]).map(
      ({ type, name, description, parameters, strict }) => ({
        type,
        function: {
          name,
          ...(description == null ? {} : { description }),
          ...(parameters == null ? {} : { parameters }),
          ...(strict == null ? {} : { strict }),
        },
      }),
    );
  const choice = b.tool_choice as { type?: unknown; name?: unknown } | string | null | undefined;
  if (typeof choice === 'string') chat.tool_choice = choice;
  else if (choice?.type === 'function')
    chat.tool_choice = { type: 'function', function: { name: choice.name } };
  const format = (b.text as { format?: Record<string, unknown> } | null | undefined)?.format;
  if (format?.type === 'json_object') chat.response_format = { type: 'json_object' };
  else if (format?.type === 'json_schema') {
    const { type: _type, ...schema } = format;
    chat.response_format = { type: 'json_schema', json_schema: schema };
  }
  if (b.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return chat;
}

/** A chat completion's `usage`. */
export interface ChatUsageLike {
  readonly prompt_tokens?: number | undefined;
  readonly completion_tokens?: number | undefined;
  readonly prompt_tokens_details?: { readonly cached_tokens?: number | undefined } | null | undefined;
}

interface ToolCallPart {
  readonly index?: number | undefined;
  readonly id?: string | undefined;
  readonly function?:
    | { readonly name?: string | undefined; readonly arguments?: string | undefined }
    | undefined;
}

/** One chunk of a streamed chat completion, as the translation reads it. */
export interface ChatChunkLike {
  readonly id?: unknown;
  readonly choices?:
    | readonly {
        readonly delta?: { readonly content?: unknown; readonly tool_calls?: readonly ToolCallPart[] | null };
        readonly finish_reason?: unknown;
      }[]
    | undefined;
  readonly usage?: ChatUsageLike | null | undefined;
}

/** A whole (non-streamed) chat completion, as the translation reads it. */
export interface ChatCompletionLike {
  readonly id?: unknown;
  readonly choices?:
    | readonly {
        readonly message?: {
          readonly content?: unknown;
          readonly tool_calls?: readonly ToolCallPart[] | null;
        };
        readonly finish_reason?: unknown;
      }[]
    | undefined;
  readonly usage?: ChatUsageLike | null | undefined;
}

/** An output item of the response being written. */
type OutputItem =
  | { readonly type: 'message'; readonly id: string; text: string }
  | {
      readonly type: 'function_call';
      readonly id: string;
      readonly callId: string;
      name: string;
      args: string;
      readonly tool: number;
    };

const event = (type: string, data: Record<string, unknown>): string =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

/**
 * Writes one chat completion as a Responses API answer. A streamed answer is fed the chat chunks in
 * order ({@link ResponsesFromChat.chunk}) and ended with {@link ResponsesFromChat.end}; a whole one
 * is written at once ({@link ResponsesFromChat.whole}). `model` is the name the client asked for.
 */
export class ResponsesFromChat {
  readonly #req: ResponsesRequestLike;
  readonly #model: string;
  readonly #createdAt: number;
  #id: string | undefined;
  #seq = 0;
  readonly #items: OutputItem[] = [];
  #open: OutputItem | undefined;
  #finish: unknown;
  #usage: ChatUsageLike | undefined;

  constructor(req: ResponsesRequestLike, model: string, createdAtS: number) {
    this.#req = req;
    this.#model = model;
    this.#createdAt = createdAtS;
  }

  /** The `response` object of a whole chat completion. */
  whole(chat: ChatCompletionLike): Record<string, unknown> {
    this.#id = idOf(chat.id);
    const choice = chat.choices?.[0];
    const said = choice?.message?.content;
    if (typeof said === 'string' && said !== '')
      this.#items.push({ type: 'message', id: `msg_${this.#id}`, text: said });
    for (const [i, c] of (choice?.message?.tool_calls ?? []).entries())
      this.#items.push({
        type: 'function_call',
        id: `fc_${this.#id}_${i}`,
        callId: c.id ?? `call_${this.#id}_${i}`,
        name: c.function?.name ?? '',
        args: c.function?.arguments ?? '',
        tool: i,
      });
    this.#finish = choice?.finish_reason;
    this.#usage = chat.usage ?? undefined;
    return this.#response(this.#finish === 'length' ? 'incomplete' : 'completed');
  }

  /** The events one streamed chat chunk amounts to ('' when it adds nothing the client sees). */
  chunk(c: ChatChunkLike): string {
    let out = '';
    if (c.usage != null) this.#usage = c.usage;
    if (this.#id === undefined) {
      this.#id = idOf(c.id);
      const response = this.#response('in_progress');
      out += this.#emit('response.created', { response });
      out += this.#emit('response.in_progress', { response });
    }
    const choice = c.choices?.[0];
    if (choice === undefined) return out;
    const said = choice.delta?.content;
    if (typeof said === 'string' && said !== '') {
      if (this.#open?.type !== 'message')
        out += this.#openItem({ type: 'message', id: `msg_${this.#id}`, text: '' });
      const item = this.#open as Extract<OutputItem, { type: 'message' }>;
      item.text += said;
      out += this.#emit('response.output_text.delta', { ...this.#part(item), delta: said, logprobs: [] });
    }
    for (const call of choice.delta?.tool_calls ?? []) {
      const tool = call.index ?? 0;
      if (this.#open?.type !== 'function_call' || this.#open.tool !== tool)
        out += this.#openItem({
          type: 'function_call',
          id: `fc_${this.#id}_${tool}`,
          callId: call.id ?? `call_${this.#id}_${tool}`,
          name: call.function?.name ?? '',
          args: '',
          tool,
        });
      const item = this.#open as Extract<OutputItem, { type: 'function_call' }>;
      const delta = call.function?.arguments;
      if (typeof delta === 'string' && delta !== '') {
        item.args += delta;
        out += this.#emit('response.function_call_arguments.delta', {
          item_id: item.id,
          output_index: this.#items.indexOf(item),
          delta,
        });
      }
    }
    if (choice.finish_reason != null) this.#finish = choice.finish_reason;
    return out;
  }

  /** The events that end a streamed answer: the open item's `.done` events and `response.completed`. */
  end(): string {
    let out = this.#id === undefined ? this.chunk({}) : '';
    out += this.#closeItem();
    const status = this.#finish === 'length' ? 'incomplete' : 'completed';
    // Ended either way with response.completed, as vLLM does; cut at the cap, it says `incomplete`.
    return out + this.#emit('response.completed', { response: this.#response(status) });
  }

  /** The event that ends a stream which failed after it started. */
  error(code: string, message: string, param: string | null): string {
    return this.#emit('error', { code, message, param });
  }

  #emit(type: string, data: Record<string, unknown>): string {
    return event(type, { sequence_number: this.#seq++, ...data });
  }

  #part(item: OutputItem): { item_id: string; output_index: number; content_index: number } {
    return { item_id: item.id, output_index: this.#items.indexOf(item), content_index: 0 };
  }

  #openItem(item: OutputItem): string {
    let out = this.#closeItem();
    this.#items.push(item);
    this.#open = item;
    out += this.#emit('response.output_item.added', {
      output_index: this.#items.length - 1,
      item: itemJson(item, 'in_progress'),
    });
    if (item.type === 'message')
      out += this.#emit('response.content_part.added', {
        ...this.#part(item),
        part: { type: 'output_text', text: '', annotations: [] },
      });
    return out;
  }

  #closeItem(): string {
    const item = this.#open;
    if (item === undefined) return '';
    this.#open = undefined;
    let out = '';
    if (item.type === 'message') {
      const part = this.#part(item);
      out += this.#emit('response.output_text.done', { ...part, text: item.text, logprobs: [] });
      out += this.#emit('response.content_part.done', {
        ...part,
        part: { type: 'output_text', text: item.text, annotations: [] },
      });
    } else
      out += this.#emit('response.function_call_arguments.done', {
        item_id: item.id,
        output_index: this.#items.indexOf(item),
        arguments: item.args,
      });
    return (
      out +
      this.#emit('response.output_item.done', {
        output_index: this.#items.indexOf(item),
        item: itemJson(item, 'completed'),
      })
    );
  }

  #response(status: 'in_progress' | 'completed' | 'incomplete'): Record<string, unknown> {
    const b = this.#req;
    const u = this.#usage;
    const input = u?.prompt_tokens ?? 0;
    const output = u?.completion_tokens ?? 0;
    return {
      id: `resp_${this.#id}`,
      object: 'response',
      created_at: this.#createdAt,
      model: this.#model,
      status,
      instructions: b.instructions ?? null,
      max_output_tokens: b.max_output_tokens ?? null,
      temperature: b.temperature ?? 1,
      top_p: b.top_p ?? 1,
      tools: Array.isArray(b.tools) ? b.tools : [],
      tool_choice: b.tool_choice ?? 'auto',
      parallel_tool_calls: b.parallel_tool_calls ?? true,
      text: b.text ?? { format: { type: 'text' } },
      truncation: 'disabled',
      store: false,
      previous_response_id: null,
      reasoning: null,
      metadata: b.metadata ?? null,
      user: b.user ?? null,
      background: false,
      error: null,
      incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
      output: status === 'in_progress' ? [] : this.#items.map((i) => itemJson(i, 'completed')),
      usage:
        u === undefined
          ? null
          : {
              input_tokens: input,
              input_tokens_details: { cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0 },
              output_tokens: output,
              output_tokens_details: { reasoning_tokens: 0 },
              total_tokens: input + output,
            },
    };
  }
}

/** An output item as the Responses API writes it. */
function itemJson(item: OutputItem, status: 'in_progress' | 'completed'): Record<string, unknown> {
  if (item.type === 'message')
    return {
      id: item.id,
      type: 'message',
      role: 'assistant',
      status,
      content:
        status === 'in_progress'
          ? []
          : [{ type: 'output_text', text: item.text, annotations: [], logprobs: [] }],
    };
  return {
    id: item.id,
    type: 'function_call',
    call_id: item.callId,
    name: item.name,
    arguments: status === 'in_progress' ? '' : item.args,
    status,
  };
}

/** The response id's body, from the chat completion's id. */
function idOf(chatId: unknown): string {
  return typeof chatId === 'string' && chatId !== '' ? chatId.replace(/^chatcmpl-/, '') : 'fairway';
}
