import { z } from 'zod';

/**
 * zod schemas for every store operation's input, shared by both backends so they reject exactly
 * the same inputs with the same field paths.
 */

const finite = z.number().finite();
const nonNegative = finite.min(0);
const id = z.string().min(1);

/** {@link WindowLimit} */
export const windowLimitSchema = z.object({
  key: id,
  limit: nonNegative,
  amount: nonNegative,
  windowMs: finite.positive(),
  onlyWhenOverloaded: z.boolean().optional(),
  code: z.enum(['rpm_limited', 'tpm_limited', 'throttled']),
  trueUp: z.boolean().optional(),
  shared: z.boolean().optional(),
});

/** {@link QueuedRequest} */
export const queuedRequestSchema = z
  .object({
    id,
    pool: id,
    band: z.number().int().min(0),
    flow: id,
    score: finite,
    arrivalMs: finite,
    reserveTokens: nonNegative,
    dispatchCost: finite,
    owner: id,
    payload: z.string(),
    continuation: z.boolean().optional(),
    affinity: z.object({ id, tokenCapacity: nonNegative, seqCapacity: nonNegative }).optional(),
    prefixParts: z
      .array(z.object({ key: z.string().regex(/^\S{1,256}$/), tokens: nonNegative }))
      .max(16)
      .optional(),
  })
  .refine((r) => (r.prefixParts ?? []).reduce((sum, p) => sum + p.tokens, 0) <= r.reserveTokens, {
    message: 'prefix parts must sum to at most reserveTokens',
    path: ['prefixParts'],
  });

/** {@link AdmitInput} */
export const admitInputSchema = z
  .object({
    req: queuedRequestSchema,
    tenant: id,
    nowMs: finite,
    lift: z.enum(['vtc', 'none']),
    limits: z.array(windowLimitSchema).refine((ls) => new Set(ls.map((l) => l.key)).size === ls.length, {
      message: 'window keys must be distinct',
    }),
    overloaded: z.boolean(),
    interaction: z.object({ key: id, ttlMs: finite.positive() }).optional(),
    maxQueuedFlow: z.number().int().min(0).optional(),
    maxQueuedPool: z.number().int().min(0).optional(),
    usage: z
      .object({
        key: id.optional(),
        model: id,
        day: z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'must be YYYY-MM-DD'),
        month: z.string().regex(/^\d{4}-\d{2}$/, 'must be YYYY-MM'),
        priceIn: nonNegative.optional(),
        priceOut: nonNegative.optional(),
      })
      .optional(),
    quotas: z
      .array(
        z.object({
          scope: z.enum(['tenant', 'key']),
          window: z.enum(['day', 'month']),
          kind: z.enum(['tokens', 'spend']),
          budget: nonNegative,
          amount: nonNegative,
          alertAt: nonNegative.optional(),
          resetAtMs: finite,
          minAmount: nonNegative.optional(),
        }),
      )
      .refine((qs) => new Set(qs.map((q) => `${q.scope}:${q.window}:${q.kind}`)).size === qs.length, {
        message: 'quotas must be distinct by scope, window and kind',
      })
      .optional(),
  })
  .refine((a) => (a.quotas ?? []).length === 0 || a.usage !== undefined, {
    message: 'quotas need a usage account',
    path: ['quotas'],
  })
  .refine((a) => !(a.quotas ?? []).some((q) => q.scope === 'key') || a.usage?.key !== undefined, {
    message: 'a key quota needs usage.key',
    path: ['quotas'],
  });

/** {@link UsageQuery} */
export const usageQuerySchema = z.object({
  days: z.array(z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'must be YYYY-MM-DD')).max(400),
  tenant: id.optional(),
  key: id.optional(),
  model: id.optional(),
});

/** {@link ReplicaCandidate} */
export const replicaCandidateSchema = z.object({
  id,
  tokenCapacity: nonNegative,
  seqCapacity: nonNegative,
});

/** {@link ChargeItem}[] */
export const chargeItemsSchema = z.array(
  z.object({ id, amount: finite, reserveTokens: nonNegative.optional() }),
);

/** {@link DispatchInput} */
export const dispatchInputSchema = z.object({
  pool: id,
  bands: z.array(z.number().int().min(0)),
  ordering: z.enum(['fair', 'score']),
  nowMs: finite,
  picker: id,
  replicas: z.array(replicaCandidateSchema),
  fit: z.enum(['first', 'best']),
  charges: chargeItemsSchema.optional(),
  affinityTokens: nonNegative.optional(),
});

/** {@link AdmitAndDispatchInput} */
export const admitAndDispatchInputSchema = z.object({
  admit: admitInputSchema,
  dispatch: dispatchInputSchema,
});

/** {@link SettleInput} */
export const settleInputSchema = z.object({
  id,
  nowMs: finite,
  finalCost: finite,
  actualTokens: nonNegative,
  outputTokens: nonNegative,
});

/** {@link SettleAndDispatchInput} */
export const settleAndDispatchInputSchema = z.object({
  settle: settleInputSchema,
  dispatch: dispatchInputSchema,
});

/** {@link RequeueInput} */
export const requeueInputSchema = z.object({
  id,
  nowMs: finite,
  servedCost: finite,
  dispatchCost: finite.optional(),
  undispatch: z.boolean().optional(),
  moveTo: z.object({ id, tokenCapacity: nonNegative, seqCapacity: nonNegative }).optional(),
});

/** Arguments of `cancel`. */
export const cancelInputSchema = z.object({ id, nowMs: finite });

/** Arguments of `renewOwner`. */
export const renewInputSchema = z.object({ owner: id, nowMs: finite, leaseMs: finite.positive() });

/** Arguments of `snapshot`. */
export const snapshotInputSchema = z.object({ pool: id, band: z.number().int().min(0) });

/** A bare identifier argument (`reserved`, `predictedOutput`). */
export const idSchema = id;

/** {@link RestoreInput} */
export const restoreInputSchema = z.object({
  nowMs: finite,
  lift: z.enum(['vtc', 'none']),
  windows: z.array(z.object({ key: id, id, atMs: finite, windowMs: finite.positive(), amount: nonNegative })),
  requests: z.array(
    z.object({
      req: queuedRequestSchema,
      replica: id.optional(),
      grown: nonNegative.optional(),
      windows: z.array(
        z.object({
          key: id,
          trueUp: z.boolean(),
          atMs: finite,
          windowMs: finite.positive(),
          amount: nonNegative,
        }),
      ),
    }),
  ),
  owner: z.object({ id, holds: z.array(id) }).optional(),
});
