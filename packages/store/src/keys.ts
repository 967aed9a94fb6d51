import { Buffer } from 'node:buffer';

/**
 * Every Redis key of the store, defined once. TypeScript builds keys with {@link StoreKeys}; the Lua
 * library gets the same builders generated from {@link KEY_LAYOUT} by {@link luaKeyFunctions}, so
 * the two can never disagree.
 *
 * All keys of one store share the hash tag `{<prefix>}`, so every function runs in one Redis Cluster
 * slot: a pool's keys always share a slot, and so do the owner leases, request records and windows
 * that operations on a pool touch atomically. Pools are spread over a cluster by *slot groups*
 * (`SlotGroupStore`): each group is a store of its own under {@link slotGroupPrefix}, tag
 * `{<prefix>:<group>}`, holding everything its pools' operations touch; the default group keeps
 * `{<prefix>}`, so a deployment without groups keeps its keys.
 *
 * Parameters before the last are length-prefixed (`<bytes>.<value>:`) so no pool, band or flow
 * name can make two keys collide, whatever characters it contains.
 */
export const KEY_LAYOUT = {
  /** STRING: admission sequence number (FIFO order of flows' requests). */
  seq: [],
  /** ZSET owner → lease end (ms). */
  leases: [],
  /** ZSET interaction key ({@link tenantScoped}) → end of its open period (ms). */
  interactions: [],
  /** HASH interaction key → calls admitted in its current open period (FairServe's stage + 1). */
  interactionCalls: [],
  /** HASH: one request's record (see `includes/request.lua`). */
  req: ['id'],
  /** SET: ids of the requests an owner holds (queued or running). */
  owner: ['owner'],
  /** HASH tokens, seqs: what is reserved on a replica. */
  replica: ['replica'],
  /**
   * STRING: running requests on a replica that hold one prompt part (`QueuedRequest.prefixParts`;
   * see `includes/prefixes.lua`). A key per part, not a hash per replica: a hash of a few hundred
   * parts stays a listpack, scanned on every read and write.
   */
  replicaPrefix: ['replica', 'part'],
  /** LIST: a flow's last output lengths, oldest first. */
  history: ['flow'],
  /** STRING: requests queued in a pool, all bands. */
  poolQueued: ['pool'],
  /**
   * HASH of one flow in one (pool, band) queue: `n` → virtual counter (%.17g), `b` / `c` → the
   * flow's member in `backlog` / `contBacklog` (present iff it is in them). One small hash per flow
   * keeps every read and write of a flow's state O(1), whatever the number of flows (a hash of
   * every flow stays a listpack up to 512 fields, scanned linearly on each access).
   */
  flow: ['pool', 'band', 'flow'],
  /** SET of the flows of a (pool, band) queue that have a counter (`snapshot` lists them). */
  flows: ['pool', 'band'],
  /** STRING: the last flow to leave a (pool, band) queue's backlog (VTC lift with an empty backlog). */
  lastFlow: ['pool', 'band'],
  /** ZSET backlogged flows scored by counter; member `sortKey(head arrival) .. flow` (fair order). */
  backlog: ['pool', 'band'],
  /** ZSET flows with queued continuations, as `backlog` (head = oldest continuation). */
  contBacklog: ['pool', 'band'],
  /** ZSET queued request id → score. */
  byScore: ['pool', 'band'],
  /** ZSET a flow's queued requests, member `sortKey(arrival) .. id`, scored by admission sequence. */
  fifo: ['pool', 'band', 'flow'],
  /** ZSET a flow's queued continuations, as `fifo`. */
  contFifo: ['pool', 'band', 'flow'],
  /**
   * ZSET of a sliding window's buckets: each bucket's end (ms, as a member and as its score); `key`
   * is {@link tenantScoped}. See `includes/windows.lua`.
   */
  windowBuckets: ['key'],
  /**
   * HASH of a sliding window: bucket end → sum admitted in it, `t` → total, `h` → first bucket's
   * end, `b` → when the window was created (ms), `r` → `1` while `windowRestored` exists (%.17g).
   */
  windowSums: ['key'],
  /** ZSET request id → bucket end of the window entries `restore` put back that still count. */
  windowRestored: ['key'],
  /**
   * HASH of one UTC day's usage: `<metric><lp(tenant)><lp(key)><model>` → requests (`r`), input
   * (`i`) and output (`o`) tokens, cost (`c`, %.17g); see `includes/usage.lua`.
   */
  usageDay: ['day'],
  /**
   * HASH of a tenant's (`tenant:<id>`) or key's (`key:<id>`) usage in one day or month bucket:
   * `t` tokens and `c` cost settled, `rt` / `rc` reserved by running requests, `at` / `ac` alert sent.
   */
  usageTotal: ['scope', 'bucket'],
} as const satisfies Record<string, readonly string[]>;

/** Name of a key kind in {@link KEY_LAYOUT}. */
export type KeyKind = keyof typeof KEY_LAYOUT;

function part(value: string | number, last: boolean): string {
  const s = String(value);
  return last ? s : `${Buffer.byteLength(s)}.${s}:`;
}

/**
 * Version of the key layout and record formats the functions read and write. A store refuses to
 * run on state another layout wrote (a rolling upgrade across a layout change would misread it):
 * raise it whenever a change makes old state unreadable.
 */
export const STORE_LAYOUT_VERSION = 3;

/**
 * A window or interaction key as the store keeps it: the caller's key under its tenant,
 * length-prefixed (`<bytes>.<tenant>:<key>`, as key parameters are), so whatever a tenant puts in
 * a key, it never names another tenant's. Layout 3 introduced it (layout 2 keyed windows and
 * interactions by the caller's key alone: a tenant naming another's user shared its window).
 */
export function tenantScoped(tenant: string, key: string): string {
  return part(tenant, false) + key;
}

/** Slot group names: what a config id may hold (no `{`, `}` or `:`). */
export const SLOT_GROUP_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/**
 * The prefix of one slot group's store: `<prefix>:<group>`, so its keys carry the hash tag
 * `{<prefix>:<group>}` and land in a slot of their own; the default group (`undefined`) is the
 * prefix itself — today's keys.
 */
export function slotGroupPrefix(prefix: string, group: string | undefined): string {
  return group === undefined ? prefix : `${prefix}:${group}`;
}

/** Name of the epoch key after the store's base (see {@link StoreKeys.epoch}); the Lua library checks it. */
export const EPOCH_KEY = 'epoch';

/** Builds the keys of one store (one prefix). */
export class StoreKeys {
  /** The store's key prefix. */
  readonly prefix: string;
  /** Common beginning of every key, including the hash tag: `{<prefix>}:`. */
  readonly base: string;

  /** @param prefix key prefix of this store; must not contain `{` or `}`. */
  constructor(prefix: string) {
    this.prefix = prefix;
    this.base = `{${prefix}}:`;
  }

  /** The key of `kind` for the given parameters (in {@link KEY_LAYOUT} order). */
  key(kind: KeyKind, ...params: (string | number)[]): string {
    const names = KEY_LAYOUT[kind];
    let out = `${this.base}${kind}:`;
    for (let i = 0; i < names.length; i++) out += part(params[i] ?? '', i === names.length - 1);
    return out;
  }

  /** The key recording which {@link STORE_LAYOUT_VERSION} wrote this store's state. */
  layout(): string {
    return `${this.base}layout`;
  }

  /**
   * The key holding this store's epoch: an id written with the layout marker when the state is
   * first used, and again after it was lost (a Redis restart without persistence). Every Lua call
   * checks it, so a loss is reported (`STATE_LOST`) instead of served from empty state.
   */
  epoch(): string {
    return `${this.base}${EPOCH_KEY}`;
  }

  /** Pattern matching every key of this store (for cleanup in tests and admin tools). */
  pattern(): string {
    return `${this.base}*`;
  }
}

/**
 * Lua source defining `key_<kind>(...)` for every kind (or only those in `only`), and `lp`, the
 * length prefix they use. They read the upvalues `BASE` (the store's {@link StoreKeys.base}, the
 * call's first argument) and `LP` (a table memoising `lp`, fresh for each call), which the caller
 * declares before this source and sets on every call.
 */
export function luaKeyFunctions(only?: ReadonlySet<string>): string {
  const kinds = (Object.entries(KEY_LAYOUT) as [KeyKind, readonly string[]][]).filter(
    ([kind]) => only === undefined || only.has(kind),
  );
  // Memoised: calls build keys of the same pool, band and flow many times. The length prefixes of
  // up to 255 bytes are made once, when the library loads: `#s .. '.'` formats a number (a
  // printf, ≈2,000 instructions) on every call's first use of each name.
  const lines = [
    "local LEN = {} for i = 0, 255 do LEN[i] = i .. '.' end",
    "local function lp(s) local r = LP[s] if r == nil then r = '' .. s r = (LEN[#r] or #r .. '.') .. r .. ':' LP[s] = r end return r end",
  ];
  for (const [kind, names] of kinds) {
    const args = names.join(', ');
    // `..` takes strings and numbers as they are (numbers as tostring writes them); a nil or a
    // boolean is a bug and raises an error rather than building a key.
    const body = names.map((n, i) => (i === names.length - 1 ? n : `lp(${n})`));
    lines.push(
      `local function key_${kind}(${args}) return ${[`BASE .. '${kind}:'`, ...body].join(' .. ')} end`,
    );
  }
  return lines.join('\n');
}
