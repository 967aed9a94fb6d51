import type { Clock, Logger } from '@fairway/core';
import type { Cluster, Redis } from 'ioredis';

/** Where a lease lives: Redis for a fleet of dispatchers, memory for one process. */
export interface LeaseBackend {
  /** Takes the lease for `holder`, or renews it if `holder` has it; true if `holder` holds it now. */
  acquire(holder: string, ttlMs: number): Promise<boolean>;
  /** Gives the lease up if `holder` has it. */
  release(holder: string): Promise<void>;
}

/**
 * Take-or-renew in one step: `SET key holder NX PX ttl` when free, `PEXPIRE` when `holder` has it.
 * Inline rather than a store script file: it touches one key outside the scheduling store's data.
 */
const ACQUIRE_LUA = `
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`;

const RELEASE_LUA = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

/** A lease on one Redis key (under the store's key prefix, so tests' cleanup finds it). */
export class RedisLeaseBackend implements LeaseBackend {
  readonly #redis: Redis | Cluster;
  readonly key: string;

  /** @param redis one Redis or a Cluster (the lease is one key). */
  constructor(redis: Redis | Cluster, key: string) {
    this.#redis = redis;
    this.key = key;
  }

  async acquire(holder: string, ttlMs: number): Promise<boolean> {
    const r = await this.#redis.eval(ACQUIRE_LUA, 1, this.key, holder, String(Math.ceil(ttlMs)));
    return r === 1;
  }

  async release(holder: string): Promise<void> {
    await this.#redis.eval(RELEASE_LUA, 1, this.key, holder);
  }
}

/** A lease in memory, shared by the dispatchers of one process (embedded `fairway up`). */
export class MemoryLeaseBackend implements LeaseBackend {
  readonly #clock: Clock;
  #holder: string | undefined;
  #until = 0;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  async acquire(holder: string, ttlMs: number): Promise<boolean> {
    const now = this.#clock.now();
    if (this.#holder !== undefined && this.#holder !== holder && now < this.#until) return false;
    this.#holder = holder;
    this.#until = now + ttlMs;
    return true;
  }

  async release(holder: string): Promise<void> {
    if (this.#holder === holder) this.#holder = undefined;
  }
}

/** Options of {@link LeaderLease}. */
export interface LeaderLeaseOptions {
  readonly backend: LeaseBackend;
  /** This dispatcher's id. */
  readonly holder: string;
  /** Lease length, ms; renewed every third of it. */
  readonly leaseMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Called when this dispatcher becomes or stops being the leader. */
  readonly onChange?: ((leader: boolean) => void) | undefined;
}

/**
 * Leader election by lease: every dispatcher tries to take or renew the lease every third of its
 * length; the one that holds it is the leader. A leader that cannot renew (store unreachable,
 * lease lost) counts itself a follower once its own lease would have expired, so two leaders
 * never overlap by more than clock skew; when a leader dies, another takes over within one lease.
 */
export class LeaderLease {
  readonly #o: LeaderLeaseOptions;
  #timer: NodeJS.Timeout | undefined;
  /** Clock ms until which this dispatcher holds the lease (0: it does not). */
  #until = 0;
  #was = false;
  #busy = false;
  #stopped = false;

  constructor(options: LeaderLeaseOptions) {
    this.#o = options;
  }

  /** Whether this dispatcher is the leader now. */
  get isLeader(): boolean {
    return this.#o.clock.now() < this.#until;
  }

  /** Tries at once, then every third of the lease. */
  async start(): Promise<void> {
    if (this.#timer !== undefined) return;
    this.#stopped = false;
    await this.#tick();
    this.#timer = setInterval(() => void this.#tick(), Math.max(10, this.#o.leaseMs / 3));
    this.#timer.unref();
  }

  /** Stops renewing and gives the lease up, so another dispatcher takes over at once. */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stopped = true;
    const was = this.isLeader;
    this.#until = 0;
    this.#notify();
    if (was) await this.#o.backend.release(this.#o.holder).catch(() => undefined);
  }

  async #tick(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    const o = this.#o;
    const at = o.clock.now();
    try {
      const held = await o.backend.acquire(o.holder, o.leaseMs);
      if (this.#stopped) {
        if (held) await o.backend.release(o.holder);
        return;
      }
      this.#until = held ? at + o.leaseMs : 0;
    } catch (err) {
      o.logger.warn(
        { err: err instanceof Error ? err.message : String(err) },
        'control: lease renewal failed',
      );
    } finally {
      this.#busy = false;
    }
    this.#notify();
  }

  #notify(): void {
    const now = this.isLeader;
    if (now === this.#was) return;
    this.#was = now;
    this.#o.logger.info({ holder: this.#o.holder, leader: now }, 'control: leadership changed');
    this.#o.onChange?.(now);
  }
}
