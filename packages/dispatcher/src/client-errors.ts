import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from './errors.ts';

/**
 * A request Node's HTTP parser refused before fastify saw it (bad request line, bare CR or LF,
 * NUL bytes, conflicting framing, oversized headers): answered with an OpenAI-shaped error, as
 * every other error is, with a new `x-request-id`, and the connection closed — its framing cannot
 * be trusted.
 */
export function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const api =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? new ApiError('HEADERS_TOO_LARGE', 'request headers are too large')
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? new ApiError('CLIENT_TIMEOUT', 'the request was not received in time')
        : new ApiError('INVALID_REQUEST', 'malformed HTTP request');
  const body = JSON.stringify(api.body());
  if (socket.writable)
    socket.write(
      `HTTP/1.1 ${api.status} ${api.status === 431 ? 'Request Header Fields Too Large' : api.status === 408 ? 'Request Timeout' : 'Bad Request'}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: fw-${randomUUID()}\r\nConnection: close\r\n\r\n${body}`,
    );
  socket.destroy();
}

/** fastify's own routing failures (a URL that does not decode): an OpenAI-shaped 400. */
export function answerFrameworkError(err: Error, _request: FastifyRequest, reply: FastifyReply): void {
  const api = new ApiError('INVALID_REQUEST', `malformed request URL: ${err.message}`);
  void reply.code(api.status).send(api.body());
}

/**
 * HTTP/1.1 requires `Host`; Node would refuse a request without one with an empty body, so the
 * server lets it through (`requireHostHeader: false`) and this check refuses it in our shape.
 */
export function checkHost(request: FastifyRequest): void {
  if (request.raw.httpVersion === '1.1' && request.headers.host === undefined)
    throw new ApiError('INVALID_HEADER', 'missing Host header', { param: 'host' });
}
