import type { RequestDescriptor, Usage } from '@fairway/core';
import {
  kvOverloaded,
  OutputHistory,
  type PlacementPolicy,
  promptBucket,
  type ReplicaState,
  repredictOutput,
} from '@fairway/policy';
import {
  type AdmitAndDispatchResult,
  type AdmitInput,
  type AdmitRejectCode,
  type DispatchInput,
  type DispatchResult,
  type QueuedRequest,
  type QuotaAlert,
  type ReplicaCandidate,
  type Reservation,
  type RestoredRequest,
  type SettleInput,
  tenantScoped,
} from '@fairway/store';
import { type AdmissionRules, composeRules, fromAdmissionPolicy, toRules } from './admission.ts';
import { ChargeCoalescer } from './charge-coalescer.ts';
import { DrainRate } from './drain-rate.ts';
import { GatewayError, GatewayErrorCode, UnknownSloClassError } from './errors.ts';
import {
  type Dispatched,
  type GatewayOptions,
  type ResolvedGatewayOptions,
  resolveGatewayOptions,
} from './gateway-options.ts';
import { replicaState, toCandidate } from './replica-view.ts';
import { decodeRequest, encodeRequest, parseRequest } from './request-payload.ts';
import { AdmissionLog, recoveringStore } from './state-recovery.ts';

/** Room offered to a replica that takes everything routed to it (QLM without pulling). */
const UNLIMITED = 1e15;
/** Most flows whose predicted output a gateway keeps (flows can be users, which clients name). */
const PREDICTION_CACHE_FLOWS = 10_000;
const NOTHING: Reservation = { tokens: 0, seqs: 0 };

/** A candidate's room less what its engine reports running beyond the store's reservations. */
function guarded(c: ReplicaCandidate, s: ReplicaState): ReplicaCandidate {
  const unseenSeqs = Math.max(0, s.running + s.waiting - s.reservedSeqs);
  const unseenTokens = Math.max(0, s.kvUsage * s.tokenCapacity - s.reservedTokens);
  return {
    id: c.id,
    tokenCapacity: Math.max(0, c.tokenCapacity - unseenTokens),
    seqCapacity: Math.max(0, c.seqCapacity - unseenSeqs),
  };
}

/** Outcome of {@link Gateway.submit}. */
export type SubmitResult =
  | {
      readonly ok: true;
      readonly queued: number;
      /** Budgets this admission brought to their alert threshold (once per window). */
      readonly alerts?: readonly QuotaAlert[];
    }
  | {
      readonly ok: false;
      /**
       * A store rejection; `context_too_long` when the prompt fits no replica of the pool;
       * `exceeds_limit` when the request alone needs more than a token window allows (it could
       * never be admitted under that limit, so it is not a 429 to retry).
       */
      readonly code: AdmitRejectCode | 'context_too_long' | 'exceeds_limit';
      readonly retryAfterMs: number;
      readonly key: string;
      /** With `exceeds_limit`: what the request needs and what the window allows, tokens. */
      readonly needed?: number;
      readonly limit?: number;
    };

/** A request this gateway owns (holds the client connection of). */
interface Owned {
  readonly req: RequestDescriptor;
  readonly pool: string;
  /** Output predicted for the request (VTC(predict) prices streamed output against it). */
  predicted: number | undefined;
  state: 'queued' | 'running';
  replica: string | undefined;
  /** Tokens it reserves on its replica while it runs. */
  readonly reserveTokens: number;
  /** Output tokens it had when it was last evicted (it resumes from there); 0 if never evicted. */
  resumeFrom: number;
  /** Dispatch cost of its queue record (what `requeueUnserved` restores). */
  readonly queuedCost: number;
  /**
   * Output predicted for its current run: what it reserved beyond its input, raised by each
   * re-prediction (the reservation grows to match only with `repredict`).
   */
  outputBound: number;
  /** Tokens its reservation grew by in its current run, as sent to the store (flushed). */
  grown: number;
  /** Whether its output outran its prediction in its current run (Aladdin: under-estimated). */
  underEstimated: boolean;
  /** Its queue record as admitted: what a repair puts back after the store lost its state. */
  readonly record: QueuedRequest;
  /** Whether the store admitted it (a repair puts back only what the store had). */
  admitted: boolean;
}

/**
 * Aladdin's output-length prediction errors on one replica (section 4.3), accumulated over the
 * gateway's life: requests that outran their prediction (under-estimated) and requests that
 * finished before it (over-estimated).
 */
export interface ReplicaPredictionErrors {
  /** `l^e`: tokens re-predicted beyond the first predictions, minus tokens predicted but not generated. */
  readonly lengthError: number;
  /** `b^e`: under-estimated requests minus over-estimated ones. */
  readonly batchError: number;
  readonly underEstimated: number;
  readonly overEstimated: number;
  /** Reservation growth sent to the store (tokens). */
  readonly grownTokens: number;
}

/** Counters of one gateway, for metrics and tests. */
export interface GatewayStats {
  /** Requests this gateway owns that wait in the store's queues. */
  readonly queued: number;
  /** Requests this gateway owns that run on a replica. */
  readonly running: number;
  /** Output tokens recorded but not yet charged. */
  readonly pendingChargeTokens: number;
  readonly admitted: number;
  readonly rejected: number;
  /** Requests this gateway picked (any owner). */
  readonly dispatched: number;
  readonly settled: number;
  readonly flushes: number;
  /** Running requests this gateway evicted and re-queued (`evict`). */
  readonly evicted: number;
  /**
   * Times a running request's output was predicted again (it outran its prediction); only with
   * `repredict` does its reservation grow.
   */
  readonly repredictions: number;
  /** Prediction errors per replica (`reserve: 'predicted'` only), by replica id. */
  readonly predictionErrors: Readonly<Record<string, ReplicaPredictionErrors>>;
  /** Times this gateway found the store's state lost and put back what it holds. */
  readonly repairs: number;
  /** Requests put back by those repairs (queued and running). */
  readonly restored: number;
}

/**
 * The gateway scheduler, one per dispatcher (DESIGN.md principles 1, 3 and 4; request path 2–6).
 * It admits a request into the shared store, holds it there until a replica of its pool has room
 * (tokens and sequence slots, with headroom), and dispatches work-conservingly — on arrival, on
 * completion and on capacity change — taking requests in the ordering policy's order and replicas
 * in the placement policy's order. A dispatched request reserves input + predicted (or maximum)
 * output on its replica and is charged its dispatch cost; streamed output is charged in coalesced
 * flushes; completion settles the true cost and frees the reservation. The live dispatcher and the
 * simulator run this same class; only the clock, the store backend and `onDispatch` differ.
 */
export class Gateway {
  readonly id: string;
  readonly options: ResolvedGatewayOptions;
  readonly #placement: PlacementPolicy;
  readonly #bands: readonly number[];
  readonly #bandOf: ReadonlyMap<string, number>;
  readonly #owned = new Map<string, Owned>();
  readonly #charges: ChargeCoalescer;
  readonly #pumping = new Set<string>();
  readonly #again = new Set<string>();
  /**
   * What the store has reserved on each replica, as this gateway last learned it: from every
   * `admitAndDispatch` result (authoritative for its candidates), from dispatch rounds' reads, and
   * from this gateway's own dispatches, settlements and evictions in between. Arrivals order
   * replicas and judge overload from it, so the request path reads nothing; the store's own
   * atomic fit check keeps reservations exact whatever the view says.
   */
  readonly #reservations = new Map<string, Reservation>();
  /** Clock ms at which each pool's reservations were last read from the store. */
  readonly #reservationsReadAt = new Map<string, number>();
  /** Predicted output per flow with the clock ms it was read (`predictionTtlMs` > 0 only). */
  readonly #predictions = new Map<string, { value: number | undefined; atMs: number }>();
  readonly #refreshing = new Set<string>();
  /** Requests whose admission reply was lost: the store may hold them; see {@link Gateway.heartbeat}. */
  readonly #orphans = new Set<string>();
  #lastFlushMs: number;
  #admitted = 0;
  #rejected = 0;
  #dispatched = 0;
  /** Dispatch rate per pool, for `queue_full`'s Retry-After. */
  readonly #drain = new DrainRate();
  #settled = 0;
  #flushes = 0;
  #running = 0;
  #evicted = 0;
  #repredictions = 0;
  /**
   * Settlements whose store call failed without an answer (Redis unreachable): the request may
   * still hold its reservation there, which would keep its replica's room taken for good. Sent
   * again on every heartbeat until the store answers.
   */
  readonly #unsettled = new Map<string, SettleInput>();
  /** Requests whose settlement is on its way to the store (a repair must not forget them). */
  readonly #settling = new Set<string>();
  /** Window entries this gateway admitted that may still count (rebuilt after a lost state). */
  readonly #log = new AdmissionLog();
  /** Until when (clock ms) candidates are bounded by what engines report, after a repair. */
  #guardUntil = Number.NEGATIVE_INFINITY;
  #repairs = 0;
  #restored = 0;
  /** Past outputs by pool and prompt bucket, for re-prediction (`repredict` without a repredictor). */
  readonly #outputs = new OutputHistory();
  readonly #errors = new Map<
    string,
    {
      lengthError: number;
      batchError: number;
      underEstimated: number;
      overEstimated: number;
      grownTokens: number;
    }
  >();

  /** Validates `options` (throws a `GatewayError` naming the field) and builds an idle gateway. */
  constructor(options: GatewayOptions) {
    const resolved = resolveGatewayOptions(options);
    this.options = { ...resolved, store: recoveringStore(resolved.store, () => this.#repair()) };
    this.id = this.options.id;
    this.#placement = this.options.placement;
    this.#bandOf = new Map(this.options.sloClasses.map((c) => [c.name, c.band]));
    this.#bands = [...new Set(this.#bandOf.values())].sort((a, b) => a - b);
    this.#charges = new ChargeCoalescer(this.options.flushTokens);
    this.#lastFlushMs = this.options.clock.now();
  }

  /**
   * Admits a request (limits, queue bounds, counter lift and enqueue) and dispatches what now fits.
   * When the store offers `admitAndDispatch` and no router splits the pool, the admission and the
   * first dispatch are one store call (one Redis round trip): a request that arrives while a
   * replica has room is on its way to the engine after it, with replicas ordered and overload
   * judged from this gateway's view of the reservations. A rejection changes nothing and says why.
   */
  async submit(request: RequestDescriptor): Promise<SubmitResult> {
    const o = this.options;
    const req = parseRequest(request, this.id);
    const band = this.#bandOf.get(req.sloClass);
    if (band === undefined)
      throw new UnknownSloClassError(this.id, req.id, req.sloClass, [...this.#bandOf.keys()]);
    const pool = o.poolOf(req);
    const flow = o.ordering.flowOf(req);
    const nowMs = o.clock.now();
    // Read the flow's history only when something uses it.
    const usesPrediction = o.reserve === 'predicted' || this.#pricesPrediction(req);
    const predicted = usesPrediction ? await this.#predictedOutput(flow) : undefined;

    let reserveTokens = req.inputTokens + this.#reservedOutput(req, predicted);
    const largest = this.#largestCapacity(pool);
    if (largest !== undefined) {
      if (req.inputTokens + 1 > largest) {
        this.#rejected++;
        return { ok: false, code: 'context_too_long', retryAfterMs: 0, key: `pool:${pool}` };
      }
      // A reservation larger than every replica would block its queue forever; the prompt fits, so
      // cap the reservation and let the engine stop the output where it must.
      reserveTokens = Math.min(reserveTokens, largest);
    }

    const ctx = { nowMs, pool, band, flow, reservedTokens: reserveTokens, gateway: this.id };
    const parts: AdmissionRules[] = [];
    if (o.ordering.admission) parts.push(toRules(fromAdmissionPolicy(o.ordering.admission)(req, ctx)));
    parts.push(toRules(o.admission(req, ctx)));
    if (o.ordering.continuation?.(req)) parts.push({ limits: [], continuation: true });
    const rules = composeRules(parts);
    const tooLarge = rules.limits.find((l) => l.code === 'tpm_limited' && l.amount > l.limit);
    if (tooLarge !== undefined) {
      this.#rejected++;
      return {
        ok: false,
        code: 'exceeds_limit',
        retryAfterMs: 0,
        key: tooLarge.key,
        needed: tooLarge.amount,
        limit: tooLarge.limit,
      };
    }
    const states = this.#viewStates(pool);
    const overloaded = rules.limits.some((l) => l.onlyWhenOverloaded)
      ? this.#isOverloaded(pool, states)
      : false;
    const queued: QueuedRequest = {
      id: req.id,
      pool,
      band,
      flow,
      score: o.ordering.score(req),
      arrivalMs: req.arrivalMs,
      reserveTokens,
      dispatchCost: o.ordering.dispatchCost(req, predicted),
      owner: this.id,
      payload: encodeRequest(req),
      ...(rules.continuation ? { continuation: true } : {}),
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
      req,
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
    };

    if (this.#owned.has(req.id)) {
      this.#rejected++;
      return { ok: false, code: 'duplicate', retryAfterMs: 0, key: req.id };
    }
    // Owned before the store call: another gateway may dispatch the request the moment it is
    // queued, and its assignment can arrive before this call's reply.
    this.#owned.set(req.id, own);
    const refused = (result: SubmitResult): SubmitResult => {
      if (this.#owned.get(req.id) === own) this.#owned.delete(req.id);
      this.#rejected++;
      if (result.ok || result.code !== 'queue_full') return result;
      // Room is likely once the requests ahead (the bound that was hit) have drained at the
      // pool's measured rate: clamped to 1–60 s, 60 s when nothing has drained lately.
      const depth = (result.key.startsWith('pool:') ? rules.maxQueuedPool : rules.maxQueuedFlow) ?? 1;
      return { ...result, retryAfterMs: this.#drain.retryAfterS(pool, depth, o.clock.now()) * 1000 };
    };
    const candidates = this.#candidates(states, undefined, false, pool);
    if (o.store.admitAndDispatch === undefined || o.router !== undefined || candidates.length === 0) {
      let result: SubmitResult;
      try {
        result = await o.store.admit(admit);
      } catch (err) {
        this.#owned.delete(req.id);
        this.#forget(req.id);
        throw err;
      }
      if (!result.ok) return refused(result);
      this.#noteAdmitted(own, admit);
      await this.pump(pool);
      return result;
    }

    let r: AdmitAndDispatchResult;
    try {
      r = await o.store.admitAndDispatch({
        admit,
        dispatch: this.#dispatchInput(pool, this.#bands, candidates),
      });
    } catch (err) {
      this.#owned.delete(req.id);
      this.#forget(req.id);
      throw err;
    }
    for (const [i, c] of candidates.entries()) this.#setReservation(c.id, r.reserved[i] ?? NOTHING);
    if (!r.admit.ok) return refused(r.admit);
    this.#noteAdmitted(own, admit);
    if (r.dispatch?.kind === 'dispatched') {
      this.#countDispatch(pool);
      // Its reservation is in the reported reservations already.
      await this.#handOn(r.dispatch, false);
      // More may fit: whatever else waits in the pool goes through a dispatch round.
      if (r.poolQueued > 0) await this.pump(pool);
    }
    return r.admit;
  }

  #noteAdmitted(own: Owned, admit: AdmitInput): void {
    this.#admitted++;
    own.admitted = true;
    // Logged as the store keeps them (by tenant), so `restore` puts each entry back in its window.
    this.#log.record(
      own.req.id,
      admit.nowMs,
      admit.limits.map((l) => ({ ...l, key: tenantScoped(l.shared ? '' : admit.tenant, l.key) })),
    );
  }

  /**
   * The store's state was lost (a Redis restart without persistence): put back what this gateway
   * holds, as `recoveringStore` calls it once the epoch is re-established. Window entries it
   * admitted within their windows go back at their admission time and amount; running requests
   * are reserved again on their replicas (charged their dispatch cost in the new counters, so each
   * is charged its final cost once in all: the counters it was charged in before are gone);
   * queued ones go back in the order this gateway admitted them, with their arrival time and flow.
   * For a while after, candidates are also bounded by what the engines report running (see
   * `#candidate`), so work other dispatchers have not put back yet is not placed over.
   */
  async #repair(): Promise<void> {
    const o = this.options;
    const store = o.store;
    if (store.restore === undefined) return;
    const nowMs = o.clock.now();
    const requests: RestoredRequest[] = [];
    for (const own of this.#owned.values()) {
      if (!own.admitted) continue;
      const running = own.state === 'running' && own.replica !== undefined && own.replica !== 'unknown';
      if (own.state === 'running' && !running) continue;
      requests.push({
        req: { ...own.record, dispatchCost: own.queuedCost },
        ...(running ? { replica: own.replica, grown: own.grown } : {}),
        windows: this.#log.windowsOf(own.req.id),
      });
    }
    // Everything the store may rightly list under this gateway; anything else there is a
    // settlement or cancellation the store lost (an AOF crash) and would hold its replica's room.
    const holds = [...this.#owned.keys(), ...this.#settling, ...this.#unsettled.keys()];
    const r = await store.restore({
      nowMs,
      lift: o.ordering.lift,
      windows: this.#log.entries(nowMs),
      requests,
      owner: { id: this.id, holds },
    });
    this.#repairs++;
    this.#restored += r.restored;
    this.#reservations.clear();
    this.#reservationsReadAt.clear();
    for (const req of requests)
      if (req.replica !== undefined)
        this.#addReservation(req.replica, req.req.reserveTokens + (req.grown ?? 0), 1);
    this.#guardUntil = nowMs + o.leaseMs;
    // Outside the repair: the dispatch round's store calls wait for the repair to end.
    setTimeout(() => {
      this.pump().catch(() => undefined);
    }, 0);
  }

  /**
   * Dispatches queued requests of `pool` (every pool when omitted) while a replica has room.
   * Returns how many it dispatched. Concurrent calls for one pool coalesce into one loop.
   */
  async pump(pool?: string): Promise<number> {
    if (pool === undefined) {
      let n = 0;
      for (const p of this.options.replicas.pools()) n += await this.pump(p);
      return n;
    }
    if (this.#pumping.has(pool)) {
      this.#again.add(pool);
      return 0;
    }
    this.#pumping.add(pool);
    let n = 0;
    try {
      do {
        this.#again.delete(pool);
        n += await this.#dispatchLoop(pool);
      } while (this.#again.has(pool));
    } finally {
      this.#pumping.delete(pool);
    }
    return n;
  }

  /**
   * The owner learns that its request was dispatched (by itself, or by another gateway sharing the
   * store) and starts charging its output. Only the request id and replica are read, so an owner
   * that learns of a dispatch over the bus (an assignment) can call it without the full record.
   */
  started(d: Pick<Dispatched, 'id' | 'replica'> & Partial<Pick<Dispatched, 'predicted'>>): void {
    const own = this.#owned.get(d.id);
    if (own === undefined || own.state !== 'queued')
      throw new GatewayError(
        GatewayErrorCode.UNKNOWN_REQUEST,
        this.id,
        `request "${d.id}" is not queued here`,
        {
          requestId: d.id,
        },
      );
    own.state = 'running';
    own.replica = d.replica;
    if (d.predicted !== undefined) own.predicted = d.predicted;
    own.outputBound = own.reserveTokens - own.req.inputTokens;
    own.grown = 0;
    own.underEstimated = false;
    this.#running++;
    this.#charges.open(d.id, own.req, own.predicted, own.resumeFrom);
  }

  /**
   * Evicts a running request this gateway owns (QLM section 5, request eviction): stops charging
   * it, and puts it back at the head of its flow's queue in the store with the `generated` output
   * tokens it has so far, its flow charged exactly for what was served. It resumes from that
   * output when it is dispatched again (`Dispatched.resumeFrom`). The caller aborts it on the
   * engine and calls `pump` once it has evicted what it needs. Returns false if the request is
   * not running here or the store cannot re-queue.
   */
  async evict(id: string, generated: number): Promise<boolean> {
    const own = this.#owned.get(id);
    const store = this.options.store;
    if (own === undefined || own.state !== 'running' || store.requeue === undefined) return false;
    const servedCost = this.options.ordering.finalCost(own.req, {
      inputTokens: own.req.inputTokens,
      outputTokens: generated,
    });
    if (!(await store.requeue({ id, nowMs: this.options.clock.now(), servedCost }))) return false;
    this.#charges.close(id);
    this.#release(own);
    own.state = 'queued';
    own.replica = undefined;
    own.resumeFrom = generated;
    this.#running--;
    this.#evicted++;
    return true;
  }

  /**
   * Puts a running request this gateway owns whose engine call failed before it produced
   * anything (connection refused or reset, engine 5xx) back at the head of its flow's queue, as
   * if it had never been dispatched: its reservation is released, its charge undone, and its next
   * dispatch charges (and prices its prediction) as the first did. The caller dispatches it again
   * with `pump`. Returns false if the request is not running here or the store cannot re-queue.
   */
  async requeueUnserved(id: string): Promise<boolean> {
    const own = this.#owned.get(id);
    const store = this.options.store;
    if (own === undefined || own.state !== 'running' || store.requeue === undefined) return false;
    const replica = own.replica;
    // Queued before the store call: once it is back in the queue another gateway may dispatch it,
    // and that assignment can arrive before the store's reply.
    this.#charges.close(id);
    own.state = 'queued';
    own.replica = undefined;
    this.#running--;
    let ok = false;
    try {
      ok = await store.requeue({
        id,
        nowMs: this.options.clock.now(),
        servedCost: 0,
        dispatchCost: own.queuedCost,
      });
    } finally {
      if (!ok && own.state === 'queued') {
        own.state = 'running';
        own.replica = replica;
        this.#running++;
        this.#charges.open(id, own.req, own.predicted, own.resumeFrom);
      }
    }
    if (ok && replica !== undefined) {
      this.#addReservation(replica, -own.reserveTokens - own.grown, -1);
      own.grown = 0;
    }
    return ok;
  }

  /**
   * Records that request `id` has streamed `generated` output tokens in total. Returns true when
   * enough tokens wait to be charged that the caller should `flush()` now.
   */
  recordTokens(id: string, generated: number): boolean {
    const due = this.#charges.record(id, generated);
    if (this.options.reserve === 'predicted') {
      const own = this.#owned.get(id);
      if (own !== undefined && own.state === 'running' && generated > own.outputBound)
        this.#repredict(own, generated);
    }
    return due;
  }

  /**
   * Aladdin section 4.3: a running request passed its predicted output — predict its output again
   * (the conditional average of past outputs longer than `generated`) and mark its replica
   * under-estimated; with `repredict`, grow its reservation by the difference with the next flush.
   */
  #repredict(own: Owned, generated: number): void {
    const o = this.options;
    const req = own.req;
    const mean =
      o.outputRepredictor?.(req, generated) ??
      this.#outputs.conditionalMean(this.#historyKey(own), generated);
    const next = repredictOutput(generated, req.maxTokens, mean);
    const growth = next - own.outputBound;
    if (growth <= 0 || own.replica === undefined) return;
    own.outputBound = next;
    this.#repredictions++;
    if (o.repredict) this.#charges.grow(req.id, growth);
    const e = this.#errorsOf(own.replica);
    e.lengthError += growth;
    if (!own.underEstimated) {
      own.underEstimated = true;
      e.underEstimated++;
      e.batchError++;
    }
  }

  #historyKey(own: Owned): string {
    return `${own.pool}\u0000${promptBucket(own.req.inputTokens)}`;
  }

  #errorsOf(replica: string) {
    let e = this.#errors.get(replica);
    if (e === undefined) {
      e = { lengthError: 0, batchError: 0, underEstimated: 0, overEstimated: 0, grownTokens: 0 };
      this.#errors.set(replica, e);
    }
    return e;
  }

  /** True when `flushMs` has passed since the last flush and tokens wait to be charged. */
  flushDue(): boolean {
    return (
      this.#charges.pendingTokens > 0 && this.options.clock.now() - this.#lastFlushMs >= this.options.flushMs
    );
  }

  /** Charges every output token recorded since the last flush in one store call; returns the items sent. */
  async flush(): Promise<number> {
    this.#lastFlushMs = this.options.clock.now();
    if (this.#charges.pendingTokens === 0) return 0;
    const items = this.#charges.drain(this.options.ordering);
    if (items.length === 0) return 0;
    this.#flushes++;
    for (const item of items) {
      if (item.reserveTokens === undefined) continue;
      // The store grows it in this call; a request it no longer runs is ignored there and here.
      const own = this.#owned.get(item.id);
      if (own === undefined || own.state !== 'running' || own.replica === undefined) continue;
      own.grown += item.reserveTokens;
      this.#addReservation(own.replica, item.reserveTokens, 0);
      this.#errorsOf(own.replica).grownTokens += item.reserveTokens;
    }
    await this.options.store.charge(items);
    return items.length;
  }

  /**
   * Settles a finished request with its true usage: corrects its counter to the policy's final
   * cost, frees its reservation, records its output length; then dispatches into the freed room.
   */
  async complete(id: string, usage: Usage): Promise<void> {
    const own = this.#owned.get(id);
    if (own === undefined || own.state !== 'running')
      throw new GatewayError(
        GatewayErrorCode.UNKNOWN_REQUEST,
        this.id,
        `request "${id}" is not running here`,
        {
          requestId: id,
        },
      );
    if (this.options.reserve === 'predicted') this.#noteFinished(own, usage.outputTokens);
    await this.#settle(id, own, usage);
  }

  /**
   * Gives up a request (client gone, timeout): a queued one leaves the queue; a running one is
   * settled with what it has used so far. Returns false if this gateway does not own it.
   */
  async cancel(id: string, usage?: Usage): Promise<boolean> {
    const own = this.#owned.get(id);
    if (own === undefined) return false;
    if (own.state === 'queued') {
      const removed = await this.options.store.cancel(id, this.options.clock.now());
      if (removed) {
        this.#owned.delete(id);
        this.#log.trueUp(id, 0);
      }
      return removed;
    }
    await this.#settle(id, own, usage ?? { inputTokens: own.req.inputTokens, outputTokens: 0 });
    return true;
  }

  /**
   * A request this gateway dispatched for another owner that is gone (its assignment found no
   * subscriber: the owner died and nobody holds the client connection): its reservation is
   * released and it leaves the queue now, rather than when the owner's lease ends — the room it
   * held goes to live requests at once. Retried on every heartbeat until the store answers.
   */
  async releaseOrphanedPick(id: string): Promise<void> {
    if (this.#owned.has(id)) return;
    this.#orphans.add(id);
    await this.#removeOrphan(id);
  }

  /**
   * Renews this gateway's lease on everything it holds in the store, retries removing what a
   * lost admission reply may have left there (see `#forget`) and settling what a lost settlement
   * left running there (its reservation would otherwise hold its replica's room).
   */
  async heartbeat(): Promise<void> {
    const store = this.options.store;
    await store.renewOwner(this.id, this.options.clock.now(), this.options.leaseMs);
    for (const id of [...this.#orphans]) await this.#removeOrphan(id);
    for (const [id, settle] of [...this.#unsettled]) {
      // False when the first call went through after all, or the state it settled was lost.
      await store.settle(settle);
      this.#unsettled.delete(id);
    }
  }

  /**
   * An admission call failed without an answer (the connection dropped, or timed out, after the
   * store may have run it): the request may be queued, or even dispatched, under this gateway's
   * lease, which it keeps renewing. The client was told the request failed, so nothing may stay
   * held for it: remove it now, and on every heartbeat until the store answers.
   */
  #forget(id: string): void {
    this.#orphans.add(id);
    this.#removeOrphan(id).catch(() => undefined);
  }

  /**
   * Cancels an orphan if it is queued; if it was dispatched, puts it back with its charge refunded
   * (nothing was served) and cancels it. Done once the store says it holds neither; a pick by
   * another gateway between the two calls leaves it for the next heartbeat.
   */
  async #removeOrphan(id: string): Promise<void> {
    const store = this.options.store;
    const nowMs = this.options.clock.now();
    if (await store.cancel(id, nowMs)) {
      this.#orphans.delete(id);
      return;
    }
    const requeued = store.requeue !== undefined && (await store.requeue({ id, nowMs, servedCost: 0 }));
    if (!requeued || (await store.cancel(id, this.options.clock.now()))) this.#orphans.delete(id);
  }

  /** A request finished: its output joins the history; an early finish marks its replica over-estimated. */
  #noteFinished(own: Owned, outputTokens: number): void {
    this.#outputs.record(this.#historyKey(own), outputTokens);
    const predicted = own.reserveTokens - own.req.inputTokens;
    if (own.replica === undefined || own.underEstimated || outputTokens >= predicted) return;
    const e = this.#errorsOf(own.replica);
    e.lengthError += outputTokens - predicted;
    e.batchError--;
    e.overEstimated++;
  }

  stats(): GatewayStats {
    return {
      queued: this.#owned.size - this.#running,
      running: this.#running,
      pendingChargeTokens: this.#charges.pendingTokens,
      admitted: this.#admitted,
      rejected: this.#rejected,
      dispatched: this.#dispatched,
      settled: this.#settled,
      flushes: this.#flushes,
      evicted: this.#evicted,
      repredictions: this.#repredictions,
      predictionErrors: Object.fromEntries([...this.#errors].map(([id, e]) => [id, { ...e }])),
      repairs: this.#repairs,
      restored: this.#restored,
    };
  }

  #reservedOutput(req: RequestDescriptor, predicted: number | undefined): number {
    switch (this.options.reserve) {
      case 'max-tokens':
        return req.maxTokens;
      case 'predicted': {
        const p = this.options.outputPredictor?.(req) ?? predicted;
        return p === undefined ? req.maxTokens : Math.min(req.maxTokens, Math.ceil(p));
      }
      case 'oracle':
        return Math.min(req.maxTokens, req.outputTokens ?? req.maxTokens);
    }
  }

  #largestCapacity(pool: string): number | undefined {
    let largest: number | undefined;
    for (const info of this.options.replicas.replicas(pool)) {
      if (info.stale) continue;
      const cap = Math.floor(info.kvCapacityTokens * (1 - this.options.headroom.tokenFraction));
      if (largest === undefined || cap > largest) largest = cap;
    }
    return largest;
  }

  /**
   * The pool's replicas as placement sees them, with reservations from this gateway's view; the
   * room of `leaving` (a request being settled in the same call) already counted as free.
   */
  #viewStates(pool: string, leaving?: Owned): ReplicaState[] {
    const h = this.options.headroom;
    return this.options.replicas.replicas(pool).map((info) => {
      const r = this.#reservations.get(info.id) ?? NOTHING;
      const freed =
        leaving !== undefined && leaving.replica === info.id
          ? {
              tokens: Math.max(0, r.tokens - leaving.reserveTokens - leaving.grown),
              seqs: Math.max(0, r.seqs - 1),
            }
          : r;
      return replicaState(info, freed, h);
    });
  }

  /**
   * The pool's replicas for a dispatch round: reservations read from the store (concurrently, one
   * round-trip time for all replicas) unless the view was read less than
   * `reservationsMaxAgeMs` ago.
   */
  async #roundStates(pool: string): Promise<ReplicaState[]> {
    const o = this.options;
    const now = o.clock.now();
    const readAt = this.#reservationsReadAt.get(pool);
    if (readAt !== undefined && now - readAt < o.reservationsMaxAgeMs) return this.#viewStates(pool);
    const infos = o.replicas.replicas(pool);
    const reserved = await Promise.all(infos.map((info) => o.store.reserved(info.id)));
    for (const [i, info] of infos.entries()) this.#setReservation(info.id, reserved[i] ?? NOTHING);
    this.#reservationsReadAt.set(pool, now);
    return infos.map((info, i) => replicaState(info, reserved[i] ?? NOTHING, o.headroom));
  }

  #setReservation(replica: string, r: Reservation): void {
    if (r.seqs <= 0) this.#reservations.delete(replica);
    else this.#reservations.set(replica, { tokens: Math.max(0, r.tokens), seqs: r.seqs });
  }

  #addReservation(replica: string, tokens: number, seqs: number): void {
    const r = this.#reservations.get(replica) ?? NOTHING;
    this.#setReservation(replica, { tokens: r.tokens + tokens, seqs: r.seqs + seqs });
  }

  /** A running request of this gateway left its replica (settled or re-queued). */
  #release(own: Owned): void {
    if (own.replica !== undefined) this.#addReservation(own.replica, -own.reserveTokens - own.grown, -1);
    own.grown = 0;
  }

  #isOverloaded(pool: string, states: readonly ReplicaState[]): boolean {
    if (this.options.overloaded) return this.options.overloaded(pool, states);
    let used = 0;
    let capacity = 0;
    for (const s of states) {
      if (s.stale) continue;
      used += Math.max(s.reservedTokens, s.kvUsage * s.tokenCapacity);
      capacity += s.tokenCapacity;
    }
    return kvOverloaded(used, capacity, this.options.overloadKv);
  }

  /**
   * Whether the ordering policy's dispatch price depends on the flow's output history. Compared
   * between two histories (none and `max_tokens` are not enough: VTC(predict) prices a flow
   * without history at `max_tokens` too).
   */
  #pricesPrediction(req: RequestDescriptor): boolean {
    const o = this.options.ordering;
    return o.dispatchCost(req, 0) !== o.dispatchCost(req, req.maxTokens);
  }

  /**
   * The flow's predicted output (mean of its last five outputs, from the store). With
   * `predictionTtlMs` > 0 a known value is served from memory and refreshed in the background
   * once older than that, so only a flow's first request waits for the store.
   */
  async #predictedOutput(flow: string): Promise<number | undefined> {
    const o = this.options;
    if (o.predictionTtlMs <= 0) return o.store.predictedOutput(flow);
    const hit = this.#predictions.get(flow);
    if (hit === undefined) return this.#readPrediction(flow);
    if (o.clock.now() - hit.atMs >= o.predictionTtlMs && !this.#refreshing.has(flow)) {
      this.#refreshing.add(flow);
      // A failed refresh keeps the old value; the next request past the ttl tries again.
      this.#readPrediction(flow)
        .catch(() => undefined)
        .finally(() => this.#refreshing.delete(flow));
    }
    return hit.value;
  }

  async #readPrediction(flow: string): Promise<number | undefined> {
    const atMs = this.options.clock.now();
    const value = await this.options.store.predictedOutput(flow);
    this.#predictions.delete(flow);
    if (this.#predictions.size >= PREDICTION_CACHE_FLOWS) {
      const oldest = this.#predictions.keys().next().value;
      if (oldest !== undefined) this.#predictions.delete(oldest);
    }
    this.#predictions.set(flow, { value, atMs });
    return value;
  }

  /**
   * The store's view of a candidate, bounded by the placement policy's capacity if it has one.
   * After a repair (for one lease, the time every other dispatcher needs to notice the loss and
   * put back what it holds) its room is also reduced by what its engine last reported beyond the
   * store's reservations — sequences running or waiting, KV tokens in use — so work not yet put
   * back is not placed over: an engine is overcommitted at most until its next heartbeat.
   */
  #candidate(s: ReplicaState, unlimited: boolean, bounded = true): ReplicaCandidate {
    const c = this.options.clock.now() < this.#guardUntil ? guarded(toCandidate(s), s) : toCandidate(s);
    if (unlimited && !s.stale) return { id: c.id, tokenCapacity: UNLIMITED, seqCapacity: UNLIMITED };
    const bound = bounded ? this.#placement.capacity?.(s) : undefined;
    if (bound === undefined) return c;
    return {
      id: c.id,
      tokenCapacity: Math.max(0, Math.min(c.tokenCapacity, bound.tokenCapacity)),
      seqCapacity: Math.max(0, Math.min(c.seqCapacity, bound.seqCapacity)),
    };
  }

  /**
   * Fresh replicas (of `allowed`, when given) in placement order, as store candidates. A policy
   * that decides the whole placement at once (`place`: Aladdin's Algorithm 1) is told how long the
   * request the store will pick has waited — the oldest this gateway holds queued in `pool`.
   */
  #candidates(
    states: readonly ReplicaState[],
    allowed: ReadonlySet<string> | undefined,
    unlimited: boolean,
    pool?: string,
  ): ReplicaCandidate[] {
    const offered = allowed === undefined ? states : states.filter((x) => allowed.has(x.id));
    const out: ReplicaCandidate[] = [];
    const place = this.#placement.place;
    if (place !== undefined && !unlimited) {
      const ctx = { waitedMs: pool === undefined ? 0 : this.#oldestQueuedWaitMs(pool) };
      for (const p of place.call(this.#placement, offered, ctx)) {
        if (p.replica.stale) continue;
        const c = this.#candidate(p.replica, false, false);
        out.push({
          id: c.id,
          tokenCapacity: Math.max(0, Math.min(c.tokenCapacity, p.tokenCapacity)),
          seqCapacity: Math.max(0, Math.min(c.seqCapacity, p.seqCapacity)),
        });
      }
      return out;
    }
    for (const s of this.#placement.order(offered)) if (!s.stale) out.push(this.#candidate(s, unlimited));
    return out;
  }

  /** Time the oldest request this gateway holds queued in `pool` has waited, ms (0 if none). */
  #oldestQueuedWaitMs(pool: string): number {
    // Owned requests are kept in admission order, so the first queued one of the pool is the oldest.
    for (const own of this.#owned.values())
      if (own.state === 'queued' && own.pool === pool)
        return Math.max(0, this.options.clock.now() - own.req.arrivalMs);
    return 0;
  }

  #dispatchInput(pool: string, bands: readonly number[], replicas: ReplicaCandidate[]): DispatchInput {
    const o = this.options;
    return {
      pool,
      bands,
      ordering: o.ordering.mode,
      nowMs: o.clock.now(),
      picker: this.id,
      replicas,
      fit: o.fit,
    };
  }

  async #dispatchLoop(pool: string): Promise<number> {
    const states = await this.#roundStates(pool);
    if (!states.some((s) => !s.stale)) return 0;
    const router = this.options.router;
    if (router === undefined) return this.#dispatchRoute(pool, states, this.#bands, undefined, false);
    let n = 0;
    // Routes change as replicas fill (a replica's queue order depends on its state), so re-ask
    // after every round that dispatched something.
    for (;;) {
      let round = 0;
      for (const route of router.routes(pool, states, this.#bands))
        round += await this.#dispatchRoute(
          pool,
          states,
          route.bands,
          new Set(route.replicas),
          route.unlimited === true,
        );
      n += round;
      if (round === 0) return n;
    }
  }

  /** Dispatches from `bands` onto the `allowed` replicas (every fresh one when undefined) until blocked. */
  async #dispatchRoute(
    pool: string,
    states: ReplicaState[],
    bands: readonly number[],
    allowed: ReadonlySet<string> | undefined,
    unlimited: boolean,
  ): Promise<number> {
    let n = 0;
    for (;;) {
      // A replica may have failed or gone stale since the round read the view (its retry may be
      // the very request this round picks next): place only where the source still offers room.
      this.#dropStale(states);
      const candidates = this.#candidates(states, allowed, unlimited, pool);
      if (candidates.length === 0 || bands.length === 0) return n;
      const res = await this.options.store.dispatch(this.#dispatchInput(pool, bands, candidates));
      if (res.kind !== 'dispatched') return n;
      n++;
      this.#countDispatch(pool);
      const i = states.findIndex((s) => s.id === res.replica);
      const s = states[i];
      if (s)
        states[i] = {
          ...s,
          reservedTokens: s.reservedTokens + res.req.reserveTokens,
          reservedSeqs: s.reservedSeqs + 1,
        };
      await this.#handOn(res, true);
    }
  }

  /** Marks stale, in a round's `states`, every replica the source says no longer takes work. */
  #dropStale(states: ReplicaState[]): void {
    const source = this.options.replicas;
    if (source.isAvailable === undefined) return;
    for (const [i, s] of states.entries())
      if (!s.stale && !source.isAvailable(s.id)) states[i] = { ...s, stale: true };
  }

  /**
   * A request was dispatched by this gateway (any owner): note its reservation in the view unless
   * the store's reply already did, price its prediction, and hand it on — to `started` if this
   * gateway owns it, and to `onDispatch`.
   */
  async #handOn(res: Extract<DispatchResult, { kind: 'dispatched' }>, note: boolean): Promise<void> {
    if (note) this.#addReservation(res.replica, res.req.reserveTokens, 1);
    const own = this.#owned.get(res.req.id);
    const req = own?.req ?? decodeRequest(res.req.payload, this.id);
    const resumeFrom = own?.resumeFrom ?? 0;
    // A resumed request was already priced; its re-queue settled what it had been served.
    const repriced = resumeFrom > 0 ? undefined : await this.#repriceAtDispatch(res.req, req);
    const predicted = repriced?.predicted;
    const d: Dispatched = {
      id: res.req.id,
      req,
      ...(predicted !== undefined ? { predicted } : {}),
      ...(resumeFrom > 0 ? { resumeFrom } : {}),
      replica: res.replica,
      owner: res.req.owner,
      picker: this.id,
      reserveTokens: res.req.reserveTokens,
      queued: res.req,
    };
    // Its owner may have learnt the placement from the store while this reply was on its way
    // (`placements`, when the bus was down): it runs already, on this replica.
    if (d.owner === this.id && !(own?.state === 'running' && own.replica === d.replica)) this.started(d);
    this.options.onDispatch(d);
    if (repriced !== undefined && repriced.delta !== 0)
      await this.options.store.charge([{ id: res.req.id, amount: repriced.delta }]);
  }

  /**
   * VTC(predict) predicts a request's output when it is selected (VTC Algorithm 3, line 25), but the
   * queue priced it at admission, and a request may wait minutes while its flow's history changes
   * (at the start no flow has any). When the policy's dispatch price depends on the prediction,
   * the difference to the price under the flow's prediction now is charged (after the request is
   * on its way); returns that prediction and the difference.
   */
  async #repriceAtDispatch(
    q: QueuedRequest,
    req: RequestDescriptor,
  ): Promise<{ predicted: number | undefined; delta: number } | undefined> {
    if (!this.#pricesPrediction(req)) return undefined;
    const fresh = await this.#predictedOutput(q.flow);
    return { predicted: fresh, delta: this.options.ordering.dispatchCost(req, fresh) - q.dispatchCost };
  }

  /** Counts a dispatch from `pool` (stats and its drain rate). */
  #countDispatch(pool: string): void {
    this.#dispatched++;
    this.#drain.dispatched(pool, this.options.clock.now());
  }

  /**
   * Settles a running request with its true usage and dispatches into the room it freed: one
   * `settleAndDispatch` call when the store has it and no router splits the pool (a dispatch round
   * follows only when work is left queued), else `settle` and a dispatch round.
   */
  async #settle(id: string, own: Owned, usage: Usage): Promise<void> {
    const o = this.options;
    this.#charges.close(id);
    this.#owned.delete(id);
    this.#running--;
    this.#settled++;
    const settle: SettleInput = {
      id,
      nowMs: o.clock.now(),
      finalCost: o.ordering.finalCost(own.req, usage),
      actualTokens: usage.inputTokens + usage.outputTokens,
      outputTokens: usage.outputTokens,
    };
    o.ordering.settled?.(own.req, usage);
    this.#log.trueUp(id, settle.actualTokens);
    this.#settling.add(id);
    try {
      await this.#settleAndDispatch(own, settle);
    } catch (err) {
      // No answer: the store may still hold the request running (see `heartbeat`).
      this.#unsettled.set(id, settle);
      throw err;
    } finally {
      this.#settling.delete(id);
    }
  }

  async #settleAndDispatch(own: Owned, settle: SettleInput): Promise<void> {
    const o = this.options;
    const pool = own.pool;
    const candidates =
      o.store.settleAndDispatch === undefined || o.router !== undefined
        ? []
        : this.#candidates(this.#viewStates(pool, own), undefined, false, pool);
    if (o.store.settleAndDispatch === undefined || candidates.length === 0) {
      if (await o.store.settle(settle)) this.#release(own);
      await this.pump(pool);
      return;
    }
    const r = await o.store.settleAndDispatch({
      settle,
      dispatch: this.#dispatchInput(pool, this.#bands, candidates),
    });
    for (const [i, c] of candidates.entries()) this.#setReservation(c.id, r.reserved[i] ?? NOTHING);
    if (r.dispatch.kind !== 'dispatched') return;
    this.#countDispatch(pool);
    await this.#handOn(r.dispatch, false);
    if (r.poolQueued > 0) await this.pump(pool);
  }
}
