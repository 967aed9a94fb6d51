import { z } from 'zod';

const streamOptionsSchema = z
  .looseObject({
    include_usage: z.boolean().nullish(),
    continuous_usage_stats: z.boolean().nullish(),
  })
  .nullish();

/** Fields both endpoints share; unknown fields (temperature, top_p, …) are accepted and ignored. */
const common = {
  model: z.string().min(1).nullish(),
  stream: z.boolean().nullish(),
  stream_options: streamOptionsSchema,
  max_tokens: z.number().int().positive().nullish(),
  ignore_eos: z.boolean().nullish(),
  priority: z.number().int().nullish(),
  /** Choices: each generates its own output (the KV model runs them as one sequence of n × the length). */
  n: z.number().int().min(1).max(128).nullish(),
  /**
   * vLLM: the tokenizer adds its special tokens (`<s>`) to the prompt. @default true for
   * completions, false for chat (the chat template has them)
   */
  add_special_tokens: z.boolean().nullish(),
  /** Test hook: the request's natural output length, tokens. */
  fairway_output_tokens: z.number().int().nonnegative().nullish(),
};

const contentPartSchema = z.looseObject({ type: z.string(), text: z.string().optional() });

/** `POST /v1/chat/completions` as the simulated engine reads it. */
export const chatRequestSchema = z.looseObject({
  ...common,
  messages: z
    .array(
      z.looseObject({
        role: z.string(),
        content: z.union([z.string(), z.array(contentPartSchema), z.null()]).optional(),
      }),
    )
    .min(1, 'must contain at least one message'),
  max_completion_tokens: z.number().int().positive().nullish(),
  /** vLLM: continue the final (assistant) message instead of starting a new one. */
  continue_final_message: z.boolean().nullish(),
  /** vLLM: open a new assistant turn after the messages (its default is true). */
  add_generation_prompt: z.boolean().nullish(),
  /** Tool definitions the chat template renders into the prompt. */
  tools: z.array(z.unknown()).nullish(),
});

/** `POST /v1/completions` as the simulated engine reads it. */
export const completionRequestSchema = z.looseObject({
  ...common,
  prompt: z.union([
    z.string(),
    z.array(z.string()).length(1, 'engine-sim serves one prompt per request'),
    z.array(z.number().int()).min(1),
    z.array(z.array(z.number().int()).min(1)).length(1, 'engine-sim serves one prompt per request'),
  ]),
});

/** A chat request after validation. */
export type ChatRequest = z.infer<typeof chatRequestSchema>;
/** A text-completion request after validation. */
export type CompletionRequest = z.infer<typeof completionRequestSchema>;

/** The text of a message's content (string or text parts). */
export function messageText(content: ChatRequest['messages'][number]['content']): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => p.text ?? '').join('');
  return '';
}
