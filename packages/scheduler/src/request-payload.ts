import { formatPath, type RequestDescriptor } from '@fairway/core';
import { z } from 'zod';
import { GatewayError, GatewayErrorCode } from './errors.ts';

const count = z.number().int().nonnegative();

/** zod schema of a {@link RequestDescriptor}: what a gateway accepts and what a payload carries. */
export const requestDescriptorSchema = z
  .object({
    id: z.string().min(1),
    tenant: z.string().min(1),
    keyId: z.string().min(1).optional(),
    app: z.string().optional(),
    user: z.string().optional(),
    model: z.string().min(1),
    sloClass: z.string().min(1),
    inputTokens: count,
    systemTokens: count.optional(),
    maxTokens: count,
    outputTokens: count.optional(),
    arrivalMs: z.number().finite(),
    interactionId: z.string().optional(),
    interactionStage: count.optional(),
    interactionSize: z.number().int().positive().optional(),
    priority: z.number().finite().optional(),
  })
  .strict();

/** Serialises a descriptor into a queued request's opaque payload. */
export function encodeRequest(req: RequestDescriptor): string {
  return JSON.stringify(req);
}

/**
 * Validates a descriptor; throws a {@link GatewayError} (`REQUEST_INVALID`) naming every offending
 * field.
 */
export function parseRequest(data: unknown, gateway: string, what = 'request'): RequestDescriptor {
  const r = requestDescriptorSchema.safeParse(data);
  if (r.success) return r.data;
  const fields = r.error.issues.map((i) => `${formatPath(i.path) || '(root)'}: ${i.message}`).join('; ');
  const id = typeof (data as { id?: unknown })?.id === 'string' ? (data as { id: string }).id : undefined;
  throw new GatewayError(GatewayErrorCode.REQUEST_INVALID, gateway, `invalid ${what}: ${fields}`, {
    ...(id === undefined ? {} : { requestId: id }),
    cause: r.error,
  });
}

/** Reads a descriptor back from a payload (e.g. a request another dispatcher admitted). */
export function decodeRequest(payload: string, gateway: string): RequestDescriptor {
  let data: unknown;
  try {
    data = JSON.parse(payload);
  } catch (cause) {
    throw new GatewayError(GatewayErrorCode.REQUEST_INVALID, gateway, 'payload is not JSON', { cause });
  }
  return parseRequest(data, gateway, 'payload');
}
