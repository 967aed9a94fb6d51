import { formatPath, type RequestDescriptor } from '@fairway/core';
import { z } from 'zod';
import { GatewayError, GatewayErrorCode } from './errors.ts';

const count = z.number().int().nonnegative();

/** Most prompt block keys a request carries to admission (`RequestDescriptor.promptBlockKeys`). */
export const MAX_PROMPT_BLOCK_KEYS = 4096;

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
    outputCap: count.optional(),
    choices: z.number().int().positive().optional(),
    outputTokens: count.optional(),
    arrivalMs: z.number().finite(),
    interactionId: z.string().optional(),
    interactionStage: count.optional(),
    interactionSize: z.number().int().positive().optional(),
    priority: z.number().finite().optional(),
    blockHashes: z.array(z.string()).optional(),
    promptBlockKeys: z.array(z.string()).max(MAX_PROMPT_BLOCK_KEYS).optional(),
    cachedPromptTokens: count.optional(),
    prefixKeys: z.array(z.string().min(1).max(256)).max(16).optional(),
    prefixTokens: z.array(count).max(16).optional(),
    thinkMs: z.number().finite().nonnegative().optional(),
  })
  .strict();

/** Serialises a descriptor into a queued request's opaque payload. */
export function encodeRequest(req: RequestDescriptor): string {
  return JSON.stringify(req);
}

const FIELDS: ReadonlySet<string> = new Set(Object.keys(requestDescriptorSchema.shape));
const isCount = (v: unknown): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isName = (v: unknown): boolean => typeof v === 'string' && v.length > 0;
const isNumber = (v: unknown): boolean => typeof v === 'number' && Number.isFinite(v);
const optional = (v: unknown, ok: (v: unknown) => boolean): boolean => v === undefined || ok(v);
const isString = (v: unknown): boolean => typeof v === 'string';

/**
 * Whether `data` is a descriptor the schema accepts as it is, read without zod's copy of it (it
 * runs once per admission; zod's parse was about 4 KB and 1.4 % of a dispatcher's busy CPU per
 * request, bench:overhead). Only a yes is final: the schema decides and words the rest.
 */
function plainDescriptor(data: unknown): data is RequestDescriptor {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return false;
  const r = data as Record<string, unknown>;
  for (const k of Object.keys(r)) if (!FIELDS.has(k)) return false;
  return (
    isName(r.id) &&
    isName(r.tenant) &&
    optional(r.keyId, isName) &&
    optional(r.app, isString) &&
    optional(r.user, isString) &&
    isName(r.model) &&
    isName(r.sloClass) &&
    isCount(r.inputTokens) &&
    optional(r.systemTokens, isCount) &&
    isCount(r.maxTokens) &&
    optional(r.outputCap, isCount) &&
    optional(r.choices, (v) => isCount(v) && (v as number) > 0) &&
    optional(r.outputTokens, isCount) &&
    isNumber(r.arrivalMs) &&
    optional(r.interactionId, isString) &&
    optional(r.interactionStage, isCount) &&
    optional(r.interactionSize, (v) => isCount(v) && (v as number) > 0) &&
    optional(r.priority, isNumber) &&
    optional(r.blockHashes, (v) => Array.isArray(v) && v.every(isString)) &&
    optional(
      r.promptBlockKeys,
      (v) => Array.isArray(v) && v.length <= MAX_PROMPT_BLOCK_KEYS && v.every(isString),
    ) &&
    optional(r.cachedPromptTokens, isCount) &&
    optional(
      r.prefixKeys,
      (v) =>
        Array.isArray(v) &&
        v.length <= 16 &&
        v.every((k) => typeof k === 'string' && k.length > 0 && k.length <= 256),
    ) &&
    optional(r.prefixTokens, (v) => Array.isArray(v) && v.length <= 16 && v.every(isCount)) &&
    optional(r.thinkMs, (v) => isNumber(v) && (v as number) >= 0)
  );
}

/**
 * Validates a descriptor; throws a {@link GatewayError} (`REQUEST_INVALID`) naming every offending
 * field.
 */
export function parseRequest(data: unknown, gateway: string, what = 'request'): RequestDescriptor {
  if (plainDescriptor(data)) return data;
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
