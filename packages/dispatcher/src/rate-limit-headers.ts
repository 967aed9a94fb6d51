import type { RateLimitState, RateLimits } from '@fairway/scheduler';
import type { FastifyReply } from 'fastify';

/** The rate-limit headers fairway sends, as OpenAI names them (CORS exposes them). */
export const RATE_LIMIT_HEADERS = [
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'x-ratelimit-limit-tokens',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
] as const;

/**
 * A duration as OpenAI writes its resets (Go's duration format): `250ms`, `1s`, `1.5s`, `6m0s`,
 * `1h2m3s`.
 */
export function formatReset(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole < 1000) return `${whole}ms`;
  const h = Math.floor(whole / 3_600_000);
  const m = Math.floor((whole % 3_600_000) / 60_000);
  const s = (whole % 60_000) / 1000;
  const secs = `${Number.isInteger(s) ? s : s.toFixed(3).replace(/0+$/, '')}s`;
  if (h > 0) return `${h}h${m}m${secs}`;
  if (m > 0) return `${m}m${secs}`;
  return secs;
}

function put(reply: FastifyReply, kind: 'requests' | 'tokens', s: RateLimitState | undefined): void {
  if (s === undefined) return;
  reply.raw.setHeader(`x-ratelimit-limit-${kind}`, String(s.limit));
  reply.raw.setHeader(`x-ratelimit-remaining-${kind}`, String(s.remaining));
  reply.raw.setHeader(`x-ratelimit-reset-${kind}`, formatReset(s.resetMs));
}

/**
 * Sets the `x-ratelimit-*` headers of the caller's tightest RPM and TPM limits on the response
 * (on the raw response, so streamed and error answers carry them too); a key without limits gets
 * none.
 */
export function setRateLimitHeaders(reply: FastifyReply, limits: RateLimits | undefined): void {
  if (limits === undefined) return;
  put(reply, 'requests', limits.requests);
  put(reply, 'tokens', limits.tokens);
}
