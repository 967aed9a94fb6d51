import { FairwayError } from '@fairway/core';

/** Stable codes of every error the gateway scheduler raises. */
export const GatewayErrorCode = {
  /** Gateway options failed validation; the message names the field. */
  OPTIONS_INVALID: 'FAIRWAY_GATEWAY_OPTIONS_INVALID',
  /** A request names an SLO class the gateway was not configured with. */
  UNKNOWN_SLO_CLASS: 'FAIRWAY_GATEWAY_UNKNOWN_SLO_CLASS',
  /** A request descriptor (or a dispatched payload) is malformed; the message names the field. */
  REQUEST_INVALID: 'FAIRWAY_GATEWAY_REQUEST_INVALID',
  /** An operation named a request this gateway does not own or that is not in the right state. */
  UNKNOWN_REQUEST: 'FAIRWAY_GATEWAY_UNKNOWN_REQUEST',
} as const;
export type GatewayErrorCode = (typeof GatewayErrorCode)[keyof typeof GatewayErrorCode];

/** Base class of gateway errors: a stable code, the gateway and request involved, and a cause. */
export class GatewayError extends FairwayError {
  override readonly name: string = 'GatewayError';
  /** Id of the gateway (dispatcher) that raised it. */
  readonly gateway: string;
  /** Request the error is about, when there is one. */
  readonly requestId: string | undefined;

  constructor(
    code: GatewayErrorCode,
    gateway: string,
    message: string,
    options: { requestId?: string; cause?: unknown } = {},
  ) {
    super(code, `gateway ${gateway}: ${message}`, { cause: options.cause });
    this.gateway = gateway;
    this.requestId = options.requestId;
  }
}

/** A request names an SLO class the gateway does not know. */
export class UnknownSloClassError extends GatewayError {
  override readonly name = 'UnknownSloClassError';
  readonly sloClass: string;
  readonly known: readonly string[];

  constructor(gateway: string, requestId: string, sloClass: string, known: readonly string[]) {
    super(
      GatewayErrorCode.UNKNOWN_SLO_CLASS,
      gateway,
      `request "${requestId}": unknown sloClass "${sloClass}"; known: ${known.join(', ')}`,
      { requestId },
    );
    this.sloClass = sloClass;
    this.known = known;
  }
}
