/**
 * The shared scheduling state and its atomic operations (DESIGN.md principle 2). Two backends
 * implement this interface — in-memory (simulator, embedded mode, unit tests) and Redis + Lua
 * (production) — and one conformance suite holds them to identical behaviour.
 *
 * Vocabulary:
 * - a *queue* is one fairness domain: a (pool, band) pair. Counters, the backlogged set and lifts
 *   are per queue;
 * - a *flow* is the unit of fairness inside a queue (a tenant, or a (user, app) pair under WSC);
 * - a *replica* is one engine of a pool; the store tracks the tokens and sequences reserved on it;
 * - an *owner* is the dispatcher holding a request's client connection; its lease keeps its queued
 *   and in-flight requests alive.
 *
 * All times are milliseconds on the caller's injected clock, passed in explicitly: the store never
 * reads a clock, so memory and Redis backends replay identically.
 */

import type { LiftMode, OrderingMode, WindowLimit } from '@fairway/policy';

/** `WindowLimit` is defined beside the admission policies that build it and re-exported here. */
export type { LiftMode, OrderingMode, WindowLimit };

/** A request waiting in a queue. */
export interface QueuedRequest {
  readonly id: string;
  readonly pool: string;
  readonly band: number;
  readonly flow: string;
  /** Ordering key under `score` ordering (arrival for FCFS, deadline for EDF). */
  readonly score: number;
  readonly arrivalMs: number;
  /** Tokens reserved on a replica while the request runs: input + predicted output. */
  readonly reserveTokens: number;
  /** Cost charged to the flow's counter at dispatch, already divided by the flow's weight. */
  readonly dispatchCost: number;
  /** Dispatcher holding the client connection. */
  readonly owner: string;
  /** Opaque data the owner needs to serve the request (e.g. a serialised descriptor). */
  readonly payload: string;
  /**
   * Continues an ongoing interaction. Under `fair` ordering such requests are served before the
   * others of their queue, least-counter flow first (FairServe Algorithm 1, lines 31–35); counters
   * stay shared with the flow's other requests. Ignored under `score` ordering. A request admitted
   * with an `interaction` that is open at that moment is a continuation whatever this says.
   * @default false
   */
  readonly continuation?: boolean;
  /**
   * The replica that likely holds the request's prompt in its prefix cache, with the room the
   * admitting gateway saw on it: a dispatch given {@link DispatchInput.affinityTokens} places the
   * request there when the replica has room and is under that bound, else on its candidates as
   * usual. A re-queued request loses it, and so does a restored one. @default none
   */
  readonly affinity?: ReplicaCandidate;
  /**
   * The parts of the prompt's start that the requests running on one replica hold once, because
   * its prefix cache shares their KV blocks (longest first, as the prompt's prefix keys): the
   * request reserves {@link reserveTokens} less these parts' tokens, plus the tokens of each part no
   * other running request on its replica holds; a part is freed with the last request holding it.
   * On its {@link affinity} replica a dispatch judges its room at that cost, elsewhere at
   * `reserveTokens` (never less). The parts' tokens sum to at most `reserveTokens`. @default none
   */
  readonly prefixParts?: readonly PrefixPart[];
}

/**
 * A part of a prompt's start (see {@link QueuedRequest.prefixParts}): the prefix key naming the
 * prompt up to the part's end, and the part's tokens.
 */
export interface PrefixPart {
  readonly key: string;
  readonly tokens: number;
}

/** Everything admission needs, checked and applied in one atomic step (one Redis round trip). */
export interface AdmitInput {
  readonly req: QueuedRequest;
  /**
   * The tenant the request belongs to. Its windows and its interaction are the tenant's own: the
   * store scopes their keys by it, so no key a request names (a user, an app, another tenant's
   * id) can reach another tenant's window or open interaction.
   */
  readonly tenant: string;
  readonly nowMs: number;
  readonly lift: LiftMode;
  readonly limits: readonly WindowLimit[];
  /** Whether the pool is overloaded now (FairServe OIT); throttle windows apply only then. */
  readonly overloaded: boolean;
  /** Interaction this request continues; if it is open, throttle windows do not apply. */
  readonly interaction?: { readonly key: string; readonly ttlMs: number };
  /** Most requests the flow may have queued in this queue. */
  readonly maxQueuedFlow?: number;
  /** Most requests the pool may have queued (all bands). */
  readonly maxQueuedPool?: number;
  /**
   * Where the request's usage is recorded when it settles (usage accounting). @default none:
   * nothing is recorded and no quota can apply
   */
  readonly usage?: UsageAccount;
  /**
   * Budgets checked after the window limits (they need `usage`): each reserves `amount` in its
   * window until the request settles, when the reservation is replaced by the true usage.
   * @default []
   */
  readonly quotas?: readonly QuotaCheck[];
}

/**
 * Who a request's usage is recorded under and when: counted at settle (requests, input and output
 * tokens, cost when priced) per (tenant, key, model) in the UTC day of its admission, and in its
 * tenant's and key's day and month totals that quotas read. The tenant is `AdmitInput.tenant`.
 */
export interface UsageAccount {
  /** The API key's id (`sha256:<hex>`); absent for requests without one. */
  readonly key?: string;
  readonly model: string;
  /** UTC day of admission, `YYYY-MM-DD`. */
  readonly day: string;
  /** UTC month of admission, `YYYY-MM`. */
  readonly month: string;
  /** Price per 1M input tokens; with `priceOut`, cost = (in × priceIn + out × priceOut) / 1e6. */
  readonly priceIn?: number;
  /** Price per 1M output tokens. */
  readonly priceOut?: number;
}

/** One budget a request is admitted under: its tenant's or its key's, over a UTC day or month. */
export interface QuotaCheck {
  readonly scope: 'tenant' | 'key';
  readonly window: 'day' | 'month';
  /** `tokens` (input + output) or `spend` (cost, in the prices' currency). */
  readonly kind: 'tokens' | 'spend';
  /** Most the window may hold: settled usage plus what running requests reserve. */
  readonly budget: number;
  /** What this request reserves: estimated tokens (prompt + output cap) or their cost. */
  readonly amount: number;
  /** Usage (settled + reserved) at which one alert per window is reported. @default none */
  readonly alertAt?: number;
  /** When the window ends (ms): a refusal's `retryAfterMs` is the time until then. */
  readonly resetAtMs: number;
  /**
   * The least this request may reserve, below `amount`: the quota then reserves as much of
   * `amount` as its budget holds, down to `minAmount`, and is refused only when `minAmount` does
   * not fit. The request's quotas with one reserve the same share of the way from `minAmount` to
   * `amount` (the least any of them can hold), reported as `quotaShare`; a request without an
   * output cap is given the engine cap that share pays for. @default amount
   */
  readonly minAmount?: number;
}

/** A budget whose usage reached its alert threshold (reported once per window). */
export interface QuotaAlert {
  /** `<scope>:<window>:<kind>`, as in a refusal's key without `quota:`. */
  readonly quota: string;
  /** The window's bucket: its day (`YYYY-MM-DD`) or month (`YYYY-MM`). */
  readonly bucket: string;
  readonly budget: number;
  /** Settled usage plus reservations, this request's included. */
  readonly used: number;
}

export type AdmitRejectCode =
  | 'rpm_limited'
  | 'tpm_limited'
  | 'throttled'
  | 'queue_full'
  | 'duplicate'
  | 'quota_exceeded';

/**
 * `queued` is the number of requests waiting in the (pool, band) queue after this admission;
 * `alerts` the budgets this admission brought to their alert threshold (absent if none). A
 * `quota_exceeded` refusal's key is `quota:<scope>:<window>:<kind>`.
 */
export type AdmitResult =
  | {
      readonly ok: true;
      readonly queued: number;
      readonly alerts?: readonly QuotaAlert[];
      /**
       * With quotas that have a `minAmount`: the share (0–1) of the way from each `minAmount` to
       * its `amount` that was reserved, the same for all of them (1 when every `amount` fit).
       */
      readonly quotaShare?: number;
      /**
       * Every window of `limits`, in order, after this admission (the request counted): what it
       * holds and when its oldest bucket ends — when it next frees room (rate-limit headers).
       */
      readonly windows: readonly WindowHeld[];
      /**
       * With an `interaction`: the calls admitted before this one in the interaction's open period
       * (FairServe's stage j; 0 for the call that opens it).
       */
      readonly interactionStage?: number;
    }
  | {
      readonly ok: false;
      readonly code: AdmitRejectCode;
      readonly retryAfterMs: number;
      readonly key: string;
      /** With `rpm_limited`, `tpm_limited` and `throttled`: what the refusing window holds. */
      readonly held?: number;
    };

/** What a window holds after an admission (see `AdmitResult.windows`). */
export interface WindowHeld {
  /** The amounts it counts (requests or tokens). */
  readonly total: number;
  /** When its oldest bucket ends (ms): the first time it holds less. */
  readonly resetAtMs: number;
}

/** A replica a request may be placed on, with the capacity the caller last saw for it. */
export interface ReplicaCandidate {
  readonly id: string;
  /** KV tokens the gateway may reserve on it in total (capacity minus headroom). */
  readonly tokenCapacity: number;
  /** Sequences it may run at once (max_num_seqs minus headroom). */
  readonly seqCapacity: number;
}

export interface DispatchInput {
  readonly pool: string;
  /** Bands to consider, in priority order (first = served first). */
  readonly bands: readonly number[];
  readonly ordering: OrderingMode;
  readonly nowMs: number;
  /** Dispatcher that performs the pick (may differ from the request's owner). */
  readonly picker: string;
  /** Candidate replicas in the caller's order of preference. */
  readonly replicas: readonly ReplicaCandidate[];
  /** `first`: first candidate with room; `best`: the one left with the least room (best fit). */
  readonly fit: 'first' | 'best';
  /**
   * Coalesced output charges of this dispatcher, applied (as by `charge`) before the pick in the
   * same atomic step: one round trip instead of two, and the pick sees fresh counters.
   * @default []
   */
  readonly charges?: readonly ChargeItem[];
  /**
   * Prefix-cache affinity bound: a picked request with an {@link QueuedRequest.affinity} goes to
   * that replica — before the candidates, whether it is one of them or not — when the replica has
   * KV tokens reserved at most this many before the request is placed (so an idle fleet is never
   * refused: the bound admits one more request at or under it), and room for the request (its
   * capacity is the candidate's when it is offered, else the one the request was admitted with).
   * Otherwise the request goes to the candidates as usual. The affinity replica is read once.
   * @default none: affinity is ignored
   */
  readonly affinityTokens?: number;
}

export type DispatchResult =
  | { readonly kind: 'empty' }
  /** The next request does not fit on any candidate; nothing changed. */
  | { readonly kind: 'blocked'; readonly id: string; readonly reserveTokens: number }
  | { readonly kind: 'dispatched'; readonly req: QueuedRequest; readonly replica: string };

/** Input of {@link SchedulingStore.admitAndDispatch}: an admission and the dispatch that follows it. */
export interface AdmitAndDispatchInput {
  readonly admit: AdmitInput;
  readonly dispatch: DispatchInput;
}

/** Tokens and sequences reserved on one replica. */
export interface Reservation {
  readonly tokens: number;
  readonly seqs: number;
}

/** Outcome of {@link SchedulingStore.admitAndDispatch}. */
export interface AdmitAndDispatchResult {
  readonly admit: AdmitResult;
  /** What the dispatch did; absent when the admission was rejected (nothing was dispatched). */
  readonly dispatch?: DispatchResult;
  /** Requests queued in the dispatch's pool, all bands, after the call. */
  readonly poolQueued: number;
  /** What is reserved on each candidate replica after the call, in candidate order. */
  readonly reserved: readonly Reservation[];
}

/** Input of {@link SchedulingStore.settleAndDispatch}: a settlement and the dispatch that follows it. */
export interface SettleAndDispatchInput {
  readonly settle: SettleInput;
  readonly dispatch: DispatchInput;
}

/** Outcome of {@link SchedulingStore.settleAndDispatch}. */
export interface SettleAndDispatchResult {
  /** Whether the request was running and is now settled (as `settle` returns). */
  readonly settled: boolean;
  /** What the dispatch did (it runs whether or not the settlement found the request). */
  readonly dispatch: DispatchResult;
  /** Requests queued in the dispatch's pool, all bands, after the call. */
  readonly poolQueued: number;
  /** What is reserved on each candidate replica after the call, in candidate order. */
  readonly reserved: readonly Reservation[];
}

/** Output-cost increments coalesced by a dispatcher and flushed in one call. */
export interface ChargeItem {
  readonly id: string;
  /** Cost to add to the request's flow counter (already divided by weight). */
  readonly amount: number;
  /**
   * Tokens to add to the request's reservation on its replica, ≥ 0: its output outran the
   * prediction it reserved for (Aladdin section 4.3, re-prediction). Added whatever the replica's
   * capacity (the tokens are in its KV cache already); `settle`, `requeue` and `reclaim` release
   * the grown reservation with the rest, and a re-queued request is dispatched again with the
   * reservation it was queued with. @default 0
   */
  readonly reserveTokens?: number;
}

export interface SettleInput {
  readonly id: string;
  readonly nowMs: number;
  /** Total weighted cost the request should have been charged; the counter is corrected to it. */
  readonly finalCost: number;
  /**
   * True tokens (input + output), to true-up TPM windows reserved at admission; with
   * `outputTokens`, the usage recorded for a request admitted with a usage account (whole tokens).
   */
  readonly actualTokens: number;
  /** True output length, appended to the flow's length history (VTC(predict)). */
  readonly outputTokens: number;
}

/** Puts a running request back in its queue (QLM eviction); see {@link SchedulingStore.requeue}. */
export interface RequeueInput {
  readonly id: string;
  readonly nowMs: number;
  /**
   * Total weighted cost of what the request was served before it was stopped (input plus the
   * output so far); its flow's counter is corrected so the request was charged exactly this.
   */
  readonly servedCost: number;
  /**
   * Cost charged when it is dispatched again, on top of `servedCost`. @default 0 — the input it
   * was already charged for is not charged twice (recomputing its cache is the fleet's cost).
   */
  readonly dispatchCost?: number;
  /**
   * Undoes the request's last dispatch instead (it never reached the replica it was placed on,
   * which had left its pool): the counter gives back what that dispatch charged and the next one
   * charges it again; `servedCost` and `dispatchCost` are ignored. @default false
   */
  readonly undispatch?: boolean;
  /**
   * The replica the request is moved to (a request taken out of an engine's queue): it becomes
   * the request's affinity, so a dispatch given {@link DispatchInput.affinityTokens} places it
   * there when that replica has room, else on its candidates as usual. @default none — a
   * re-queued request loses its affinity
   */
  readonly moveTo?: ReplicaCandidate;
}

/** One entry a dispatcher recorded in a sliding window, put back by {@link SchedulingStore.restore}. */
export interface RestoredWindowEntry {
  /** The window's key as the store keeps it: `tenantScoped(tenant, WindowLimit.key)` (keys.ts). */
  readonly key: string;
  /** The request the entry counts. */
  readonly id: string;
  /** Admission time of the entry (ms). */
  readonly atMs: number;
  /** The window's length (ms, `WindowLimit.windowMs`): with `atMs`, when the entry leaves it. */
  readonly windowMs: number;
  /** Its amount now: the admitted amount, or the true-up amount once settled or cancelled. */
  readonly amount: number;
}

/** A window a restored request was admitted into, and where it counts there (for true-up). */
export interface RestoredWindowUse {
  /** The window's key as the store keeps it (as in {@link RestoredWindowEntry}). */
  readonly key: string;
  /** Whether settle and cancel replace its amount (TPM). */
  readonly trueUp: boolean;
  /** Its admission time (ms). */
  readonly atMs: number;
  /** The window's length (ms). */
  readonly windowMs: number;
  /** The amount it counts there now (as {@link RestoredWindowEntry.amount}). */
  readonly amount: number;
}

/** A request a dispatcher still holds the client connection of, put back by `restore`. */
export interface RestoredRequest {
  readonly req: QueuedRequest;
  /** The replica it runs on; absent while it waits for one (it is queued again). */
  readonly replica?: string;
  /** Tokens its reservation grew by in its current run (`ChargeItem.reserveTokens`). @default 0 */
  readonly grown?: number;
  /**
   * The windows it was admitted into, for true-up at settle or cancel (their entries, which count
   * it, come apart in {@link RestoreInput.windows}).
   */
  readonly windows: readonly RestoredWindowUse[];
}

/** Input of {@link SchedulingStore.restore}. */
export interface RestoreInput {
  readonly nowMs: number;
  /** Lift applied to a flow that was not backlogged when one of its queued requests is put back. */
  readonly lift: LiftMode;
  /**
   * Window entries to put back. An entry the window counts already is skipped: the window existed
   * at its admission time (it has counted every admission since), or the entry was put back before.
   */
  readonly windows: readonly RestoredWindowEntry[];
  /**
   * Requests to put back, in order: queued ones join the end of their flow's FIFO in this order;
   * running ones are reserved on their replica again (whatever its capacity: they hold its KV
   * cache already) and charged their dispatch cost. A request the store knows is skipped.
   */
  readonly requests: readonly RestoredRequest[];
  /**
   * The dispatcher doing the restore and every request id it may hold (those put back, and those
   * it is admitting right now): any other request the store lists under this owner — a
   * settlement or cancellation the store lost while the dispatcher went on — is dropped if queued
   * and released if running, as `reclaim` does, so it does not hold a replica's room for good.
   * @default none: nothing is dropped
   */
  readonly owner?: { readonly id: string; readonly holds: readonly string[] };
}

/** Outcome of {@link SchedulingStore.locate}. */
export interface RequestLocations {
  /** The replica each dispatched, unsettled request runs on. */
  readonly running: ReadonlyMap<string, string>;
  /** The ids the store has no record of (settled, cancelled, released, or never admitted). */
  readonly unknown: readonly string[];
}

/** Outcome of {@link SchedulingStore.restore}. */
export interface RestoreResult {
  /** Requests put back. */
  readonly restored: number;
  /** Requests skipped because the store knew them already. */
  readonly skipped: number;
  /** Requests of `owner` the store had but the owner does not hold, dropped or released. */
  readonly forgotten: number;
}

/** Which recorded usage to read (see {@link SchedulingStore.usage}). */
export interface UsageQuery {
  /** UTC days to read, `YYYY-MM-DD` (at most 400). */
  readonly days: readonly string[];
  readonly tenant?: string;
  /** API key id (`sha256:<hex>`). */
  readonly key?: string;
  readonly model?: string;
}

/** Usage of one (tenant, key, model) on one UTC day. */
export interface UsageRow {
  readonly day: string;
  readonly tenant: string;
  /** API key id; '' for requests without a key. */
  readonly key: string;
  readonly model: string;
  readonly requests: number;
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Cost at the prices configured when each request was admitted; 0 when none were. */
  readonly cost: number;
}

/** A read-only view of one queue, for metrics, tests and the conformance suite. */
export interface QueueSnapshot {
  readonly counters: Readonly<Record<string, number>>;
  readonly backlogged: readonly string[];
  readonly queued: Readonly<Record<string, number>>;
}

/**
 * The scheduling store. Every method is atomic. Semantics both backends share (the conformance
 * suite in `packages/store/test/conformance.ts` is the executable specification):
 * - ids compare by code unit (byte order for ASCII), the order Redis uses;
 * - `fair` picks the backlogged flow with the least counter, ties by oldest head arrival then flow
 *   id, and takes its oldest request (FIFO by admission); flows holding `continuation` requests are
 *   served first, among themselves in the same order. `score` picks the least (score, id);
 * - bands are tried in the given order; the first non-empty band decides: if its pick fits no
 *   candidate replica the result is `blocked` (no lower band overtakes, as VTC Alg. 2 line 23);
 * - a window entry admitted at `t` leaves the window at `t + windowMs` rounded up to a multiple of
 *   `ceil(windowMs / 60)` ms (its bucket's end: never earlier, so a limit is never exceeded; at
 *   most 1/60 of the window later); a refusal's `retryAfterMs` is the time until the bucket whose
 *   end makes room (`windowMs` if the amount exceeds the limit). A window keeps one bucket per
 *   `ceil(windowMs / 60)` ms that still counts (61 at most with one `windowMs`), however many
 *   requests it counts, and a refusal reads at most those. A window forgets what ended by
 *   the latest time an admission checked it at (a dispatcher whose clock lags sees it forgotten
 *   too).
 */
export interface SchedulingStore {
  /**
   * Windows are the request's tenant's own (a `shared` limit's window is one across tenants).
   * Rejects a known id (`duplicate`), then checks `limits` in order (throttle limits only when
   * `overloaded` and the interaction is not open), then `maxQueuedFlow` and `maxQueuedPool`. On
   * success records the request in every window (throttle windows included), opens or extends the
   * interaction to `nowMs + ttlMs`, grants the owner a default lease if it has none, lifts the
   * flow's counter if it was not backlogged, and enqueues. A rejection changes nothing.
   */
  admit(input: AdmitInput): Promise<AdmitResult>;
  /** Picks the next request by the ordering, reserves it on a replica and charges its dispatch cost. */
  dispatch(input: DispatchInput): Promise<DispatchResult>;
  /**
   * `admit`, then — only if the request was admitted — `dispatch`: the request path's common case,
   * a request that arrives while a replica has room, admitted and dispatched in one call. Each
   * step has its own operation's semantics (the dispatch picks by the ordering, so a request
   * queued ahead is served first); the Redis backend runs both in one script — one round trip,
   * nothing in between — and the memory backend calls `admit` and `dispatch` in turn. Also
   * reports the pool's queued count and the candidates' reservations after the call, so the
   * caller needs no further reads. Optional so that wrappers written before it still type-check;
   * both built-in backends implement it.
   */
  admitAndDispatch?(input: AdmitAndDispatchInput): Promise<AdmitAndDispatchResult>;
  /**
   * Adds streamed-output costs to counters (coalesced per dispatcher) and grows the reservations
   * of items with `reserveTokens`. Unknown or queued ids are ignored.
   */
  charge(items: readonly ChargeItem[]): Promise<void>;
  /**
   * Ends a running request: corrects its flow's counter so the request was charged `finalCost` in
   * total, releases its reservation, replaces its true-up windows' amounts by `actualTokens`,
   * records `outputTokens` in the flow's history and keeps its interaction open for another ttl.
   * A request admitted with a usage account has its usage recorded and its quota reservations
   * replaced by that usage. A running request reclaimed with its owner's lease keeps its quota
   * reservations (its true usage is unknown; counting the estimate never lets a budget overshoot).
   * Returns false if the request was not running.
   */
  settle(input: SettleInput): Promise<boolean>;
  /**
   * `settle`, then `dispatch` into the room it freed: the completion path's common case in one
   * call, as `admitAndDispatch` is for arrivals (the Redis backend runs both in one script; the
   * memory backend calls `settle` and `dispatch` in turn). The dispatch runs even if the request
   * was not running. Optional like `admitAndDispatch`.
   */
  settleAndDispatch?(input: SettleAndDispatchInput): Promise<SettleAndDispatchResult>;
  /**
   * Puts a running request back at the head of its flow's FIFO in its (pool, band) queue, as QLM
   * evicts a lower-band request to make room (QLM section 5, request eviction): releases its
   * reservation, corrects its flow's counter so the request was charged exactly `servedCost` so
   * far, keeps that as its charge and adds `dispatchCost` when it is dispatched again, so `settle`
   * still corrects the counter to the request's total final cost. A flow that was not backlogged
   * rejoins without a lift (the request is not a new arrival). Windows and interaction are kept.
   * Returns false if the request was not running. Optional so that wrappers written before it
   * still type-check; both built-in backends implement it.
   */
  requeue?(input: RequeueInput): Promise<boolean>;
  /**
   * Removes a queued request (client gone, queue timeout); its true-up windows get their amount
   * back. Returns false if it was not queued (running requests end with `settle`).
   */
  cancel(id: string, nowMs: number): Promise<boolean>;
  /**
   * Puts back what a dispatcher holds after the store's state was lost (an operation failed with
   * `STATE_LOST` and `adoptEpoch` re-established the state marker): window entries it admitted,
   * then its requests (see {@link RestoreInput}). Grants the owners a default lease if they have
   * none. Optional like `requeue`; both built-in backends implement it.
   */
  restore?(input: RestoreInput): Promise<RestoreResult>;
  /**
   * Re-establishes the store's epoch and layout marker after its state was lost: the first caller
   * writes a new epoch, every other one adopts it, so each dispatcher that saw `STATE_LOST` puts
   * back what it holds once and then works on again. A no-op for a store whose state cannot be
   * lost (memory). Optional like `requeue`.
   */
  adoptEpoch?(): Promise<void>;
  /**
   * The epoch this store instance works in, once known (undefined before its first call, and
   * always for a store whose state cannot be lost). Dispatchers sharing one instance compare it
   * with the epoch they last repaired for: one of them adopting a new epoch tells the others that
   * the state they held was lost too.
   */
  readonly epoch?: string | undefined;
  /** Renews the owner's lease; everything it holds stays alive until `nowMs + leaseMs`. */
  renewOwner(owner: string, nowMs: number, leaseMs: number): Promise<void>;
  /**
   * Reclaims everything held by owners whose lease ended (`until <= nowMs`), owners in order of
   * expiry then id, each owner's requests by id: queued ones are dropped as by `cancel`, running
   * ones have their reservation released (their charges stay).
   */
  reclaim(
    nowMs: number,
  ): Promise<{ readonly dropped: readonly string[]; readonly released: readonly string[] }>;
  /** Mean of the flow's last five output lengths, or undefined with no history (VTC(predict)). */
  predictedOutput(flow: string): Promise<number | undefined>;
  /** Tokens and sequences currently reserved on a replica. */
  reserved(replica: string): Promise<Reservation>;
  /**
   * Where each of `ids` is: the replica of those dispatched and not yet settled, and which ids the
   * store holds no record of at all (queued ids are in neither). The store is the record of who
   * was placed where; an owner that missed the assignment message (the bus was down, the picker
   * died) learns its requests' placements from here, and which of its waiting requests were
   * released by a picker that took it for dead.
   */
  locate(ids: readonly string[]): Promise<RequestLocations>;
  /** Counters of every flow seen in the queue; backlogged flows in `fair` order with their queue lengths. */
  snapshot(pool: string, band: number): Promise<QueueSnapshot>;
  /**
   * Recorded usage per (day, tenant, key, model) over the days of `query`, filtered by its fields.
   * Optional like `requeue`; both built-in backends implement it.
   */
  usage?(query: UsageQuery): Promise<readonly UsageRow[]>;
  close(): Promise<void>;
}
