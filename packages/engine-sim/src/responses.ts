import type { AddressInfo } from 'node:net';
import {
  type ChatChunkLike,
  type ChatCompletionLike,
  chatBodyOf,
  ResponsesFromChat,
  SseDataLines,
} from '@fairway/engine';
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
const messageItem = z.looseObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content: z.union([z.string(), z.array(inputPart)]),
});
const functionCallItem = z.looseObject({
  type: z.literal('function_call'),
  call_id: z.string(),
  name: z.string(),
  arguments: z.string(),
});
const functionOutputItem = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string(),
  output: z.string(),
});
const inputItem = z.union([messageItem, functionCallItem, functionOutputItem]);

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

/** Headers of the client's request the chat run keeps (fairway's test hooks, ids, trace context). */
const PASSED = [
  'x-request-id',
  'traceparent',
  'x-fairway-input-tokens',
  'x-fairway-output-tokens',
  'x-fairway-resumed-tokens',
];

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
        body: JSON.stringify(chatBodyOf(b)),
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
    const answer = new ResponsesFromChat(b, b.model ?? servedModelName, Math.floor(Date.now() / 1000));
    if (b.stream !== true)
      return reply
        .header('content-type', 'application/json')
        .send(answer.whole((await res.json()) as ChatCompletionLike));
    reply.hijack();
    const out = reply.raw;
    out.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    const lines = new SseDataLines();
    try {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        for (const data of lines.push(chunk)) {
          if (data === '[DONE]' || data === '') continue;
          const c = JSON.parse(data) as ChatChunkLike & { error?: { message?: string } };
          if (c.error !== undefined) {
            out.end(answer.error('server_error', c.error.message ?? 'generation failed', null));
            return reply;
          }
          const events = answer.chunk(c);
          if (events !== '') out.write(events);
        }
      }
    } catch {
      // The chat run was cut (the client left, or the engine dropped it): so is this stream.
      out.destroy();
      return reply;
    }
    out.end(answer.end());
    return reply;
  });
}
