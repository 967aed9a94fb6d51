import type { Logger } from '@fairway/core';
import type { FastifyRequest } from 'fastify';
import type { RequestTrace } from './tracing.ts';

/** A client's `x-request-id` fairway takes as the request's id: a short token safe in logs and headers. */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The request id of an incoming request: the client's `x-request-id` when it is a sane token (at
 * most 128 of `[A-Za-z0-9._:-]`, sent once), else a new one. It is returned on every response.
 */
export function requestIdOf(headers: Record<string, string | string[] | undefined>, newId: () => string) {
  const h = headers['x-request-id'];
  return typeof h === 'string' && CLIENT_REQUEST_ID.test(h) ? h : newId();
}

/**
 * What one request's access log line and trace gather as the request goes: set by the handler
 * (never a prompt or a key), written once when the response ends or the client leaves.
 */
export class RequestRecord {
  /** Monotonic ms at which the request arrived. */
  readonly arrivedAt: number;
  /** The request's spans; undefined when tracing is off. */
  readonly trace: RequestTrace | undefined;
  tenant: string | undefined;
  model: string | undefined;
  /** fairway's own id of the request in the scheduler, when it differs from the request id. */
  schedulerId: string | undefined;
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  queueMs: number | undefined;
  ttftMs: number | undefined;
  /** How the request ended (`completed`, `throttled`, an error code …); derived from the status if unset. */
  outcome: string | undefined;
  replica: string | undefined;
  /** Pools that passed the request on to a fallback, each as `<pool>:<reason>`, in order. */
  fallbacks: string[] | undefined;
  /** What prefix-cache affinity did for its placement (`hit`, `bounded`, `miss`), when it had prefix keys. */
  affinity: string | undefined;
  /** Replicas whose engine queues the request was moved out of (`policy.moves`), in order. */
  movedFrom: string[] | undefined;
  /**
   * Called when the connection closes before the response was written in full (the client left):
   * the request path's one listener on it, through the record's own (no second listener per request).
   */
  clientLeft: (() => void) | undefined;

  constructor(arrivedAt: number, trace: RequestTrace | undefined) {
    this.arrivedAt = arrivedAt;
    this.trace = trace;
  }
}

/** The key under which a request carries its {@link RequestRecord} (set by the app's `onRequest` hook). */
export const RECORD = Symbol('fairway.record');

/** A request with its record. */
export type RecordedRequest = FastifyRequest & { [RECORD]?: RequestRecord };

/**
 * Writes the one access log line of a finished (or abandoned) request at `info`: method, route,
 * status, ids, tenant, model, tokens, queue wait, TTFT, total time, outcome, replica and what
 * prefix-cache affinity did for its placement.
 */
export function logAccess(
  log: Logger,
  request: FastifyRequest,
  record: RequestRecord,
  status: number,
  finished: boolean,
  now: number,
): void {
  log.info(
    {
      method: request.method,
      route: request.routeOptions.url ?? request.url.split('?')[0],
      status,
      requestId: request.id,
      schedulerId: record.schedulerId,
      tenant: record.tenant,
      model: record.model,
      promptTokens: record.inputTokens,
      completionTokens: record.outputTokens,
      queueMs: record.queueMs,
      ttftMs: record.ttftMs,
      totalMs: Math.round((now - record.arrivedAt) * 10) / 10,
      outcome: record.outcome ?? (!finished ? 'client_closed' : status < 400 ? 'ok' : 'error'),
      replica: record.replica,
      ...(record.affinity !== undefined ? { affinity: record.affinity } : {}),
      ...(record.fallbacks !== undefined ? { fallbacks: record.fallbacks } : {}),
      ...(record.movedFrom !== undefined ? { movedFrom: record.movedFrom } : {}),
    },
    'request',
  );
}
