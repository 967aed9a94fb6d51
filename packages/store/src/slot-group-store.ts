import { StoreInputError } from './errors.ts';
import { SLOT_GROUP_NAME, slotGroupPrefix } from './keys.ts';
import { RedisStore } from './redis-store.ts';
import type { RedisClient } from './script-loader.ts';
import type {
  AdmitAndDispatchInput,
  AdmitAndDispatchResult,
  AdmitInput,
  AdmitResult,
  ChargeItem,
  DispatchInput,
  DispatchResult,
  QueueSnapshot,
  RequestLocations,
  RequeueInput,
  Reservation,
  RestoredRequest,
  RestoredWindowEntry,
  RestoreInput,
  RestoreResult,
  SchedulingStore,
  SettleAndDispatchInput,
  SettleAndDispatchResult,
  SettleInput,
  UsageQuery,
  UsageRow,
} from './store.ts';
import type { StoreOptions } from './store-options.ts';

/** Name of the default slot group in {@link SlotGroupStoreOptions.groups}: every pool no group names. */
export const DEFAULT_SLOT_GROUP = '';

/** Options of {@link SlotGroupStore}. */
export interface SlotGroupStoreOptions {
  /**
   * One store per slot group, by group name; {@link DEFAULT_SLOT_GROUP} must be among them. Each
   * holds everything its pools' operations touch (queues, replicas, request records, windows,
   * quotas and usage of requests admitted into its pools, owner leases), in one hash slot.
   */
  readonly groups: ReadonlyMap<string, SchedulingStore>;
  /** Pool → group name; a pool not listed is in the default group. */
  readonly poolGroups: ReadonlyMap<string, string>;
}

/** One request this store routed, kept while it may be named by id or its window entries restored. */
interface Route {
  readonly id: string;
  readonly group: string;
  /** When its last window entry leaves its window (ms). */
  readonly untilMs: number;
  /** Queued or running: until settled, cancelled or reclaimed. */
  live: boolean;
}

/**
 * The slot group of every request admitted through this store, so operations that name only an
 * id (settle, cancel, requeue, charge, locate) go to one group in one round trip: the owner
 * of a request is the dispatcher that admitted it, and it is the one that settles, cancels and
 * charges it. A route stays while the request lives and, after that, until its window entries
 * have left their windows (a `restore` may put them back); memory is one small record per request
 * of the last window.
 */
class Routes {
  readonly #byId = new Map<string, Route>();
  #order: Route[] = [];
  #head = 0;

  admitted(id: string, group: string, nowMs: number, windowMs: number): void {
    this.prune(nowMs);
    const r: Route = { id, group, untilMs: nowMs + windowMs, live: true };
    this.#byId.set(id, r);
    this.#order.push(r);
  }

  groupOf(id: string): string | undefined {
    return this.#byId.get(id)?.group;
  }

  /** The request is live in `group` (a duplicate admission into another group must be refused). */
  liveIn(id: string): string | undefined {
    const r = this.#byId.get(id);
    return r?.live === true ? r.group : undefined;
  }

  /** The admission was refused: nothing of it is in the store. */
  refused(id: string, group: string): void {
    if (this.#byId.get(id)?.group === group) this.#byId.delete(id);
  }

  /** The request left the store (settled, cancelled, reclaimed) at `nowMs`. */
  ended(id: string, nowMs: number): void {
    const r = this.#byId.get(id);
    if (r === undefined) return;
    r.live = false;
    if (r.untilMs <= nowMs) this.#byId.delete(id);
  }

  prune(nowMs: number): void {
    const order = this.#order;
    while (this.#head < order.length) {
      const r = order[this.#head] as Route;
      if (r.untilMs > nowMs) break;
      // A live request stays routed; `ended` forgets it.
      if (!r.live && this.#byId.get(r.id) === r) this.#byId.delete(r.id);
      this.#head++;
    }
    if (this.#head > 1024 && this.#head * 2 > order.length) {
      this.#order = order.slice(this.#head);
      this.#head = 0;
    }
  }
}

function sumRows(query: UsageQuery, parts: readonly (readonly UsageRow[])[]): UsageRow[] {
  const byRow = new Map<string, UsageRow>();
  for (const rows of parts)
    for (const r of rows) {
      const id = `${r.day}\0${r.tenant}\0${r.key}\0${r.model}`;
      const seen = byRow.get(id);
      byRow.set(
        id,
        seen === undefined
          ? r
          : {
              ...seen,
              requests: seen.requests + r.requests,
              inputTokens: seen.inputTokens + r.inputTokens,
              outputTokens: seen.outputTokens + r.outputTokens,
              cost: seen.cost + r.cost,
            },
      );
    }
  const dayIndex = new Map(query.days.map((d, i) => [d, i]));
  const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
  // The order one store gives: days as queried, then tenant, key and model.
  return [...byRow.values()].sort(
    (a, b) =>
      (dayIndex.get(a.day) ?? 0) - (dayIndex.get(b.day) ?? 0) ||
      cmp(a.tenant, b.tenant) ||
      cmp(a.key, b.key) ||
      cmp(a.model, b.model),
  );
}

/**
 * A {@link SchedulingStore} over *slot groups*: pools are mapped to groups, each group is a store
 * of its own (on Redis Cluster: its own hash slot, so its own primary), and every operation on a
 * pool — admission with its windows and quotas, dispatch, settlement — runs in its pool's group,
 * atomically, in one round trip to one primary, as on a single store. What is not per pool:
 * - by id (settle, cancel, requeue, charge, locate): routed to the group the request was
 *   admitted into through this store (the caller's own requests); an id it does not know (a
 *   request another dispatcher admitted) is tried in every group, where at most one knows it;
 * - by owner (renewOwner, reclaim), usage, adoptEpoch: every group (usage rows are summed, so a
 *   tenant's usage is its total; reclaim lists each group's ids in that group's order, group
 *   after group);
 * - reserved(replica): the group of the pool the replica was last a dispatch candidate of, else
 *   every group (summed);
 * - predictedOutput(flow): every group; the mean of the groups' means (each the mean of the
 *   flow's last outputs in that group).
 *
 * Windows (RPM/TPM), quotas, usage totals, output histories and duplicate detection are exact
 * per group: a tenant's requests in two groups count against each group's window separately.
 * Pools whose shared limits must be exact belong in one group.
 */
export class SlotGroupStore implements SchedulingStore {
  readonly #groups: ReadonlyMap<string, SchedulingStore>;
  readonly #all: readonly SchedulingStore[];
  readonly #poolGroups: ReadonlyMap<string, string>;
  readonly #routes = new Routes();
  /** Replica → group of the pool it was last a candidate of. */
  readonly #replicaGroups = new Map<string, string>();
  /** Every group's epoch claimed (so `epoch` never changes by a group's first claim). */
  #claimed = false;
  #claiming: Promise<void> | undefined;

  constructor(options: SlotGroupStoreOptions) {
    if (!options.groups.has(DEFAULT_SLOT_GROUP))
      throw new StoreInputError('options', [
        { path: 'groups', message: 'the default group ("") is missing' },
      ]);
    for (const [pool, group] of options.poolGroups)
      if (!options.groups.has(group))
        throw new StoreInputError('options', [
          { path: `poolGroups.${pool}`, message: `unknown slot group "${group}"` },
        ]);
    this.#groups = options.groups;
    this.#all = [...options.groups.values()];
    this.#poolGroups = options.poolGroups;
  }

  /** The slot group of a pool. */
  groupOf(pool: string): string {
    return this.#poolGroups.get(pool) ?? DEFAULT_SLOT_GROUP;
  }

  #store(group: string): SchedulingStore {
    return this.#groups.get(group) as SchedulingStore;
  }

  /** The store of a pool; an input without a pool (invalid) goes to the default group, which reports it. */
  #ofPool(pool: unknown): SchedulingStore {
    return this.#store(typeof pool === 'string' ? this.groupOf(pool) : DEFAULT_SLOT_GROUP);
  }

  /** Before the first operation: every group's epoch claimed at once. */
  #ready(): Promise<void> | undefined {
    if (this.#claimed) return undefined;
    this.#claiming ??= Promise.all(this.#all.map((s) => s.adoptEpoch?.())).then(
      () => {
        this.#claimed = true;
      },
      (err: unknown) => {
        this.#claiming = undefined;
        throw err;
      },
    );
    return this.#claiming;
  }

  #noteCandidates(d: DispatchInput | undefined): void {
    if (d === undefined || !Array.isArray(d.replicas)) return;
    const group = typeof d.pool === 'string' ? this.groupOf(d.pool) : DEFAULT_SLOT_GROUP;
    for (const r of d.replicas)
      if (this.#replicaGroups.get(r.id) !== group) this.#replicaGroups.set(r.id, group);
  }

  /** Refuses an id live in another group (one store refuses a known id; groups do not see each other's). */
  #duplicate(input: AdmitInput, group: string): AdmitResult | undefined {
    const id = input.req?.id;
    const live = typeof id === 'string' ? this.#routes.liveIn(id) : undefined;
    if (live === undefined || live === group) return undefined;
    return { ok: false, code: 'duplicate', retryAfterMs: 0, key: id as string };
  }

  #admitted(input: AdmitInput, group: string): void {
    const id = input.req?.id;
    if (typeof id !== 'string' || typeof input.nowMs !== 'number') return;
    let windowMs = 0;
    for (const l of Array.isArray(input.limits) ? input.limits : [])
      windowMs = Math.max(windowMs, l.windowMs);
    this.#routes.admitted(id, group, input.nowMs, windowMs);
  }

  async admit(input: AdmitInput): Promise<AdmitResult> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    const group = typeof input.req?.pool === 'string' ? this.groupOf(input.req.pool) : DEFAULT_SLOT_GROUP;
    const dup = this.#duplicate(input, group);
    if (dup !== undefined) return dup;
    // Routed before the call: an orphaned admission (lost reply) is removed by id.
    this.#admitted(input, group);
    try {
      const r = await this.#store(group).admit(input);
      if (!r.ok) this.#routes.refused(input.req.id, group);
      return r;
    } catch (err) {
      // Refused as invalid: nothing was sent. Any other failure may have admitted it (lost reply).
      if (err instanceof StoreInputError) this.#routes.refused(input.req?.id, group);
      throw err;
    }
  }

  async admitAndDispatch(input: AdmitAndDispatchInput): Promise<AdmitAndDispatchResult> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    const group =
      typeof input.admit?.req?.pool === 'string' ? this.groupOf(input.admit.req.pool) : DEFAULT_SLOT_GROUP;
    const store = this.#store(group);
    if (typeof input.dispatch?.pool === 'string' && this.groupOf(input.dispatch.pool) !== group)
      throw new StoreInputError('admitAndDispatch', [
        {
          path: 'dispatch.pool',
          message: `pool "${input.dispatch.pool}" is in another slot group than admit.req.pool "${input.admit.req.pool}": admit and dispatch them apart`,
        },
      ]);
    if (store.admitAndDispatch === undefined) throw new Error('a slot group store lacks admitAndDispatch');
    const dup = this.#duplicate(input.admit, group);
    if (dup !== undefined) {
      // Rare (a caller re-using a live id): the candidates' reservations are read apart, so the
      // caller's view of them stays right; poolQueued is reported only with a dispatch.
      const reserved = await Promise.all(input.dispatch.replicas.map((r) => store.reserved(r.id)));
      return { admit: dup, poolQueued: 0, reserved };
    }
    this.#noteCandidates(input.dispatch);
    this.#admitted(input.admit, group);
    const r = await store.admitAndDispatch(input);
    if (!r.admit.ok) this.#routes.refused(input.admit.req.id, group);
    return r;
  }

  async dispatch(input: DispatchInput): Promise<DispatchResult> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    const group = typeof input?.pool === 'string' ? this.groupOf(input.pool) : DEFAULT_SLOT_GROUP;
    this.#noteCandidates(input);
    const charges = input?.charges;
    if (
      charges === undefined ||
      charges.length === 0 ||
      charges.every((c) => this.#routes.groupOf(c.id) === group)
    )
      return this.#store(group).dispatch(input);
    // Charges of requests in other groups are applied there, before the pick here.
    await this.charge(charges.filter((c) => this.#routes.groupOf(c.id) !== group));
    return this.#store(group).dispatch({
      ...input,
      charges: charges.filter((c) => this.#routes.groupOf(c.id) === group),
    });
  }

  async charge(items: readonly ChargeItem[]): Promise<void> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    if (!Array.isArray(items)) return this.#store(DEFAULT_SLOT_GROUP).charge(items);
    const first = items.length === 0 ? undefined : this.#routes.groupOf(items[0]?.id as string);
    if (first !== undefined && items.every((c) => this.#routes.groupOf(c.id) === first))
      return this.#store(first).charge(items);
    if (items.length === 0) return this.#store(DEFAULT_SLOT_GROUP).charge(items);
    // Split by group; an item of an unknown request goes to every group (ignored where unknown).
    const byGroup = new Map<string, ChargeItem[]>();
    for (const c of items) {
      const g = this.#routes.groupOf(c.id);
      for (const target of g === undefined ? this.#groups.keys() : [g]) {
        const list = byGroup.get(target) ?? [];
        list.push(c);
        byGroup.set(target, list);
      }
    }
    await Promise.all([...byGroup].map(([g, list]) => this.#store(g).charge(list)));
  }

  /** `op` in the request's group, or in every group (true if any) for a request this store did not route. */
  async #byId(id: string, op: (s: SchedulingStore) => Promise<boolean>): Promise<boolean> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    const group = this.#routes.groupOf(id);
    if (group !== undefined) return op(this.#store(group));
    const results = await Promise.all(this.#all.map(op));
    return results.some(Boolean);
  }

  async settle(input: SettleInput): Promise<boolean> {
    const settled = await this.#byId(input?.id, (s) => s.settle(input));
    this.#routes.ended(input.id, input.nowMs);
    return settled;
  }

  async settleAndDispatch(input: SettleAndDispatchInput): Promise<SettleAndDispatchResult> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    const dispatchGroup =
      typeof input.dispatch?.pool === 'string' ? this.groupOf(input.dispatch.pool) : DEFAULT_SLOT_GROUP;
    const store = this.#store(dispatchGroup);
    if (store.settleAndDispatch === undefined) throw new Error('a slot group store lacks settleAndDispatch');
    this.#noteCandidates(input.dispatch);
    const id = input.settle?.id;
    const group = this.#routes.groupOf(id);
    // The dispatch group's call settles the request there if it is there (else changes nothing);
    // the request's own group, or every other group for an unknown id, settles it apart.
    const elsewhere =
      group === dispatchGroup
        ? []
        : [...this.#groups]
            .filter(([g]) => g !== dispatchGroup && (group === undefined || g === group))
            .map(([, s]) => s.settle(input.settle));
    const [r, ...others] = await Promise.all([store.settleAndDispatch(input), ...elsewhere]);
    this.#routes.ended(id, input.settle.nowMs);
    return others.some(Boolean) ? { ...r, settled: true } : r;
  }

  requeue(input: RequeueInput): Promise<boolean> {
    return this.#byId(input?.id, (s) => {
      if (s.requeue === undefined) throw new Error('a slot group store lacks requeue');
      return s.requeue(input);
    });
  }

  async cancel(id: string, nowMs: number): Promise<boolean> {
    const cancelled = await this.#byId(id, (s) => s.cancel(id, nowMs));
    // Ended either way: a request that was not queued is settled (routed or tried in every group)
    // or was never there; a route kept live by a cancel that found nothing would never be freed.
    this.#routes.ended(id, nowMs);
    return cancelled;
  }

  async restore(input: RestoreInput): Promise<RestoreResult> {
    const groupOfRequest = new Map<string, string>();
    const requests = new Map<string, RestoredRequest[]>();
    const windows = new Map<string, RestoredWindowEntry[]>();
    const add = <T>(m: Map<string, T[]>, g: string, x: T): void => {
      const list = m.get(g);
      if (list === undefined) m.set(g, [x]);
      else list.push(x);
    };
    for (const r of input?.requests ?? []) {
      const g = typeof r.req?.pool === 'string' ? this.groupOf(r.req.pool) : DEFAULT_SLOT_GROUP;
      groupOfRequest.set(r.req?.id, g);
      add(requests, g, r);
    }
    for (const w of input?.windows ?? []) {
      const g = groupOfRequest.get(w.id) ?? this.#routes.groupOf(w.id);
      // An entry of a request this store never routed: in every group, so no window undercounts.
      if (g === undefined) for (const group of this.#groups.keys()) add(windows, group, w);
      else add(windows, g, w);
    }
    const results = await Promise.all(
      [...this.#groups].map(([g, s]) => {
        if (s.restore === undefined) throw new Error('a slot group store lacks restore');
        return s.restore({ ...input, windows: windows.get(g) ?? [], requests: requests.get(g) ?? [] });
      }),
    );
    for (const [id, g] of groupOfRequest)
      if (this.#routes.groupOf(id) === undefined) this.#routes.admitted(id, g, input.nowMs, 0);
    return results.reduce(
      (a, r) => ({
        restored: a.restored + r.restored,
        skipped: a.skipped + r.skipped,
        forgotten: a.forgotten + r.forgotten,
      }),
      { restored: 0, skipped: 0, forgotten: 0 },
    );
  }

  async adoptEpoch(): Promise<void> {
    await Promise.all(this.#all.map((s) => s.adoptEpoch?.()));
    this.#claimed = true;
  }

  /** Every group's epoch (`|`-joined), once all are claimed: a change in any group changes it. */
  get epoch(): string | undefined {
    if (!this.#claimed) return undefined;
    let out = '';
    for (const s of this.#all) {
      const e = s.epoch;
      if (e === undefined) return undefined;
      out = out === '' ? e : `${out}|${e}`;
    }
    return out;
  }

  async renewOwner(owner: string, nowMs: number, leaseMs: number): Promise<void> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    await Promise.all(this.#all.map((s) => s.renewOwner(owner, nowMs, leaseMs)));
  }

  async reclaim(
    nowMs: number,
  ): Promise<{ readonly dropped: readonly string[]; readonly released: readonly string[] }> {
    const ready = this.#ready();
    if (ready !== undefined) await ready;
    const parts = await Promise.all(this.#all.map((s) => s.reclaim(nowMs)));
    const dropped = parts.flatMap((p) => p.dropped);
    const released = parts.flatMap((p) => p.released);
    for (const id of dropped) this.#routes.ended(id, nowMs);
    for (const id of released) this.#routes.ended(id, nowMs);
    return { dropped, released };
  }

  async predictedOutput(flow: string): Promise<number | undefined> {
    const means = (await Promise.all(this.#all.map((s) => s.predictedOutput(flow)))).filter(
      (m): m is number => m !== undefined,
    );
    if (means.length === 0) return undefined;
    let sum = 0;
    for (const m of means) sum += m;
    return sum / means.length;
  }

  async reserved(replica: string): Promise<Reservation> {
    const group = this.#replicaGroups.get(replica);
    if (group !== undefined) return this.#store(group).reserved(replica);
    const parts = await Promise.all(this.#all.map((s) => s.reserved(replica)));
    return parts.reduce((a, r) => ({ tokens: a.tokens + r.tokens, seqs: a.seqs + r.seqs }), {
      tokens: 0,
      seqs: 0,
    });
  }

  async locate(ids: readonly string[]): Promise<RequestLocations> {
    const byGroup = new Map<string, string[]>();
    for (const id of ids) {
      const g = this.#routes.groupOf(id);
      for (const target of g === undefined ? this.#groups.keys() : [g]) {
        const list = byGroup.get(target) ?? [];
        list.push(id);
        byGroup.set(target, list);
      }
    }
    const parts = await Promise.all([...byGroup].map(([g, list]) => this.#store(g).locate(list)));
    const running = new Map<string, string>();
    // An id of unknown group was asked of every group: unknown only if no group knows it.
    const unknownIn = new Map<string, number>();
    for (const p of parts) {
      for (const [id, replica] of p.running) running.set(id, replica);
      for (const id of p.unknown) unknownIn.set(id, (unknownIn.get(id) ?? 0) + 1);
    }
    const unknown: string[] = [];
    for (const id of ids) {
      const g = this.#routes.groupOf(id);
      const asked = g === undefined ? this.#groups.size : 1;
      if (unknownIn.get(id) === asked) unknown.push(id);
    }
    return { running, unknown };
  }

  snapshot(pool: string, band: number): Promise<QueueSnapshot> {
    return this.#ofPool(pool).snapshot(pool, band);
  }

  async usage(query: UsageQuery): Promise<readonly UsageRow[]> {
    const parts = await Promise.all(
      this.#all.map((s) => {
        if (s.usage === undefined) throw new Error('a slot group store lacks usage');
        return s.usage(query);
      }),
    );
    return parts.length === 1 ? (parts[0] as readonly UsageRow[]) : sumRows(query, parts);
  }

  async close(): Promise<void> {
    await Promise.all(this.#all.map((s) => s.close()));
  }
}

/** Options of {@link redisSlotGroupStore}. */
export interface RedisSlotGroupStoreOptions extends StoreOptions {
  /** One Redis or a Cluster, shared by every group's store (not closed by the store). */
  readonly redis: RedisClient;
  /** Connection of control traffic (see `RedisStoreOptions.control`). @default `redis` */
  readonly control?: RedisClient | undefined;
  /** Key prefix: the default group's keys are `{<prefix>}:…`, group g's `{<prefix>:g}:…`. */
  readonly prefix: string;
  /** Group name → its pools. Pools in none are in the default group. @default {} (one group) */
  readonly slotGroups?: Readonly<Record<string, readonly string[]>>;
}

/**
 * A {@link SlotGroupStore} of {@link RedisStore}s on one client: one per group of `slotGroups`
 * (prefix `<prefix>:<group>`, its own hash slot) and the default group (prefix `<prefix>`).
 */
export function redisSlotGroupStore(options: RedisSlotGroupStoreOptions): SlotGroupStore {
  const { slotGroups = {}, redis, control, prefix, ...storeOptions } = options;
  const poolGroups = new Map<string, string>();
  const issues: { path: string; message: string }[] = [];
  for (const [group, pools] of Object.entries(slotGroups)) {
    if (!SLOT_GROUP_NAME.test(group))
      issues.push({ path: `slotGroups.${group}`, message: 'a group name is 1–64 of [A-Za-z0-9._-]' });
    for (const pool of pools) {
      const other = poolGroups.get(pool);
      if (other !== undefined)
        issues.push({ path: `slotGroups.${group}`, message: `pool "${pool}" is in group "${other}" too` });
      poolGroups.set(pool, group);
    }
  }
  if (issues.length > 0) throw new StoreInputError('options', issues);
  const groups = new Map<string, SchedulingStore>();
  for (const group of [DEFAULT_SLOT_GROUP, ...Object.keys(slotGroups)])
    groups.set(
      group,
      new RedisStore({
        ...storeOptions,
        redis,
        control,
        prefix: slotGroupPrefix(prefix, group === DEFAULT_SLOT_GROUP ? undefined : group),
      }),
    );
  return new SlotGroupStore({ groups, poolGroups });
}
