import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { parseInput, ScriptErrorCode, StoreError, StoreErrorCode, scriptErrorFromCode } from './errors.ts';
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
import { STORE_LAYOUT_VERSION, StoreKeys } from './keys.ts';
import { type LuaLibrary, loadLibrary } from './script-loader.ts';
import type {
  AdmitAndDispatchInput,
  AdmitAndDispatchResult,
  AdmitInput,
  AdmitRejectCode,
  AdmitResult,
  ChargeItem,
  DispatchInput,
  DispatchResult,
  QueuedRequest,
  QueueSnapshot,
  QuotaAlert,
  RequeueInput,
  Reservation,
  RestoreInput,
  RestoreResult,
  SchedulingStore,
  SettleAndDispatchInput,
  SettleAndDispatchResult,
  SettleInput,
  UsageQuery,
  UsageRow,
} from './store.ts';
import {
  HISTORY_LENGTH,
  meanOfHistory,
  type ResolvedStoreOptions,
  resolveStoreOptions,
  type StoreOptions,
} from './store-options.ts';
import { usageRows } from './usage-rows.ts';

/** Options of {@link RedisStore}. */
export interface RedisStoreOptions extends StoreOptions {
  /**
   * A connected ioredis client (the store does not close it) or a Redis URL (the store opens its
   * own connection and closes it on `close()`).
   */
  readonly redis: Redis | string;
  /**
   * A second connected client to the same Redis for control traffic — lease renewals, reclaims,
   * queue snapshots and placement look-ups — so it never queues behind admissions and
   * settlements on `redis` (the store does not close it). @default `redis`
   */
  readonly control?: Redis | undefined;
  /** Prefix of every key; each prefix is an independent store in one hash slot. Must not contain `{}`. */
  readonly prefix: string;
}

type Reply = string | number | null | Reply[];
type Invoke = (...args: (string | number)[]) => Promise<Reply>;

const optionsSchema = z.object({
  prefix: z
    .string()
    .min(1)
    .regex(/^[^{}]+$/, 'must not contain { or }'),
});

let cachedLibrary: LuaLibrary | undefined;

/** Window entries or requests put back per `restore` call (each call is one Lua run). */
const RESTORE_SLICE = 500;

/** Per client, the loading of the current library (by whichever store on it called first). */
const loading = new WeakMap<Redis, Promise<void>>();
/** Clients whose Redis holds the current library, as far as they know. */
const loaded = new WeakSet<Redis>();

function functionMissing(err: unknown): boolean {
  return err instanceof Error && /function not found/i.test(err.message);
}

function str(n: number): string {
  return String(n);
}

function expectArray(script: string, reply: Reply): Reply[] {
  if (Array.isArray(reply)) return reply;
  if (typeof reply === 'number' && reply < 0) throw scriptErrorFromCode(script, reply);
  throw new StoreError(StoreErrorCode.REPLY_INVALID, script, `unexpected reply ${JSON.stringify(reply)}`);
}

function asString(reply: Reply | undefined): string {
  if (typeof reply === 'string') return reply;
  if (typeof reply === 'number') return String(reply);
  throw new StoreError(
    StoreErrorCode.REPLY_INVALID,
    'decode',
    `expected a string, got ${JSON.stringify(reply)}`,
  );
}

function admitReply(script: string, r: Reply): AdmitResult {
  const reply = expectArray(script, r);
  if (reply[0] === 1) {
    if (reply[2] === undefined) return { ok: true, queued: Number(reply[1]) };
    const flat = expectArray(script, reply[2]).map(asString);
    const alerts: QuotaAlert[] = [];
    for (let i = 0; i < flat.length; i += 4)
      alerts.push({
        quota: flat[i] as string,
        bucket: flat[i + 1] as string,
        budget: Number(flat[i + 2]),
        used: Number(flat[i + 3]),
      });
    return { ok: true, queued: Number(reply[1]), alerts };
  }
  return {
    ok: false,
    code: asString(reply[1]) as AdmitRejectCode,
    retryAfterMs: Number(asString(reply[2])),
    key: asString(reply[3]),
  };
}

/** ARGV[2 ..] of settle-1.lua. */
function settleArgs(input: SettleInput): string[] {
  return [
    input.id,
    str(input.nowMs),
    str(input.finalCost),
    str(input.actualTokens),
    str(input.outputTokens),
    str(HISTORY_LENGTH),
  ];
}

/** The flat { tokens, seqs, … } list the fused scripts report, one pair per candidate. */
function reservationsReply(script: string, r: Reply, n: number): Reservation[] {
  const flat = expectArray(script, r).map((x) => Number(asString(x)));
  return Array.from({ length: n }, (_, i) => ({ tokens: flat[2 * i] ?? 0, seqs: flat[2 * i + 1] ?? 0 }));
}

/** ARGV[2 ..] of dispatch-1.lua. */
function dispatchArgs(input: DispatchInput): string[] {
  const args: string[] = [
    input.pool,
    input.ordering,
    input.fit,
    str(input.bands.length),
    ...input.bands.map(str),
    str(input.replicas.length),
  ];
  for (const r of input.replicas) args.push(r.id, str(r.tokenCapacity), str(r.seqCapacity));
  const charges = input.charges ?? [];
  args.push(str(charges.length));
  for (const c of charges) args.push(c.id, str(c.amount), str(c.reserveTokens ?? 0));
  return args;
}

function dispatchReply(script: string, r: Reply): DispatchResult {
  const reply = expectArray(script, r);
  const kind = asString(reply[0]);
  if (kind === 'empty') return { kind: 'empty' };
  if (kind === 'blocked') {
    return { kind: 'blocked', id: asString(reply[1]), reserveTokens: Number(asString(reply[2])) };
  }
  if (kind !== 'dispatched')
    throw new StoreError(
      StoreErrorCode.REPLY_INVALID,
      script,
      `unexpected dispatch reply ${JSON.stringify(r)}`,
    );
  return {
    kind: 'dispatched',
    replica: asString(reply[1]),
    req: JSON.parse(asString(reply[2])) as QueuedRequest,
  };
}

/**
 * The Redis {@link SchedulingStore}: every multi-step operation is one Lua function (`commands/`,
 * loaded as one Redis Functions library by `FUNCTION LOAD` and run by `FCALL`; Redis 7.0 or later),
 * so admission, dispatch and a batch of charges are each one round trip and exact across any
 * number of dispatchers. Functions get times from their arguments and never read a clock, and store
 * numbers with 17 significant digits, so results match {@link MemoryStore} exactly. The client
 * loads the library on its first call; on Redis Cluster every primary needs it, which FCALL's
 * retry after "function not found" gives only for the node the client talks to.
 */
export class RedisStore implements SchedulingStore {
  readonly #redis: Redis;
  /** The connection of control traffic (see {@link RedisStoreOptions.control}). */
  readonly #control: Redis;
  readonly #ownsClient: boolean;
  readonly #keys: StoreKeys;
  readonly #opts: ResolvedStoreOptions;
  readonly #cmd: (name: string, client?: Redis) => { readonly script: string; readonly invoke: Invoke };
  #closed = false;
  /** The layout check and epoch claim of this store's prefix, made before its first function call. */
  #layout: Promise<void> | undefined;
  /** The epoch this store works in (see {@link StoreKeys.epoch}); undefined until claimed. */
  #epoch: string | undefined;
  /** Times the client connected again after a drop (see {@link RedisStore.epoch}). */
  #reconnects = 0;
  #connected = false;
  readonly #onReady = (): void => {
    if (this.#connected) this.#reconnects++;
    this.#connected = true;
  };

  constructor(options: RedisStoreOptions) {
    parseInput('options', optionsSchema, { prefix: options.prefix });
    this.#opts = resolveStoreOptions({
      defaultLeaseMs: options.defaultLeaseMs,
      queueFullRetryMs: options.queueFullRetryMs,
      validate: options.validate,
    });
    this.#ownsClient = typeof options.redis === 'string';
    this.#redis = typeof options.redis === 'string' ? new Redis(options.redis) : options.redis;
    this.#control = options.control ?? this.#redis;
    this.#keys = new StoreKeys(options.prefix);
    this.#connected = this.#redis.status === 'ready';
    this.#redis.on('ready', this.#onReady);
    cachedLibrary ??= loadLibrary();
    const library = cachedLibrary;
    this.#cmd = (name, client = this.#redis) => {
      const c = library.commands.get(name);
      if (c === undefined) throw new StoreError(StoreErrorCode.SCRIPT_ARGS, name, 'no such script');
      const { functionName, numberOfKeys } = c;
      return {
        script: functionName,
        invoke: (...args) => this.#fcall(client, library, functionName, numberOfKeys, args),
      };
    };
  }

  /**
   * FCALL with this store's epoch as the last argument, loading the library first if this client
   * has not yet, and again if Redis lost it (restart without persistence, FUNCTION FLUSH): then
   * the call is retried once. A call in a lost epoch throws `STATE_LOST` (it changed nothing).
   */
  async #fcall(
    redis: Redis,
    library: LuaLibrary,
    fn: string,
    numberOfKeys: number,
    args: (string | number)[],
  ): Promise<Reply> {
    const epoch = this.#epoch ?? (await this.#claimed());
    if (!loaded.has(redis)) await this.#load(redis, library);
    let reply: Reply;
    try {
      reply = (await redis.fcall(fn, numberOfKeys, ...args, epoch)) as Reply;
    } catch (err) {
      if (!functionMissing(err)) throw err;
      loaded.delete(redis);
      loading.delete(redis);
      await this.#load(redis, library);
      reply = (await redis.fcall(fn, numberOfKeys, ...args, epoch)) as Reply;
    }
    if (reply === ScriptErrorCode.STATE_LOST) throw scriptErrorFromCode(fn, reply);
    return reply;
  }

  /** The epoch, claimed (with the layout check) by the first caller of this store. */
  async #claimed(): Promise<string> {
    this.#layout ??= this.#claim();
    await this.#layout;
    return this.#epoch as string;
  }

  /**
   * Claims the prefix for this layout version, or finds it already claimed by the same version,
   * and adopts the store's epoch, writing a new one if there is none — both in one transaction
   * (`SET NX GET`, one round trip). State written by another version is refused rather than
   * misread (drain the old fleet, or run the new one under another prefix).
   */
  async #claim(): Promise<void> {
    const proposal = randomUUID();
    const replies = await this.#redis
      .multi()
      .set(this.#keys.layout(), String(STORE_LAYOUT_VERSION), 'NX', 'GET')
      .set(this.#keys.epoch(), proposal, 'NX', 'GET')
      .exec();
    const [layout, epoch] = (replies ?? []).map(([err, value]) => {
      if (err) throw err;
      return value as string | null;
    });
    if (layout !== null && layout !== undefined && layout !== String(STORE_LAYOUT_VERSION)) {
      this.#layout = undefined;
      throw new StoreError(
        StoreErrorCode.LAYOUT_MISMATCH,
        'connect',
        `the state under ${this.#keys.base} was written by store layout ${layout}, this fairway uses layout ${STORE_LAYOUT_VERSION}; drain the fleet that wrote it or use another prefix`,
      );
    }
    this.#epoch = epoch ?? proposal;
  }

  /**
   * The epoch this store works in, and how many times its client reconnected since: a Redis that
   * restarted from its append-only file keeps the epoch but may have lost the last second of
   * writes (`appendfsync everysec`), so a reconnection too tells the dispatchers to put back what
   * they hold (`restore` skips what the store still has). Undefined until the first call claims it.
   */
  get epoch(): string | undefined {
    return this.#epoch === undefined ? undefined : `${this.#epoch}/${this.#reconnects}`;
  }

  /**
   * Re-establishes the layout marker and the epoch after `STATE_LOST`: the first store to call
   * writes a new epoch, the others adopt it (the claim is `SET NX`).
   */
  async adoptEpoch(): Promise<void> {
    this.#open('adoptEpoch');
    const claim = this.#claim();
    this.#layout = claim;
    await claim;
  }

  #load(redis: Redis, library: LuaLibrary): Promise<void> {
    let p = loading.get(redis);
    if (p === undefined) {
      p = redis.function('LOAD', library.code).then(
        () => {
          loaded.add(redis);
        },
        (err: unknown) => {
          // Another client (a store in another process) loaded the same version first.
          if (err instanceof Error && /already exists/i.test(err.message)) {
            loaded.add(redis);
            return;
          }
          loading.delete(redis);
          throw err;
        },
      );
      loading.set(redis, p);
    }
    return p;
  }

  /** The key builder of this store (tests and admin tools use it to find or clean up keys). */
  get keys(): StoreKeys {
    return this.#keys;
  }

  async admit(input: AdmitInput): Promise<AdmitResult> {
    this.#open('admit');
    if (this.#opts.validate) parseInput('admit', admitInputSchema, input);
    const { script, invoke } = this.#cmd('admit');
    return admitReply(
      script,
      await invoke(...this.#admitKeys(input), this.#keys.base, ...this.#admitArgs(input)),
    );
  }

  async admitAndDispatch(input: AdmitAndDispatchInput): Promise<AdmitAndDispatchResult> {
    this.#open('admitAndDispatch');
    if (this.#opts.validate) parseInput('admitAndDispatch', admitAndDispatchInputSchema, input);
    const { script, invoke } = this.#cmd('admitAndDispatch');
    const reply = expectArray(
      script,
      await invoke(
        ...this.#admitKeys(input.admit),
        this.#keys.base,
        ...this.#admitArgs(input.admit),
        ...dispatchArgs(input.dispatch),
      ),
    );
    const admit = admitReply(script, reply[0] ?? null);
    const reserved = reservationsReply(script, reply[3] ?? null, input.dispatch.replicas.length);
    return {
      admit,
      ...(admit.ok ? { dispatch: dispatchReply(script, reply[1] ?? null) } : {}),
      poolQueued: Number(reply[2]),
      reserved,
    };
  }

  #admitKeys(input: AdmitInput): string[] {
    const k = this.#keys;
    return [k.key('req', input.req.id), k.key('leases'), k.key('seq'), k.key('interactions')];
  }

  /** ARGV[2 ..] of admit-4.lua. */
  #admitArgs(input: AdmitInput): string[] {
    const { req } = input;
    const args: string[] = [
      ...requestFields(req),
      JSON.stringify(recordOf(req)),
      req.continuation ? '1' : '0',
      str(input.nowMs),
      input.lift,
      input.overloaded ? '1' : '0',
      input.interaction?.key ?? '',
      input.interaction === undefined ? '0' : str(input.interaction.ttlMs),
      input.maxQueuedFlow === undefined ? '' : str(input.maxQueuedFlow),
      input.maxQueuedPool === undefined ? '' : str(input.maxQueuedPool),
      str(this.#opts.defaultLeaseMs),
      str(this.#opts.queueFullRetryMs),
      input.tenant,
      str(input.limits.length),
    ];
    for (const l of input.limits) {
      args.push(
        l.key,
        str(l.limit),
        str(l.amount),
        str(l.windowMs),
        l.onlyWhenOverloaded ? '1' : '0',
        l.code,
        (l.trueUp ?? l.code === 'tpm_limited') ? '1' : '0',
        l.shared ? '1' : '0',
      );
    }
    args.push(...usageArgs(input));
    return args;
  }

  async dispatch(input: DispatchInput): Promise<DispatchResult> {
    this.#open('dispatch');
    if (this.#opts.validate) parseInput('dispatch', dispatchInputSchema, input);
    const { script, invoke } = this.#cmd('dispatch');
    return dispatchReply(
      script,
      await invoke(this.#keys.key('poolQueued', input.pool), this.#keys.base, ...dispatchArgs(input)),
    );
  }

  async charge(items: readonly ChargeItem[]): Promise<void> {
    this.#open('charge');
    if (this.#opts.validate) parseInput('charge', chargeItemsSchema, items);
    if (items.length === 0) return;
    const args: (string | number)[] = [this.#keys.key('seq'), this.#keys.base, str(items.length)];
    for (const item of items) args.push(item.id, str(item.amount), str(item.reserveTokens ?? 0));
    const { script, invoke } = this.#cmd('charge');
    const reply = await invoke(...args);
    if (typeof reply !== 'number' || reply < 0) throw scriptErrorFromCode(script, Number(reply));
  }

  async settle(input: SettleInput): Promise<boolean> {
    this.#open('settle');
    if (this.#opts.validate) parseInput('settle', settleInputSchema, input);
    const { invoke } = this.#cmd('settle');
    const reply = await invoke(this.#keys.key('req', input.id), this.#keys.base, ...settleArgs(input));
    return reply === 1;
  }

  async settleAndDispatch(input: SettleAndDispatchInput): Promise<SettleAndDispatchResult> {
    this.#open('settleAndDispatch');
    if (this.#opts.validate) parseInput('settleAndDispatch', settleAndDispatchInputSchema, input);
    const { script, invoke } = this.#cmd('settleAndDispatch');
    const reply = expectArray(
      script,
      await invoke(
        this.#keys.key('req', input.settle.id),
        this.#keys.base,
        ...settleArgs(input.settle),
        ...dispatchArgs(input.dispatch),
      ),
    );
    return {
      settled: reply[0] === 1,
      dispatch: dispatchReply(script, reply[1] ?? null),
      poolQueued: Number(reply[2]),
      reserved: reservationsReply(script, reply[3] ?? null, input.dispatch.replicas.length),
    };
  }

  async requeue(input: RequeueInput): Promise<boolean> {
    this.#open('requeue');
    if (this.#opts.validate) parseInput('requeue', requeueInputSchema, input);
    const { invoke } = this.#cmd('requeue');
    const reply = await invoke(
      this.#keys.key('req', input.id),
      this.#keys.base,
      input.id,
      str(input.nowMs),
      str(input.servedCost),
      str(input.dispatchCost ?? 0),
    );
    return reply === 1;
  }

  async cancel(id: string, nowMs: number): Promise<boolean> {
    this.#open('cancel');
    if (this.#opts.validate) parseInput('cancel', cancelInputSchema, { id, nowMs });
    const { invoke } = this.#cmd('cancel');
    return (await invoke(this.#keys.key('req', id), this.#keys.base, id, str(nowMs))) === 1;
  }

  async renewOwner(owner: string, nowMs: number, leaseMs: number): Promise<void> {
    this.#open('renewOwner');
    if (this.#opts.validate) parseInput('renewOwner', renewInputSchema, { owner, nowMs, leaseMs });
    const epoch = this.#epoch ?? (await this.#claimed());
    // The epoch read rides with the renewal (one round trip): an idle dispatcher learns of a
    // loss on its next renewal, not only on its next request.
    const replies = await this.#control
      .multi()
      .get(this.#keys.epoch())
      .zadd(this.#keys.key('leases'), str(nowMs + leaseMs), owner)
      .exec();
    const [err, found] = replies?.[0] ?? [null, null];
    if (err) throw err;
    if (found !== epoch) throw scriptErrorFromCode('renewOwner', ScriptErrorCode.STATE_LOST);
  }

  async restore(input: RestoreInput): Promise<RestoreResult> {
    this.#open('restore');
    if (this.#opts.validate) parseInput('restore', restoreInputSchema, input);
    const { script, invoke } = this.#cmd('restore');
    const head = [this.#keys.key('seq'), this.#keys.base, str(input.nowMs), input.lift];
    head.push(str(this.#opts.defaultLeaseMs));
    let restored = 0;
    let skipped = 0;
    let forgotten = 0;
    // In slices, so one repair never blocks Redis for long; order is kept across slices. The
    // owner's holdings are reconciled by the first.
    const windows = input.windows;
    const requests = input.requests;
    let owner = input.owner;
    for (let w = 0, r = 0; owner !== undefined || w < windows.length || r < requests.length; ) {
      const args = [...head];
      if (owner === undefined) args.push('', '0');
      else args.push(owner.id, str(owner.holds.length), ...owner.holds);
      owner = undefined;
      const ws = windows.slice(w, w + RESTORE_SLICE);
      w += ws.length;
      args.push(str(ws.length));
      for (const e of ws) args.push(e.key, e.id, str(e.atMs), str(e.amount));
      const rs = ws.length > 0 ? [] : requests.slice(r, r + RESTORE_SLICE);
      r += rs.length;
      args.push(str(rs.length));
      for (const { req, replica, grown, windows: rw } of rs) {
        args.push(
          ...requestFields(req),
          req.continuation ? '1' : '0',
          JSON.stringify(recordOf(req)),
          replica ?? '',
          str(grown ?? 0),
          str(rw.length),
        );
        for (const x of rw) args.push(x.key, x.trueUp ? '1' : '0');
      }
      const reply = expectArray(script, await invoke(...args));
      restored += Number(reply[0]);
      skipped += Number(reply[1]);
      forgotten += Number(reply[2]);
    }
    return { restored, skipped, forgotten };
  }

  async reclaim(
    nowMs: number,
  ): Promise<{ readonly dropped: readonly string[]; readonly released: readonly string[] }> {
    this.#open('reclaim');
    if (this.#opts.validate) parseInput('reclaim', cancelInputSchema.shape.nowMs, nowMs);
    const { script, invoke } = this.#cmd('reclaim', this.#control);
    const reply = expectArray(script, await invoke(this.#keys.key('leases'), this.#keys.base, str(nowMs)));
    return {
      dropped: expectArray(script, reply[0] ?? null).map(asString),
      released: expectArray(script, reply[1] ?? null).map(asString),
    };
  }

  async predictedOutput(flow: string): Promise<number | undefined> {
    this.#open('predictedOutput');
    if (this.#opts.validate) parseInput('predictedOutput', idSchema, flow);
    const list = await this.#redis.lrange(this.#keys.key('history', flow), 0, -1);
    return meanOfHistory(list.map(Number));
  }

  async reserved(replica: string): Promise<Reservation> {
    this.#open('reserved');
    if (this.#opts.validate) parseInput('reserved', idSchema, replica);
    const [tokens, seqs] = await this.#redis.hmget(this.#keys.key('replica', replica), 'tokens', 'seqs');
    return { tokens: tokens ? Number(tokens) : 0, seqs: seqs ? Number(seqs) : 0 };
  }

  async placements(ids: readonly string[]): Promise<ReadonlyMap<string, string>> {
    this.#open('placements');
    const placed = new Map<string, string>();
    if (ids.length === 0) return placed;
    // Plain reads of the request records (one pipelined round trip): nothing changes, so no
    // script and no epoch check — after a loss the records are gone and nothing is reported.
    const pipeline = this.#control.pipeline();
    for (const id of ids) pipeline.hmget(this.#keys.key('req', id), 'state', 'replica');
    const replies = (await pipeline.exec()) ?? [];
    replies.forEach(([err, fields], i) => {
      const [state, replica] = (err ? [] : fields) as (string | null)[];
      const id = ids[i];
      if (state === 'r' && replica && id !== undefined) placed.set(id, replica);
    });
    return placed;
  }

  async snapshot(pool: string, band: number): Promise<QueueSnapshot> {
    this.#open('snapshot');
    if (this.#opts.validate) parseInput('snapshot', snapshotInputSchema, { pool, band });
    const { script, invoke } = this.#cmd('snapshot', this.#control);
    const reply = expectArray(
      script,
      await invoke(this.#keys.key('flows', pool, band), this.#keys.base, pool, str(band)),
    );
    const flat = expectArray(script, reply[0] ?? null).map(asString);
    const counters: Record<string, number> = {};
    for (let i = 0; i < flat.length; i += 2) counters[flat[i] as string] = Number(flat[i + 1]);
    // Redis returns the backlog already in fair order (see includes/queue.lua).
    const bl = expectArray(script, reply[1] ?? null).map(asString);
    const backlogged: string[] = [];
    const queued: Record<string, number> = {};
    for (let i = 0; i < bl.length; i += 2) {
      backlogged.push(bl[i] as string);
      queued[bl[i] as string] = Number(bl[i + 1]);
    }
    return { counters, backlogged, queued };
  }

  async usage(query: UsageQuery): Promise<readonly UsageRow[]> {
    this.#open('usage');
    if (this.#opts.validate) parseInput('usage', usageQuerySchema, query);
    if (query.days.length === 0) return [];
    // Plain reads, one pipelined round trip: nothing changes, so no script and no epoch check.
    const pipeline = this.#redis.pipeline();
    for (const day of query.days) pipeline.hgetall(this.#keys.key('usageDay', day));
    const replies = (await pipeline.exec()) ?? [];
    return usageRows(
      query,
      replies.map(([err, hash], i) => {
        if (err) throw err;
        const fields = new Map<string, number>();
        for (const [f, v] of Object.entries(hash as Record<string, string>)) fields.set(f, Number(v));
        return { day: query.days[i] as string, fields };
      }),
    );
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#redis.off('ready', this.#onReady);
    if (this.#ownsClient) await this.#redis.quit();
  }

  #open(operation: string): void {
    if (this.#closed) throw new StoreError(StoreErrorCode.CLOSED, operation, 'the store is closed');
  }
}

/** The usage account and quota arguments after the limits (see includes/usage.lua). */
function usageArgs(input: AdmitInput): string[] {
  const u = input.usage;
  if (u === undefined) return ['', '', '', '', '', '', '', '0'];
  const quotas = input.quotas ?? [];
  const args = [
    '1',
    u.key ?? '',
    u.model,
    u.day,
    u.month,
    u.priceIn === undefined ? '' : str(u.priceIn),
    u.priceOut === undefined ? '' : str(u.priceOut),
    str(quotas.length),
  ];
  for (const q of quotas)
    args.push(
      q.scope,
      q.window,
      q.kind,
      str(q.budget),
      str(q.amount),
      q.alertAt === undefined ? '' : str(q.alertAt),
      str(q.resetAtMs),
    );
  return args;
}

/** A request's scalar fields in the order admit-4.lua and restore-1.lua read them. */
function requestFields(req: QueuedRequest): string[] {
  return [
    req.id,
    req.pool,
    str(req.band),
    req.flow,
    str(req.score),
    str(req.arrivalMs),
    str(req.reserveTokens),
    str(req.dispatchCost),
    req.owner,
  ];
}

/** The request as stored: exactly the {@link QueuedRequest} fields, whatever else the caller's object holds. */
function recordOf(req: QueuedRequest): QueuedRequest {
  const rec: QueuedRequest = {
    id: req.id,
    pool: req.pool,
    band: req.band,
    flow: req.flow,
    score: req.score,
    arrivalMs: req.arrivalMs,
    reserveTokens: req.reserveTokens,
    dispatchCost: req.dispatchCost,
    owner: req.owner,
    payload: req.payload,
  };
  return req.continuation === undefined ? rec : { ...rec, continuation: req.continuation };
}
