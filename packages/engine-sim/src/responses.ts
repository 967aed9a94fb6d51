import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { errorBody } from './response-format.ts';

/**
 * OpenAI's Responses API as vLLM serves it (`POST /v1/responses`, without its response store): the
 * request runs as this engine's own chat completion — over loopback HTTP, so it is timed, batched
 * and preempted by the engine model like any request — and the answer is written in the Responses
 * shape: a `response` object, or typed events (`response.created` … `response.output_text.delta` …
 * `response.completed`, each with an `event:` line) ending with the usage in
 * `response.completed`'s `response.usage`.
 */

const inputPart = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
  image_url: z.string().optional(),
});
const inputItem = z.looseObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content: z.union([z.string(), z.array(inputPart)]),
});

/** The Responses request fields engine-sim reads; others are ignored, as vLLM ignores unknowns. */
export const responsesRequestSchema = z.looseObject({
  model: z.string().optional(),
  input: z.union([z.string(), z.array(inputItem)]),
  instructions: z.string().nullable().optional(),
  max_output_tokens: z.number().int().min(1).nullable().optional(),
  temperature: z.number().nullable().optional(),
  top_p: z.number().nullable().optional(),
  stream: z.boolean().nullable().optional(),
  store: z.boolean().nullable().optional(),
  previous_response_id: z.string().nullable().optional(),
  fairway_output_tokens: z.number().int().min(0).optional(),
});
type ResponsesRequest = z.infer<typeof responsesRequestSchema>;

/** The chat completion a Responses request runs as. */
function chatBody(b: ResponsesRequest): Record<string, unknown> {
  const messages: Record<string, unknown>[] = [];
  if (typeof b.instructions === 'string') messages.push({ role: 'system', content: b.instructions });
  if (typeof b.input === 'string') messages.push({ role: 'user', content: b.input });
  else
    for (const item of b.input)
      messages.push({
        role: item.role === 'developer' ? 'system' : item.role,
        content:
          typeof item.content === 'string'
            ? item.content
            : item.content.map((p) =>
                p.type === 'input_image'
                  ? { type: 'image_url', image_url: { url: p.image_url ?? '' } }
                  : { type: 'text', text: p.text ?? '' },
              ),
      });
  const chat: Record<string, unknown> = { messages };
  if (b.model !== undefined) chat.model = b.model;
  if (b.max_output_tokens != null) chat.max_tokens = b.max_output_tokens;
  if (b.temperature != null) chat.temperature = b.temperature;
  if (b.top_p != null) chat.top_p = b.top_p;
  if (b.fairway_output_tokens !== undefined) chat.fairway_output_tokens = b.fairway_output_tokens;
  if (b.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return chat;
}

/** Headers of the client's request the chat run keeps (fairway's test hooks, ids, trace context). */
const PASSED = [
  'x-request-id',
  'traceparent',
  'x-fairway-input-tokens',
  'x-fairway-output-tokens',
  'x-fairway-resumed-tokens',
];

interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
}

/** The Responses `response` object. */
function responseObject(
  b: ResponsesRequest,
  id: string,
  createdAt: number,
  model: string,
  state: { status: string; text?: string; itemId: string; usage?: ChatUsage; finish?: string },
): Record<string, unknown> {
  const done = state.status !== 'in_progress';
  return {
    id,
    object: 'response',
    created_at: createdAt,
    model,
    status: state.status,
    instructions: b.instructions ?? null,
    max_output_tokens: b.max_output_tokens ?? null,
    temperature: b.temperature ?? 1,
    top_p: b.top_p ?? 1,
    tools: [],
    tool_choice: 'auto',
    parallel_tool_calls: true,
    text: { format: { type: 'text' } },
    truncation: 'disabled',
    store: false,
    previous_response_id: null,
    reasoning: null,
    metadata: null,
    user: null,
    background: false,
    error: null,
    incomplete_details: state.status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    output: done
      ? [
          {
            id: state.itemId,
            type: 'message',
            role: 'assistant',
            status: 'completed',
            content: [{ type: 'output_text', text: state.text ?? '', annotations: [], logprobs: [] }],
          },
        ]
      : [],
    usage:
      state.usage === undefined
        ? null
        : {
            input_tokens: state.usage.prompt_tokens,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens: state.usage.completion_tokens,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: state.usage.prompt_tokens + state.usage.completion_tokens,
          },
  };
}

/** This server's own URL, from the address it listens on (a wildcard address through loopback). */
function loopback(a: AddressInfo): string {
  if (a.address === '0.0.0.0' || a.address === '::') return `http://127.0.0.1:${a.port}`;
  return a.family === 'IPv6' ? `http://[${a.address}]:${a.port}` : `http://${a.address}:${a.port}`;
}

/** Registers `POST /v1/responses` on the engine-sim app (which must be listening to serve it). */
export function responsesRoute(app: FastifyInstance, servedModelName: string): void {
  app.post('/v1/responses', async (req: FastifyRequest, reply: FastifyReply) => {
    const parsed = responsesRequestSchema.safeParse(req.body);
    if (!parsed.success)
      return reply
        .code(400)
        .header('content-type', 'application/json')
        .send(errorBody(400, 'BadRequestError', parsed.error.issues.map((i) => i.message).join('; ')));
    const b = parsed.data;
    if (typeof b.previous_response_id === 'string')
      return reply
        .code(400)
        .header('content-type', 'application/json')
        .send(
          errorBody(
            400,
            'BadRequestError',
            '`store` is disabled on this server (VLLM_ENABLE_RESPONSES_API_STORE): previous_response_id cannot be used.',
          ),
        );
    const address = app.server.address() as AddressInfo;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    for (const name of PASSED) {
      const v = req.headers[name];
      if (typeof v === 'string') headers[name] = v;
    }
    const ac = new AbortController();
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) ac.abort();
    });
    let res: Response;
    try {
      res = await fetch(`${loopback(address)}/v1/chat/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify(chatBody(b)),
        signal: ac.signal,
      });
    } catch {
      return reply
        .code(500)
        .header('content-type', 'application/json')
        .send(errorBody(500, 'InternalServerError', 'generation failed'));
    }
    if (res.status !== 200)
      return reply
        .code(res.status)
        .header('content-type', 'application/json')
        .send(await res.text());
    const id = `resp_${randomBytes(12).toString('hex')}`;
    const itemId = `msg_${randomBytes(12).toString('hex')}`;
    const createdAt = Math.floor(Date.now() / 1000);
    const model = b.model ?? servedModelName;
    if (b.stream !== true) {
      const chat = (await res.json()) as {
        choices: { message: { content: string | null }; finish_reason: string }[];
        usage: ChatUsage;
      };
      const c = chat.choices[0];
      return reply.header('content-type', 'application/json').send(
        responseObject(b, id, createdAt, model, {
          status: c?.finish_reason === 'length' ? 'incomplete' : 'completed',
          text: c?.message.content ?? '',
          itemId,
          usage: chat.usage,
        }),
      );
    }
    reply.hijack();
    const out = reply.raw;
    out.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    let seq = 0;
    const emit = (type: string, data: Record<string, unknown>): void => {
      out.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`);
    };
    const part = { item_id: itemId, output_index: 0, content_index: 0 };
    emit('response.created', {
      response: responseObject(b, id, createdAt, model, { status: 'in_progress', itemId }),
    });
    emit('response.in_progress', {
      response: responseObject(b, id, createdAt, model, { status: 'in_progress', itemId }),
    });
    emit('response.output_item.added', {
      output_index: 0,
      item: { id: itemId, type: 'message', role: 'assistant', status: 'in_progress', content: [] },
    });
    emit('response.content_part.added', {
      ...part,
      part: { type: 'output_text', text: '', annotations: [] },
    });
    let text = '';
    let finish: string | undefined;
    let usage: ChatUsage | undefined;
    let carry = '';
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        carry += decoder.decode(chunk, { stream: true });
        for (let nl = carry.indexOf('\n'); nl >= 0; nl = carry.indexOf('\n')) {
          const line = carry.slice(0, nl).trim();
          carry = carry.slice(nl + 1);
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (data === '[DONE]' || data === '') continue;
          const c = JSON.parse(data) as {
            choices?: { delta?: { content?: string }; finish_reason?: string | null }[];
            usage?: ChatUsage | null;
            error?: { message?: string };
          };
          if (c.error !== undefined) {
            emit('error', {
              code: 'server_error',
              message: c.error.message ?? 'generation failed',
              param: null,
            });
            out.end();
            return reply;
          }
          if (c.usage != null) usage = c.usage;
          const choice = c.choices?.[0];
          const delta = choice?.delta?.content;
          if (typeof delta === 'string' && delta !== '') {
            text += delta;
            emit('response.output_text.delta', { ...part, delta, logprobs: [] });
          }
          if (choice?.finish_reason != null) finish = choice.finish_reason;
        }
      }
    } catch {
      // The chat run was cut (the client left, or the engine dropped it): so is this stream.
      out.destroy();
      return reply;
    }
    emit('response.output_text.done', { ...part, text, logprobs: [] });
    emit('response.content_part.done', { ...part, part: { type: 'output_text', text, annotations: [] } });
    emit('response.output_item.done', {
      output_index: 0,
      item: {
        id: itemId,
        type: 'message',
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text, annotations: [], logprobs: [] }],
      },
    });
    const status = finish === 'length' ? 'incomplete' : 'completed';
    // vLLM ends with response.completed either way; an answer cut at the cap says `incomplete`.
    emit('response.completed', {
      response: responseObject(b, id, createdAt, model, {
        status,
        text,
        itemId,
        ...(usage === undefined ? {} : { usage }),
      }),
    });
    out.end();
    return reply;
  });
}
