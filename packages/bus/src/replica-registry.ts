import { type Clock, type Logger, redactUrls, silentLogger } from '@fairway/core';
import type { Bus, Unsubscribe } from './bus.ts';
import { type EngineTiming, EngineTimingWindow } from './engine-timing.ts';
import type { Heartbeat, Registration, ReplicaState } from './messages.ts';

/** Options of {@link ReplicaRegistry}. */
export interface ReplicaRegistryOptions {
  readonly bus: Bus;
  /** Times heartbeats on receipt; senders' clocks are not trusted across machines. */
  readonly clock: Clock;
  readonly logger?: Logger;
  /**
   * A replica whose last heartbeat is older than this is treated as saturated, ms (the llm-d
   * router uses 200 ms; agents heartbeat every 100–250 ms). @default 1000
   */
  readonly staleAfterMs?: number;
  /** A replica silent for this long is dropped from the registry, ms. @default 60000 */
  readonly forgetAfterMs?: number;
  /** Minimum spacing of `discover` requests sent for unknown replicas, ms. @default 500 */
  readonly discoverIntervalMs?: number;
  /** Name sent with `discover` requests, for logs. @default 'registry' */
  readonly name?: string;
  /**
   * Replica ids whose registrations are accepted; any other is refused and logged once. NATS
   * permissions decide who may publish for a replica id; this list decides which ids take traffic.
   * @default every replica id
   */
  readonly allowedReplicas?: readonly string[];
}

/** What a consumer may place on a replica now. A stale, draining or sleeping replica has no room. */
export interface ReplicaCapacity {
  readonly kvCapacityTokens: number;
  /** KV tokens in use at the last heartbeat. */
  readonly kvUsedTokens: number;
  /** KV tokens free; 0 unless the replica accepts work. */
  readonly kvFreeTokens: number;
  readonly maxNumSeqs: number;
  readonly running: number;
  readonly waiting: number;
  /** Sequence slots free (`maxNumSeqs − running − waiting`); 0 unless the replica accepts work. */
  readonly freeSeqs: number;
  /** True when nothing should be placed here: no KV tokens or no sequence slots free. */
  readonly saturated: boolean;
}

/** One replica as the registry sees it. */
export interface ReplicaView {
  readonly id: string;
  readonly registration: Registration;
  /** The last heartbeat, if any arrived since the registration. */
  readonly heartbeat: Heartbeat | undefined;
  /** When the last heartbeat arrived, on the registry's clock (ms); undefined before the first. */
  readonly lastHeartbeatMs: number | undefined;
  /** The state the replica last reported, `undefined` before its first heartbeat. */
  readonly reportedState: ReplicaState | undefined;
  /** No heartbeat yet, or the last one is older than the staleness limit. */
  readonly stale: boolean;
  /**
   * The bus is disconnected: this is the last state known before it went down (kept, not expired,
   * since silence then says nothing about the replica), refreshed only by direct observations.
   */
  readonly lastKnown: boolean;
  /** Fresh and `ready`: the only case in which capacity is reported as free. */
  readonly acceptsWork: boolean;
  readonly capacity: ReplicaCapacity;
}

/** What changed in the registry. */
export interface ReplicaChange {
  readonly type: 'registered' | 'heartbeat' | 'removed';
  readonly replicaId: string;
}

/** Load read from a replica's engine directly (not from its agent), while the bus is down. */
export interface ReplicaObservation {
  readonly running: number;
  readonly waiting: number;
  /** 0–1. */
  readonly kvUsage: number;
}

interface Entry {
  registration: Registration;
  heartbeat: Heartbeat | undefined;
  lastHeartbeatMs: number | undefined;
  lastSeenMs: number;
  /** Requests finished per second over the last whole {@link FINISH_WINDOW_MS}; 0 until one passed. */
  finishedPerS: number;
  /** Where the window being measured started: the agent's clock and the engine's counter then. */
  finishedFrom: { readonly ts: number; readonly total: number } | undefined;
  /** The engine's decode and prefill times, from its histograms in the heartbeats. */
  readonly timing: EngineTimingWindow;
}

/** How long a replica's finish rate is measured over, ms of the agent's clock. */
const FINISH_WINDOW_MS = 2_000;

/**
 * The fleet as consumers (dispatchers, planners) see it: registrations and heartbeats from the
 * bus, folded into each replica's capacity. A replica whose heartbeat is late is reported as
 * saturated, never as free, so a dead or partitioned replica gets no new work; a `gone`
 * heartbeat removes it at once. Heartbeats from an unknown replica or epoch trigger a `discover`
 * so a registry that starts late learns the fleet within one heartbeat.
 *
 * Silence means something only while the bus is up: when the bus itself disconnects, every
 * replica keeps the state it had (`lastKnown`), nothing expires or is forgotten, and consumers may
 * refresh the load with {@link ReplicaRegistry.observe} from the engines directly; once the bus is
 * back, agents get one staleness period to be heard again and are asked to re-register.
 *
 * A bus can also fail without disconnecting: a NATS server that is frozen, or cut off by a network
 * that drops packets, keeps its connections open until pings time out. When no replica of two or
 * more has been heard for a staleness period, the silence is the bus's, not every replica's at
 * once: freshness stands still at the last heartbeat heard, as if the bus had disconnected then
 * (`busConnected` is false), until a heartbeat arrives. Replicas silent past `forgetAfterMs` are
 * still forgotten (a bus that stays silent that long is not connected in any useful sense, and a
 * fleet whose agents all died leaves).
 */
export class ReplicaRegistry {
  readonly #bus: Bus;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #staleAfterMs: number;
  readonly #forgetAfterMs: number;
  readonly #discoverIntervalMs: number;
  readonly #name: string;
  readonly #allowed: ReadonlySet<string> | undefined;
  readonly #refused = new Set<string>();
  readonly #entries = new Map<string, Entry>();
  readonly #listeners = new Set<(change: ReplicaChange) => void>();
  readonly #unsubs: Unsubscribe[] = [];
  #lastDiscoverMs = Number.NEGATIVE_INFINITY;
  /** Registry-clock ms at which the bus disconnected; undefined while it is connected. */
  #busDownSinceMs: number | undefined;
  /** Registry-clock ms of the last heartbeat accepted from any replica. */
  #lastHeardMs: number | undefined;
  /** Whether the silence of every replica (see the class) has been logged. */
  #silenceLogged = false;
  /**
   * The last unfiltered `list()`, reused until an entry changes or a replica's freshness runs out:
   * every request reads the fleet (candidates for its dispatch), and rebuilding and sorting every
   * replica's view per request grew with the fleet (and was ~3 % of what a request allocated).
   */
  #listed:
    | { readonly views: readonly ReplicaView[]; readonly version: number; readonly untilMs: number }
    | undefined;
  /** Bumped on every change to an entry or to the bus's connection. */
  #version = 0;
  /**
   * No replica can be forgotten before this (the least `lastSeenMs` plus `forgetAfterMs` at the
   * last sweep; a new replica can only lower it): `get` and `list` run on every request, and a
   * sweep walked every replica each time.
   */
  #sweepAtMs = Number.NEGATIVE_INFINITY;

  constructor(options: ReplicaRegistryOptions) {
    this.#bus = options.bus;
    this.#clock = options.clock;
    this.#logger = options.logger ?? silentLogger;
    this.#staleAfterMs = options.staleAfterMs ?? 1000;
    this.#forgetAfterMs = options.forgetAfterMs ?? 60_000;
    this.#discoverIntervalMs = options.discoverIntervalMs ?? 500;
    this.#name = options.name ?? 'registry';
    this.#allowed = options.allowedReplicas === undefined ? undefined : new Set(options.allowedReplicas);
  }

  /** Subscribes to registrations and heartbeats and asks running agents to announce themselves. */
  start(): void {
    if (this.#unsubs.length > 0) return;
    this.#unsubs.push(
      this.#bus.subscribe('registration', (r, meta) => this.#onRegistration(r, meta.subject)),
    );
    this.#unsubs.push(this.#bus.subscribe('heartbeat', (h) => this.#onHeartbeat(h)));
    const watch = this.#bus.onConnectionChange?.((up) => this.#onConnection(up));
    if (watch !== undefined) this.#unsubs.push(watch);
    this.#discover(true);
  }

  /**
   * Whether the bus carries heartbeats: false while it is disconnected or every replica is silent,
   * and the registry serves on the last known states.
   */
  get busConnected(): boolean {
    return this.#standstillMs(this.#clock.now()) === undefined;
  }

  /**
   * The registry-clock time freshness is measured at when time stands still: when the bus
   * disconnected, or the last heartbeat heard when every replica has been silent since for a
   * staleness period (two or more replicas; one silent replica is just silent); undefined otherwise.
   */
  #standstillMs(now: number): number | undefined {
    if (this.#busDownSinceMs !== undefined) return this.#busDownSinceMs;
    const heard = this.#lastHeardMs;
    if (heard === undefined || this.#entries.size < 2 || now - heard <= this.#staleAfterMs) return undefined;
    if (!this.#silenceLogged) {
      this.#silenceLogged = true;
      this.#logger.warn(
        { replicas: this.#entries.size, silentMs: now - heard },
        'registry: no replica heard from; the bus is silent: serving on the last known replica states',
      );
    }
    return heard;
  }

  /**
   * Records load read from a replica's engine directly (its `/metrics`), used while the bus is
   * down and agents' heartbeats cannot arrive. Keeps the replica's reported state; returns false
   * for an unknown replica or one that never heartbeated.
   */
  observe(replicaId: string, o: ReplicaObservation): boolean {
    const e = this.#entries.get(replicaId);
    if (e?.heartbeat === undefined) return false;
    const kvUsage = Math.min(1, Math.max(0, o.kvUsage));
    this.#version++;
    e.heartbeat = {
      ...e.heartbeat,
      running: Math.max(0, Math.round(o.running)),
      waiting: Math.max(0, Math.round(o.waiting)),
      kvUsage,
      kvUsedTokens: Math.round(kvUsage * e.registration.kvCapacityTokens),
    };
    return true;
  }

  #onConnection(up: boolean): void {
    const now = this.#clock.now();
    this.#version++;
    if (!up) {
      if (this.#busDownSinceMs !== undefined) return;
      // A bus found dead after a silence (pings timed out) went down when it fell silent.
      this.#busDownSinceMs = this.#standstillMs(now) ?? now;
      this.#logger.warn(
        { replicas: this.#entries.size },
        'registry: bus disconnected; serving on the last known replica states',
      );
      return;
    }
    const since = this.#busDownSinceMs;
    if (since === undefined) return;
    this.#busDownSinceMs = undefined;
    // The outage does not count as silence: each replica is as fresh as it was when the bus went
    // down, measured from now, and must be heard within the usual limits from here on.
    this.#shiftFreshness(now - since, true);
    this.#logger.info({ downMs: now - since }, 'registry: bus reconnected');
    this.#discover(true);
  }

  /** Stops listening; the last known views stay readable. */
  stop(): void {
    for (const u of this.#unsubs.splice(0)) u();
  }

  /** Calls `listener` on every registration, accepted heartbeat and removal. */
  onChange(listener: (change: ReplicaChange) => void): Unsubscribe {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /**
   * Requests per second one replica finished lately, from its engine's own counter in its
   * heartbeats (a few seconds' average); 0 when unknown.
   */
  finishRateOf(replicaId: string): number {
    return this.#entries.get(replicaId)?.finishedPerS ?? 0;
  }

  /**
   * How fast one replica's engine decodes and prefills, as its own histograms measured over the
   * last windows of its heartbeats that saw enough work; undefined until one did.
   */
  timingOf(replicaId: string): EngineTiming | undefined {
    return this.#entries.get(replicaId)?.timing.timing;
  }

  /** One replica's view, or undefined if unknown (never registered, gone, or forgotten). */
  get(replicaId: string): ReplicaView | undefined {
    this.#sweep();
    const e = this.#entries.get(replicaId);
    return e ? this.#view(replicaId, e, this.#standstillMs(this.#clock.now())) : undefined;
  }

  /**
   * Every known replica, optionally of one pool or model, in id order. The unfiltered list is the
   * same array until a replica registers, heartbeats, leaves or goes stale (callers must not
   * change it): a reader can keep what it derived from it for as long as it gets the same array.
   */
  list(filter: { pool?: string; model?: string } = {}): readonly ReplicaView[] {
    const all = this.#list();
    if (filter.pool === undefined && filter.model === undefined) return all;
    return all.filter(
      (v) =>
        (filter.pool === undefined || v.registration.pool === filter.pool) &&
        (filter.model === undefined || v.registration.model === filter.model),
    );
  }

  #list(): readonly ReplicaView[] {
    this.#sweep();
    const now = this.#clock.now();
    const last = this.#listed;
    if (last !== undefined && last.version === this.#version && now < last.untilMs) return last.views;
    const views: ReplicaView[] = [];
    // The views hold until the first fresh replica turns stale or a silent one is forgotten; while
    // time stands still (the bus down or silent) they hold until a change (see #view and #sweep).
    let untilMs = Number.POSITIVE_INFINITY;
    const standstill = this.#standstillMs(now);
    for (const [id, e] of this.#entries) {
      const v = this.#view(id, e, standstill);
      views.push(v);
      if (this.#busDownSinceMs !== undefined) continue;
      if (standstill === undefined && !v.stale && e.lastHeartbeatMs !== undefined)
        untilMs = Math.min(untilMs, e.lastHeartbeatMs + this.#staleAfterMs);
      untilMs = Math.min(untilMs, e.lastSeenMs + this.#forgetAfterMs);
    }
    // ... and until the bus would fall silent (every replica unheard for a staleness period).
    if (standstill === undefined && this.#lastHeardMs !== undefined && this.#entries.size >= 2)
      untilMs = Math.min(untilMs, this.#lastHeardMs + this.#staleAfterMs + 1);
    views.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    this.#listed = { views, version: this.#version, untilMs };
    return views;
  }

  #onRegistration(r: Registration, subject: string): void {
    if (this.#allowed !== undefined && !this.#allowed.has(r.replicaId)) {
      if (!this.#refused.has(r.replicaId)) {
        this.#refused.add(r.replicaId);
        this.#logger.warn(
          { replicaId: r.replicaId, subject, url: redactUrls(r.url) },
          'registry: refused a replica that is not in the allowed list',
        );
      }
      return;
    }
    const now = this.#clock.now();
    this.#version++;
    const e = this.#entries.get(r.replicaId);
    if (e && e.registration.epoch === r.epoch) {
      e.registration = r;
      e.lastSeenMs = now;
    } else {
      // A new epoch is a restarted agent: its heartbeat sequence starts over.
      this.#sweepAtMs = Math.min(this.#sweepAtMs, now + this.#forgetAfterMs);
      this.#entries.set(r.replicaId, {
        registration: r,
        heartbeat: undefined,
        lastHeartbeatMs: undefined,
        lastSeenMs: now,
        finishedPerS: 0,
        finishedFrom: undefined,
        timing: new EngineTimingWindow(),
      });
      this.#logger.info(
        { replicaId: r.replicaId, url: r.url, pool: r.pool, model: r.model, epoch: r.epoch },
        'registry: replica registered',
      );
    }
    this.#emit({ type: 'registered', replicaId: r.replicaId });
  }

  #onHeartbeat(h: Heartbeat): void {
    const e = this.#entries.get(h.replicaId);
    if (!e || e.registration.epoch !== h.epoch) {
      if (h.state !== 'gone') this.#discover(false);
      return;
    }
    if (h.state === 'gone') {
      this.#version++;
      this.#entries.delete(h.replicaId);
      this.#logger.info({ replicaId: h.replicaId }, 'registry: replica gone');
      this.#emit({ type: 'removed', replicaId: h.replicaId });
      return;
    }
    if (e.heartbeat && h.seq <= e.heartbeat.seq) return;
    const now = this.#clock.now();
    this.#version++;
    const silentSince = this.#busDownSinceMs === undefined ? this.#standstillMs(now) : undefined;
    if (silentSince !== undefined) {
      // As after a reconnect, the silence does not count: each replica is as fresh as it was when
      // the bus fell silent, measured from now.
      this.#shiftFreshness(now - silentSince, false);
      this.#logger.info(
        { silentMs: now - silentSince },
        'registry: replicas heard again after the bus was silent',
      );
    }
    this.#silenceLogged = false;
    this.#lastHeardMs = now;
    // The agent's clock times its own counter; an engine restart resets the counter: start over.
    const from = e.finishedFrom;
    if (from === undefined || h.ts < from.ts || h.requestsFinishedTotal < from.total)
      e.finishedFrom = { ts: h.ts, total: h.requestsFinishedTotal };
    else if (h.ts - from.ts >= FINISH_WINDOW_MS) {
      e.finishedPerS = ((h.requestsFinishedTotal - from.total) * 1000) / (h.ts - from.ts);
      e.finishedFrom = { ts: h.ts, total: h.requestsFinishedTotal };
    }
    e.timing.observe(h);
    e.heartbeat = h;
    e.lastHeartbeatMs = now;
    e.lastSeenMs = now;
    this.#emit({ type: 'heartbeat', replicaId: h.replicaId });
  }

  /**
   * Moves every replica's last heartbeat `ms` later (time that stood still), and its last sighting
   * too when `seen` (the bus was down: nothing was forgotten meanwhile either).
   */
  #shiftFreshness(ms: number, seen: boolean): void {
    for (const e of this.#entries.values()) {
      if (e.lastHeartbeatMs !== undefined) e.lastHeartbeatMs += ms;
      if (seen) e.lastSeenMs += ms;
    }
    if (this.#lastHeardMs !== undefined) this.#lastHeardMs += ms;
  }

  /** `standstill`: as {@link ReplicaRegistry.#standstillMs} returned it now. */
  #view(id: string, e: Entry, standstill: number | undefined): ReplicaView {
    // While the bus is down or silent, time stands still for freshness: the state known then still holds.
    const now = standstill ?? this.#clock.now();
    const h = e.heartbeat;
    const stale = e.lastHeartbeatMs === undefined || now - e.lastHeartbeatMs > this.#staleAfterMs;
    const acceptsWork = !stale && h?.state === 'ready';
    const cap = e.registration.kvCapacityTokens;
    const used = h?.kvUsedTokens ?? 0;
    const running = h?.running ?? 0;
    const waiting = h?.waiting ?? 0;
    const kvFreeTokens = acceptsWork ? Math.max(0, cap - used) : 0;
    const freeSeqs = acceptsWork ? Math.max(0, e.registration.maxNumSeqs - running - waiting) : 0;
    return {
      id,
      registration: e.registration,
      heartbeat: h,
      lastHeartbeatMs: e.lastHeartbeatMs,
      reportedState: h?.state,
      stale,
      lastKnown: standstill !== undefined,
      acceptsWork,
      capacity: {
        kvCapacityTokens: cap,
        kvUsedTokens: used,
        kvFreeTokens,
        maxNumSeqs: e.registration.maxNumSeqs,
        running,
        waiting,
        freeSeqs,
        saturated: kvFreeTokens === 0 || freeSeqs === 0,
      },
    };
  }

  #sweep(): void {
    if (this.#busDownSinceMs !== undefined) return;
    const now = this.#clock.now();
    if (now <= this.#sweepAtMs) return;
    let next = Number.POSITIVE_INFINITY;
    for (const [id, e] of this.#entries) {
      if (now - e.lastSeenMs > this.#forgetAfterMs) {
        this.#version++;
        this.#entries.delete(id);
        this.#logger.warn({ replicaId: id }, 'registry: replica forgotten after silence');
        this.#emit({ type: 'removed', replicaId: id });
      } else next = Math.min(next, e.lastSeenMs + this.#forgetAfterMs);
    }
    this.#sweepAtMs = next;
  }

  #discover(force: boolean): void {
    const now = this.#clock.now();
    if (!force && now - this.#lastDiscoverMs < this.#discoverIntervalMs) return;
    this.#lastDiscoverMs = now;
    this.#bus.publish('discover', { requester: this.#name });
  }

  #emit(change: ReplicaChange): void {
    for (const l of this.#listeners) {
      try {
        l(change);
      } catch (err) {
        this.#logger.error(
          { err: err instanceof Error ? err.message : String(err) },
          'registry: listener failed',
        );
      }
    }
  }
}
