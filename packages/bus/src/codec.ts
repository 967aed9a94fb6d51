/**
 * The bus boundary: messages travel as JSON and are checked against their schema both when sent
 * (a bug in the sender fails loudly at the sender) and when received (a bad or foreign message is
 * dropped with a logged reason and never reaches a handler).
 */
import { formatPath, type Logger, LogThrottle } from '@fairway/core';
import type { z } from 'zod';
import { BusMessageError } from './errors.ts';
import {
  type AdminEvent,
  type AdminEventInput,
  adminEventSchema,
  type SignedAdminEnvelope,
  signedAdminEnvelopeSchema,
} from './messages.ts';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/** Validates an outgoing message against its schema; throws {@link BusMessageError} naming the fields. */
export function parseOutgoing<S extends z.ZodType>(
  kind: string,
  schema: S,
  msg: unknown,
  subject?: string,
): z.infer<S> {
  const result = schema.safeParse(msg);
  if (!result.success) {
    throw new BusMessageError(kind, issuesOf(result.error), subject === undefined ? {} : { subject });
  }
  return result.data;
}

/** JSON bytes of an already validated message. */
export function toBytes(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

/** Validates `msg` against `schema` and encodes it as JSON bytes; throws {@link BusMessageError}. */
export function encodeMessage<S extends z.ZodType>(
  kind: string,
  schema: S,
  msg: unknown,
  subject?: string,
): Uint8Array {
  return toBytes(parseOutgoing(kind, schema, msg, subject));
}

/** The outcome of decoding a received message. */
export type Decoded<T> = { ok: true; value: T } | { ok: false; reason: string };

/** Decodes and validates received bytes; never throws. */
export function decodeMessage<S extends z.ZodType>(schema: S, data: Uint8Array): Decoded<z.infer<S>> {
  let text: string;
  try {
    text = decoder.decode(data);
  } catch {
    return { ok: false, reason: 'payload is not UTF-8' };
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'payload is not JSON' };
  }
  const result = schema.safeParse(json);
  if (!result.success) {
    const lines = issuesOf(result.error).map((i) => `${i.path || '(root)'}: ${i.message}`);
    return { ok: false, reason: lines.join('; ') };
  }
  return { ok: true, value: result.data };
}

function issuesOf(error: z.ZodError): { path: string; message: string }[] {
  return error.issues.map((i) => ({ path: formatPath(i.path), message: i.message }));
}

/** Logs a received message that failed validation. */
export function logRejected(logger: Logger, kind: string, subject: string, reason: string): void {
  // One line per kind of message and field at fault (array indices dropped, so the kinds stay few).
  const fault = (reason.split(':', 1)[0] ?? '').replace(/\d+/g, '#').slice(0, 64);
  throttleOf(logger).warn(
    logger,
    `rejected:${kind}:${fault}`,
    { kind, subject, reason },
    'bus: rejected invalid message',
  );
}

// Refused messages are anyone's to send: one throttle per logger keeps them from flooding the log.
const throttles = new WeakMap<Logger, LogThrottle>();
function throttleOf(logger: Logger): LogThrottle {
  let t = throttles.get(logger);
  if (t === undefined) {
    t = new LogThrottle();
    throttles.set(logger, t);
  }
  return t;
}

/**
 * Runs a handler so that neither a throw nor a rejected promise escapes: a failing handler is
 * logged and its subscription keeps delivering.
 */
export function runHandler(logger: Logger, kind: string, subject: string, fn: () => unknown): void {
  const fail = (err: unknown): void => {
    logger.error({ kind, subject, err: errorText(err) }, 'bus: handler failed');
  };
  try {
    const out = fn();
    if (out instanceof Promise) out.catch(fail);
  } catch (err) {
    fail(err);
  }
}

/** A short text for an unknown thrown value. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** An admin event as decoded from the stream, with its signed form when it came signed. */
export interface DecodedAdmin {
  readonly event: AdminEvent;
  readonly signed?: SignedAdminEnvelope;
}

/**
 * Decodes an admin-stream message: a signed envelope (its payload is the event) or a bare event.
 * Only the schema is checked here; whether the signature is good is the receiver's decision.
 */
export function decodeAdminMessage(data: Uint8Array): Decoded<DecodedAdmin> {
  const outer = decodeMessage(signedAdminEnvelopeSchema, data);
  if (outer.ok) {
    const inner = decodeMessage(adminEventSchema, encoder.encode(outer.value.payload));
    return inner.ok ? { ok: true, value: { event: inner.value, signed: outer.value } } : inner;
  }
  const bare = decodeMessage(adminEventSchema, data);
  return bare.ok ? { ok: true, value: { event: bare.value } } : bare;
}

/**
 * The bytes and type of an outgoing admin event, signed or not; throws {@link BusMessageError}
 * naming the fields if it fails its schema.
 */
export function encodeAdminMessage(event: AdminEventInput | SignedAdminEnvelope): {
  readonly type: AdminEvent['type'];
  readonly data: Uint8Array;
} {
  if ('payload' in event) {
    const envelope = parseOutgoing('signed admin', signedAdminEnvelopeSchema, event);
    const decoded = decodeMessage(adminEventSchema, encoder.encode(envelope.payload));
    if (!decoded.ok) throw new BusMessageError('admin', [{ path: 'payload', message: decoded.reason }]);
    return { type: decoded.value.type, data: toBytes(envelope) };
  }
  const value = parseOutgoing('admin', adminEventSchema, event);
  return { type: value.type, data: toBytes(value) };
}

/**
 * Logs a received message refused although it passed its schema: its route key (the replica,
 * dispatcher or pool it names) does not give the subject it arrived on. NATS permissions bind a
 * publisher to subjects; this check binds the payload to the subject, so an agent allowed to
 * publish only under its own replica's subjects cannot speak for another replica.
 */
export function logMisrouted(logger: Logger, kind: string, subject: string, expected: string): void {
  throttleOf(logger).warn(
    logger,
    `misrouted:${kind}`,
    { kind, subject, expected },
    'bus: refused a message naming another route than its subject',
  );
}
