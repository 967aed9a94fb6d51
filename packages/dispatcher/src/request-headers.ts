import { ApiError } from './errors.ts';

/** fairway's request headers (all optional). */
export const FairwayHeaders = {
  app: 'x-fairway-app',
  user: 'x-fairway-user',
  sloClass: 'x-fairway-slo-class',
  interaction: 'x-fairway-interaction',
} as const;

/** Values read from fairway's headers. */
export interface FairwayHeaderValues {
  readonly app: string | undefined;
  readonly user: string | undefined;
  readonly sloClass: string | undefined;
  readonly interaction: string | undefined;
}

const SAFE = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

function read(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const raw = headers[name];
  if (raw === undefined) return undefined;
  if (Array.isArray(raw))
    throw new ApiError('INVALID_HEADER', `header ${name} must appear once`, { param: name });
  if (!SAFE.test(raw)) {
    throw new ApiError('INVALID_HEADER', `header ${name} must be 1-128 characters of [A-Za-z0-9._:@/+=-]`, {
      param: name,
    });
  }
  return raw;
}

/**
 * Reads and validates fairway's headers. Values are restricted to a safe alphabet so they can be
 * used in store keys, metrics labels and logs without escaping (no header or key injection).
 */
export function readFairwayHeaders(
  headers: Record<string, string | string[] | undefined>,
): FairwayHeaderValues {
  return {
    app: read(headers, FairwayHeaders.app),
    user: read(headers, FairwayHeaders.user),
    sloClass: read(headers, FairwayHeaders.sloClass),
    interaction: read(headers, FairwayHeaders.interaction),
  };
}

/** The bearer token of an `Authorization` header, or undefined when absent. */
export function bearerToken(headers: Record<string, string | string[] | undefined>): string | undefined {
  const auth = headers.authorization;
  if (auth === undefined) return undefined;
  if (Array.isArray(auth))
    throw new ApiError('INVALID_HEADER', 'header authorization must appear once', { param: 'authorization' });
  const m = /^Bearer\s+(\S{1,512})\s*$/i.exec(auth);
  if (!m) throw new ApiError('INVALID_API_KEY', 'authorization header must be "Bearer <api key>"');
  return m[1];
}

/**
 * The headers with Anthropic's `x-api-key` read as `Authorization: Bearer <key>` when no
 * `Authorization` is sent: the Messages API takes its key either way, and whatever reads the key
 * (authentication, CORS's per-tenant origins) must see the same one. A repeated `x-api-key` is a
 * 400 `invalid_header`.
 */
export function withApiKeyHeader<H extends Record<string, string | string[] | undefined>>(headers: H): H {
  const key = headers['x-api-key'];
  if (key === undefined || headers.authorization !== undefined) return headers;
  if (Array.isArray(key))
    throw new ApiError('INVALID_HEADER', 'header x-api-key must appear once', { param: 'x-api-key' });
  return { ...headers, authorization: `Bearer ${key}` };
}
