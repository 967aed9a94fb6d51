import { queueDeadlineMs, type RequestDescriptor } from '@fairway/core';
import { groupBand, kvOverloaded, profileBucket, type ReplicaState } from '@fairway/policy';
import {
  type AdmitAndDispatchResult,
  type AdmitInput,
  type AdmitRejectCode,
  type AdmitResult,
  type QueuedRequest,
  tenantScoped,
} from '@fairway/store';
import { type AdmissionRules, composeRules, fromAdmissionPolicy, toRules } from './admission-rules.ts';
import type { Candidates } from './candidates.ts';
import type { DispatchRounds } from './dispatch.ts';
import { UnknownSloClassError } from './errors.ts';
import type { ResolvedGatewayOptions } from './gateway-options.ts';
import type { OutputPredictions } from './output-prediction.ts';
import type { Owned, OwnedRequests } from './owned-requests.ts';
import type { PrefixAffinity } from './prefix-affinity.ts';
import { type RateLimits, rateLimitsAfter, rateLimitsAtRefusal } from './rate-limit-state.ts';
import type { Recovery } from './recovery.ts';
import { RefusalMemo } from './refusal-memo.ts';
import { encodeRequest, parseRequest } from './request-payload.ts';
import { NOTHING, type ReservationView } from './reservation-view.ts';
import type { AdmissionLog } from './state-recovery.ts';

/** Outcome of {@link Admission.submit} (and so of `Gateway.submit`). */
export type SubmitResult =
  /**
   * The store's answer (queue size, budgets brought to their alert threshold, quota share, what
   * each window holds) and where the caller stands under its tightest RPM and TPM limits.
   */
  | (AdmitResult & { readonly ok: true; readonly rateLimits: RateLimits })
  | {
      readonly ok: false;
      /**
       * A store rejection; `context_too_long` when the prompt fits no replica of the pool;
       * `exceeds_limit` when the request alone needs more than a token window allows (it could
       * never be admitted under that limit, so it is not a 429 to retry); `over_deadline` when
       * the queue ahead would hold it past its class's queue deadline (see `QueueDeadlines`).
       */
      readonly code: AdmitRejectCode | 'context_too_long' | 'exceeds_limit' | 'over_deadline';
      readonly retryAfterMs: number;
      readonly key: string;
      /** With `exceeds_limit`: what the request needs and what the window allows, tokens. */
      readonly needed?: number;
      readonly limit?: number;
      /** With `rpm_limited` and `tpm_limited`: where the caller stands under the refusing limit. */
      readonly rateLimits?: RateLimits;
    };

/** Options of a request's admission. */
export interface SubmitOptions {
  /**
   * Its prompt's block keys (`RequestDescriptor.promptBlockKeys`), asked for only when the gateway
   * places by KV cache events and has not refused the request by itself: getting them may cost an
   * engine call.
   */
  readonly promptBlockKeys?: () => Promise<readonly string[] | undefined>;
}

/**
 * Admission for one gateway (DESIGN.md request path, steps 2 and 3): a request's reservation is
 * sized, its admission rules composed (the ordering policy's and the configured ones), and it is
 * admitted into the store's queues — together with the first dispatch when the store can.
 */
export class Admission {
  readonly #o: ResolvedGatewayOptions;
  readonly #id: string;
  readonly #bandOf: ReadonlyMap<string, number>;
  readonly #owned: OwnedRequests;
  readonly #log: AdmissionLog;
  readonly #view: ReservationView;
  readonly #candidates: Candidates;
  readonly #predictions: OutputPredictions;
  readonly #dispatch: DispatchRounds;
  readonly #recovery: Recovery;
  readonly #affinity: PrefixAffinity;
  readonly #deadlineMsOf: ReadonlyMap<string, number>;
  readonly #memo = new RefusalMemo();
  admitted = 0;
  rejected = 0;

  constructor(deps: {
    options: ResolvedGatewayOptions;
    bandOf: ReadonlyMap<string, number>;
    owned: OwnedRequests;
    log: AdmissionLog;
    view: ReservationView;
    candidates: Candidates;
    predictions: OutputPredictions;
    dispatch: DispatchRounds;
    recovery: Recovery;
    affinity: PrefixAffinity;
  }) {
    this.#o = deps.options;
    this.#id = deps.options.id;
    this.#bandOf = deps.bandOf;
    this.#owned = deps.owned;
    this.#log = deps.log;
    this.#view = deps.view;
    this.#candidates = deps.candidates;
    this.#predictions = deps.predictions;
    this.#dispatch = deps.dispatch;
    this.#recovery = deps.recovery;
    this.#affinity = deps.affinity;
    this.#deadlineMsOf = new Map(
      deps.options.sloClasses.map((c) => [c.name, queueDeadlineMs(c, deps.options.maxQueueWaitMs)]),
    );
  }

  /**
   * Admits a request (limits, queue bounds, counter lift and enqueue) and dispatches what now fits.
   * When the store offers `admitAndDispatch` and no router splits the pool, the admission and the
   * first dispatch are one store call (one Redis round trip): a request that arrives while a
   * replica has room is on its way to the engine after it, with replicas ordered and overload
   * judged from this gateway's view of the reservations. A rejection changes nothing and says why.
   */
  async submit(request: RequestDescriptor, options?: SubmitOptions): Promise<SubmitResult> {
    const o = this.#o;
    let req = parseRequest(request, this.#id);
    const classBand = this.#bandOf.get(req.sloClass);
    if (classBand === undefined)
      throw new UnknownSloClassError(this.#id, req.id, req.sloClass, [...this.#bandOf.keys()]);
    const bounds = o.promptBands;
    const band =
      bounds === undefined ? classBand : groupBand(classBand, profileBucket(req.inputTokens, bounds), bounds);
    const pool = o.poolOf(req);
    const flow = o.ordering.flowOf(req);
    const nowMs = o.clock.now();
    // Read the flow's history only when something uses it.
    const usesPrediction = o.reserve === 'predicted' || this.#predictions.pricesPrediction(req);
    const predicted = usesPrediction ? await this.#predictions.predictedOutput(flow) : undefined;

    let reserveTokens = req.inputTokens + this.#predictions.reservedOutput(req, predicted);
    const largest = this.#largestCapacity(pool);
    if (largest !== undefined) {
      if (req.inputTokens + 1 > largest) {
        this.rejected++;
        return { ok: false, code: 'context_too_long', retryAfterMs: 0, key: `pool:${pool}` };
      }
      // A reservation larger than every replica would block its queue forever; the prompt fits, so
      // cap the reservation and let the engine stop the output where it must.
      reserveTokens = Math.min(reserveTokens, largest);
    }

    const ctx = { nowMs, pool, band, flow, reservedTokens: reserveTokens, gateway: this.#id };
    const parts: AdmissionRules[] = [];
    if (o.ordering.admission) parts.push(toRules(fromAdmissionPolicy(o.ordering.admission)(req, ctx)));
    parts.push(toRules(o.admission(req, ctx)));
    if (o.ordering.continuation?.(req)) parts.push({ limits: [], continuation: true });
    const rules = composeRules(parts);
    const tooLarge = rules.limits.find((l) => l.code === 'tpm_limited' && l.amount > l.limit);
    if (tooLarge !== undefined) {
      this.rejected++;
      return {
        ok: false,
        code: 'exceeds_limit',
        retryAfterMs: 0,
        key: tooLarge.key,
        needed: tooLarge.amount,
        limit: tooLarge.limit,
      };
    }
    // A budget smaller than this request alone would refuse it every window, never "try later".
    const overBudget = rules.quotas?.find((q) => (q.minAmount ?? q.amount) > q.budget);
    if (overBudget !== undefined) {
      this.rejected++;
      return {
        ok: false,
        code: 'exceeds_limit',
        retryAfterMs: 0,
        key: `quota:${overBudget.scope}:${overBudget.window}:${overBudget.kind}`,
        needed: overBudget.minAmount ?? overBudget.amount,
        limit: overBudget.budget,
      };
    }
    const deadlineMs = this.#deadlineMsOf.get(req.sloClass);
    const late =
      deadlineMs === undefined || deadlineMs === Number.POSITIVE_INFINITY
        ? undefined
        : this.#dispatch.deadlines.lateBy(pool, band, deadlineMs, o.replicas.finishRate?.(pool) ?? 0, nowMs);
    if (late !== undefined) {
      this.rejected++;
      return {
        ok: false,
        code: 'over_deadline',
        retryAfterMs: late,
        key: `deadline:${pool}:${req.sloClass}`,
      };
    }
    const remembered = this.#memo.refusal(pool, req.tenant, rules.limits, nowMs);
    if (remembered !== undefined) {
      this.rejected++;
      return {
        ok: false,
        code: remembered.limit.code as AdmitRejectCode,
        retryAfterMs: remembered.retryAfterMs,
        key: remembered.limit.key,
        rateLimits: rateLimitsAtRefusal(rules.limits, {
          key: remembered.limit.key,
          code: remembered.limit.code,
          retryAfterMs: remembered.retryAfterMs,
        }),
      };
    }
    // The prompt's block keys cost an engine call: asked for only once every refusal this gateway
    // can make by itself has passed, so a tenant flooding past its limits costs the engines nothing.
    if (
      req.promptBlockKeys === undefined &&
      options?.promptBlockKeys !== undefined &&
      this.#affinity.kvBlocks
    ) {
      const keys = await options.promptBlockKeys();
      if (keys !== undefined) req = { ...req, promptBlockKeys: keys };
    }
    const states = this.#view.states(pool);
    const overloaded = rules.limits.some((l) => l.onlyWhenOverloaded)
      ? this.#isOverloaded(pool, states)
      : false;
    // A replica whose engine's KV cache events show the prompt's start steers it over the prefix
    // index's guess, and the tokens it holds are charged as cached.
    const kv = this.#affinity.kvAffinityOf(req, pool, states);
    const affinity = kv?.candidate ?? this.#affinity.affinityOf(req, pool, states);
    const charged = chargedRequest(req, kv?.cachedTokens);
    const prefixParts = this.#affinity.prefixParts(req, pool);
    const queued: QueuedRequest = {
      id: req.id,
      pool,
      band,
      flow,
      score: o.ordering.score(charged),
      arrivalMs: req.arrivalMs,
      reserveTokens,
      dispatchCost: o.ordering.dispatchCost(charged, predicted),
      owner: this.#id,
      payload: encodeRequest(charged),
      ...(rules.continuation ? { continuation: true } : {}),
      ...(affinity !== undefined ? { affinity } : {}),
      ...(prefixParts !== undefined ? { prefixParts } : {}),
    };
    const admit: AdmitInput = {
      req: queued,
      tenant: req.tenant,
      nowMs,
      lift: o.ordering.lift,
      limits: rules.limits,
      overloaded,
      ...(rules.interaction ? { interaction: rules.interaction } : {}),
      ...(rules.maxQueuedFlow !== undefined ? { maxQueuedFlow: rules.maxQueuedFlow } : {}),
      ...(rules.maxQueuedPool !== undefined ? { maxQueuedPool: rules.maxQueuedPool } : {}),
      ...(rules.usage !== undefined ? { usage: rules.usage } : {}),
      ...(rules.quotas !== undefined && rules.quotas.length > 0 ? { quotas: rules.quotas } : {}),
    };
    const own: Owned = {
      req: charged,
      pool,
      predicted,
      state: 'queued',
      replica: undefined,
      reserveTokens,
      resumeFrom: 0,
      queuedCost: queued.dispatchCost,
      outputBound: reserveTokens - req.inputTokens,
      grown: 0,
      underEstimated: false,
      record: queued,
      admitted: false,
      ...(req.promptBlockKeys !== undefined && this.#affinity.kvBlocks !== undefined
        ? { promptBlockKeys: req.promptBlockKeys }
        : {}),
    };

    if (this.#owned.has(req.id)) {
      this.rejected++;
      return { ok: false, code: 'duplicate', retryAfterMs: 0, key: req.id };
    }
    // Owned before the store call: another gateway may dispatch the request the moment it is
    // queued, and its assignment can arrive before this call's reply.
    this.#owned.set(req.id, own);
    const refused = (result: Extract<AdmitResult, { ok: false }>): SubmitResult => {
      if (this.#owned.get(req.id) === own) this.#owned.delete(req.id);
      this.rejected++;
      if (result.code === 'rpm_limited' || result.code === 'tpm_limited') {
        this.#memo.remember(pool, req.tenant, rules.limits, result.key, result.retryAfterMs, nowMs);
        return { ...result, rateLimits: rateLimitsAtRefusal(rules.limits, result) };
      }
      if (result.code !== 'queue_full') return result;
      // Room is likely once the requests ahead (the bound that was hit) have drained at the
      // pool's measured rate: clamped to 1–60 s, 60 s when nothing has drained lately.
      const depth = (result.key.startsWith('pool:') ? rules.maxQueuedPool : rules.maxQueuedFlow) ?? 1;
      return { ...result, retryAfterMs: this.#dispatch.drain.retryAfterS(pool, depth, o.clock.now()) * 1000 };
    };
    const offered = this.#candidates.list(states, { pool });
    const candidates = offered.replicas;
    if (o.store.admitAndDispatch === undefined || o.router !== undefined || candidates.length === 0) {
      let result: AdmitResult;
      try {
        result = await o.store.admit(admit);
      } catch (err) {
        this.#owned.delete(req.id);
        this.#recovery.forget(req.id);
        throw err;
      }
      if (!result.ok) return refused(result);
      const admitted = { ...result, rateLimits: rateLimitsAfter(rules.limits, result.windows, nowMs) };
      own.admission = admitted;
      this.#dispatch.deadlines.observe(pool, band, result.queued, nowMs);
      this.#noteAdmitted(own, admit, result.interactionStage);
      await this.#dispatch.pump(pool);
      return admitted;
    }

    let r: AdmitAndDispatchResult;
    // Under first fit the store places on the first candidate with room: arrivals until the answer
    // see that room as taken.
    const likely = o.fit === 'first' ? candidates[0]?.id : undefined;
    if (likely !== undefined) this.#view.expect(likely, own.reserveTokens);
    try {
      r = await o.store.admitAndDispatch({
        admit,
        dispatch: this.#dispatch.input(pool, this.#dispatch.bands, candidates, states),
      });
    } catch (err) {
      this.#owned.delete(req.id);
      this.#recovery.forget(req.id);
      throw err;
    } finally {
      if (likely !== undefined) this.#view.answered(likely, own.reserveTokens);
    }
    for (const [i, c] of candidates.entries()) this.#view.set(c.id, r.reserved[i] ?? NOTHING);
    if (!r.admit.ok) return refused(r.admit);
    const admitted = { ...r.admit, rateLimits: rateLimitsAfter(rules.limits, r.admit.windows, nowMs) };
    own.admission = admitted;
    this.#dispatch.deadlines.observe(pool, band, r.admit.queued, nowMs);
    this.#dispatch.deadlines.poolQueued(pool, r.poolQueued, nowMs);
    this.#noteAdmitted(own, admit, r.admit.interactionStage);
    if (r.dispatch?.kind === 'dispatched') {
      this.#dispatch.countDispatch(pool);
      // Its reservation is in the reported reservations already.
      await this.#dispatch.handOn(r.dispatch, false);
      // More may fit: whatever else waits in the pool goes through a dispatch round.
      if (r.poolQueued > 0) await this.#dispatch.pump(pool);
    } else if (r.dispatch?.kind === 'blocked') {
      await this.#dispatch.afterBlocked(pool, offered, r.dispatch.reserveTokens);
    }
    return admitted;
  }

  #noteAdmitted(own: Owned, admit: AdmitInput, stage: number | undefined): void {
    this.admitted++;
    own.admitted = true;
    // FairServe's stage j, counted by the store across every dispatcher: what settlement prices
    // and the app profiles learn from.
    if (stage !== undefined && own.req.interactionStage === undefined)
      own.req = { ...own.req, interactionStage: stage };
    // Logged as the store keeps them (by tenant), so `restore` puts each entry back in its window.
    this.#log.record(
      own.req.id,
      admit.nowMs,
      admit.limits.map((l) => ({ ...l, key: tenantScoped(l.shared ? '' : admit.tenant, l.key) })),
    );
  }

  /** The largest KV capacity (tokens, less headroom) of a fresh replica of `pool`; undefined if none. */
  #largestCapacity(pool: string): number | undefined {
    let largest: number | undefined;
    for (const info of this.#o.replicas.replicas(pool)) {
      if (info.stale) continue;
      const cap = Math.floor(info.kvCapacityTokens * (1 - this.#o.headroom.tokenFraction));
      if (largest === undefined || cap > largest) largest = cap;
    }
    return largest;
  }

  /** Whether `pool` is overloaded (the `overloaded` option, else KV use over `overloadKv`). */
  #isOverloaded(pool: string, states: readonly ReplicaState[]): boolean {
    if (this.#o.overloaded) return this.#o.overloaded(pool, states);
    let used = 0;
    let capacity = 0;
    for (const s of states) {
      if (s.stale) continue;
      used += Math.max(s.reservedTokens, s.kvUsage * s.tokenCapacity);
      capacity += s.tokenCapacity;
    }
    return kvOverloaded(used, capacity, this.#o.overloadKv);
  }
}

/**
 * The request as admission keeps it: with the prompt tokens known to be cached where it is
 * steered, and without its prompt's block keys (a long prompt has thousands).
 */
function chargedRequest(req: RequestDescriptor, cachedPromptTokens: number | undefined): RequestDescriptor {
  if (req.promptBlockKeys === undefined && cachedPromptTokens === undefined) return req;
  const { promptBlockKeys: _dropped, ...kept } = req;
  return cachedPromptTokens === undefined ? kept : { ...kept, cachedPromptTokens };
}
