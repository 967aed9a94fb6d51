import { z } from 'zod';
import { ApiError } from './errors.ts';

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
