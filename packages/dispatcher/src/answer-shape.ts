import type { ApiError } from './errors.ts';

/**
 * How the engine's answer is rewritten for a client that speaks another API than the engine's
 * (Anthropic's Messages API over the engine's chat completions): the request still runs the one
 * chat path — admitted, queued, proxied and settled from the engine's own `usage` — and only the
 * bytes written to the client change.
 */
export interface AnswerShape {
  /** A whole (non-streamed) engine body, as the client receives it. */
  whole(bytes: Uint8Array | string): string;
  /** Streamed engine bytes, split anywhere, as the client's events ('' while a line is incomplete). */
  chunk(bytes: Uint8Array | string): string;
  /** The event that ends a stream which failed after it started. */
  error(err: ApiError): string;
}
