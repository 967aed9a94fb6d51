import {
  type RestoredWindowEntry,
  type RestoredWindowUse,
  type SchedulingStore,
  StoreError,
  StoreErrorCode,
  type WindowLimit,
} from '@fairway/store';

/** One window entry this gateway admitted. */
interface LoggedEntry {
  readonly key: string;
  readonly atMs: number;
  readonly windowMs: number;
  readonly trueUp: boolean;
  amount: number;
}

/** What one admission put in the windows. */
interface LoggedAdmission {
  readonly id: string;
  /** When its last entry leaves its window (ms). */
  readonly untilMs: number;
  readonly entries: readonly LoggedEntry[];
}

/**
 * The window entries a gateway admitted that may still count, kept so that the windows can be
 * rebuilt after the store's state was lost (DESIGN.md failure model: Redis restarts). Each
 * dispatcher puts back exactly what it admitted, at its admission time and amount (true-up
 * amounts once settled), so the rebuilt windows equal the lost ones but for what dispatchers that
 * died meanwhile had admitted. Memory: one small record per admission of the last window (the
 * longest of its limits).
 */
export class AdmissionLog {
  readonly #byId = new Map<string, LoggedAdmission>();
  /** Admissions in order; pruned from the head once they left every window. */
  #order: LoggedAdmission[] = [];
  #head = 0;

  /** Records an admission's window entries (`limits` as admitted at `atMs`). */
  record(id: string, atMs: number, limits: readonly WindowLimit[]): void {
    this.prune(atMs);
    if (limits.length === 0) return;
    let windowMs = 0;
    const entries = limits.map((l) => {
      windowMs = Math.max(windowMs, l.windowMs);
      return {
        key: l.key,
        atMs,
        windowMs: l.windowMs,
        trueUp: l.trueUp ?? l.code === 'tpm_limited',
        amount: l.amount,
      };
    });
    const a = { id, untilMs: atMs + windowMs, entries };
    this.#byId.set(id, a);
    this.#order.push(a);
  }

  /** Replaces the amount of the request's true-up entries (settled: true tokens; cancelled: 0). */
  trueUp(id: string, amount: number): void {
    for (const e of this.#byId.get(id)?.entries ?? []) if (e.trueUp) e.amount = amount;
  }

  /** The windows a request was admitted into and what it counts there, as `restore` records them. */
  windowsOf(id: string): RestoredWindowUse[] {
    return (this.#byId.get(id)?.entries ?? []).map((e) => ({
      key: e.key,
      trueUp: e.trueUp,
      atMs: e.atMs,
      windowMs: e.windowMs,
      amount: e.amount,
    }));
  }

  /** Every entry still inside its window at `nowMs`, oldest admission first. */
  entries(nowMs: number): RestoredWindowEntry[] {
    this.prune(nowMs);
    const out: RestoredWindowEntry[] = [];
    for (let i = this.#head; i < this.#order.length; i++) {
      const a = this.#order[i] as LoggedAdmission;
      for (const e of a.entries)
        if (e.atMs > nowMs - e.windowMs)
          out.push({ key: e.key, id: a.id, atMs: e.atMs, windowMs: e.windowMs, amount: e.amount });
    }
    return out;
  }

  /** Admissions recorded and not yet pruned. */
  get size(): number {
    return this.#order.length - this.#head;
  }

  /** Forgets admissions whose every entry left its window by `nowMs`. */
  prune(nowMs: number): void {
    const order = this.#order;
    while (this.#head < order.length) {
      const a = order[this.#head] as LoggedAdmission;
      if (a.untilMs > nowMs) break;
      if (this.#byId.get(a.id) === a) this.#byId.delete(a.id);
      this.#head++;
    }
    if (this.#head > 1024 && this.#head * 2 > order.length) {
      this.#order = order.slice(this.#head);
      this.#head = 0;
    }
  }
}

/** Whether a store call failed because the store's state was lost (see `STATE_LOST`). */
export function isStateLost(err: unknown): boolean {
  return err instanceof StoreError && err.code === StoreErrorCode.STATE_LOST;
}

/**
 * Wraps a store so that a lost state is repaired, not hidden: the first call that fails with
 * `STATE_LOST` re-establishes the store's epoch (`adoptEpoch`) and runs `repair` (the gateway
 * puts back what it holds); calls made meanwhile wait for the repair, and every call that failed
 * with `STATE_LOST` (it changed nothing) runs again once after it. Calls go straight through
 * otherwise: the hot path costs a flag check and an epoch comparison. A store without an `epoch`
 * (memory) is returned unwrapped.
 */
export function recoveringStore(inner: SchedulingStore, repair: () => Promise<void>): SchedulingStore {
  // A store that cannot lose its state (memory: the simulator's hot loop) is used as it is.
  if (!('epoch' in inner)) return inner;
  let repairing: Promise<void> | undefined;
  /** Repairs completed; a call that began before the last one retries without another. */
  let generation = 0;
  /** The store's epoch when this gateway last knew its state whole. */
  let seen: string | undefined;

  const recover = async (began: number): Promise<void> => {
    if (began !== generation) return;
    repairing ??= (async () => {
      try {
        await inner.adoptEpoch?.();
        await repair();
        seen = inner.epoch;
        generation++;
      } finally {
        repairing = undefined;
      }
    })();
    await repairing;
  };

  const call = async <T>(op: () => Promise<T>): Promise<T> => {
    if (repairing !== undefined) await repairing.catch(() => undefined);
    // Another gateway sharing this store instance adopted a new epoch: the state this one held
    // was lost too, though its calls now succeed.
    const epoch = inner.epoch;
    if (seen !== undefined && epoch !== seen) await recover(generation);
    const began = generation;
    try {
      const result = await op();
      seen ??= inner.epoch;
      return result;
    } catch (err) {
      if (!isStateLost(err)) throw err;
      await recover(began);
      return op();
    }
  };

  const s: SchedulingStore = {
    admit: (input) => call(() => inner.admit(input)),
    dispatch: (input) => call(() => inner.dispatch(input)),
    charge: (items) => call(() => inner.charge(items)),
    settle: (input) => call(() => inner.settle(input)),
    cancel: (id, nowMs) => call(() => inner.cancel(id, nowMs)),
    renewOwner: (owner, nowMs, leaseMs) => call(() => inner.renewOwner(owner, nowMs, leaseMs)),
    reclaim: (nowMs) => call(() => inner.reclaim(nowMs)),
    predictedOutput: (flow) => inner.predictedOutput(flow),
    reserved: (replica) => inner.reserved(replica),
    snapshot: (pool, band) => inner.snapshot(pool, band),
    locate: (ids) => inner.locate(ids),
    close: () => inner.close(),
    get epoch() {
      return inner.epoch;
    },
  };
  const { admitAndDispatch, settleAndDispatch, requeue, restore, adoptEpoch, usage } = inner;
  if (admitAndDispatch !== undefined)
    s.admitAndDispatch = (input) => call(() => admitAndDispatch.call(inner, input));
  if (settleAndDispatch !== undefined)
    s.settleAndDispatch = (input) => call(() => settleAndDispatch.call(inner, input));
  if (requeue !== undefined) s.requeue = (input) => call(() => requeue.call(inner, input));
  if (restore !== undefined) s.restore = (input) => restore.call(inner, input);
  if (adoptEpoch !== undefined) s.adoptEpoch = () => adoptEpoch.call(inner);
  if (usage !== undefined) s.usage = (query) => usage.call(inner, query);
  return s;
}
