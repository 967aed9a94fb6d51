import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import {
  chatPromptTokenList,
  completionPromptTokenList,
  promptTokenIds,
  type Tokenize,
} from './prompt-blocks.ts';
import { type ChatRequest, type CompletionRequest, chatRequestSchema } from './request-schema.ts';
import { errorBody } from './response-format.ts';

/** `POST /tokenize` with a prompt, as vLLM's `TokenizeCompletionRequest`. */
const tokenizeCompletionSchema = z.looseObject({
  model: z.string().min(1).nullish(),
  prompt: z.string(),
  add_special_tokens: z.boolean().nullish(),
  return_token_strs: z.boolean().nullish(),
});

/** `POST /tokenize` with messages, as vLLM's `TokenizeChatRequest`. */
const tokenizeChatSchema = chatRequestSchema.safeExtend({
  return_token_strs: z.boolean().nullish(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
});

/** What {@link tokenizeRoute} needs from the engine. */
export interface TokenizeRouteDeps {
  /** Splits text into tokens, as generation requests are. */
  readonly tokenize: Tokenize;
  /** The longest prompt + output the engine takes, reported as `max_model_len`. */
  readonly maxModelLen: number;
  /** Whether `model` names a model this engine serves (its own name or a loaded adapter). */
  readonly serves: (model: string) => boolean;
}

/**
 * vLLM's `POST /tokenize`: the token ids of a prompt (`prompt`, with `<s>` unless
 * `add_special_tokens` is false) or of a conversation under the chat template (`messages`), exactly
 * the ids whose blocks the prefix cache hashes (`sha256_cbor`) for the same completion or chat
 * request. Answers `{count, max_model_len, tokens, token_strs: null}`; `return_token_strs` is
 * accepted, but the token strings are not reported.
 */
export function tokenizeRoute(app: FastifyInstance, deps: TokenizeRouteDeps): void {
  app.post('/tokenize', async (req, reply) => {
    const fail = (status: number, type: string, message: string) =>
      reply
        .code(status)
        .header('content-type', 'application/json')
        .send(errorBody(status, type, message));
    const body = req.body;
    const isChat = typeof body === 'object' && body !== null && 'messages' in body;
    const parsed = isChat ? tokenizeChatSchema.safeParse(body) : tokenizeCompletionSchema.safeParse(body);
    if (!parsed.success)
      return fail(
        400,
        'BadRequestError',
        parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; '),
      );
    const model = parsed.data.model;
    if (model != null && !deps.serves(model))
      return fail(404, 'NotFoundError', `The model \`${model}\` does not exist.`);
    let tokens: ReturnType<typeof promptTokenIds>;
    if (isChat) {
      const chat = parsed.data as ChatRequest;
      if (chat.continue_final_message === true && chat.add_generation_prompt === true)
        return fail(
          400,
          'BadRequestError',
          'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
        );
      tokens = promptTokenIds(chatPromptTokenList(chat, deps.tokenize));
    } else {
      tokens = promptTokenIds(completionPromptTokenList(parsed.data as CompletionRequest, deps.tokenize));
    }
    return reply.header('content-type', 'application/json').send({
      count: tokens.length,
      max_model_len: deps.maxModelLen,
      tokens,
      token_strs: null,
    });
  });
}
