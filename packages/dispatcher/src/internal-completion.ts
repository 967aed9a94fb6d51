import type { FastifyInstance } from 'fastify';
import type { Authenticator } from './auth.ts';
import { FairwayHeaders } from './request-headers.ts';

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

/**
 * Runs completions for an API key through the public route, in process (`app.inject`): the same
 * authentication, admission, fair queue, dispatch, proxy and settlement as a client's request, so
 * nothing of the request path is written twice. The request names its key by id with this
 * process's secret ({@link Authenticator.internalHeader}): it is checked on the key ring like a
 * client's key (a revoked or expired key fails) and its usage is charged to that key.
 */
export class InternalCompletions {
  readonly #app: FastifyInstance;
  readonly #auth: Authenticator;

  constructor(app: FastifyInstance, auth: Authenticator) {
    this.#app = app;
    this.#auth = auth;
  }

  /** Runs `call` as the key with id `keyId` (`sha256:<hex>`) and returns what a client would have had. */
  async complete(keyId: string, call: InternalCompletion): Promise<InternalAnswer> {
    const res = await this.#app.inject({
      method: 'POST',
      url: call.url,
      headers: {
        ...this.#auth.internalHeader(keyId),
        'content-type': 'application/json',
        [FairwayHeaders.sloClass]: call.sloClass,
      },
      payload: JSON.stringify(call.body),
    });
    const id = res.headers['x-request-id'];
    return { status: res.statusCode, body: res.body, requestId: typeof id === 'string' ? id : '' };
  }
}
