import { FairwayError } from '@fairway/core';

/** Stable codes of every error the bus raises. */
export const BusErrorCode = {
  /** A subject prefix or subject token is not a valid NATS subject part. */
  INVALID_SUBJECT: 'FAIRWAY_BUS_INVALID_SUBJECT',
  /** An outgoing message or a reply failed its schema. */
  INVALID_MESSAGE: 'FAIRWAY_BUS_INVALID_MESSAGE',
  /** A request got no reply within its timeout. */
  REQUEST_TIMEOUT: 'FAIRWAY_BUS_REQUEST_TIMEOUT',
  /** A request was sent to a subject nobody serves. */
  NO_RESPONDERS: 'FAIRWAY_BUS_NO_RESPONDERS',
  /** The bus could not connect, or could not create its JetStream stream. */
  SETUP_FAILED: 'FAIRWAY_BUS_SETUP_FAILED',
  /** The bus was used after `close()`. */
  CLOSED: 'FAIRWAY_BUS_CLOSED',
  /** An operator key file does not hold an Ed25519 key of the expected kind. */
  INVALID_KEY: 'FAIRWAY_BUS_INVALID_KEY',
  /** A NATS or JetStream operation failed for another reason. */
  TRANSPORT: 'FAIRWAY_BUS_TRANSPORT',
} as const;
export type BusErrorCode = (typeof BusErrorCode)[keyof typeof BusErrorCode];

/** Base class of bus errors: a stable code, the subject involved when there is one, and a cause. */
export class BusError extends FairwayError {
  override readonly name: string = 'BusError';
  readonly subject: string | undefined;

  constructor(code: BusErrorCode, message: string, options: { subject?: string; cause?: unknown } = {}) {
    super(code, message, { cause: options.cause });
    this.subject = options.subject;
  }
}

/** A message failed its schema; `issues` name each offending field by path. */
export class BusMessageError extends BusError {
  override readonly name = 'BusMessageError';
  readonly kind: string;
  readonly issues: readonly { path: string; message: string }[];

  constructor(
    kind: string,
    issues: readonly { path: string; message: string }[],
    options: { subject?: string; cause?: unknown } = {},
  ) {
    const lines = issues.map((i) => `${i.path || '(root)'}: ${i.message}`).join('; ');
    super(BusErrorCode.INVALID_MESSAGE, `invalid ${kind} message: ${lines}`, options);
    this.kind = kind;
    this.issues = issues;
  }
}

/** A request got no reply in time. */
export class BusTimeoutError extends BusError {
  override readonly name = 'BusTimeoutError';
  readonly timeoutMs: number;

  constructor(subject: string, timeoutMs: number, options: { cause?: unknown } = {}) {
    super(BusErrorCode.REQUEST_TIMEOUT, `no reply on ${subject} within ${timeoutMs} ms`, {
      subject,
      cause: options.cause,
    });
    this.timeoutMs = timeoutMs;
  }
}

/** A request was sent where nobody listens (for a node command: the agent is not running). */
export class BusNoRespondersError extends BusError {
  override readonly name = 'BusNoRespondersError';

  constructor(subject: string, options: { cause?: unknown } = {}) {
    super(BusErrorCode.NO_RESPONDERS, `nobody serves ${subject}`, { subject, cause: options.cause });
  }
}
