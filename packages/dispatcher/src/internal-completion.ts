import { randomBytes } from 'node:crypto';
import { hashApiKey } from '@fairway/core';
import type { FastifyInstance } from 'fastify';
import type { KeyRing, Principal } from './auth.ts';
import { ApiError } from './errors.ts';
import { bearerToken, FairwayHeaders } from './request-headers.ts';

/** One completion an in-process caller (the Batch API) runs for a tenant. */
export interface InternalCompletion {
  /** `/v1/chat/completions` or `/v1/completions`. */
  readonly url: string;
  /** The request body, as a client would send it. */
  readonly body: unknown;
  /** SLO class of the request (`x-fairway-slo-class`). */
  readonly sloClass: string;
}

/** The answer of an {@link InternalCompletion}: what a client would have received. */
export interface InternalAnswer {
  readonly status: number;
  /** The response body (JSON text). */
  readonly body: string;
  /** The request id the dispatcher gave it (`x-request-id`). */
  readonly requestId: string;
}

/** Who a request's `Authorization` header authenticates as; the same 401s as the completion routes. */
export function authenticateHeaders(
  keys: KeyRing,
  headers: Record<string, string | string[] | undefined>,
): Principal {
  const key = bearerToken(headers);
  if (key === undefined)
    throw new ApiError('MISSING_API_KEY', 'missing API key: send "Authorization: Bearer <key>"');
  const principal = keys.authenticate(key);
  if (principal === undefined) throw new ApiError('INVALID_API_KEY', 'invalid API key');
  return principal;
}

/**
 * Runs completions for a tenant through the public route, in process (`app.inject`): the same
 * authentication, admission, fair queue, dispatch, proxy and settlement as a client's request, so
 * nothing of the request path is written twice. Each tenant gets a random key of its own, held only
 * in this process's memory and on its key ring (by hash); it follows the tenant (a revoked or
 * removed tenant's key fails like any other).
 */
export class InternalCompletions {
  readonly #app: FastifyInstance;
  readonly #keys: KeyRing;
  readonly #byTenant = new Map<string, { key: string; hash: string }>();

  constructor(app: FastifyInstance, keys: KeyRing) {
    this.#app = app;
    this.#keys = keys;
  }

  /** Runs `call` as `tenant` and returns the answer a client would have had. */
  async complete(tenant: string, call: InternalCompletion): Promise<InternalAnswer> {
    const res = await this.#app.inject({
      method: 'POST',
      url: call.url,
      headers: {
        authorization: `Bearer ${this.#keyOf(tenant)}`,
        'content-type': 'application/json',
        [FairwayHeaders.sloClass]: call.sloClass,
      },
      payload: JSON.stringify(call.body),
    });
    const id = res.headers['x-request-id'];
    return { status: res.statusCode, body: res.body, requestId: typeof id === 'string' ? id : '' };
  }

  #keyOf(tenant: string): string {
    let entry = this.#byTenant.get(tenant);
    if (entry === undefined) {
      const key = `fw-internal-${randomBytes(24).toString('hex')}`;
      entry = { key, hash: hashApiKey(key) };
      this.#byTenant.set(tenant, entry);
    }
    // Revoking the tenant's keys removed it too: issue it again while the tenant exists.
    if (this.#keys.ownerOf(entry.hash) !== tenant) this.#keys.add(entry.hash, { tenant });
    return entry.key;
  }
}
