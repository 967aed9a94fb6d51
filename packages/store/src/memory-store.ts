import { parseInput, StoreError, StoreErrorCode } from './errors.ts';
import { IndexedHeap } from './indexed-heap.ts';
import {
  admitAndDispatchInputSchema,
  admitInputSchema,
  cancelInputSchema,
  chargeItemsSchema,
  dispatchInputSchema,
  idSchema,
  renewInputSchema,
  requeueInputSchema,
  restoreInputSchema,
  settleAndDispatchInputSchema,
  settleInputSchema,
  snapshotInputSchema,
  usageQuerySchema,
} from './input-schemas.ts';
import { tenantScoped } from './keys.ts';
import { bucketEnd, SlidingWindow } from './sliding-window.ts';
import type {
  AdmitAndDispatchInput,
  AdmitAndDispatchResult,
  AdmitInput,
  AdmitResult,
  ChargeItem,
  DispatchInput,
  DispatchResult,
  QueuedRequest,
  QueueSnapshot,
  QuotaAlert,
  QuotaCheck,
  ReplicaCandidate,
  RequestLocations,
  RequeueInput,
  Reservation,
  RestoreInput,
  RestoreResult,
  SchedulingStore,
  SettleAndDispatchInput,
  SettleAndDispatchResult,
  SettleInput,
  UsageAccount,
  UsageQuery,
  UsageRow,
  WindowHeld,
} from './store.ts';
import {
  fairBefore,
  HISTORY_LENGTH,
  meanOfHistory,
  type ResolvedStoreOptions,
  resolveStoreOptions,
  type StoreOptions,
  USAGE_RETENTION_DAYS,
} from './store-options.ts';
import { usageField, usageRows } from './usage-rows.ts';

/** The bucket of a usage account's window: its day or its month. */
function bucketOf(usage: UsageAccount, window: 'day' | 'month'): string {
  return window === 'month' ? usage.month : usage.day;
}

/** A window a request was admitted into: its bucket (end, ms) and the amount it counts there. */
interface WindowUse {
  readonly key: string;
  readonly trueUp: boolean;
  readonly end: number;
  readonly amount: number;
}

/** A request the store knows: queued in a flow's FIFO, or running on a replica until settled. */
interface RequestState {
  readonly req: QueuedRequest;
  readonly continuation: boolean;
  state: 'queued' | 'running';
  replica: string;
  /** Cost charged to the flow's counter so far (dispatch cost plus streamed charges). */
  charged: number;
  /** Tokens its reservation grew by while it runs (`ChargeItem.reserveTokens`), beyond `req.reserveTokens`. */
  grown: number;
  /** Cost charged at the next dispatch: the admitted dispatch cost, or what `requeue` set. */
  cost: number;
  /**
   * The replica its prompt likely is cached on (`QueuedRequest.affinity`); `requeue` drops it, or
   * sets the replica it moves the request to.
   */
  affinity: ReplicaCandidate | undefined;
  /**
   * Windows this request consumed, for true-up at settle or cancel: a true-up window's bucket
   * (its end) and the amount the request counts in it.
   */
  readonly windows: readonly WindowUse[];
  readonly interaction: { readonly key: string; readonly ttlMs: number } | undefined;
  /** Where its usage is recorded at settle, and the quota reservations it holds until then. */
  readonly account?: Account | undefined;
}

/** A request's usage account as admitted (see `includes/usage.lua`). */
interface Account {
  readonly tenant: string;
  readonly usage: UsageAccount;
  readonly reserved: readonly {
    readonly total: UsageTotal;
    readonly field: 'rt' | 'rc';
    readonly amount: number;
  }[];
}

/** A tenant's or key's usage in one day or month bucket, as `usageTotal` in keys.ts. */
interface UsageTotal {
  t: number;
  c: number;
  rt: number;
  rc: number;
  at: boolean;
  ac: boolean;
}

/** A FIFO of requests with O(1) head and lazy removal from the middle (cancel, EDF picks). */
class Fifo {
  #items: RequestState[] = [];
  #head = 0;
  readonly #removed = new Set<RequestState>();
  count = 0;

  push(rs: RequestState): void {
    this.#items.push(rs);
    this.count++;
  }

  /** Puts a request at the head (a re-queued request; always a fresh state object). */
  unshift(rs: RequestState): void {
    if (this.#head > 0) this.#items[--this.#head] = rs;
    else this.#items.unshift(rs);
    this.count++;
  }

  head(): RequestState | undefined {
    return this.#items[this.#head];
  }

  remove(rs: RequestState): void {
    this.count--;
    if (this.#items[this.#head] === rs) this.#head++;
    else this.#removed.add(rs);
    // Skip entries removed while they were behind the head, so head() stays O(1).
    for (;;) {
      const h = this.#items[this.#head];
      if (h === undefined || !this.#removed.has(h)) break;
      this.#removed.delete(h);
      this.#head++;
    }
    if (this.#head > 64 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
  }
}

/** A backlogged flow of one queue: its FIFO and the FIFO of its interaction continuations. */
class FlowState {
  readonly all = new Fifo();
  readonly cont = new Fifo();
  constructor(readonly flow: string) {}
}

/** One fairness domain: a (pool, band) pair. */
class QueueState {
  readonly counters = new Map<string, number>();
  /** Backlogged flows only. */
  readonly flows = new Map<string, FlowState>();
  readonly fair: IndexedHeap<FlowState>;
  readonly continuing: IndexedHeap<FlowState>;
  readonly byScore = new IndexedHeap<RequestState>(
    (a, b) => a.req.score < b.req.score || (a.req.score === b.req.score && a.req.id < b.req.id),
  );
  lastLeft: string | undefined;
  size = 0;

  constructor() {
    const counter = (f: FlowState): number => this.counters.get(f.flow) ?? 0;
    this.fair = new IndexedHeap<FlowState>((a, b) =>
      fairBefore(
        counter(a),
        a.all.head()?.req.arrivalMs ?? 0,
        a.flow,
        counter(b),
        b.all.head()?.req.arrivalMs ?? 0,
        b.flow,
      ),
    );
    this.continuing = new IndexedHeap<FlowState>((a, b) =>
      fairBefore(
        counter(a),
        a.cont.head()?.req.arrivalMs ?? 0,
        a.flow,
        counter(b),
        b.cont.head()?.req.arrivalMs ?? 0,
        b.flow,
      ),
    );
  }
}

/**
 * The in-memory {@link SchedulingStore}: the simulator's store, the embedded mode's store and the
 * reference the Redis backend is held to by the conformance suite. Every operation is O(log n) in
 * the number of queued requests or backlogged flows (heaps, not scans).
 */
export class MemoryStore implements SchedulingStore {
  readonly #opts: ResolvedStoreOptions;
  readonly #queues = new Map<string, Map<number, QueueState>>();
  readonly #poolQueued = new Map<string, number>();
  readonly #requests = new Map<string, RequestState>();
  readonly #replicas = new Map<string, { tokens: number; seqs: number }>();
  /** Per replica: prefix key → running requests on it holding that part (`QueuedRequest.prefixParts`). */
  readonly #prefixHolders = new Map<string, Map<string, number>>();
  readonly #leases = new Map<string, number>();
  readonly #ownerRequests = new Map<string, Set<string>>();
  readonly #windows = new Map<string, SlidingWindow>();
  /** Interaction key → end of its open period, and the calls admitted in it. */
  readonly #interactions = new Map<string, { until: number; calls: number }>();
  #interactionsSweepAt = 1024;
  readonly #history = new Map<string, number[]>();
  /** Usage rows by UTC day, in the field encoding the Redis backend uses (usage-rows.ts). */
  readonly #usageDays = new Map<string, Map<string, number>>();
  readonly #usageTotals = new Map<string, UsageTotal>();
  /** The cutoff day the last usage pruning used (see {@link MemoryStore.#pruneUsage}). */
  #usageCutoff = '';
  #closed = false;

  constructor(options: StoreOptions = {}) {
    this.#opts = resolveStoreOptions(options);
  }

  async admit(input: AdmitInput): Promise<AdmitResult> {
    this.#open('admit');
    if (this.#opts.validate) parseInput('admit', admitInputSchema, input);
    return this.#admit(input);
  }

  async admitAndDispatch(input: AdmitAndDispatchInput): Promise<AdmitAndDispatchResult> {
    this.#open('admitAndDispatch');
    if (this.#opts.validate) parseInput('admitAndDispatch', admitAndDispatchInputSchema, input);
    // Through the public operations, so a subclass that observes `admit` or `dispatch` (a test
    // or benchmark wrapper) sees both steps, as it did before they were fused.
    const admit = await this.admit(input.admit);
    const dispatch = admit.ok ? await this.dispatch(input.dispatch) : undefined;
    return {
      admit,
      ...(dispatch !== undefined ? { dispatch } : {}),
      ...this.#after(input.dispatch),
    };
  }

  /** The pool's queued count and the candidates' reservations, reported by the fused operations. */
  #after(d: DispatchInput): { poolQueued: number; reserved: Reservation[] } {
    return {
      poolQueued: this.#poolQueued.get(d.pool) ?? 0,
      reserved: d.replicas.map((c) => {
        const r = this.#replicas.get(c.id);
        return { tokens: r?.tokens ?? 0, seqs: r?.seqs ?? 0 };
      }),
    };
  }

  #admit(input: AdmitInput): AdmitResult {
    const { req, nowMs } = input;
    if (this.#requests.has(req.id)) return { ok: false, code: 'duplicate', retryAfterMs: 0, key: req.id };

    // Windows and the interaction are the tenant's own (as the Redis backend scopes them).
    const interaction =
      input.interaction === undefined
        ? undefined
        : { key: tenantScoped(input.tenant, input.interaction.key), ttlMs: input.interaction.ttlMs };
    const windowKeys = input.limits.map((l) => tenantScoped(l.shared ? '' : input.tenant, l.key));
    const interactionOpen =
      interaction !== undefined && nowMs < (this.#interactions.get(interaction.key)?.until ?? -Infinity);
    const throttleApplies = input.overloaded && !interactionOpen;
    // Throttle windows count every arrival, admitted or not (FairServe Algorithm 1 line 19).
    const reject = (result: AdmitResult & { ok: false }): AdmitResult => {
      for (const [i, limit] of input.limits.entries()) {
        if (limit.onlyWhenOverloaded)
          this.#addToWindow(windowKeys[i] as string, nowMs, limit.windowMs, limit.amount, nowMs);
      }
      return result;
    };
    for (const [i, limit] of input.limits.entries()) {
      if (limit.onlyWhenOverloaded && !throttleApplies) continue;
      const w = this.#purgedWindow(windowKeys[i] as string, nowMs);
      if (w === undefined) {
        if (limit.amount > limit.limit) {
          return reject({
            ok: false,
            code: limit.code,
            retryAfterMs: limit.windowMs,
            key: limit.key,
            held: 0,
          });
        }
        continue;
      }
      const retryAfterMs = w.retryAfter(limit.amount, limit.limit, limit.windowMs, nowMs);
      if (retryAfterMs !== undefined)
        return reject({ ok: false, code: limit.code, retryAfterMs, key: limit.key, held: w.total });
    }
    const quotas = input.usage === undefined ? [] : (input.quotas ?? []);
    // The share of the way from minAmount to amount every quota with a minAmount can reserve.
    let share: number | undefined;
    for (const q of quotas) {
      const total = this.#usageTotal(q.scope, input.tenant, input.usage, q.window, false);
      const used = total === undefined ? 0 : q.kind === 'spend' ? total.c + total.rc : total.t + total.rt;
      const least = q.minAmount ?? q.amount;
      if (used + least > q.budget)
        return reject({
          ok: false,
          code: 'quota_exceeded',
          retryAfterMs: Math.max(0, q.resetAtMs - nowMs),
          key: `quota:${q.scope}:${q.window}:${q.kind}`,
        });
      if (least < q.amount) {
        const s = Math.min(1, (q.budget - used - least) / (q.amount - least));
        if (share === undefined || s < share) share = s;
      }
    }

    const queue = this.#queue(req.pool, req.band, false);
    const flowState = queue?.flows.get(req.flow);
    if (input.maxQueuedFlow !== undefined && (flowState?.all.count ?? 0) >= input.maxQueuedFlow) {
      return reject({
        ok: false,
        code: 'queue_full',
        retryAfterMs: this.#opts.queueFullRetryMs,
        key: `flow:${req.pool}:${req.band}:${req.flow}`,
      });
    }
    if (input.maxQueuedPool !== undefined && (this.#poolQueued.get(req.pool) ?? 0) >= input.maxQueuedPool) {
      return reject({
        ok: false,
        code: 'queue_full',
        retryAfterMs: this.#opts.queueFullRetryMs,
        key: `pool:${req.pool}`,
      });
    }

    // Every window records the request, throttle windows included (FairServe Algorithm 1 line 19:
    // arrivals are counted whether or not the limit is being enforced right now).
    const windows: WindowUse[] = [];
    const held: WindowHeld[] = [];
    for (const [i, limit] of input.limits.entries()) {
      const key = windowKeys[i] as string;
      const end = this.#addToWindow(key, nowMs, limit.windowMs, limit.amount, nowMs);
      windows.push({ key, trueUp: limit.trueUp ?? limit.code === 'tpm_limited', end, amount: limit.amount });
      const w = this.#windows.get(key) as SlidingWindow;
      held.push({ total: w.total, resetAtMs: w.oldestEnd });
    }
    // A call's stage: the calls admitted before it in its interaction's open period.
    const stage =
      interaction === undefined
        ? undefined
        : this.#openInteraction(interaction.key, nowMs, interaction.ttlMs, true);
    this.#hold(req, nowMs);

    const alerts: QuotaAlert[] = [];
    const reserved: Account['reserved'][number][] = [];
    for (const q of quotas) {
      const total = this.#usageTotal(q.scope, input.tenant, input.usage, q.window, true) as UsageTotal;
      const spend = q.kind === 'spend';
      const before = spend ? total.rc : total.rt;
      const least = q.minAmount;
      const amount =
        share !== undefined && least !== undefined && least < q.amount
          ? least + share * (q.amount - least)
          : q.amount;
      const used = (spend ? total.c : total.t) + before + amount;
      if (spend) total.rc = before + amount;
      else total.rt = before + amount;
      reserved.push({ total, field: spend ? 'rc' : 'rt', amount });
      if (q.alertAt !== undefined && used >= q.alertAt && !(spend ? total.ac : total.at)) {
        if (spend) total.ac = true;
        else total.at = true;
        alerts.push({
          quota: `${q.scope}:${q.window}:${q.kind}`,
          bucket: bucketOf(input.usage as UsageAccount, q.window),
          budget: q.budget,
          used,
        });
      }
    }

    const rs: RequestState = {
      req,
      // A call made while its interaction is open continues it, whoever says so (FairServe).
      continuation: req.continuation === true || interactionOpen,
      state: 'queued',
      replica: '',
      charged: 0,
      grown: 0,
      cost: req.dispatchCost,
      affinity: req.affinity,
      windows,
      interaction,
      account: input.usage === undefined ? undefined : { tenant: input.tenant, usage: input.usage, reserved },
    };
    this.#requests.set(req.id, rs);
    const q = queue ?? (this.#queue(req.pool, req.band, true) as QueueState);
    this.#enqueue(q, rs, input.lift);
    this.#poolQueued.set(req.pool, (this.#poolQueued.get(req.pool) ?? 0) + 1);
    return {
      ok: true,
      queued: q.size,
      ...(alerts.length > 0 ? { alerts } : {}),
      ...(share !== undefined ? { quotaShare: share } : {}),
      windows: held,
      ...(stage === undefined ? {} : { interactionStage: stage }),
    };
  }

  async dispatch(input: DispatchInput): Promise<DispatchResult> {
    this.#open('dispatch');
    if (this.#opts.validate) parseInput('dispatch', dispatchInputSchema, input);
    return this.#dispatch(input);
  }

  #dispatch(input: DispatchInput): DispatchResult {
    if (input.charges !== undefined) this.#applyCharges(input.charges);
    for (const band of input.bands) {
      const q = this.#queue(input.pool, band, false);
      if (q === undefined || q.size === 0) continue;
      const rs = input.ordering === 'score' ? q.byScore.peek() : this.#fairPick(q);
      if (rs === undefined) continue;
      const replica = this.#affine(rs, input) ?? this.#fit(rs.req.reserveTokens, input.replicas, input.fit);
      if (replica === undefined)
        return { kind: 'blocked', id: rs.req.id, reserveTokens: rs.req.reserveTokens };
      this.#unqueue(q, rs);
      this.#reserve(rs.req, replica, 0);
      rs.state = 'running';
      rs.replica = replica;
      rs.charged += rs.cost;
      this.#addToCounter(q, rs.req.flow, rs.cost);
      return { kind: 'dispatched', req: rs.req, replica };
    }
    return { kind: 'empty' };
  }

  async charge(items: readonly ChargeItem[]): Promise<void> {
    this.#open('charge');
    if (this.#opts.validate) parseInput('charge', chargeItemsSchema, items);
    this.#applyCharges(items);
  }

  #applyCharges(items: readonly ChargeItem[]): void {
    for (const item of items) {
      const rs = this.#requests.get(item.id);
      if (rs === undefined || rs.state !== 'running') continue;
      if (item.amount !== 0) {
        rs.charged += item.amount;
        this.#addToCounter(
          this.#queue(rs.req.pool, rs.req.band, true) as QueueState,
          rs.req.flow,
          item.amount,
        );
      }
      const grow = item.reserveTokens ?? 0;
      if (grow > 0) {
        rs.grown += grow;
        const r = this.#replicas.get(rs.replica);
        if (r !== undefined) r.tokens += grow;
      }
    }
  }

  async settle(input: SettleInput): Promise<boolean> {
    this.#open('settle');
    if (this.#opts.validate) parseInput('settle', settleInputSchema, input);
    const rs = this.#requests.get(input.id);
    if (rs === undefined || rs.state !== 'running') return false;
    const q = this.#queue(rs.req.pool, rs.req.band, true) as QueueState;
    this.#addToCounter(q, rs.req.flow, input.finalCost - rs.charged);
    this.#release(rs);
    this.#trueUp(rs, input.actualTokens, input.nowMs);
    this.#recordUsage(rs, input.actualTokens, input.outputTokens);
    if (rs.account !== undefined) this.#pruneUsage(input.nowMs);
    let hist = this.#history.get(rs.req.flow);
    if (hist === undefined) {
      hist = [];
      this.#history.set(rs.req.flow, hist);
    }
    hist.push(input.outputTokens);
    if (hist.length > HISTORY_LENGTH) hist.shift();
    if (rs.interaction !== undefined)
      this.#openInteraction(rs.interaction.key, input.nowMs, rs.interaction.ttlMs);
    this.#forget(rs);
    return true;
  }

  async settleAndDispatch(input: SettleAndDispatchInput): Promise<SettleAndDispatchResult> {
    this.#open('settleAndDispatch');
    if (this.#opts.validate) parseInput('settleAndDispatch', settleAndDispatchInputSchema, input);
    // Through the public operations, like admitAndDispatch.
    const settled = await this.settle(input.settle);
    const dispatch = await this.dispatch(input.dispatch);
    return { settled, dispatch, ...this.#after(input.dispatch) };
  }

  async requeue(input: RequeueInput): Promise<boolean> {
    this.#open('requeue');
    if (this.#opts.validate) parseInput('requeue', requeueInputSchema, input);
    const old = this.#requests.get(input.id);
    if (old === undefined || old.state !== 'running') return false;
    const q = this.#queue(old.req.pool, old.req.band, true) as QueueState;
    const served = input.undispatch === true ? old.charged - old.cost : input.servedCost;
    this.#addToCounter(q, old.req.flow, served - old.charged);
    this.#release(old);
    // A fresh state object: the old one may still sit, lazily removed, behind a FIFO's head.
    const rs: RequestState = {
      ...old,
      state: 'queued',
      replica: '',
      charged: served,
      grown: 0,
      cost: input.undispatch === true ? old.cost : (input.dispatchCost ?? 0),
      affinity: input.moveTo,
    };
    this.#requests.set(input.id, rs);
    const flow = rs.req.flow;
    let fs = q.flows.get(flow);
    if (fs === undefined) {
      q.counters.set(flow, q.counters.get(flow) ?? 0);
      fs = new FlowState(flow);
      q.flows.set(flow, fs);
      fs.all.unshift(rs);
      q.fair.push(fs);
    } else {
      fs.all.unshift(rs);
      q.fair.update(fs);
    }
    if (rs.continuation) {
      fs.cont.unshift(rs);
      if (fs.cont.count === 1) q.continuing.push(fs);
      else q.continuing.update(fs);
    }
    q.byScore.push(rs);
    q.size++;
    this.#poolQueued.set(rs.req.pool, (this.#poolQueued.get(rs.req.pool) ?? 0) + 1);
    return true;
  }

  async cancel(id: string, nowMs: number): Promise<boolean> {
    this.#open('cancel');
    if (this.#opts.validate) parseInput('cancel', cancelInputSchema, { id, nowMs });
    const rs = this.#requests.get(id);
    if (rs === undefined || rs.state !== 'queued') return false;
    this.#drop(rs, nowMs);
    return true;
  }

  async restore(input: RestoreInput): Promise<RestoreResult> {
    this.#open('restore');
    if (this.#opts.validate) parseInput('restore', restoreInputSchema, input);
    let forgotten = 0;
    if (input.owner !== undefined) {
      const holds = new Set(input.owner.holds);
      const ids = [...(this.#ownerRequests.get(input.owner.id) ?? [])].filter((id) => !holds.has(id));
      for (const id of ids) {
        const rs = this.#requests.get(id);
        if (rs === undefined) continue;
        if (rs.state === 'queued') this.#drop(rs, input.nowMs);
        else {
          this.#release(rs);
          this.#forget(rs);
        }
        forgotten++;
      }
    }
    for (const e of input.windows) {
      const end = bucketEnd(e.atMs, e.windowMs);
      if (end <= input.nowMs || this.#windows.get(e.key)?.counts(e.id, e.atMs)) continue;
      this.#addToWindow(e.key, e.atMs, e.windowMs, e.amount, input.nowMs);
      this.#windows.get(e.key)?.restored(e.id, end);
    }
    let restored = 0;
    let skipped = 0;
    for (const { req, replica, grown, windows } of input.requests) {
      if (this.#requests.has(req.id)) {
        skipped++;
        continue;
      }
      this.#hold(req, input.nowMs);
      const rs: RequestState = {
        req,
        continuation: req.continuation === true,
        state: 'queued',
        replica: '',
        charged: 0,
        grown: 0,
        cost: req.dispatchCost,
        affinity: undefined,
        windows: windows.map((w) => ({
          key: w.key,
          trueUp: w.trueUp,
          end: bucketEnd(w.atMs, w.windowMs),
          amount: w.amount,
        })),
        interaction: undefined,
      };
      this.#requests.set(req.id, rs);
      const q = this.#queue(req.pool, req.band, true) as QueueState;
      if (replica === undefined) {
        this.#enqueue(q, rs, input.lift);
        this.#poolQueued.set(req.pool, (this.#poolQueued.get(req.pool) ?? 0) + 1);
      } else {
        rs.state = 'running';
        rs.replica = replica;
        rs.grown = grown ?? 0;
        this.#reserve(req, replica, rs.grown);
        rs.charged = rs.cost;
        this.#addToCounter(q, req.flow, rs.cost);
      }
      restored++;
    }
    return { restored, skipped, forgotten };
  }

  /** The state of a memory store cannot be lost: nothing to re-establish. */
  async adoptEpoch(): Promise<void> {
    this.#open('adoptEpoch');
  }

  async renewOwner(owner: string, nowMs: number, leaseMs: number): Promise<void> {
    this.#open('renewOwner');
    if (this.#opts.validate) parseInput('renewOwner', renewInputSchema, { owner, nowMs, leaseMs });
    this.#leases.set(owner, nowMs + leaseMs);
  }

  async reclaim(
    nowMs: number,
  ): Promise<{ readonly dropped: readonly string[]; readonly released: readonly string[] }> {
    this.#open('reclaim');
    if (this.#opts.validate) parseInput('reclaim', cancelInputSchema.shape.nowMs, nowMs);
    const expired = [...this.#leases]
      .filter(([, until]) => until <= nowMs)
      .sort(([oa, ua], [ob, ub]) => (ua !== ub ? ua - ub : oa < ob ? -1 : oa > ob ? 1 : 0));
    const dropped: string[] = [];
    const released: string[] = [];
    for (const [owner] of expired) {
      const ids = [...(this.#ownerRequests.get(owner) ?? [])].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      for (const id of ids) {
        const rs = this.#requests.get(id);
        if (rs === undefined) continue;
        if (rs.state === 'queued') {
          this.#drop(rs, nowMs);
          dropped.push(id);
        } else {
          this.#release(rs);
          this.#forget(rs);
          released.push(id);
        }
      }
      this.#leases.delete(owner);
      this.#ownerRequests.delete(owner);
    }
    return { dropped, released };
  }

  async predictedOutput(flow: string): Promise<number | undefined> {
    this.#open('predictedOutput');
    if (this.#opts.validate) parseInput('predictedOutput', idSchema, flow);
    return meanOfHistory(this.#history.get(flow) ?? []);
  }

  async reserved(replica: string): Promise<{ readonly tokens: number; readonly seqs: number }> {
    this.#open('reserved');
    if (this.#opts.validate) parseInput('reserved', idSchema, replica);
    const r = this.#replicas.get(replica);
    return { tokens: r?.tokens ?? 0, seqs: r?.seqs ?? 0 };
  }

  /** Records the request among its owner's holdings, granting the owner a lease if it has none. */
  #hold(req: QueuedRequest, nowMs: number): void {
    if (!this.#leases.has(req.owner)) this.#leases.set(req.owner, nowMs + this.#opts.defaultLeaseMs);
    let owned = this.#ownerRequests.get(req.owner);
    if (owned === undefined) {
      owned = new Set();
      this.#ownerRequests.set(req.owner, owned);
    }
    owned.add(req.id);
  }

  async locate(ids: readonly string[]): Promise<RequestLocations> {
    this.#open('locate');
    const running = new Map<string, string>();
    const unknown: string[] = [];
    for (const id of ids) {
      const rs = this.#requests.get(id);
      if (rs === undefined) unknown.push(id);
      else if (rs.state === 'running') running.set(id, rs.replica);
    }
    return { running, unknown };
  }

  async snapshot(pool: string, band: number): Promise<QueueSnapshot> {
    this.#open('snapshot');
    if (this.#opts.validate) parseInput('snapshot', snapshotInputSchema, { pool, band });
    const q = this.#queue(pool, band, false);
    if (q === undefined) return { counters: {}, backlogged: [], queued: {} };
    const flows = [...q.flows.values()].sort((a, b) => (lessFair(q, a, b) ? -1 : lessFair(q, b, a) ? 1 : 0));
    return {
      counters: Object.fromEntries(q.counters),
      backlogged: flows.map((f) => f.flow),
      queued: Object.fromEntries(flows.map((f) => [f.flow, f.all.count])),
    };
  }

  async usage(query: UsageQuery): Promise<readonly UsageRow[]> {
    this.#open('usage');
    if (this.#opts.validate) parseInput('usage', usageQuerySchema, query);
    return usageRows(
      query,
      query.days.map((day) => ({ day, fields: this.#usageDays.get(day) ?? new Map<string, number>() })),
    );
  }

  async close(): Promise<void> {
    this.#closed = true;
  }

  #open(operation: string): void {
    if (this.#closed) throw new StoreError(StoreErrorCode.CLOSED, operation, 'the store is closed');
  }

  #queue(pool: string, band: number, create: boolean): QueueState | undefined {
    let bands = this.#queues.get(pool);
    if (bands === undefined) {
      if (!create) return undefined;
      bands = new Map();
      this.#queues.set(pool, bands);
    }
    let q = bands.get(band);
    if (q === undefined && create) {
      q = new QueueState();
      bands.set(band, q);
    }
    return q;
  }

  /** Appends to the flow's FIFO, lifting its counter first if it was not backlogged (VTC Alg. 2 l. 8–14). */
  #enqueue(q: QueueState, rs: RequestState, lift: AdmitInput['lift']): void {
    const flow = rs.req.flow;
    let fs = q.flows.get(flow);
    if (fs === undefined) {
      let c = q.counters.get(flow) ?? 0;
      if (lift === 'vtc') {
        const top = q.fair.peek();
        const floor =
          top !== undefined
            ? q.counters.get(top.flow)
            : q.lastLeft !== undefined
              ? q.counters.get(q.lastLeft)
              : undefined;
        if (floor !== undefined && floor > c) c = floor;
      }
      q.counters.set(flow, c);
      fs = new FlowState(flow);
      q.flows.set(flow, fs);
      fs.all.push(rs);
      q.fair.push(fs);
    } else {
      fs.all.push(rs);
    }
    if (rs.continuation) {
      fs.cont.push(rs);
      if (fs.cont.count === 1) q.continuing.push(fs);
    }
    q.byScore.push(rs);
    q.size++;
  }

  #fairPick(q: QueueState): RequestState | undefined {
    const cont = q.continuing.peek();
    if (cont !== undefined) return cont.cont.head();
    return q.fair.peek()?.all.head();
  }

  /**
   * The request's affinity replica if the dispatch honours affinity and the replica is within the
   * bound with room (see `DispatchInput.affinityTokens`); its capacity is the candidate's when it
   * is offered.
   */
  #affine(rs: RequestState, input: DispatchInput): string | undefined {
    const a = rs.affinity;
    if (a === undefined || input.affinityTokens === undefined) return undefined;
    const c = input.replicas.find((x) => x.id === a.id) ?? a;
    const r = this.#replicas.get(a.id);
    const tokens = r?.tokens ?? 0;
    const seqs = r?.seqs ?? 0;
    return tokens <= input.affinityTokens &&
      tokens + this.#costOn(rs.req, a.id) <= c.tokenCapacity &&
      seqs + 1 <= c.seqCapacity
      ? a.id
      : undefined;
  }

  #fit(tokens: number, replicas: readonly ReplicaCandidate[], fit: DispatchInput['fit']): string | undefined {
    let chosen: string | undefined;
    let bestLeft = 0;
    for (const c of replicas) {
      const r = this.#replicas.get(c.id);
      const after = (r?.tokens ?? 0) + tokens;
      if (after > c.tokenCapacity || (r?.seqs ?? 0) + 1 > c.seqCapacity) continue;
      if (fit === 'first') return c.id;
      const left = c.tokenCapacity - after;
      if (chosen === undefined || left < bestLeft) {
        chosen = c.id;
        bestLeft = left;
      }
    }
    return chosen;
  }

  /** Takes a queued request out of its queue; the flow leaves the backlog if it was its last. */
  #unqueue(q: QueueState, rs: RequestState): void {
    const flow = rs.req.flow;
    const fs = q.flows.get(flow) as FlowState;
    fs.all.remove(rs);
    if (rs.continuation) {
      fs.cont.remove(rs);
      if (fs.cont.count === 0) q.continuing.remove(fs);
      else q.continuing.update(fs);
    }
    q.byScore.remove(rs);
    q.size--;
    const pool = rs.req.pool;
    this.#poolQueued.set(pool, (this.#poolQueued.get(pool) ?? 1) - 1);
    if (fs.all.count === 0) {
      q.flows.delete(flow);
      q.fair.remove(fs);
      q.lastLeft = flow;
    } else {
      q.fair.update(fs);
    }
  }

  #addToCounter(q: QueueState, flow: string, amount: number): void {
    q.counters.set(flow, (q.counters.get(flow) ?? 0) + amount);
    const fs = q.flows.get(flow);
    if (fs !== undefined) {
      q.fair.update(fs);
      q.continuing.update(fs);
    }
  }

  /**
   * Tokens a request reserves on `replica`: `reserveTokens` less its prefix parts, plus each part
   * no running request on the replica holds yet.
   */
  #costOn(req: QueuedRequest, replica: string): number {
    const parts = req.prefixParts;
    if (parts === undefined) return req.reserveTokens;
    const holders = this.#prefixHolders.get(replica);
    let cost = req.reserveTokens;
    for (const p of parts) if ((holders?.get(p.key) ?? 0) > 0) cost -= p.tokens;
    return cost;
  }

  /** Reserves a request (and `grown` tokens more) on `replica`, holding its prefix parts there. */
  #reserve(req: QueuedRequest, replica: string, grown: number): void {
    const tokens = this.#costOn(req, replica) + grown;
    const parts = req.prefixParts;
    if (parts !== undefined) {
      let holders = this.#prefixHolders.get(replica);
      if (holders === undefined) {
        holders = new Map();
        this.#prefixHolders.set(replica, holders);
      }
      for (const p of parts) holders.set(p.key, (holders.get(p.key) ?? 0) + 1);
    }
    const r = this.#replicas.get(replica);
    if (r === undefined) this.#replicas.set(replica, { tokens, seqs: 1 });
    else {
      r.tokens += tokens;
      r.seqs += 1;
    }
  }

  /**
   * Frees a running request's reservation: `reserveTokens` less its prefix parts, what it grew by,
   * and each part no other running request on the replica holds.
   */
  #release(rs: RequestState): void {
    let tokens = rs.req.reserveTokens + rs.grown;
    const parts = rs.req.prefixParts;
    const holders = parts === undefined ? undefined : this.#prefixHolders.get(rs.replica);
    if (parts !== undefined && holders !== undefined) {
      for (const p of parts) {
        const n = (holders.get(p.key) ?? 1) - 1;
        if (n > 0) {
          holders.set(p.key, n);
          tokens -= p.tokens;
        } else holders.delete(p.key);
      }
      if (holders.size === 0) this.#prefixHolders.delete(rs.replica);
    }
    const r = this.#replicas.get(rs.replica);
    if (r === undefined) return;
    r.tokens -= tokens;
    r.seqs -= 1;
    if (r.seqs <= 0) this.#replicas.delete(rs.replica);
  }

  #trueUp(rs: RequestState, tokens: number, nowMs: number): void {
    for (const w of rs.windows)
      if (w.trueUp) this.#windows.get(w.key)?.trueUp(w.end, w.amount, tokens, nowMs);
  }

  /** The window of `key` once its ended buckets are dropped; undefined (and forgotten) if none is left. */
  #purgedWindow(key: string, nowMs: number): SlidingWindow | undefined {
    const w = this.#windows.get(key);
    if (w === undefined) return undefined;
    w.purge(nowMs);
    if (!w.isEmpty()) return w;
    this.#windows.delete(key);
    return undefined;
  }

  /**
   * Counts `amount`, admitted at `atMs`, in its bucket of the window of `key` (created at `nowMs`
   * if it has no bucket left); returns the bucket's end.
   */
  #addToWindow(key: string, atMs: number, windowMs: number, amount: number, nowMs: number): number {
    const w = this.#purgedWindow(key, nowMs);
    const end = bucketEnd(atMs, windowMs);
    if (w === undefined) this.#windows.set(key, new SlidingWindow(nowMs, end, amount));
    else w.add(end, amount);
    return end;
  }

  /** Removes a queued request for good (cancel, reclaim): nothing was served, so TPM gets it back. */
  #drop(rs: RequestState, nowMs: number): void {
    this.#unqueue(this.#queue(rs.req.pool, rs.req.band, true) as QueueState, rs);
    this.#trueUp(rs, 0, nowMs);
    this.#releaseQuotas(rs);
    this.#forget(rs);
  }

  /** The usage total of a quota's scope and window for a request (created if `create`). */
  #usageTotal(
    scope: QuotaCheck['scope'],
    tenant: string,
    usage: UsageAccount | undefined,
    window: QuotaCheck['window'],
    create: boolean,
  ): UsageTotal | undefined {
    if (usage === undefined) return undefined;
    const id = scope === 'key' ? `key:${usage.key ?? ''}` : `tenant:${tenant}`;
    return this.#total(id, bucketOf(usage, window), create);
  }

  #total(id: string, bucket: string, create: boolean): UsageTotal | undefined {
    const k = `${id}\u0000${bucket}`;
    let t = this.#usageTotals.get(k);
    if (t === undefined && create) {
      t = { t: 0, c: 0, rt: 0, rc: 0, at: false, ac: false };
      this.#usageTotals.set(k, t);
    }
    return t;
  }

  #releaseQuotas(rs: RequestState): void {
    for (const r of rs.account?.reserved ?? []) r.total[r.field] = r.total[r.field] + -r.amount;
  }

  /** Records a settled request's usage (whole tokens) and replaces its reservations by it. */
  #recordUsage(rs: RequestState, actualTokens: number, outputTokens: number): void {
    const a = rs.account;
    if (a === undefined) return;
    const u = a.usage;
    const out = Math.floor(outputTokens);
    const inp = Math.max(0, Math.floor(actualTokens) - out);
    const priced = u.priceIn !== undefined || u.priceOut !== undefined;
    const cost = (inp * (u.priceIn ?? 0) + out * (u.priceOut ?? 0)) / 1000000;
    let day = this.#usageDays.get(u.day);
    if (day === undefined) {
      day = new Map();
      this.#usageDays.set(u.day, day);
    }
    const key = u.key ?? '';
    const add = (metric: 'r' | 'i' | 'o' | 'c', v: number): void => {
      const f = usageField(metric, a.tenant, key, u.model);
      day.set(f, (day.get(f) ?? 0) + v);
    };
    add('r', 1);
    add('i', inp);
    add('o', out);
    if (priced) add('c', cost);
    const ids = [`tenant:${a.tenant}`, ...(key === '' ? [] : [`key:${key}`])];
    const totals: UsageTotal[] = [];
    for (const id of ids)
      for (const b of [u.day, u.month]) totals.push(this.#total(id, b, true) as UsageTotal);
    // In the Redis backend's order: tenant day, tenant month, key day, key month.
    for (const t of totals) {
      t.t += inp + out;
      if (priced) t.c = t.c + cost;
    }
    this.#releaseQuotas(rs);
  }

  /**
   * Drops the usage days and total buckets that ended more than {@link USAGE_RETENTION_DAYS}
   * before `nowMs` (Redis lets such keys expire); looks once per UTC day of `nowMs`.
   */
  #pruneUsage(nowMs: number): void {
    const cutoff = new Date(nowMs - USAGE_RETENTION_DAYS * 86_400_000).toISOString().slice(0, 10);
    if (cutoff === this.#usageCutoff) return;
    this.#usageCutoff = cutoff;
    for (const day of this.#usageDays.keys()) if (day < cutoff) this.#usageDays.delete(day);
    // A bucket is a day (YYYY-MM-DD) or a month (YYYY-MM, which ended before the cutoff's month).
    const month = cutoff.slice(0, 7);
    for (const k of this.#usageTotals.keys()) {
      const bucket = k.slice(k.indexOf('\u0000') + 1);
      if (bucket.length === 7 ? bucket < month : bucket < cutoff) this.#usageTotals.delete(k);
    }
  }

  #forget(rs: RequestState): void {
    this.#requests.delete(rs.req.id);
    this.#ownerRequests.get(rs.req.owner)?.delete(rs.req.id);
  }

  /**
   * Keeps interaction `key` open until `nowMs + ttlMs` at least; a period that had ended starts
   * anew, with no calls counted. With `call` (an admission), counts the call and returns its stage:
   * the calls admitted before it in the period.
   */
  #openInteraction(key: string, nowMs: number, ttlMs: number, call = false): number {
    const until = nowMs + ttlMs;
    let current = this.#interactions.get(key);
    if (current === undefined || current.until <= nowMs) {
      current = { until, calls: 0 };
      this.#interactions.set(key, current);
    } else if (until > current.until) current.until = until;
    const stage = current.calls;
    if (call) current.calls++;
    if (this.#interactions.size > this.#interactionsSweepAt) {
      for (const [k, v] of this.#interactions) if (v.until <= nowMs) this.#interactions.delete(k);
      this.#interactionsSweepAt = Math.max(1024, this.#interactions.size * 2);
    }
    return stage;
  }
}

function lessFair(q: QueueState, a: FlowState, b: FlowState): boolean {
  return fairBefore(
    q.counters.get(a.flow) ?? 0,
    a.all.head()?.req.arrivalMs ?? 0,
    a.flow,
    q.counters.get(b.flow) ?? 0,
    b.all.head()?.req.arrivalMs ?? 0,
    b.flow,
  );
}
