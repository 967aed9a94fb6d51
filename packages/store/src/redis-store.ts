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
import { RespCommand } from './resp-command.ts';
import {
  checkClient,
  ensureLibrary,
  functionMissing,
  isCluster,
  type LuaLibrary,
  loadLibrary,
  type RedisClient,
  reloadLibrary,
} from './script-loader.ts';
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
  RequestLocations,
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
  WindowHeld,
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
   * A connected ioredis client — one Redis, or a `Cluster` (the store's keys share one hash slot;
   * the functions library is loaded on every primary) — which the store does not close, or a
   * Redis URL (the store opens its own connection and closes it on `close()`).
   */
  readonly redis: RedisClient | string;
  /**
   * A second connected client to the same Redis for control traffic — lease renewals, reclaims,
   * queue snapshots and placement look-ups — so it never queues behind admissions and
   * settlements on `redis` (the store does not close it). @default `redis`
   */
  readonly control?: RedisClient | undefined;
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

/**
 * Sends one FCALL. On a connected client of one server, the calls made in one turn of the event
 * loop — many requests' admissions and settlements, whose I/O callbacks run in the same turn —
 * leave in one write: the first corks the socket and a `setImmediate` uncorks it after the turn's
 * I/O. Each FCALL is still atomic and replies keep their order, so nothing about exactness changes.
 * Unlike ioredis's auto-pipelining, a batch is written while earlier ones still await their
 * replies, so the client and Redis work at the same time instead of taking turns, and no
 * `Pipeline` is built per turn (V8 promoted each one, with every command, reply and promise it
 * held, to the old generation: ~0.9 MB per scavenge at 500 req/s through a dispatcher,
 * `bench:overhead --trace-gc`). A Cluster client routes each call to its slot's primary.
 */
function send(redis: RedisClient, argv: (string | number)[]): Promise<Reply> {
  if (!isCluster(redis)) {
    const stream = redis.stream;
    if (redis.status === 'ready' && stream !== undefined && stream.writableCorked === 0) {
      stream.cork();
      setImmediate(uncork, stream);
    }
  }
  // The arguments are set after construction: ioredis's constructor copies them with
  // Array.prototype.flat, which costs about 3 µs for an admission's 45 (more than the rest of
  // building the call); they are flat strings already. RespCommand encodes them into one Buffer.
  const command = new RespCommand('fcall', [], { replyEncoding: 'utf8' });
  for (let i = 0; i < argv.length; i++) if (typeof argv[i] !== 'string') argv[i] = String(argv[i]);
  command.args = argv;
  return redis.sendCommand(command) as Promise<Reply>;
}

/**
 * A plain read on the requests connection, written at once like the FCALLs (not deferred by
 * auto-pipelining), so it runs after the calls made before it.
 */
function read(redis: RedisClient, name: string, args: string[]): Promise<unknown> {
  return redis.sendCommand(new RespCommand(name, args, { replyEncoding: 'utf8' })) as Promise<unknown>;
}

function uncork(stream: Redis['stream']): void {
  stream.uncork();
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
    const flat = reply[2] === undefined ? [] : expectArray(script, reply[2]).map(asString);
    const alerts: QuotaAlert[] = [];
    for (let i = 0; i < flat.length; i += 4)
      alerts.push({
        quota: flat[i] as string,
        bucket: flat[i + 1] as string,
        budget: Number(flat[i + 2]),
        used: Number(flat[i + 3]),
      });
    const share = reply[3] === undefined ? '' : asString(reply[3]);
    const held = reply[4] === undefined ? [] : expectArray(script, reply[4]).map(asString);
    const windows: WindowHeld[] = [];
    for (let i = 0; i < held.length; i += 2)
      windows.push({ total: Number(held[i]), resetAtMs: Number(held[i + 1]) });
    const stage = reply[5] === undefined ? '' : asString(reply[5]);
    return {
      ok: true,
      queued: Number(reply[1]),
      ...(alerts.length > 0 ? { alerts } : {}),
      ...(share !== '' ? { quotaShare: Number(share) } : {}),
      windows,
      ...(stage !== '' ? { interactionStage: Number(stage) } : {}),
    };
  }
  return {
    ok: false,
    code: asString(reply[1]) as AdmitRejectCode,
    retryAfterMs: Number(asString(reply[2])),
    key: asString(reply[3]),
    ...(reply[4] === undefined ? {} : { held: Number(asString(reply[4])) }),
  };
}

/** Appends ARGV[2 ..] of settle-1.lua. (Arguments are pushed onto one array, not spread: an admission has 45.) */
function pushSettleArgs(args: string[], input: SettleInput): void {
  args.push(
    input.id,
    str(input.nowMs),
    str(input.finalCost),
    str(input.actualTokens),
    str(input.outputTokens),
    str(HISTORY_LENGTH),
  );
}

/** The flat { tokens, seqs, … } list the fused scripts report, one pair per candidate. */
function reservationsReply(script: string, r: Reply, n: number): Reservation[] {
  const flat = expectArray(script, r).map((x) => Number(asString(x)));
  return Array.from({ length: n }, (_, i) => ({ tokens: flat[2 * i] ?? 0, seqs: flat[2 * i + 1] ?? 0 }));
}

/** Appends ARGV[2 ..] of dispatch-1.lua. */
function pushDispatchArgs(args: string[], input: DispatchInput): void {
  args.push(input.pool, input.ordering, input.fit, str(input.bands.length));
  for (const b of input.bands) args.push(str(b));
  args.push(str(input.replicas.length));
  for (const r of input.replicas) args.push(r.id, str(r.tokenCapacity), str(r.seqCapacity));
  const charges = input.charges ?? [];
  args.push(str(charges.length));
  for (const c of charges) args.push(c.id, str(c.amount), str(c.reserveTokens ?? 0));
  args.push(input.affinityTokens === undefined ? '' : str(input.affinityTokens));
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
 * numbers with 17 significant digits, so results match {@link MemoryStore} exactly. Calls made in
 * one turn of the event loop leave in one write; concurrent charges, and concurrent dispatches with
 * the same arguments, go as one call (see `charge` and `dispatch`). The client loads the library on
 * its first call (on every primary of a Cluster), and again on a node that lost it (see
 * `reloadLibrary`).
 */
export class RedisStore implements SchedulingStore {
  readonly #redis: RedisClient;
  /** The connection of control traffic (see {@link RedisStoreOptions.control}). */
  readonly #control: RedisClient;
  readonly #ownsClient: boolean;
  readonly #keys: StoreKeys;
  readonly #opts: ResolvedStoreOptions;
  readonly #cmd: (name: string, client?: RedisClient) => { readonly script: string; readonly invoke: Invoke };
  #closed = false;
  /**
   * Calls made in this turn of the event loop that go to Redis as one when it ends (see
   * {@link RedisStore.charge} and {@link RedisStore.dispatch}), or as soon as another operation
   * is made, so operations run in the order they were made.
   */
  #pending: ChargeBatch | DispatchBatch | undefined;
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
    checkClient(this.#redis);
    checkClient(this.#control);
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
    redis: RedisClient,
    library: LuaLibrary,
    fn: string,
    numberOfKeys: number,
    args: (string | number)[],
  ): Promise<Reply> {
    const epoch = this.#epoch ?? (await this.#claimed());
    const loading = ensureLibrary(redis, library);
    if (loading !== undefined) await loading;
    // FCALL fn numberOfKeys ...args epoch, built in the caller's array.
    args.unshift(fn, numberOfKeys);
    args.push(epoch);
    let reply: Reply;
    try {
      reply = await send(redis, args);
    } catch (err) {
      if (!functionMissing(err)) throw err;
      await reloadLibrary(redis, library);
      reply = await send(redis, args);
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

  /** The key builder of this store (tests and admin tools use it to find or clean up keys). */
  get keys(): StoreKeys {
    return this.#keys;
  }

  async admit(input: AdmitInput): Promise<AdmitResult> {
    this.#open('admit');
    if (this.#opts.validate) parseInput('admit', admitInputSchema, input);
    const { script, invoke } = this.#cmd('admit');
    const args = this.#admitKeys(input);
    args.push(this.#keys.base);
    this.#pushAdmitArgs(args, input);
    return admitReply(script, await invoke(...args));
  }

  async admitAndDispatch(input: AdmitAndDispatchInput): Promise<AdmitAndDispatchResult> {
    this.#open('admitAndDispatch');
    if (this.#opts.validate) parseInput('admitAndDispatch', admitAndDispatchInputSchema, input);
    const { script, invoke } = this.#cmd('admitAndDispatch');
    const args = this.#admitKeys(input.admit);
    args.push(this.#keys.base);
    this.#pushAdmitArgs(args, input.admit);
    pushDispatchArgs(args, input.dispatch);
    const reply = expectArray(script, await invoke(...args));
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

  /** Appends ARGV[2 ..] of admit-4.lua. */
  #pushAdmitArgs(args: string[], input: AdmitInput): void {
    const { req } = input;
    pushRequestFields(args, req);
    args.push(
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
    );
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
    pushUsageArgs(args, input);
    const a = req.affinity;
    if (a === undefined) args.push('', '0', '0');
    else args.push(a.id, str(a.tokenCapacity), str(a.seqCapacity));
    args.push(prefixPartsArg(req));
  }

  /**
   * Dispatches made in one turn of the event loop with the same arguments and no charges (concurrent
   * picks of this dispatcher from one pool onto the same candidates) go to Redis as one call that
   * picks once for each, in order (`dispatchRepeat`): what the calls one after another would do.
   */
  async dispatch(input: DispatchInput): Promise<DispatchResult> {
    this.#assertOpen('dispatch');
    if (this.#opts.validate) parseInput('dispatch', dispatchInputSchema, input);
    const args = [this.#keys.key('poolQueued', input.pool), this.#keys.base];
    pushDispatchArgs(args, input);
    if (input.charges !== undefined && input.charges.length > 0) {
      this.#send();
      const { script, invoke } = this.#cmd('dispatch');
      return dispatchReply(script, await invoke(...args));
    }
    let batch = this.#pending;
    if (!(batch instanceof DispatchBatch && batch.takes(args))) {
      this.#send();
      batch = new DispatchBatch(args);
      this.#queue(batch);
    }
    return batch.add();
  }

  /**
   * Charges made in one turn of the event loop (by concurrent requests) go to Redis as one call,
   * their items in the order of the calls, once the turn ends — or at once when another operation
   * comes first, so every operation still runs after the charges made before it. Applying
   * the items of several calls in one atomic step is what applying them one call after another
   * does (a charge reads and writes only the counters and records its items name); Redis pays a
   * call's fixed cost (≈30,000 instructions) once for all of them.
   */
  async charge(items: readonly ChargeItem[]): Promise<void> {
    this.#assertOpen('charge');
    if (this.#opts.validate) parseInput('charge', chargeItemsSchema, items);
    if (items.length === 0) return;
    let batch = this.#pending;
    if (!(batch instanceof ChargeBatch)) {
      this.#send();
      batch = new ChargeBatch();
      this.#queue(batch);
    }
    for (const item of items) batch.args.push(item.id, str(item.amount), str(item.reserveTokens ?? 0));
    batch.items += items.length;
    return batch.done;
  }

  /** Makes `batch` the pending one, sent when this turn of the event loop ends (if not before). */
  #queue(batch: ChargeBatch | DispatchBatch): void {
    this.#pending = batch;
    process.nextTick(() => {
      if (this.#pending === batch) this.#send();
    });
  }

  /** Sends the pending calls (see {@link RedisStore.#pending}), if any, as one. */
  #send(): void {
    const batch = this.#pending;
    if (batch === undefined) return;
    this.#pending = undefined;
    if (batch instanceof ChargeBatch) {
      const { script, invoke } = this.#cmd('charge');
      invoke(this.#keys.key('seq'), this.#keys.base, str(batch.items), ...batch.args).then((reply) => {
        if (typeof reply !== 'number' || reply < 0) batch.fail(scriptErrorFromCode(script, Number(reply)));
        else batch.succeed();
      }, batch.fail);
      return;
    }
    const [poolKey = '', base = '', ...rest] = batch.args;
    if (batch.size === 1) {
      const { script, invoke } = this.#cmd('dispatch');
      invoke(...batch.args).then((reply) => batch.settle(script, [reply]), batch.failAll);
      return;
    }
    const { script, invoke } = this.#cmd('dispatchRepeat');
    invoke(poolKey, base, str(batch.size), ...rest).then((reply) => {
      if (Array.isArray(reply)) batch.settle(script, reply);
      else batch.failAll(scriptErrorFromCode(script, Number(reply)));
    }, batch.failAll);
  }

  async settle(input: SettleInput): Promise<boolean> {
    this.#open('settle');
    if (this.#opts.validate) parseInput('settle', settleInputSchema, input);
    const { invoke } = this.#cmd('settle');
    const args = [this.#keys.key('req', input.id), this.#keys.base];
    pushSettleArgs(args, input);
    return (await invoke(...args)) === 1;
  }

  async settleAndDispatch(input: SettleAndDispatchInput): Promise<SettleAndDispatchResult> {
    this.#open('settleAndDispatch');
    if (this.#opts.validate) parseInput('settleAndDispatch', settleAndDispatchInputSchema, input);
    const { script, invoke } = this.#cmd('settleAndDispatch');
    const args = [this.#keys.key('req', input.settle.id), this.#keys.base];
    pushSettleArgs(args, input.settle);
    pushDispatchArgs(args, input.dispatch);
    const reply = expectArray(script, await invoke(...args));
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
      input.undispatch === true ? '1' : '0',
      ...(input.moveTo === undefined
        ? []
        : [input.moveTo.id, str(input.moveTo.tokenCapacity), str(input.moveTo.seqCapacity)]),
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
      for (const e of ws) args.push(e.key, e.id, str(e.atMs), str(e.windowMs), str(e.amount));
      const rs = ws.length > 0 ? [] : requests.slice(r, r + RESTORE_SLICE);
      r += rs.length;
      args.push(str(rs.length));
      for (const { req, replica, grown, windows: rw } of rs) {
        pushRequestFields(args, req);
        args.push(
          req.continuation ? '1' : '0',
          JSON.stringify(recordOf(req)),
          replica ?? '',
          str(grown ?? 0),
          prefixPartsArg(req),
          str(rw.length),
        );
        for (const x of rw)
          args.push(x.key, x.trueUp ? '1' : '0', str(x.atMs), str(x.windowMs), str(x.amount));
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
    const list = (await read(this.#redis, 'lrange', [
      this.#keys.key('history', flow),
      '0',
      '-1',
    ])) as string[];
    return meanOfHistory(list.map(Number));
  }

  async reserved(replica: string): Promise<Reservation> {
    this.#open('reserved');
    if (this.#opts.validate) parseInput('reserved', idSchema, replica);
    const [tokens, seqs] = (await read(this.#redis, 'hmget', [
      this.#keys.key('replica', replica),
      'tokens',
      'seqs',
    ])) as (string | null)[];
    return { tokens: tokens ? Number(tokens) : 0, seqs: seqs ? Number(seqs) : 0 };
  }

  async locate(ids: readonly string[]): Promise<RequestLocations> {
    this.#open('locate');
    const running = new Map<string, string>();
    const unknown: string[] = [];
    if (ids.length === 0) return { running, unknown };
    // Plain reads of the request records (one pipelined round trip): nothing changes, so no
    // script and no epoch check — after a loss the records are gone and nothing is reported.
    const pipeline = this.#control.pipeline();
    for (const id of ids) pipeline.hmget(this.#keys.key('req', id), 'state', 'replica');
    const replies = (await pipeline.exec()) ?? [];
    replies.forEach(([err, fields], i) => {
      const id = ids[i];
      if (err || id === undefined) return; // neither: a failed read tells nothing
      const [state, replica] = fields as (string | null)[];
      if (state === 'r' && replica) running.set(id, replica);
      else if (state === null || state === undefined) unknown.push(id);
    });
    return { running, unknown };
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
    this.#send();
    this.#closed = true;
    this.#redis.off('ready', this.#onReady);
    if (this.#ownsClient) await this.#redis.quit();
  }

  /** Throws `CLOSED` once the store is closed (dispatch and charge, which may join the pending call). */
  #assertOpen(operation: string): void {
    if (this.#closed) throw new StoreError(StoreErrorCode.CLOSED, operation, 'the store is closed');
  }

  /** Checks the store is open, and sends the calls made before this operation ahead of it. */
  #open(operation: string): void {
    this.#assertOpen(operation);
    this.#send();
  }
}

/** Charges of several calls waiting to go to Redis as one (see {@link RedisStore.charge}). */
class ChargeBatch {
  /** Per item: request id, amount, reservation growth (ARGV[3 ..] of charge-1.lua). */
  readonly args: string[] = [];
  items = 0;
  readonly done: Promise<void>;
  succeed!: () => void;
  fail!: (err: unknown) => void;

  constructor() {
    this.done = new Promise<void>((resolve, reject) => {
      this.succeed = resolve;
      this.fail = reject;
    });
  }
}

/** Dispatches with the same arguments waiting to go to Redis as one (see {@link RedisStore.dispatch}). */
class DispatchBatch {
  readonly #callers: { resolve: (r: DispatchResult) => void; reject: (err: unknown) => void }[] = [];

  /** @param args KEYS and ARGV of dispatch-1.lua */
  constructor(readonly args: readonly string[]) {}

  /** Whether a dispatch with these arguments is the same as this batch's. */
  takes(args: readonly string[]): boolean {
    if (args.length !== this.args.length) return false;
    for (let i = 0; i < args.length; i++) if (args[i] !== this.args[i]) return false;
    return true;
  }

  get size(): number {
    return this.#callers.length;
  }

  add(): Promise<DispatchResult> {
    return new Promise((resolve, reject) => this.#callers.push({ resolve, reject }));
  }

  /** Hands each caller its reply, in order. */
  settle(script: string, replies: readonly Reply[]): void {
    for (const [i, c] of this.#callers.entries()) {
      try {
        c.resolve(dispatchReply(script, replies[i] ?? null));
      } catch (err) {
        c.reject(err);
      }
    }
  }

  readonly failAll = (err: unknown): void => {
    for (const c of this.#callers) c.reject(err);
  };
}

/** Appends the usage account and quota arguments after the limits (see includes/usage.lua). */
function pushUsageArgs(args: string[], input: AdmitInput): void {
  const u = input.usage;
  if (u === undefined) {
    args.push('', '', '', '', '', '', '', '0');
    return;
  }
  const quotas = input.quotas ?? [];
  args.push(
    '1',
    u.key ?? '',
    u.model,
    u.day,
    u.month,
    u.priceIn === undefined ? '' : str(u.priceIn),
    u.priceOut === undefined ? '' : str(u.priceOut),
    str(quotas.length),
  );
  for (const q of quotas)
    args.push(
      q.scope,
      q.window,
      q.kind,
      str(q.budget),
      str(q.amount),
      q.alertAt === undefined ? '' : str(q.alertAt),
      str(q.resetAtMs),
      q.minAmount === undefined ? '' : str(q.minAmount),
    );
}

/** Appends a request's scalar fields in the order admit-4.lua and restore-1.lua read them. */
function pushRequestFields(args: string[], req: QueuedRequest): void {
  args.push(
    req.id,
    req.pool,
    str(req.band),
    req.flow,
    str(req.score),
    str(req.arrivalMs),
    str(req.reserveTokens),
    str(req.dispatchCost),
    req.owner,
  );
}

/** A request's prefix parts as the scripts keep them (`px`): 'key tokens key tokens …', '' if none. */
function prefixPartsArg(req: QueuedRequest): string {
  const parts = req.prefixParts;
  if (parts === undefined || parts.length === 0) return '';
  let out = '';
  for (const p of parts) out += `${out === '' ? '' : ' '}${p.key} ${str(p.tokens)}`;
  return out;
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
  const withCont = req.continuation === undefined ? rec : { ...rec, continuation: req.continuation };
  const withParts =
    req.prefixParts === undefined
      ? withCont
      : { ...withCont, prefixParts: req.prefixParts.map((p) => ({ key: p.key, tokens: p.tokens })) };
  return req.affinity === undefined
    ? withParts
    : {
        ...withParts,
        affinity: {
          id: req.affinity.id,
          tokenCapacity: req.affinity.tokenCapacity,
          seqCapacity: req.affinity.seqCapacity,
        },
      };
}
