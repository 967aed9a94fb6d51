import {
  type ChatChunkLike,
  type ChatCompletionLike,
  chatBodyOf,
  chatExpresses,
  ResponsesFromChat,
  SseDataLines,
} from '@fairway/engine';
import { z } from 'zod';
import type { AnswerShape } from './answer-shape.ts';
import { validationError } from './error-mapping.ts';
import { ApiError } from './errors.ts';
import { refuseUnknownFields } from './openai-schemas.ts';

/**
 * OpenAI's Responses API (`POST /v1/responses`) as vLLM serves it: the fields fairway forwards, the
 * schema of those it reads, and the prompt it estimates for admission. vLLM keeps responses only
 * with its response store (off by default), so what needs server-side state is refused.
 */

const MAX_TOKENS_CAP = 1_000_000;

/** Every top-level field `POST /v1/responses` accepts: OpenAI's that vLLM serves, and vLLM's extras. */
export const RESPONSES_FIELDS: ReadonlySet<string> = new Set([
  'model',
  'input',
  'instructions',
  'max_output_tokens',
  'temperature',
  'top_p',
  'stream',
  'store',
  'previous_response_id',
  'user',
  'metadata',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'text',
  'reasoning',
  'truncation',
  'include',
  'service_tier',
  'background',
  'top_logprobs',
  'max_tool_calls',
  'frequency_penalty',
  'presence_penalty',
  'prompt_cache_key',
  'safety_identifier',
  // vLLM's extra sampling parameters.
  'top_k',
  'min_p',
  'repetition_penalty',
  'seed',
  'stop',
  'request_id',
  'priority',
  'cache_salt',
  'fairway_output_tokens',
]);

const inputPart = z.looseObject({ type: z.string().max(64), text: z.string().optional() });
const inputItem = z.looseObject({
  type: z.string().max(64).optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer']).optional(),
  content: z.union([z.string(), z.array(inputPart).max(1024)]).optional(),
});

export const responsesSchema = z.looseObject({
  model: z.string().min(1, 'must be a non-empty string').max(256),
  input: z.union([z.string(), z.array(inputItem).min(1, 'must not be empty').max(4096)]),
  instructions: z.string().nullable().optional(),
  max_output_tokens: z.number().int().min(1).max(MAX_TOKENS_CAP).nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  store: z.boolean().nullable().optional(),
  previous_response_id: z.string().nullable().optional(),
  background: z.boolean().nullable().optional(),
  user: z.string().max(256).optional(),
  priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
  fairway_output_tokens: z.number().int().min(0).max(MAX_TOKENS_CAP).optional(),
});
export type ResponsesBody = z.infer<typeof responsesSchema>;

/**
 * Refuses what needs state kept between requests: `previous_response_id` (a conversation the
 * server stored), `store: true` (keep the response to fetch later) and `background: true`.
 */
export function refuseStatefulFields(body: ResponsesBody): void {
  if (body.previous_response_id != null)
    throw new ApiError(
      'INVALID_REQUEST',
      '"previous_response_id" needs responses stored on the server, which this fleet does not keep: send the conversation in "input" instead',
      { param: 'previous_response_id' },
    );
  if (body.store === true)
    throw new ApiError(
      'INVALID_REQUEST',
      '"store": true asks the server to keep the response, which this fleet does not do: send "store": false or leave it out',
      { param: 'store' },
    );
  if (body.background === true)
    throw new ApiError(
      'INVALID_REQUEST',
      '"background": true needs responses stored on the server, which this fleet does not keep',
      { param: 'background' },
    );
}

/**
 * The chat messages a Responses request's `instructions` and `input` amount to, for the prompt
 * estimate (the engine renders the same conversation through the model's chat template).
 */
export function responsesMessages(body: ResponsesBody): { role: string; content: unknown }[] {
  const messages: { role: string; content: unknown }[] = [];
  if (typeof body.instructions === 'string') messages.push({ role: 'system', content: body.instructions });
  if (typeof body.input === 'string') messages.push({ role: 'user', content: body.input });
  else
    for (const item of body.input)
      messages.push({
        role: item.role ?? 'user',
        content:
          typeof item.content === 'string' || item.content === undefined
            ? (item.content ?? '')
            : item.content.map((p) =>
                p.type === 'input_image' ? { type: 'image_url' } : { type: 'text', text: p.text ?? '' },
              ),
      });
  return messages;
}

const decoder = new TextDecoder();
const text = (bytes: Uint8Array | string): string =>
  typeof bytes === 'string' ? bytes : decoder.decode(bytes);

/**
 * A Responses API request served over the engine's chat completions: the engine's chat answer is
 * written for the client as the Responses API's `response` object or typed events, with the name
 * the client asked for. Used where evictions resume requests (chat continues an evicted answer;
 * the Responses API cannot), so the client still reads one response.
 */
export class ResponsesAnswer implements AnswerShape {
  readonly #answer: ResponsesFromChat;
  readonly #lines = new SseDataLines();

  constructor(body: ResponsesBody, createdAtS: number) {
    this.#answer = new ResponsesFromChat(body, body.model, createdAtS);
  }

  whole(bytes: Uint8Array | string): string {
    return JSON.stringify(this.#answer.whole(JSON.parse(text(bytes)) as ChatCompletionLike));
  }

  chunk(bytes: Uint8Array | string): string {
    let out = '';
    for (const data of this.#lines.push(bytes)) {
      if (data === '[DONE]') out += this.#answer.end();
      else if (data !== '') {
        const c = JSON.parse(data) as ChatChunkLike & { error?: { message?: unknown; code?: unknown } };
        out +=
          c.error === undefined
            ? this.#answer.chunk(c)
            : this.#answer.error(
                String(c.error.code ?? 'server_error'),
                String(c.error.message ?? 'failed'),
                null,
              );
      }
    }
    return out;
  }

  error(err: ApiError): string {
    const e = err.body().error;
    return this.#answer.error(e.code ?? e.type, e.message, e.param ?? null);
  }
}

/**
 * The chat completion a Responses request is served as where evictions resume requests, with its
 * answer's shape; undefined when chat cannot express it whole (built-in tools, reasoning, …): it is
 * then served by the engine's Responses API. Validates the request as `POST /v1/responses` does.
 */
export function responsesOverChat(
  raw: unknown,
  createdAtS: number,
): { readonly body: unknown; readonly shape: AnswerShape } | undefined {
  refuseUnknownFields(raw, RESPONSES_FIELDS);
  const parsed = responsesSchema.safeParse(raw);
  if (!parsed.success) throw validationError(parsed.error);
  refuseStatefulFields(parsed.data);
  if (!chatExpresses(parsed.data)) return undefined;
  return { body: chatBodyOf(parsed.data), shape: new ResponsesAnswer(parsed.data, createdAtS) };
}
