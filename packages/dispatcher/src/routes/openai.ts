import type { FastifyPluginAsync } from 'fastify';
import { type CompletionContext, handleCompletion } from '../completion-handler.ts';

/** Options of the OpenAI routes plugin. */
export interface OpenAiRoutesOptions {
  readonly ctx: CompletionContext;
  /** Models the dispatcher serves or is configured for, in listing order. */
  readonly models: () => readonly string[];
}

/**
 * The OpenAI-compatible API: `POST /v1/chat/completions`, `POST /v1/completions` (streaming and
 * not) and `GET /v1/models`. Every route authenticates with a bearer key.
 */
export const openAiRoutes: FastifyPluginAsync<OpenAiRoutesOptions> = async (app, opts) => {
  const { ctx } = opts;
  app.post('/v1/chat/completions', (request, reply) => handleCompletion(ctx, 'chat', request, reply));
  app.post('/v1/completions', (request, reply) => handleCompletion(ctx, 'completions', request, reply));
  app.get('/v1/models', async (request) => {
    ctx.auth.principal(request.headers);
    // `created` is fixed: the list describes configuration, not events.
    return {
      object: 'list',
      data: opts.models().map((id) => ({ id, object: 'model', created: 0, owned_by: 'fairway' })),
    };
  });
};
