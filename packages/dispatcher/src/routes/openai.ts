import type { FastifyPluginAsync } from 'fastify';
import { type CompletionContext, handleCompletion } from '../completion-handler.ts';
import { ApiError } from '../errors.ts';
import { responsesOverChat } from '../responses-api.ts';

/** Options of the OpenAI routes plugin. */
export interface OpenAiRoutesOptions {
  readonly ctx: CompletionContext;
  /** Models the dispatcher serves or is configured for, and the exact aliases of those, in listing order. */
  readonly models: () => readonly string[];
  /** The model an alias (`models.aliases`, patterns too) stands for; undefined for no alias. */
  readonly aliasOf: (model: string) => string | undefined;
}

/**
 * The OpenAI-compatible API: `POST /v1/chat/completions`, `POST /v1/completions` (streaming and
 * not), `POST /v1/embeddings`, `POST /v1/responses` (streaming and not), `GET /v1/models` and `GET /v1/models/{id}`. Every route authenticates with a bearer key.
 */
export const openAiRoutes: FastifyPluginAsync<OpenAiRoutesOptions> = async (app, opts) => {
  const { ctx } = opts;
  app.post('/v1/chat/completions', (request, reply) => handleCompletion(ctx, 'chat', request, reply));
  app.post('/v1/completions', (request, reply) => handleCompletion(ctx, 'completions', request, reply));
  app.post('/v1/embeddings', (request, reply) => handleCompletion(ctx, 'embeddings', request, reply));
  app.post('/v1/responses', (request, reply) => {
    // Where evictions resume requests, a response chat can express runs as chat, which resumes.
    if (ctx.resume === undefined) return handleCompletion(ctx, 'responses', request, reply);
    ctx.auth.principal(request.headers);
    const overChat = responsesOverChat(request.body, Math.floor(ctx.clock.now() / 1000));
    return overChat === undefined
      ? handleCompletion(ctx, 'responses', request, reply)
      : handleCompletion(ctx, 'chat', request, reply, overChat);
  });
  // `created` is fixed: the list describes configuration, not events.
  const modelObject = (id: string) => ({ id, object: 'model', created: 0, owned_by: 'fairway' });
  app.get('/v1/models', async (request) => {
    ctx.auth.principal(request.headers);
    return { object: 'list', data: opts.models().map(modelObject) };
  });
  // A wildcard: model ids may hold "/" (`meta-llama/Llama-3.1-8B-Instruct`), sent plain or encoded.
  app.get('/v1/models/*', async (request) => {
    ctx.auth.principal(request.headers);
    const raw = (request.params as { '*': string })['*'];
    let id: string;
    try {
      id = decodeURIComponent(raw);
    } catch {
      id = raw;
    }
    const models = opts.models();
    const target = models.includes(id) ? undefined : opts.aliasOf(id);
    if (!models.includes(id) && (target === undefined || !models.includes(target)))
      throw new ApiError(
        'MODEL_NOT_FOUND',
        `The model '${id.length > 256 ? `${id.slice(0, 256)}…` : id}' does not exist`,
        { param: 'model' },
      );
    return modelObject(id);
  });
};
