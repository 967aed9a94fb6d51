import type { Logger } from '@fairway/core';
import type { FastifyPluginAsync } from 'fastify';
import {
  AnthropicAnswer,
  anthropicErrorBody,
  toChatBody,
  validCountTokensBody,
  validMessagesBody,
} from '../anthropic-messages.ts';
import { type CompletionContext, handleCompletion } from '../completion-handler.ts';
import { toApiError, validationError } from '../error-mapping.ts';
import { ApiError } from '../errors.ts';
import { chatCompletionSchema } from '../openai-schemas.ts';
import { promptTokens } from '../request-descriptor.ts';
import { withApiKeyHeader } from '../request-headers.ts';
import { RECORD, type RecordedRequest } from '../request-record.ts';

/** Options of the Anthropic routes plugin. */
export interface AnthropicRoutesOptions {
  readonly ctx: CompletionContext;
  readonly logger: Logger;
}

/**
 * Anthropic's Messages API, `POST /v1/messages`: the request is translated to a chat completion and
 * served by the chat path (admitted, queued fairly, limited and charged exactly like chat); the
 * answer and every error come back in Anthropic's shapes. The key may come as `x-api-key` (what
 * Anthropic's SDKs send) or `Authorization: Bearer`; `anthropic-version` is accepted and not read.
 */
export const anthropicRoutes: FastifyPluginAsync<AnthropicRoutesOptions> = async (app, opts) => {
  const { ctx, logger } = opts;
  app.setErrorHandler((err, request: RecordedRequest, reply) => {
    let api = toApiError(err);
    if (api.kind === 'MISSING_API_KEY')
      api = new ApiError(
        'MISSING_API_KEY',
        'missing API key: send "x-api-key: <key>" or "Authorization: Bearer <key>"',
      );
    const record = request[RECORD];
    if (record !== undefined) record.outcome ??= api.kind;
    if (api.status >= 500)
      logger.error({ err: err instanceof Error ? err.message : String(err) }, 'request failed');
    if (api.retryAfterS !== undefined) void reply.header('retry-after', String(api.retryAfterS));
    // Anthropic answers an overloaded API with 529 `overloaded_error`, which its SDKs retry.
    return reply.code(api.status === 503 ? 529 : api.status).send(anthropicErrorBody(api));
  });
  app.post('/v1/messages', (request, reply) => {
    request.headers = withApiKeyHeader(request.headers);
    // Anthropic's name for the request id header (its SDKs read it as `_request_id`).
    reply.raw.setHeader('request-id', request.id);
    // Who it is before what it asks: a request without a key is a 401 whatever its body.
    ctx.auth.principal(request.headers);
    const body = validMessagesBody(request.body);
    return handleCompletion(ctx, 'chat', request, reply, {
      body: toChatBody(body),
      shape: new AnthropicAnswer(body.model, body.stop_sequences),
    });
  });
  // The prompt's tokens as admission counts them (the pool's tokenizer over the chat template when
  // one is configured, else the estimate): what a request with this prompt is reserved and limited by.
  app.post('/v1/messages/count_tokens', async (request, reply) => {
    request.headers = withApiKeyHeader(request.headers);
    reply.raw.setHeader('request-id', request.id);
    ctx.auth.principal(request.headers);
    const body = validCountTokensBody(request.body);
    const model = ctx.aliasOf(body.model) ?? body.model;
    const pool = ctx.poolFor(model);
    if (pool === undefined)
      throw new ApiError('MODEL_NOT_FOUND', `model "${body.model}" does not exist`, { param: 'model' });
    const chat = chatCompletionSchema.safeParse(toChatBody({ ...body, model, max_tokens: 1 }));
    if (!chat.success) throw validationError(chat.error);
    return { input_tokens: promptTokens('chat', chat.data, ctx.tokenizerFor(pool)) };
  });
};
