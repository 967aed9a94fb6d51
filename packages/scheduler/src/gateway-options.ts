import { type Clock, DEFAULT_SLO_CLASSES, type RequestDescriptor, type SloClass } from '@fairway/core';
import type {
  AdmissionPolicy,
  DispatchRouter,
  OrderingPolicy,
  PlacementPolicy,
  ReplicaState,
} from '@fairway/policy';
import type { QueuedRequest, SchedulingStore } from '@fairway/store';
import { z } from 'zod';
import { type AdmissionFunction, admitAll, fromAdmissionPolicy } from './admission-rules.ts';
import { GatewayError, GatewayErrorCode } from './errors.ts';
import type { AffinityOutcome, PrefixAffinityOptions } from './prefix-affinity.ts';
import type { Headroom, ReplicaSource } from './replica-view.ts';

/**
 * How many tokens a request reserves on its replica: input plus
 * - `max-tokens`: `max_tokens`, the worst case (like VTC's S-LoRA engine: no preemption);
 * - `predicted`: the flow's predicted output (mean of its last five, VTC section 4.4), falling
 *   back to `max_tokens` without history — more requests fit, the engine may preempt;
 * - `oracle`: the true output length (simulation only; `max_tokens` when unknown).
 */
export type ReserveMode = 'max-tokens' | 'predicted' | 'oracle';

/** A request a gateway reserved on a replica, handed to whoever forwards it to the engine. */
export interface Dispatched {
  readonly id: string;
  readonly req: RequestDescriptor;
  readonly replica: string;
  /** Gateway holding the client connection; it charges the output and settles. */
  readonly owner: string;
  /** Gateway that picked it (may differ from the owner when dispatchers share a store). */
  readonly picker: string;
  readonly reserveTokens: number;
  readonly queued: QueuedRequest;
  /**
   * Output predicted for the request when it was picked, if the policy prices predictions; the
   * owner prices its streamed output against it.
   */
  readonly predicted?: number;
  /**
   * Output tokens the request already had when it was evicted and re-queued (`Gateway.evict`):
   * it resumes from there, its prompt now holding that output too. Absent for a first dispatch.
   */
  readonly resumeFrom?: number;
  /** What prefix-cache affinity did for it (requests with prefix keys in a pool that uses it). */
  readonly affinity?: AffinityOutcome;
}

/** Options of a {@link Gateway}; functions and objects are injected, numbers have defaults. */
export interface GatewayOptions {
  /** This dispatcher's id: the owner of what it admits and the picker of what it dispatches. */
  readonly id: string;
  readonly store: SchedulingStore;
  readonly clock: Clock;
  readonly ordering: OrderingPolicy;
  readonly placement: PlacementPolicy;
  readonly replicas: ReplicaSource;
  /**
   * Called for every request this gateway dispatches, including ones another gateway owns: forward
   * it to `replica`, and if `owner` is another gateway, tell it (it then calls `started`).
   */
  readonly onDispatch: (d: Dispatched) => void;
  /** SLO classes; a request's class gives its priority band. @default QLM's three classes */
  readonly sloClasses?: readonly SloClass[];
  /**
   * Splits every class's band by prompt length, as QLM's request groups are keyed: a request of
   * class band `b` whose prompt falls in bucket `i` of these ascending bounds queues in band
   * `groupBand(b, i)` (`b × (bounds + 1) + i`), so a router can order a class's groups of short and
   * long prompts and send them to different replicas. Each sub-band is its own queue and fairness
   * domain. @default none (one band per class)
   */
  readonly promptBands?: readonly number[] | undefined;
  /** Pool a request is scheduled in. @default the request's model */
  readonly poolOf?: (req: RequestDescriptor) => string;
  /** @default 'max-tokens' */
  readonly reserve?: ReserveMode;
  /**
   * Output-length prediction used by `reserve: 'predicted'` instead of the flow's history, e.g.
   * Aladdin's mean output of past requests with a similar prompt (Aladdin section 2.3); returning
   * undefined falls back to the history. @default the flow's history only
   */
  readonly outputPredictor?: (req: RequestDescriptor) => number | undefined;
  /**
   * Aladdin's re-prediction (section 4.3), with `reserve: 'predicted'`: when a running request's
   * streamed output passes the output its reservation covers, its output is predicted again —
   * the conditional average of past outputs longer than what it has (`outputRepredictor`, else
   * this gateway's own history of outputs of the pool and prompt-length bucket) — and its
   * reservation on its replica grows by the difference with the next charge flush (no extra
   * store call). New requests then see the replica as fuller than the first prediction said and
   * go elsewhere. Per-replica prediction errors (`l^e`, `b^e`) are in `stats().predictionErrors`
   * with `reserve: 'predicted'` either way (without `repredict` nothing grows). @default false
   */
  readonly repredict?: boolean;
  /**
   * Conditional average output, in tokens, of past requests like `req` that were longer than
   * `generated` (Aladdin section 4.3), for `repredict`; undefined falls back to this gateway's
   * history, then to twice `generated`. @default this gateway's history only
   */
  readonly outputRepredictor?: (req: RequestDescriptor, generated: number) => number | undefined;
  /**
   * SLO-class routing (QLM virtual queues): each dispatch round takes the routes it gives —
   * which bands each replica takes, in which order, and whether it pulls only while it has room.
   * @default every band in priority order onto every fresh replica in placement order
   */
  readonly router?: DispatchRouter;
  /** KV fraction and sequence slots never reserved. @default { tokenFraction: 0.01, seqs: 0 } */
  readonly headroom?: Partial<Headroom>;
  /** `first`: first candidate in placement order with room; `best`: best fit. @default 'first' */
  readonly fit?: 'first' | 'best';
  /**
   * Most replicas one dispatch offers the store under `fit: 'first'` (the store reads each one
   * it is offered, so this bounds its work per request whatever the pool's size); those the view
   * shows with room come first. `best` fit is offered every replica. @default 4
   */
  readonly maxCandidates?: number;
  /** Streamed output is charged at least this often, ms of the injected clock. @default 50 */
  readonly flushMs?: number;
  /** …or as soon as this many output tokens wait to be charged. @default 512 */
  readonly flushTokens?: number;
  /**
   * Admission limits for each request, as a function or an {@link AdmissionPolicy} (RPM/TPM, OIT),
   * checked after the ordering policy's own `admission`, if it has one. @default none
   */
  readonly admission?: AdmissionFunction | AdmissionPolicy;
  /**
   * Whether a pool is overloaded now (FairServe: throttle windows apply only then).
   * @default the fresh replicas' KV tokens reserved or in use ≥ `overloadKv` of their capacity
   * (policy's `kvOverloaded`); a pool without fresh replicas is overloaded
   */
  readonly overloaded?: (pool: string, replicas: readonly ReplicaState[]) => boolean;
  /** KV load (0–1) above which the default overload test fires. @default 0.9 */
  readonly overloadKv?: number;
  /** Lease renewed by `heartbeat()`, ms. @default 30000 */
  readonly leaseMs?: number;
  /**
   * How long a flow's predicted output is served from memory before it is re-read from the
   * store (in the background), ms of the injected clock; 0 reads the store every time it is
   * used. A live dispatcher sets it so no request waits for the read. @default 0
   */
  readonly predictionTtlMs?: number;
  /**
   * How old this gateway's view of the reservations may be before a dispatch round (`pump`)
   * reads them from the store again, ms of the injected clock; 0 reads them every round.
   * Arrivals never read them: they use the view, which every `admitAndDispatch` refreshes.
   * @default 0
   */
  readonly reservationsMaxAgeMs?: number;
  /**
   * Longest a request waits in the queue before its client is answered with an error, ms (the
   * dispatcher's queue timeout). Admission refuses at once a request predicted to wait longer than
   * this or its class's `queueDeadlineS`, whichever is less. @default no bound
   */
  readonly maxQueueWaitMs?: number;
  /**
   * Prefix-cache affinity: requests with prefix keys go to the replica that served their prompt's
   * start, bounded by load (see {@link PrefixAffinityOptions}). @default off
   */
  readonly prefixAffinity?: PrefixAffinityOptions;
  /**
   * Requests moved out of an engine's queue (`requeueUnserved` with the replica they move to) are
   * placed there when it has room: dispatches honour a request's affinity replica, without a load
   * bound where the pool has no prefix affinity of its own. Ignored under a router, whose routes
   * decide where each band's requests run. @default false
   */
  readonly moves?: boolean;
}

/** {@link GatewayOptions} with every default applied. */
export interface ResolvedGatewayOptions
  extends Required<
    Omit<
      GatewayOptions,
      | 'headroom'
      | 'overloaded'
      | 'admission'
      | 'outputPredictor'
      | 'outputRepredictor'
      | 'router'
      | 'prefixAffinity'
      | 'promptBands'
    >
  > {
  readonly headroom: Headroom;
  readonly promptBands: readonly number[] | undefined;
  readonly admission: AdmissionFunction;
  readonly overloaded: ((pool: string, replicas: readonly ReplicaState[]) => boolean) | undefined;
  readonly outputPredictor: ((req: RequestDescriptor) => number | undefined) | undefined;
  readonly outputRepredictor: ((req: RequestDescriptor, generated: number) => number | undefined) | undefined;
  readonly router: DispatchRouter | undefined;
  readonly prefixAffinity: PrefixAffinityOptions | undefined;
}

const fn = z.custom<(...args: never[]) => unknown>((v) => typeof v === 'function', {
  message: 'must be a function',
});
const obj = (methods: readonly string[]) =>
  z.custom<object>(
    (v) =>
      typeof v === 'object' &&
      v !== null &&
      methods.every((m) => typeof (v as Record<string, unknown>)[m] === 'function'),
    { message: `must be an object with ${methods.join(', ')}` },
  );

const optionsSchema = z
  .object({
    id: z.string().min(1),
    store: obj(['admit', 'dispatch', 'charge', 'settle', 'cancel', 'reserved', 'predictedOutput']),
    clock: obj(['now']),
    ordering: obj(['flowOf', 'score', 'dispatchCost', 'outputCost', 'finalCost']),
    placement: obj(['order', 'forDispatcher']),
    replicas: obj(['replicas', 'pools']),
    onDispatch: fn,
    sloClasses: z
      .array(z.object({ name: z.string().min(1), band: z.number().int().min(0) }).loose())
      .min(1)
      .optional(),
    promptBands: z
      .array(z.number().int().positive())
      .min(1)
      .refine((b) => b.every((x, i) => i === 0 || x > (b[i - 1] as number)), { message: 'must ascend' })
      .optional(),
    poolOf: fn.optional(),
    reserve: z.enum(['max-tokens', 'predicted', 'oracle']).optional(),
    outputPredictor: fn.optional(),
    repredict: z.boolean().optional(),
    outputRepredictor: fn.optional(),
    router: obj(['routes']).optional(),
    headroom: z
      .object({
        tokenFraction: z.number().min(0).max(0.9).optional(),
        seqs: z.number().int().min(0).optional(),
      })
      .strict()
      .optional(),
    fit: z.enum(['first', 'best']).optional(),
    maxCandidates: z.number().int().min(1).optional(),
    flushMs: z.number().positive().optional(),
    flushTokens: z.number().int().positive().optional(),
    admission: z.union([fn, obj(['limits', 'interaction'])]).optional(),
    overloaded: fn.optional(),
    overloadKv: z.number().min(0).max(1).optional(),
    leaseMs: z.number().positive().optional(),
    predictionTtlMs: z.number().min(0).finite().optional(),
    reservationsMaxAgeMs: z.number().min(0).finite().optional(),
    maxQueueWaitMs: z.number().positive().optional(),
    prefixAffinity: z
      .object({
        mode: z.union([z.enum(['off', 'bounded', 'unbounded']), fn]),
        loadFactor: z.number().min(1).finite().optional(),
        floor: z.number().min(0).max(1).optional(),
        index: obj(['learn', 'lookup']).optional(),
        kvBlocks: obj(['longest', 'apply']).optional(),
        onLearn: fn.optional(),
      })
      .strict()
      .optional(),
    moves: z.boolean().optional(),
  })
  .strict();

/** Validates gateway options (errors name the field) and applies defaults. */
export function resolveGatewayOptions(options: GatewayOptions): ResolvedGatewayOptions {
  const r = optionsSchema.safeParse(options);
  if (!r.success) {
    const fields = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new GatewayError(
      GatewayErrorCode.OPTIONS_INVALID,
      String(options.id ?? '?'),
      `invalid options: ${fields}`,
      {
        cause: r.error,
      },
    );
  }
  return {
    id: options.id,
    store: options.store,
    clock: options.clock,
    ordering: options.ordering,
    placement: options.placement,
    replicas: options.replicas,
    onDispatch: options.onDispatch,
    sloClasses: options.sloClasses ?? DEFAULT_SLO_CLASSES,
    promptBands: options.promptBands,
    poolOf: options.poolOf ?? ((req) => req.model),
    reserve: options.reserve ?? 'max-tokens',
    outputPredictor: options.outputPredictor,
    repredict: options.repredict ?? false,
    outputRepredictor: options.outputRepredictor,
    router: options.router,
    headroom: { tokenFraction: options.headroom?.tokenFraction ?? 0.01, seqs: options.headroom?.seqs ?? 0 },
    fit: options.fit ?? 'first',
    maxCandidates: options.maxCandidates ?? 4,
    flushMs: options.flushMs ?? 50,
    flushTokens: options.flushTokens ?? 512,
    admission:
      options.admission === undefined
        ? admitAll
        : typeof options.admission === 'function'
          ? options.admission
          : fromAdmissionPolicy(options.admission),
    overloaded: options.overloaded,
    overloadKv: options.overloadKv ?? 0.9,
    leaseMs: options.leaseMs ?? 30_000,
    predictionTtlMs: options.predictionTtlMs ?? 0,
    reservationsMaxAgeMs: options.reservationsMaxAgeMs ?? 0,
    maxQueueWaitMs: options.maxQueueWaitMs ?? Number.POSITIVE_INFINITY,
    prefixAffinity: options.prefixAffinity,
    moves: options.moves ?? false,
  };
}
