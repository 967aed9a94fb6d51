import { z } from 'zod';

/**
 * The OpenAI request bodies fairway accepts. Known fields are type-checked; unknown fields pass
 * through untouched to vLLM, which accepts many extensions (`top_k`, `repetition_penalty`, …).
 */

const MAX_TOKENS_CAP = 1_000_000;

const contentPart = z.looseObject({ type: z.string().max(64) });
const messageContent = z.union([z.string(), z.array(contentPart).max(1024)]).nullable();

export const chatMessageSchema = z.looseObject({
  role: z.enum(['system', 'user', 'assistant', 'tool', 'developer', 'function']),
  content: messageContent.optional(),
  name: z.string().max(256).optional(),
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
  n: z.literal(1, { message: 'only n=1 is supported' }).nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  stop: z
    .union([z.string().max(1024), z.array(z.string().max(1024)).max(16)])
    .nullable()
    .optional(),
  user: z.string().max(256).optional(),
  priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
};

export const chatCompletionSchema = z.looseObject({
  ...common,
  messages: z.array(chatMessageSchema).min(1, 'must contain at least one message').max(4096),
  max_completion_tokens: z.number().int().min(1).max(MAX_TOKENS_CAP).nullable().optional(),
});
export type ChatCompletionBody = z.infer<typeof chatCompletionSchema>;

export const completionSchema = z.looseObject({
  ...common,
  prompt: z.union([z.string(), z.array(z.string()).length(1, 'only a single prompt is supported')]),
});
export type CompletionBody = z.infer<typeof completionSchema>;

/** Text of a chat message's content, for token estimation (non-text parts count nothing). */
export function messageText(content: z.infer<typeof messageContent> | undefined): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  let out = '';
  for (const part of content) {
    const text = (part as { text?: unknown }).text;
    if (typeof text === 'string') out += text;
  }
  return out;
}
