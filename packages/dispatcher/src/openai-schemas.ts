import { MAX_MEDIA_PARTS, MEDIA_PART_TOKENS } from '@fairway/core';
import { z } from 'zod';
import { ApiError } from './errors.ts';

/**
 * The OpenAI request bodies fairway accepts and forwards to vLLM. Only the top-level fields listed
 * in {@link CHAT_FIELDS} / {@link COMPLETION_FIELDS} pass (OpenAI's, vLLM's documented extra
 * parameters, and engine-sim's test hook): any other is refused with a 400 naming it, so nothing
 * the admission estimate does not see reaches the engine. Fields fairway reads are type-checked.
 */

const MAX_TOKENS_CAP = 1_000_000;

/**
 * Most choices (`n`) the schema lets through; a pool's own bound (`pools[].maxChoices`) is checked
 * when the request is described.
 */
export const MAX_CHOICES_CAP = 128;

/** Top-level fields of OpenAI's chat and completion APIs that both endpoints accept. */
const OPENAI_COMMON = [
  'model',
  'stream',
  'stream_options',
  'max_tokens',
  'n',
  'temperature',
  'top_p',
  'stop',
  'user',
  'seed',
  'frequency_penalty',
  'presence_penalty',
  'logit_bias',
  'logprobs',
  'response_format',
  // Sent by today's OpenAI SDKs; read by OpenAI's own service only. fairway accepts and drops
  // them (see DROPPED_FIELDS): vLLM has no use for them.
  'prompt_cache_key',
  'safety_identifier',
] as const;

/**
 * vLLM's extra sampling and serving parameters (`vllm/entrypoints/openai/protocol.py`,
 * `ChatCompletionRequest` and `CompletionRequest`, "extra parameters" in vLLM's OpenAI-compatible
 * server docs), shared by both endpoints.
 */
const VLLM_COMMON = [
  'best_of',
  'use_beam_search',
  'top_k',
  'min_p',
  'repetition_penalty',
  'length_penalty',
  'stop_token_ids',
  'include_stop_str_in_output',
  'ignore_eos',
  'min_tokens',
  'skip_special_tokens',
  'spaces_between_special_tokens',
  'truncate_prompt_tokens',
  'prompt_logprobs',
  'allowed_token_ids',
  'bad_words',
  'add_special_tokens',
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
  'guided_decoding_backend',
  'guided_whitespace_pattern',
  'structural_tag',
  'structured_outputs',
  'priority',
  'request_id',
  'logits_processors',
  'return_tokens_as_token_ids',
  'return_token_ids',
  'cache_salt',
  'kv_transfer_params',
  'vllm_xargs',
] as const;

/**
 * engine-sim's test hook: the request's natural output length. Real vLLM ignores it (it logs and
 * drops unknown fields), so it is forwarded; it is an integer, so it carries nothing else.
 */
const FAIRWAY_FIELDS = ['fairway_output_tokens'] as const;

/** Every top-level field `POST /v1/chat/completions` accepts. */
export const CHAT_FIELDS: ReadonlySet<string> = new Set([
  ...OPENAI_COMMON,
  ...VLLM_COMMON,
  ...FAIRWAY_FIELDS,
  'messages',
  'max_completion_tokens',
  'top_logprobs',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'functions',
  'function_call',
  'reasoning_effort',
  'include_reasoning',
  'metadata',
  'store',
  'service_tier',
  'modalities',
  'prediction',
  'echo',
  'add_generation_prompt',
  'continue_final_message',
  'documents',
  'chat_template',
  'chat_template_kwargs',
  'mm_processor_kwargs',
  'media_io_kwargs',
  'thinking_token_budget',
  'verbosity',
  'web_search_options',
  'audio',
]);

/**
 * OpenAI fields accepted and not forwarded: what they ask of OpenAI's service has no meaning for
 * a vLLM fleet (`prompt_cache_key`: vLLM caches prefixes by content on its own; `safety_identifier`:
 * OpenAI's abuse monitoring; `verbosity`: a GPT-5 answer-length hint; `web_search_options`: OpenAI's
 * hosted search, which no vLLM model runs).
 */
export const DROPPED_FIELDS = [
  'prompt_cache_key',
  'safety_identifier',
  'verbosity',
  'web_search_options',
] as const;

/**
 * OpenAI fields that ask for something a vLLM engine cannot do: refused with a 400 naming the field
 * rather than silently answered without it.
 */
const UNSERVED_FIELDS: ReadonlyMap<string, string> = new Map([
  [
    'audio',
    '"audio" asks for spoken output, which vLLM does not generate: this fleet answers in text only (remove "audio", and "audio" from modalities)',
  ],
]);

/** Every top-level field `POST /v1/completions` accepts. */
export const COMPLETION_FIELDS: ReadonlySet<string> = new Set([
  ...OPENAI_COMMON,
  ...VLLM_COMMON,
  ...FAIRWAY_FIELDS,
  'prompt',
  'echo',
  'suffix',
]);

/**
 * Refuses a body with a top-level field outside `allowed`: a 400 `invalid_request_error` whose
 * `param` names the field. One pass over the keys, before validation.
 */
export function refuseUnknownFields(body: unknown, allowed: ReadonlySet<string>): void {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
  for (const key in body) {
    const unserved = UNSERVED_FIELDS.get(key);
    if (unserved !== undefined && allowed.has(key))
      throw new ApiError('INVALID_REQUEST', unserved, { param: key });
    if (!allowed.has(key))
      throw new ApiError(
        'INVALID_REQUEST',
        `unknown field "${key.length > 64 ? `${key.slice(0, 64)}…` : key}": fairway forwards only the OpenAI and vLLM request fields`,
        { param: key.slice(0, 256) },
      );
  }
}

const contentPart = z.looseObject({ type: z.string().max(64), text: z.string().optional() });
const messageContent = z.union([z.string(), z.array(contentPart).max(1024)]).nullable();

export const chatMessageSchema = z.looseObject({
  role: z.enum(['system', 'user', 'assistant', 'tool', 'developer', 'function']),
  content: messageContent.optional(),
  name: z.string().max(256).optional(),
  tool_calls: z
    .array(
      z.looseObject({
        function: z.looseObject({ name: z.string().max(256), arguments: z.unknown().optional() }),
      }),
    )
    .max(1024)
    .nullable()
    .optional(),
  tool_call_id: z.string().max(256).optional(),
});

const streamOptions = z
  .looseObject({ include_usage: z.boolean().optional(), continuous_usage_stats: z.boolean().optional() })
  .nullable()
  .optional();

const common = {
  model: z.string().min(1, 'must be a non-empty string').max(256),
  stream: z.boolean().nullable().optional(),
  stream_options: streamOptions,
  max_tokens: z.number().int().min(1).max(MAX_TOKENS_CAP).nullable().optional(),
  n: z.number().int().min(1).max(MAX_CHOICES_CAP).nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  stop: z
    .union([z.string().max(1024), z.array(z.string().max(1024)).max(16)])
    .nullable()
    .optional(),
  user: z.string().max(256).optional(),
  priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
  fairway_output_tokens: z.number().int().min(0).max(MAX_TOKENS_CAP).optional(),
  prompt_cache_key: z.string().max(1024).nullable().optional(),
  safety_identifier: z.string().max(1024).nullable().optional(),
};

/** Counts a conversation's non-text content parts: more than {@link MAX_MEDIA_PARTS} is refused. */
function mediaParts(messages: readonly z.infer<typeof chatMessageSchema>[]): number {
  let n = 0;
  for (const m of messages)
    if (Array.isArray(m.content)) for (const p of m.content) if (MEDIA_PART_TOKENS.has(p.type)) n++;
  return n;
}

export const chatCompletionSchema = z
  .looseObject({
    ...common,
    messages: z.array(chatMessageSchema).min(1, 'must contain at least one message').max(4096),
    max_completion_tokens: z.number().int().min(1).max(MAX_TOKENS_CAP).nullable().optional(),
    tools: z.array(z.looseObject({})).max(1024).nullable().optional(),
    functions: z.array(z.looseObject({})).max(1024).nullable().optional(),
    verbosity: z.enum(['low', 'medium', 'high']).nullable().optional(),
    web_search_options: z.looseObject({}).nullable().optional(),
  })
  .refine((b) => mediaParts(b.messages) <= MAX_MEDIA_PARTS, {
    message: `at most ${MAX_MEDIA_PARTS} image, audio or video parts per request`,
    path: ['messages'],
  });
export type ChatCompletionBody = z.infer<typeof chatCompletionSchema>;

export const completionSchema = z.looseObject({
  ...common,
  prompt: z.union([z.string(), z.array(z.string()).length(1, 'only a single prompt is supported')]),
});
export type CompletionBody = z.infer<typeof completionSchema>;

const ROLES: ReadonlySet<unknown> = new Set(chatMessageSchema.shape.role.options);

const absent = (v: unknown): boolean => v === undefined || v === null;
const isInt = (v: unknown, min: number, max: number): boolean =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= min && v <= max;
const isNum = (v: unknown, min: number, max: number): boolean =>
  typeof v === 'number' && Number.isFinite(v) && v >= min && v <= max;
const isText = (v: unknown, max: number): boolean => typeof v === 'string' && v.length <= max;
const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const isArray = (v: unknown, max: number): v is unknown[] => Array.isArray(v) && v.length <= max;

/** The fields both endpoints share, as `common` reads them. */
function commonFieldsOk(b: Record<string, unknown>): boolean {
  const so = b.stream_options;
  return (
    typeof b.model === 'string' &&
    b.model.length >= 1 &&
    b.model.length <= 256 &&
    (absent(b.stream) || typeof b.stream === 'boolean') &&
    (absent(so) ||
      (isRecord(so) &&
        (so.include_usage === undefined || typeof so.include_usage === 'boolean') &&
        (so.continuous_usage_stats === undefined || typeof so.continuous_usage_stats === 'boolean'))) &&
    (absent(b.max_tokens) || isInt(b.max_tokens, 1, MAX_TOKENS_CAP)) &&
    (absent(b.n) || isInt(b.n, 1, MAX_CHOICES_CAP)) &&
    (absent(b.temperature) || isNum(b.temperature, 0, 2)) &&
    (absent(b.top_p) || isNum(b.top_p, 0, 1)) &&
    (absent(b.stop) ||
      isText(b.stop, 1024) ||
      (isArray(b.stop, 16) && b.stop.every((s) => isText(s, 1024)))) &&
    (b.user === undefined || isText(b.user, 256)) &&
    (b.priority === undefined || isInt(b.priority, -1_000_000, 1_000_000)) &&
    (b.fairway_output_tokens === undefined || isInt(b.fairway_output_tokens, 0, MAX_TOKENS_CAP)) &&
    (absent(b.prompt_cache_key) || isText(b.prompt_cache_key, 1024)) &&
    (absent(b.safety_identifier) || isText(b.safety_identifier, 1024))
  );
}

function messageOk(m: unknown): boolean {
  if (!isRecord(m) || !ROLES.has(m.role)) return false;
  const c = m.content;
  const contentOk =
    absent(c) ||
    typeof c === 'string' ||
    (isArray(c, 1024) &&
      c.every(
        (p) => isRecord(p) && isText(p.type, 64) && (p.text === undefined || typeof p.text === 'string'),
      ));
  const calls = m.tool_calls;
  return (
    contentOk &&
    (m.name === undefined || isText(m.name, 256)) &&
    (m.tool_call_id === undefined || isText(m.tool_call_id, 256)) &&
    (absent(calls) ||
      (isArray(calls, 1024) &&
        calls.every((t) => isRecord(t) && isRecord(t.function) && isText(t.function.name, 256))))
  );
}

const VERBOSITY: ReadonlySet<unknown> = new Set(['low', 'medium', 'high']);
const objectsOrAbsent = (v: unknown): boolean => absent(v) || (isArray(v, 1024) && v.every(isRecord));

/**
 * Whether `body` is a request the endpoint's zod schema accepts as it is — read by hand, without
 * the copy zod's parse makes of the whole body (about 4 KB allocated and 3.5 % of a dispatcher's
 * CPU per request, bench:overhead --heap-profile/--cpu-prof). Only a yes is final: anything
 * unusual answers false, and the schema then decides and words the error.
 */
export function plainValidBody(endpoint: 'chat' | 'completions', body: unknown): boolean {
  if (!isRecord(body) || !commonFieldsOk(body)) return false;
  if (endpoint === 'completions') {
    const p = body.prompt;
    return typeof p === 'string' || (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string');
  }
  const messages = body.messages;
  return (
    isArray(messages, 4096) &&
    messages.length >= 1 &&
    messages.every(messageOk) &&
    (absent(body.max_completion_tokens) || isInt(body.max_completion_tokens, 1, MAX_TOKENS_CAP)) &&
    objectsOrAbsent(body.tools) &&
    objectsOrAbsent(body.functions) &&
    (absent(body.verbosity) || VERBOSITY.has(body.verbosity)) &&
    (absent(body.web_search_options) || isRecord(body.web_search_options)) &&
    mediaParts(messages as z.infer<typeof chatMessageSchema>[]) <= MAX_MEDIA_PARTS
  );
}

/** Every top-level field `POST /v1/embeddings` accepts: OpenAI's and vLLM's documented extras. */
export const EMBEDDING_FIELDS: ReadonlySet<string> = new Set([
  'model',
  'input',
  'encoding_format',
  'dimensions',
  'user',
  'truncate_prompt_tokens',
  'add_special_tokens',
  'priority',
  'request_id',
]);

/** Most inputs one embeddings request may carry (OpenAI's bound). */
export const MAX_EMBEDDING_INPUTS = 2048;

const tokenIds = z.array(z.number().int().min(0).max(10_000_000)).min(1, 'must not be empty');

export const embeddingSchema = z.looseObject({
  model: z.string().min(1, 'must be a non-empty string').max(256),
  input: z.union(
    [
      z.string().min(1, 'must not be empty'),
      z.array(z.string().min(1, 'must not be empty')).min(1).max(MAX_EMBEDDING_INPUTS),
      tokenIds,
      z.array(tokenIds).min(1).max(MAX_EMBEDDING_INPUTS),
    ],
    { message: 'must be a string, an array of strings, an array of token ids or an array of such arrays' },
  ),
  encoding_format: z.enum(['float', 'base64']).nullable().optional(),
  dimensions: z.number().int().min(1).max(65_536).nullable().optional(),
  user: z.string().max(256).optional(),
  priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
  truncate_prompt_tokens: z.number().int().min(-1).max(MAX_TOKENS_CAP).nullable().optional(),
  add_special_tokens: z.boolean().optional(),
});
export type EmbeddingBody = z.infer<typeof embeddingSchema>;
