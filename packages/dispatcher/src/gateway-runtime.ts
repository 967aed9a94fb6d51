import type {
  Assignment,
  Bus,
  ControlReport,
  Evict,
  ReplicaRegistry,
  ReplicaUnavailable,
  ReplicaView,
  Unsubscribe,
} from '@fairway/bus';
import {
  type Clock,
  type EngineTimeoutsConfig,
  type FairwayConfig,
  type Logger,
  LogThrottle,
  type RequestDescriptor,
  type Usage,
} from '@fairway/core';
import { EngineTimeoutError } from '@fairway/engine';
import { DEFAULT_PROFILE_BOUNDARIES, type RwtProfile, type SequenceProgress } from '@fairway/policy';
import {
  type AffinityOutcome,
  type Dispatched,
  Gateway,
  type GatewayStats,
  KvBlockIndex,
  MAX_MOVES,
  MOVE_EVERY_MS,
  PrefixIndex,
  type PrefixLearned,
  type SubmitOptions,
  type SubmitResult,
} from '@fairway/scheduler';
import type { QuotaAlert, ReplicaCandidate, SchedulingStore } from '@fairway/store';
import { ControlPlane } from './control-plane.ts';
import type { ResolvedDispatcherOptions } from './dispatcher-options.ts';
import type { EngineProbe } from './engine-probe.ts';
import { isEngineDown } from './error-mapping.ts';
import type { HungEngines } from './hung-engines.ts';
import { type LeaseBackend, MemoryLeaseBackend } from './leader-lease.ts';
import type { RegistryReplicaSource } from './replica-source.ts';
import type { SchedulingSetup } from './scheduling-config.ts';
import type { StopSignal } from './stop-signal.ts';
import { SuspectReplicas } from './suspect-replicas.ts';
import { Ticket } from './ticket.ts';

/** Options of {@link GatewayRuntime}. */
export interface GatewayRuntimeOptions {
  /** This dispatcher's id: owner of what it admits, key of its assignments on the bus. */
  readonly id: string;
  readonly config: FairwayConfig;
  readonly store: SchedulingStore;
  readonly bus: Bus;
  readonly registry: ReplicaRegistry;
  readonly replicas: RegistryReplicaSource;
  /** Asks engines directly: recovery of suspect replicas, load while the bus is down. */
  readonly probe: EngineProbe;
  /**
   * Tells which engines stopped answering, so that requests on them with nothing sent fail over.
   * @default none (such requests wait out their engine timeouts)
   */
  readonly hungEngines?: HungEngines | undefined;
  /** A pool's engine timeouts (its `streamIdleMs` is how long a stalled engine may stand still). */
  readonly timeoutsFor: (pool: string) => EngineTimeoutsConfig;
  readonly scheduling: SchedulingSetup;
  /** The pool serving a model (config first, then the registry); the model itself when unknown. */
  readonly poolFor: (model: string) => string | undefined;
  readonly options: ResolvedDispatcherOptions;
  /** The store's clock (ms): admission times, windows and leases. */
  readonly clock: Clock;
  /** Monotonic clock (ms) for queue and overhead timings. */
  readonly timer: Clock;
  readonly logger: Logger;
  /**
   * Where the control plane's leader lease lives (Redis for a fleet); used with `ordering: edf |
   * qlm` or `policy.scaling`. @default a lease in this process's memory (one dispatcher)
   */
  readonly lease?: LeaseBackend | undefined;
  /**
   * Models whose queued requests wait even while no replica serves them (the control plane may
   * swap a replica to them), instead of failing after `noReplicaWaitMs`. @default none
   */
  readonly waitsForReplica?: ((model: string) => boolean) | undefined;
  /** Sets the `fairway_desired_replicas{pool}` gauge. @default none */
  readonly desiredReplicasGauge?: ((pool: string, desired: number) => void) | undefined;
  /** Sets the `fairway_qlm_estimator_ms` gauges from a profile QLM's planner used. @default none */
  readonly profileGauge?: ((model: string, gpu: string, tp: number, profile: RwtProfile) => void) | undefined;
  /** Counts what prefix affinity did for a request this dispatcher placed. @default none */
  readonly affinityCounter?: ((pool: string, outcome: AffinityOutcome) => void) | undefined;
}

/** A running stream's output so far, read on every charge tick (not per chunk). */
export interface OutputMeter {
  /** Output tokens streamed so far. */
  generated(): number;
}

/** What this dispatcher holds, as a control report carries it. */
export type RuntimeHoldings = Pick<ControlReport, 'queued' | 'running' | 'finished'>;

/** Outcome of {@link GatewayRuntime.submit}. */
export type RuntimeSubmit =
  | {
      readonly ok: true;
      readonly ticket: Ticket;
      /** The answer to the admission (quota share, alerts, rate-limit state). */
      readonly admission: Extract<SubmitResult, { ok: true }> | undefined;
    }
  | Extract<SubmitResult, { ok: false }>;

/**
 * Outcome of {@link GatewayRuntime.retry}: back in the queue; no other replica of its pool takes
 * work (the client gets a 503); or the store could not re-queue it.
 */
export type RetryOutcome = 'requeued' | 'no_replica' | 'failed';

/**
 * How waiting for capacity ended (`no_replica`: no replica of its pool took work for
 * `noReplicaWaitMs`).
 */
export type WaitOutcome = 'dispatched' | 'timeout' | 'aborted' | 'shutdown' | 'no_replica';

/** A request as a control report describes it. */
function reported(r: RequestDescriptor) {
  return {
    requestId: r.id,
    model: r.model,
    sloClass: r.sloClass,
    inputTokens: r.inputTokens,
    maxTokens: r.maxTokens,
    arrivalMs: r.arrivalMs,
  };
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * How long after the bus returns a dispatcher still looks up its waiting requests' placements in
 * the store (ms): assignments published while the bus was down are lost, not delivered late.
 */
const BUS_CATCH_UP_MS = 5_000;

/** What {@link GatewayRuntime} has for its engine checks when every replica it uses is heard from. */
const NONE_UNHEARD: ReadonlyMap<string, string> = new Map();

/**
 * The live side of the gateway scheduler (DESIGN.md request path, steps 2–6): one {@link Gateway}
 * — the same code the simulator runs — driven in real time. It holds a {@link Ticket} per client
 * connection, learns of dispatches made here or by other dispatchers (bus assignments), forwards
 * dispatches of requests other dispatchers own, charges streamed tokens coalesced, renews this
 * dispatcher's lease, reclaims the leases of dead dispatchers and re-offers queued work to freed
 * capacity on replica changes and on a timer.
 */
export class GatewayRuntime {
  readonly id: string;
  readonly gateway: Gateway;
  readonly #o: GatewayRuntimeOptions;
  readonly #tickets = new Map<string, Ticket>();
  readonly #timers: NodeJS.Timeout[] = [];
  readonly #unsubs: Unsubscribe[] = [];
  readonly #accepting = new Map<string, boolean>();
  /** Running streams: how many output tokens each has streamed so far, read on every charge tick. */
  readonly #meters = new Map<string, OutputMeter>();
  /** Set by `stop`: waits for a dispatch end with `shutdown`. */
  #stopping = false;
  /** The `done` of every wait for a dispatch in progress, ended with `shutdown` by `stop`. */
  readonly #waits = new Set<(outcome: WaitOutcome) => void>();
  /** The SLO-class control plane (`ordering: edf | qlm`) and desired-replicas signal, if configured. */
  readonly control: ControlPlane | undefined;
  /** Output tokens an evicted request had, while it waits to resume. */
  readonly #resumeFrom = new Map<string, number>();
  /** Finished since the last `holdings()` (only with a control plane). */
  #finished: RuntimeHoldings['finished'] = [];
  /** The fleet placement sees: replicas whose engine failed a call are held out until they recover. */
  readonly #suspects: SuspectReplicas;
  #probing = false;
  /** Timer ms at which the bus was last seen down (-Infinity: never). */
  #busDownAt = Number.NEGATIVE_INFINITY;
  /** Monotonic ms of the last look-up of long-waiting requests' placements (`#catchUpPlacements`). */
  #auditedAt = Number.NEGATIVE_INFINITY;
  /** Waiting requests the store had no record of at a look-up, with when that was first seen (monotonic ms). */
  #unknownSince = new Map<string, number>();
  /**
   * Per replica, its engine's progress (prompt, generation and finish counters summed) as last
   * heard, and since when (monotonic ms) it has stood still with requests on it; `found` once
   * it was taken for stalled.
   */
  readonly #progress = new Map<string, { epoch: string; total: number; sinceMs: number; found: boolean }>();
  /** Monotonic ms since which each pool with waiting requests has had no replica taking work. */
  readonly #unservedSince = new Map<string, number>();
  #flushing = false;
  #started = false;
  /** Store-clock ms of the last successful lease renewal. */
  #renewedAt = Number.NEGATIVE_INFINITY;
  /** Where prefixes were sent, learned here and from the other dispatchers (prefix affinity). */
  readonly prefixIndex: PrefixIndex;
  /**
   * Which KV blocks each replica's prefix cache holds, from its engine's KV cache events, where a
   * pool places by them (`pools[].kvEvents`).
   */
  readonly kvBlocks: KvBlockIndex | undefined;
  /** `policy.moves.afterS` in ms where queued requests move (undefined: they do not). */
  readonly #movesAfterMs: number | undefined;
  /** Each replica's heartbeat time (registry clock) when requests were last moved off it here. */
  readonly #movedOff = new Map<string, number>();

  constructor(o: GatewayRuntimeOptions) {
    this.#o = o;
    this.id = o.id;
    const opt = o.options;
    const policy = o.config.policy;
    this.control =
      o.scheduling.planner === undefined && policy.scaling.length === 0
        ? undefined
        : new ControlPlane({
            id: o.id,
            control: policy.control,
            scaling: policy.scaling,
            planner: o.scheduling.planner,
            sloClasses: o.config.sloClasses,
            gatewayBandOf: (c) => o.scheduling.sloClasses.find((x) => x.name === c)?.band ?? 0,
            bus: o.bus,
            registry: o.registry,
            replicas: o.replicas,
            store: o.store,
            lease: o.lease ?? new MemoryLeaseBackend(o.clock),
            clock: o.clock,
            logger: o.logger,
            holdings: () => this.holdings(),
            onRoutes: () => {
              this.gateway.pump().catch((err: unknown) => {
                o.logger.warn({ err: errText(err) }, 'dispatcher: pump failed');
              });
            },
            headroomFraction: opt.headroomFraction,
            gauge: o.desiredReplicasGauge,
            profileGauge: o.profileGauge,
          });
    this.#suspects = new SuspectReplicas({
      inner: o.replicas,
      clock: o.timer,
      holdMs: opt.suspectMs,
      epochOf: (id) => o.registry.get(id)?.registration.epoch,
      probe: (id) => o.probe.health(id),
    });
    const affinity = policy.prefixAffinity;
    this.prefixIndex = new PrefixIndex({
      ttlMs: affinity.ttlS * 1000,
      entriesPerTenant: affinity.entriesPerTenant,
      maxTenants: affinity.maxTenants,
    });
    this.kvBlocks = o.config.pools.some((p) => p.kvEvents !== undefined) ? new KvBlockIndex() : undefined;
    const modes = new Map(o.config.pools.map((p) => [p.id, p.prefixAffinity]));
    const moves = policy.moves.enabled ?? policy.placement === 'aladdin';
    this.#movesAfterMs = moves ? policy.moves.afterS * 1000 : undefined;
    this.gateway = new Gateway({
      id: o.id,
      store: o.store,
      clock: o.clock,
      ordering: o.scheduling.ordering,
      placement: o.scheduling.placement,
      replicas: this.#suspects,
      onDispatch: (d) => this.#onDispatch(d),
      sloClasses: o.scheduling.sloClasses,
      poolOf: (req) => o.poolFor(req.model) ?? req.model,
      reserve: opt.reserve,
      repredict: opt.repredict,
      headroom: { tokenFraction: opt.headroomFraction },
      flushMs: opt.flushMs,
      flushTokens: opt.flushTokens,
      admission: o.scheduling.admission,
      overloadKv: o.config.policy.overloadKv,
      leaseMs: opt.leaseMs,
      predictionTtlMs: opt.predictionTtlMs,
      reservationsMaxAgeMs: opt.reservationsMaxAgeMs,
      maxQueueWaitMs: opt.queueTimeoutMs,
      ...(this.control?.router !== undefined ? { router: this.control.router } : {}),
      // Every dispatcher queues a request in its group's band; the leader's routes name them.
      ...(o.scheduling.planner === 'qlm' && policy.control.groupBands
        ? { promptBands: DEFAULT_PROFILE_BOUNDARIES }
        : {}),
      prefixAffinity: {
        // A pool the config does not name (its replicas registered themselves) has the default.
        mode: (pool) => modes.get(pool) ?? 'bounded',
        loadFactor: affinity.loadFactor,
        floor: affinity.floor,
        index: this.prefixIndex,
        ...(this.kvBlocks !== undefined ? { kvBlocks: this.kvBlocks } : {}),
        onLearn: (l) => this.#publishPrefix(l),
      },
      moves,
    });
  }

  /**
   * Tells the other dispatchers where a prefix went (fire-and-forget: a lost message only costs
   * them a cache hit).
   */
  #publishPrefix(l: PrefixLearned): void {
    try {
      this.#o.bus.publish('prefixRoute', {
        dispatcherId: this.id,
        tenant: l.tenant,
        pool: l.pool,
        replicaId: l.replica,
        keys: [...l.keys],
        at: this.#o.clock.now(),
      });
    } catch (err) {
      this.#o.logger.debug({ err: errText(err) }, 'dispatcher: prefix route not sent');
    }
  }

  /**
   * Moves a request out of its engine's queue to `to`, once its lifecycle has aborted the engine
   * call: back at the head of its flow as if never dispatched, placed on `to` when that has room
   * (else where its next dispatch finds room). False if the store cannot re-queue it.
   */
  async move(ticket: Ticket, to: ReplicaCandidate): Promise<boolean> {
    this.#meters.delete(ticket.id);
    return this.#putBack(ticket, 'move', () => this.gateway.requeueUnserved(ticket.id, to));
  }

  /**
   * Aladdin's re-balancing where an engine queue allows it (`policy.moves`): a request placed on a
   * replica but not started there is one in its engine's waiting queue. Each replica whose last
   * heartbeat reports `waiting` requests, newer than the last this dispatcher moved requests off
   * it on, gives up to that many of this dispatcher's requests that are streamed from it, had had
   * no output token for `afterS` since their dispatch when that heartbeat came, and have sent
   * nothing to their client, each to the replica the gateway's `planMoves` names for it.
   */
  #moveQueued(): void {
    const after = this.#movesAfterMs;
    if (after === undefined) return;
    const now = this.#o.timer.now();
    let byReplica: Map<string, Ticket[]> | undefined;
    for (const t of this.#tickets.values()) {
      const replica = t.replica;
      if (replica === undefined || replica === 'unknown' || t.dispatchedAt === undefined) continue;
      if (now - t.dispatchedAt < after || t.answered || t.moves >= MAX_MOVES) continue;
      const meter = this.#meters.get(t.id);
      if (meter === undefined || meter.generated() > 0) continue;
      byReplica ??= new Map();
      const list = byReplica.get(replica);
      if (list === undefined) byReplica.set(replica, [t]);
      else list.push(t);
    }
    if (byReplica === undefined) return;
    const targets = new Set<string>();
    for (const [replica, list] of byReplica) {
      const view = this.#o.registry.get(replica);
      const waiting = view?.heartbeat?.waiting ?? 0;
      const beat = view?.lastHeartbeatMs;
      // A stale heartbeat's queue is long gone (or the replica with it): nothing to act on.
      if (
        waiting === 0 ||
        beat === undefined ||
        view?.stale !== false ||
        this.#movedOff.get(replica) === beat
      )
        continue;
      // Only a queue the engine still reported once the request had waited `afterS` counts: one
      // seen as it arrived says nothing of a first token late for another reason (a stalled loop).
      const beatAgeMs = Math.max(0, this.#o.clock.now() - beat);
      const queued = [];
      for (const t of list)
        if (t.dispatchedAt !== undefined && now - t.dispatchedAt - beatAgeMs >= after)
          queued.push({ id: t.id, dispatchedAtMs: t.dispatchedAt });
      const pool = list[0]?.pool ?? '';
      for (const m of this.gateway.planMoves(pool, replica, waiting, queued, targets))
        if (this.#tickets.get(m.id)?.move(m.to) === true) this.#movedOff.set(replica, beat);
    }
  }

  /** Whether evicted requests resume (an SLO-class control plane routes this gateway). */
  get resumable(): boolean {
    return this.control?.router !== undefined;
  }

  /**
   * What this dispatcher holds for its control report: queued requests (with the output they had
   * when evicted), running ones with their replica and output so far, and what finished since the
   * last call. Runs on the control timer, never on the request path.
   */
  holdings(): RuntimeHoldings {
    const queued: RuntimeHoldings['queued'] = [];
    const running: RuntimeHoldings['running'] = [];
    for (const t of this.#tickets.values()) {
      const r = t.req;
      const base = reported(r);
      if (t.replica === undefined) queued.push({ ...base, generated: this.#resumeFrom.get(r.id) ?? 0 });
      else if (t.replica !== 'unknown')
        running.push({
          ...base,
          replicaId: t.replica,
          generated: this.#generatedOf(r.id),
        });
    }
    const finished = this.#finished;
    this.#finished = [];
    return { queued, running, finished };
  }

  /** Output tokens a running request has so far: streamed, or had when evicted. */
  #generatedOf(id: string): number {
    return this.#meters.get(id)?.generated() ?? this.#resumeFrom.get(id) ?? 0;
  }

  /**
   * The requests this dispatcher runs, by replica, with their progress (Aladdin's sequence
   * reports): prompt, output so far, time since the first output token was seen here (`firstSeen`
   * keeps that time per request, monotonic ms; entries of requests that ended are dropped), and
   * the reservation the store holds for each. Runs on the report timer, never per request.
   */
  runningSequences(firstSeen: Map<string, number>): Map<string, SequenceProgress[]> {
    const now = this.#o.timer.now();
    const byReplica = new Map<string, SequenceProgress[]>();
    const seen = new Set<string>();
    for (const t of this.#tickets.values()) {
      const replica = t.replica;
      const reservedTokens = this.gateway.reservedTokensOf(t.id);
      if (replica === undefined || replica === 'unknown' || reservedTokens === undefined) continue;
      const generated = this.#generatedOf(t.id);
      let first = firstSeen.get(t.id);
      if (first === undefined && generated > 0) {
        first = now;
        firstSeen.set(t.id, now);
      }
      seen.add(t.id);
      const list = byReplica.get(replica) ?? [];
      byReplica.set(replica, list);
      list.push({
        inputTokens: t.req.inputTokens,
        generated,
        decodeMs: first === undefined ? 0 : now - first,
        prefilled: generated > 0,
        reservedTokens,
      });
    }
    for (const id of firstSeen.keys()) if (!seen.has(id)) firstSeen.delete(id);
    return byReplica;
  }

  /**
   * Evicts a running request this dispatcher holds, after its engine call was aborted with
   * `generated` output tokens delivered (QLM section 5): the gateway re-queues it at the head of
   * its flow, charged for what was served, and the ticket waits for its next dispatch, from
   * which it resumes. Returns false (the request still counts as running) if it cannot be re-queued.
   */
  async evict(ticket: Ticket, generated: number): Promise<boolean> {
    this.#meters.delete(ticket.id);
    this.#resumeFrom.set(ticket.id, generated);
    return this.#putBack(ticket, 'eviction', () => this.gateway.evict(ticket.id, generated));
  }

  /**
   * Puts a running ticket back to waiting and re-queues its request with `requeue` (the gateway's
   * eviction or unserved re-queue), then pumps its pool; if the store refuses or fails, the ticket
   * runs on where it was and false is returned.
   */
  async #putBack(ticket: Ticket, what: string, requeue: () => Promise<boolean>): Promise<boolean> {
    const replica = ticket.replica;
    // Renewed before the store call: another dispatcher may pick it as soon as it is queued again.
    ticket.requeued();
    ticket.puttingBack = true;
    let ok = false;
    try {
      ok = await requeue();
    } catch (err) {
      this.#o.logger.warn({ requestId: ticket.id, err: errText(err) }, `dispatcher: ${what} failed`);
    } finally {
      ticket.puttingBack = false;
    }
    if (!ok) {
      if (replica !== undefined) ticket.markDispatched(replica, this.#o.timer.now());
      return false;
    }
    this.gateway.pump(ticket.pool).catch((err: unknown) => {
      this.#o.logger.warn({ err: errText(err) }, 'dispatcher: pump failed');
    });
    return true;
  }

  /** Renews the lease, subscribes to assignments, evictions and replica changes, starts the timers. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    const o = this.#o;
    await this.#renew();
    this.#unsubs.push(
      o.bus.subscribe('assignment', (a) => this.#onAssignment(a), { key: this.id }),
      o.bus.subscribe('evict', (e) => this.#onEvict(e)),
      o.bus.subscribe('replicaUnavailable', (r) => this.#onReplicaUnavailable(r)),
      // Another dispatcher's placements teach this one's prefix index (timed on this clock).
      o.bus.subscribe('prefixRoute', (p) => {
        if (p.dispatcherId !== this.id)
          this.prefixIndex.learn(p.tenant, p.pool, p.keys, p.replicaId, o.clock.now());
      }),
      o.registry.onChange((c) => this.#onReplicaChange(c.type, c.replicaId)),
    );
    const kv = this.kvBlocks;
    if (kv !== undefined) {
      for (const v of o.registry.list()) this.#trackKvBlocks('registered', v.registration.replicaId);
      // A registered replica's events only: an unknown id has no cache bounds to hold them to.
      this.#unsubs.push(
        o.bus.subscribe('kvEvents', (m) => {
          if (o.registry.get(m.replicaId) !== undefined) kv.apply(m);
        }),
      );
    }
    await o.bus.flush();
    // A loop that fails while the store is away fails on every turn: one line per interval and loop.
    const failures = new LogThrottle();
    const every = (ms: number, fn: () => Promise<unknown>, what: string): void => {
      const t = setInterval(() => {
        fn().catch((err: unknown) =>
          failures.warn(o.logger, what, { err: errText(err) }, `dispatcher: ${what} failed`),
        );
      }, ms);
      t.unref();
      this.#timers.push(t);
    };
    every(o.options.renewEveryMs, () => this.#renew(), 'lease renewal');
    every(o.options.reclaimEveryMs, () => this.#reclaim(), 'reclaim');
    every(o.options.flushMs, () => this.#chargeTick(), 'flush');
    every(o.options.pumpEveryMs, () => this.gateway.pump(), 'pump');
    every(o.options.probeEveryMs, () => this.#probeTick(), 'replica probe');
    if (this.#movesAfterMs !== undefined) every(MOVE_EVERY_MS, async () => this.#moveQueued(), 'move');
    await this.control?.start();
  }

  /**
   * Stops taking part: requests still waiting for capacity end with `shutdown`, pending charges
   * are flushed, timers and subscriptions stop. Running requests are left to finish.
   */
  async stop(): Promise<void> {
    if (!this.#started) return;
    this.#started = false;
    this.#stopping = true;
    for (const done of [...this.#waits]) done('shutdown');
    for (const t of this.#timers.splice(0)) clearInterval(t);
    for (const u of this.#unsubs.splice(0)) u();
    await this.control?.stop().catch(() => undefined);
    await this.gateway.flush().catch(() => undefined);
  }

  /** Whether the lease was renewed within the lease time (readiness). */
  get ready(): boolean {
    return this.#started && this.#o.clock.now() - this.#renewedAt < this.#o.options.leaseMs;
  }

  /** The gateway's counters. */
  stats(): GatewayStats {
    return this.gateway.stats();
  }

  /** Requests waiting for capacity per pool, among those this dispatcher holds. */
  queuedByPool(): Map<string, number> {
    const out = new Map<string, number>();
    for (const t of this.#tickets.values())
      if (t.replica === undefined) out.set(t.pool, (out.get(t.pool) ?? 0) + 1);
    return out;
  }

  /** Requests waiting for capacity among those this dispatcher holds, per pool and SLO band. */
  queuedByBand(): Map<string, Map<number, number>> {
    const bandOf = new Map(this.#o.scheduling.sloClasses.map((c) => [c.name, c.band]));
    const out = new Map<string, Map<number, number>>();
    for (const t of this.#tickets.values()) {
      if (t.replica !== undefined) continue;
      const band = bandOf.get(t.req.sloClass) ?? 0;
      const bands = out.get(t.pool) ?? new Map<number, number>();
      out.set(t.pool, bands);
      bands.set(band, (bands.get(band) ?? 0) + 1);
    }
    return out;
  }

  /** Whether this dispatcher holds `replicaId` out of placement after a failed call. */
  isSuspect(replicaId: string): boolean {
    return this.#suspects.isSuspect(replicaId);
  }

  /**
   * Admits and enqueues a request (one store round trip), dispatching it at once if it fits.
   * Resolves as soon as the request is dispatched — the rest of that dispatch round (offering
   * other queued work to the replicas) goes on without holding this request back.
   */
  async submit(req: RequestDescriptor, pool: string, options?: SubmitOptions): Promise<RuntimeSubmit> {
    const ticket = new Ticket(req, pool);
    this.#tickets.set(req.id, ticket);
    // Resolves with the admission's answer, or undefined as soon as the request is dispatched
    // (the rest of that dispatch round goes on without holding it back).
    let answered = false;
    let res: SubmitResult | undefined;
    // The store's answer, also when the dispatch was heard of first (another dispatcher placed it).
    let stored: Promise<SubmitResult> | undefined;
    try {
      res = await new Promise<SubmitResult | undefined>((resolve, reject) => {
        // Only a dispatch ends this wait: an unservable pool is seen by waitForDispatch.
        ticket.waiter = (wake) => {
          if (wake !== 'dispatched') return;
          answered = true;
          resolve(undefined);
        };
        stored = this.gateway.submit(req, options);
        stored.then(
          (r) => {
            if (r.ok && r.alerts !== undefined) this.#quotaAlerts(req, r.alerts);
            answered = true;
            resolve(r);
          },
          (err: unknown) => {
            // Dispatched, hence admitted: a failure later in the round concerns other requests.
            if (answered) this.#o.logger.warn({ err: errText(err) }, 'dispatcher: dispatch round failed');
            else reject(err);
          },
        );
      });
    } catch (err) {
      this.#tickets.delete(req.id);
      throw err;
    } finally {
      ticket.waiter = undefined;
    }
    if (res === undefined) {
      ticket.submittedAt = this.#o.timer.now();
      let admission = this.gateway.admissionOf(req.id);
      // An engine cap that depends on the admission's quota share waits for the store's answer.
      if (admission === undefined && req.outputCap !== undefined && stored !== undefined) {
        const r = await stored.catch(() => undefined);
        if (r?.ok === true) admission = r;
      }
      return { ok: true, ticket, admission };
    }
    if (!res.ok) {
      this.#tickets.delete(req.id);
      return res;
    }
    ticket.submittedAt = this.#o.timer.now();
    return { ok: true, ticket, admission: res };
  }

  /**
   * Publishes (`quotaAlert`) and logs each budget this request's admission brought to its alert
   * fraction; the store reports each budget once per window, whichever dispatcher admits.
   */
  #quotaAlerts(req: RequestDescriptor, alerts: readonly QuotaAlert[]): void {
    for (const a of alerts) {
      const [scope, window, kind] = a.quota.split(':') as [
        'tenant' | 'key',
        'day' | 'month',
        'tokens' | 'spend',
      ];
      const msg = {
        tenant: req.tenant,
        ...(scope === 'key' && req.keyId !== undefined ? { key: req.keyId } : {}),
        scope,
        window,
        kind,
        bucket: a.bucket,
        budget: a.budget,
        used: a.used,
        at: this.#o.clock.now(),
        dispatcherId: this.id,
      };
      this.#o.logger.warn(msg, 'quota: budget reached its alert threshold');
      try {
        this.#o.bus.publish('quotaAlert', msg);
      } catch (err) {
        this.#o.logger.warn({ err: errText(err) }, 'quota: alert not published');
      }
    }
  }

  /**
   * Waits until the request is dispatched, `timeoutMs` passes, `signal` aborts (client gone) or the
   * dispatcher shuts down. On anything but a dispatch the request is taken out of the queue — or,
   * if another dispatcher picked it meanwhile, served anyway after a timeout, or released.
   */
  async waitForDispatch(ticket: Ticket, timeoutMs: number, signal: StopSignal): Promise<WaitOutcome> {
    if (ticket.replica !== undefined) return 'dispatched';
    // One listener on the client's own signal; the dispatcher's shutdown and the ticket's dispatch
    // reach `done` through plain references (a listener per waiting request on one shared signal
    // was a MaxListenersExceededWarning beyond 10 queued requests).
    const outcome = await new Promise<WaitOutcome>((resolve) => {
      let settled = false;
      const done = (o: WaitOutcome): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.#waits.delete(done);
        if (ticket.waiter === done) ticket.waiter = undefined;
        resolve(o);
      };
      const onAbort = (): void => done('aborted');
      const timer = setTimeout(done, timeoutMs, 'timeout');
      signal.addEventListener('abort', onAbort);
      this.#waits.add(done);
      ticket.waiter = done;
      if (ticket.unservable) done('no_replica');
      if (signal.aborted) onAbort();
      if (this.#stopping) done('shutdown');
      if (ticket.replica !== undefined) done('dispatched');
    });
    return outcome === 'dispatched' ? outcome : this.#giveUp(ticket, outcome);
  }

  /**
   * Charges a running stream's output as it goes (coalesced, DESIGN.md request path step 5):
   * `meter` is read once per charge tick — not per chunk — and the tokens streamed since the
   * last tick are charged in one store call with every other stream's.
   */
  meter(ticket: Ticket, meter: OutputMeter): void {
    this.#meters.set(ticket.id, meter);
  }

  /**
   * Settles a finished request with the engine's usage and offers the freed room to the queue.
   * Only a request's lifecycle calls it (request-lifecycle.ts), once, as it settles.
   */
  async finish(ticket: Ticket, usage: Usage): Promise<void> {
    this.#tickets.delete(ticket.id);
    this.#meters.delete(ticket.id);
    if (this.control !== undefined) this.#forget(ticket, usage.outputTokens);
    try {
      await this.gateway.complete(ticket.id, usage);
    } catch (err) {
      this.#o.logger.warn({ requestId: ticket.id, err: errText(err) }, 'dispatcher: settle failed');
    }
  }

  /**
   * A replica's engine failed a call in a way that is the replica's fault (refused, reset, 5xx —
   * see `isReplicaFailure`): it is held out of placement here at once, and every other dispatcher
   * is told over the bus, until it shows it is back (see {@link SuspectReplicas}).
   */
  replicaFailed(replicaId: string, err: unknown): void {
    const o = this.#o;
    const epoch = o.registry.get(replicaId)?.registration.epoch;
    // An engine that answered (5xx) is probed again at once: one bad request must not take a
    // replica — or, retried, every replica — out of the fleet for suspectMs.
    const holdMs = isEngineDown(err) ? o.options.suspectMs : 0;
    const known = this.#suspects.isSuspect(replicaId);
    if (epoch === undefined || !this.#suspects.mark(replicaId, epoch, holdMs)) return;
    // Already held out: the hold is renewed here and, when this failure extends it, fleet-wide too.
    // A hung engine still answers its health check: a dispatcher whose hold ran out from the first
    // report would place requests on it again, among them those retried away from it here.
    if (known && holdMs === 0) return;
    const reason = errText(err);
    if (!known)
      o.logger.warn({ replicaId, reason }, 'dispatcher: replica failed; held out of placement fleet-wide');
    try {
      o.bus.publish('replicaUnavailable', {
        replicaId,
        epoch,
        reportedBy: this.id,
        reason: reason.slice(0, 500),
        holdMs,
        at: o.clock.now(),
      });
    } catch (err) {
      o.logger.warn({ replicaId, err: errText(err) }, 'dispatcher: replica failure not published');
    }
  }

  /** Whether any replica of `pool` takes work now (registered, fresh, ready, not suspect). */
  serving(pool: string): boolean {
    return this.#suspects.replicas(pool).some((r) => !r.stale);
  }

  /**
   * The engine call of a running request failed before anything reached the client (its replica
   * already held out by {@link GatewayRuntime.replicaFailed}): the request goes back to the head
   * of its flow's queue (its reservation released, its charge undone) to be dispatched again on
   * another replica — `waitForDispatch` then waits for that. Not re-queued when no other replica
   * of its pool takes work now (`no_replica`) or the store refuses (`failed`); the caller then
   * abandons it.
   */
  async retry(ticket: Ticket): Promise<RetryOutcome> {
    const failed = ticket.replica;
    // Nowhere else to go: waiting for the failed replica to come back would only delay the error.
    if (!this.#suspects.replicas(ticket.pool).some((r) => !r.stale && r.id !== failed)) return 'no_replica';
    this.#meters.delete(ticket.id);
    return (await this.#putBack(ticket, 're-queue', () => this.gateway.requeueUnserved(ticket.id)))
      ? 'requeued'
      : 'failed';
  }

  /**
   * Settles a running request that ended early (error, disconnect, eviction) with what it used.
   * Only a request's lifecycle calls it (request-lifecycle.ts), once, as it is abandoned.
   */
  async abandon(ticket: Ticket, usage: Usage): Promise<void> {
    this.#tickets.delete(ticket.id);
    this.#meters.delete(ticket.id);
    if (this.control !== undefined) this.#forget(ticket, undefined);
    try {
      await this.gateway.cancel(ticket.id, usage);
    } catch (err) {
      this.#o.logger.warn({ requestId: ticket.id, err: errText(err) }, 'dispatcher: settle failed');
    }
  }

  async #giveUp(ticket: Ticket, reason: Exclude<WaitOutcome, 'dispatched'>): Promise<WaitOutcome> {
    const g = this.gateway;
    const zero = { inputTokens: ticket.req.inputTokens, outputTokens: 0 };
    // A timed-out request that got a replica after all is served rather than thrown away.
    const late = reason === 'timeout' || reason === 'no_replica';
    if (ticket.replica !== undefined && late) return 'dispatched';
    // Removes it from the queue, or settles it if it was started here meanwhile.
    if (await g.cancel(ticket.id, zero)) {
      this.#tickets.delete(ticket.id);
      return reason;
    }
    // Another dispatcher picked it: its assignment is on the way. Wait for it a little.
    const grace = new Promise<undefined>((r) =>
      setTimeout(() => r(undefined), this.#o.options.assignGraceMs).unref(),
    );
    const replica = await Promise.race([ticket.dispatched, grace]);
    if (replica !== undefined && late) return 'dispatched';
    if (replica === undefined) {
      // The assignment was lost (the picker died after reserving, or the message was dropped):
      // take the request as started so settling releases the reservation the picker made.
      this.#o.logger.warn({ requestId: ticket.id }, 'dispatcher: assignment lost; releasing the reservation');
      try {
        g.started({ id: ticket.id, replica: 'unknown' });
      } catch {
        // Started meanwhile by a late assignment; cancel below settles it either way.
      }
    }
    this.#tickets.delete(ticket.id);
    await g.cancel(ticket.id, zero);
    return reason;
  }

  #onDispatch(d: Dispatched): void {
    const now = this.#o.timer.now();
    if (d.affinity !== undefined) this.#o.affinityCounter?.(d.queued.pool, d.affinity);
    if (d.owner === this.id) {
      const ticket = this.#tickets.get(d.id);
      if (ticket) ticket.markDispatched(d.replica, now, d.affinity);
      else void this.gateway.cancel(d.id); // no one waits for it any more: release at once
      return;
    }
    const assignment = {
      requestId: d.id,
      dispatcherId: d.owner,
      pickedBy: this.id,
      replicaId: d.replica,
      reserveTokens: d.reserveTokens,
      ...(d.affinity !== undefined ? { affinity: d.affinity } : {}),
      at: this.#o.clock.now(),
    };
    const bus = this.#o.bus;
    const graceMs = this.#o.options.assignGraceMs;
    try {
      if (bus.deliver === undefined) bus.publish('assignment', assignment);
      else {
        // A live owner may have no subscription for a moment (it reconnects to a restarted NATS
        // after this dispatcher did): only an owner missing for the whole grace is taken as gone.
        // Releasing the pick of a live one leaves its client waiting for a request nobody holds.
        void bus.deliver('assignment', assignment, { timeoutMs: graceMs, awaitSubscriberMs: graceMs }).then(
          (delivery) => {
            if (delivery === 'no_responders') this.#ownerGone(d);
          },
          (err: unknown) =>
            this.#o.logger.error({ requestId: d.id, err: errText(err) }, 'dispatcher: assignment not sent'),
        );
      }
    } catch (err) {
      this.#o.logger.error({ requestId: d.id, err: errText(err) }, 'dispatcher: assignment not sent');
    }
  }

  /**
   * Nobody subscribed to the assignments of the request's owner for `assignGraceMs`: it died
   * (SIGKILL, crash) with the client connection, and its lease has not ended yet. Its request is
   * released now, so a dead dispatcher's queue does not fill the fleet with reservations nobody
   * will use.
   */
  #ownerGone(d: Dispatched): void {
    this.#o.logger.warn(
      { requestId: d.id, owner: d.owner, replicaId: d.replica },
      'dispatcher: the owner of a picked request is gone; releasing it',
    );
    this.gateway
      .releaseOrphanedPick(d.id)
      .catch((err: unknown) => {
        // Left for the next heartbeat to retry.
        this.#o.logger.warn({ requestId: d.id, err: errText(err) }, 'dispatcher: release failed');
      })
      .then(() => this.gateway.pump(d.queued.pool))
      .catch((err: unknown) => {
        this.#o.logger.warn({ err: errText(err) }, 'dispatcher: pump failed');
      });
  }

  #onAssignment(a: Assignment): void {
    this.#adopt(a.requestId, a.replicaId, a.affinity);
  }

  /**
   * Another dispatcher (or this one, in a reply still on its way) placed a request this one holds:
   * it runs on `replicaId`. Told by the picker's assignment message, or read from the store when
   * that message could not come (`#catchUpPlacements`).
   */
  #adopt(requestId: string, replicaId: string, affinity?: AffinityOutcome): void {
    const ticket = this.#tickets.get(requestId);
    try {
      this.gateway.started({ id: requestId, replica: replicaId });
    } catch {
      this.#o.logger.debug({ requestId }, 'dispatcher: assignment for a request not queued here');
      // One this gateway does not hold at all (its admission's reply was lost and its client told
      // it failed, though the store admitted it) has nobody waiting: its placement is released.
      // A request it holds (running already) is left as it is.
      this.gateway.releaseOrphanedPick(requestId).catch((err: unknown) => {
        // Left for the next heartbeat to retry.
        this.#o.logger.warn({ requestId, err: errText(err) }, 'dispatcher: release failed');
      });
      return;
    }
    if (ticket) ticket.markDispatched(replicaId, this.#o.timer.now(), affinity);
    else void this.gateway.cancel(requestId);
  }

  /** A finished or abandoned request leaves the control's view (finished ones with their output). */
  #forget(ticket: Ticket, outputTokens: number | undefined): void {
    this.#resumeFrom.delete(ticket.id);
    if (outputTokens === undefined) return;
    this.#finished.push({ ...reported(ticket.req), generated: outputTokens });
  }

  #onEvict(e: Evict): void {
    for (const id of e.requestIds) {
      const t = this.#tickets.get(id);
      // Only the run the eviction is about: the request may have moved on since it was planned.
      if (t?.replica === undefined || t.replica !== e.replicaId) continue;
      // Its engine call is aborted; under a control plane it resumes elsewhere (request-lifecycle.ts).
      t.evict(e.reason ?? 'evicted');
    }
  }

  /** Bounds a replica's known KV blocks by its cache when it registers; forgets them when it leaves. */
  #trackKvBlocks(type: 'registered' | 'heartbeat' | 'removed', replicaId: string): void {
    const kv = this.kvBlocks;
    if (kv === undefined || type === 'heartbeat') return;
    const reg = this.#o.registry.get(replicaId)?.registration;
    if (type === 'removed' || reg === undefined) kv.forget(replicaId);
    else kv.setReplica(replicaId, reg.blockSize, reg.kvCapacityTokens / reg.blockSize);
  }

  #onReplicaChange(type: 'registered' | 'heartbeat' | 'removed', replicaId: string): void {
    this.#trackKvBlocks(type, replicaId);
    const view = this.#o.registry.get(replicaId);
    const accepting = view?.acceptsWork ?? false;
    const was = this.#accepting.get(replicaId);
    if (type === 'removed') this.#accepting.delete(replicaId);
    else this.#accepting.set(replicaId, accepting);
    // Capacity changes only when a replica appears, leaves, or starts/stops taking work.
    if (type === 'heartbeat' && was === accepting) return;
    const pool = view === undefined ? undefined : this.#o.replicas.poolOf(view);
    this.gateway.pump(pool).catch((err: unknown) => {
      this.#o.logger.warn({ err: errText(err) }, 'dispatcher: pump failed');
    });
  }

  #onReplicaUnavailable(r: ReplicaUnavailable): void {
    if (r.reportedBy === this.id) return;
    // A report on a replica held out already renews the hold (a later failure of it).
    const known = this.#suspects.isSuspect(r.replicaId);
    if (!this.#suspects.mark(r.replicaId, r.epoch, r.holdMs) || known) return;
    this.#o.logger.warn(
      { replicaId: r.replicaId, reportedBy: r.reportedBy, reason: r.reason },
      'dispatcher: replica reported failing by another dispatcher; held out of placement',
    );
  }

  /**
   * Probes suspect replicas whose hold has passed and takes back those that answer; while the bus
   * is down, reads every replica's load from its engine directly (a replica whose engine does not
   * answer is held out like one that failed a call).
   */
  async #probeTick(): Promise<void> {
    if (this.#probing) return;
    this.#probing = true;
    const o = this.#o;
    try {
      void o.hungEngines?.check(this.#unheardHolding(), (id, err) => {
        if (this.#unheard(id) !== undefined) this.#engineHung(id, err);
      });
      this.#findStalled();
      const cleared = await this.#suspects.probe();
      for (const id of cleared) o.logger.info({ replicaId: id }, 'dispatcher: replica answers again');
      if (!o.registry.busConnected) {
        await Promise.all(
          o.registry.list().map(async (v) => {
            if (this.#suspects.isSuspect(v.id)) return;
            const m = await o.probe.metrics(v.id);
            if (m === undefined) this.replicaFailed(v.id, new Error('no answer to a direct metrics probe'));
            else
              o.registry.observe(v.id, { running: m.running, waiting: m.waiting, kvUsage: m.kvCacheUsage });
          }),
        );
      }
      if (!o.registry.busConnected) this.#busDownAt = o.timer.now();
      const now = o.timer.now();
      if (now - this.#busDownAt <= BUS_CATCH_UP_MS) await this.#catchUpPlacements(0);
      else if (now - this.#auditedAt >= o.options.assignGraceMs) {
        this.#auditedAt = now;
        await this.#catchUpPlacements(o.options.assignGraceMs);
      }
      if (cleared.length > 0) await this.gateway.pump();
      this.#failUnservable();
    } finally {
      this.#probing = false;
    }
  }

  /**
   * The replicas this dispatcher has not heard from — heartbeats stopped (or frozen fresh while the
   * bus is away, which counts as heard), or held out after a failure — that run its requests with
   * nothing sent to their clients yet: replica id → engine URL.
   */
  #unheardHolding(): ReadonlyMap<string, string> {
    let unheard: Map<string, string> | undefined;
    for (const t of this.#tickets.values()) {
      const replica = t.replica;
      if (replica === undefined || replica === 'unknown' || t.answered || unheard?.has(replica)) continue;
      const v = this.#unheard(replica);
      if (v === undefined) continue;
      unheard ??= new Map();
      unheard.set(replica, v.registration.url);
    }
    return unheard ?? NONE_UNHEARD;
  }

  /** The view of a registered replica that is silent or held out; undefined for any other. */
  #unheard(replicaId: string): ReplicaView | undefined {
    const v = this.#o.registry.get(replicaId);
    return v !== undefined && (v.stale || this.#suspects.isSuspect(replicaId)) ? v : undefined;
  }

  /**
   * A replica's engine stopped answering: it is held out fleet-wide, and each of this dispatcher's
   * requests on it with nothing sent to its client fails over to another replica, while another of
   * its pool takes work (else it stays, and the next finding tries again: failing it over then
   * would only answer it with the error). A stream already answering is left to its idle limit
   * (`engineTimeouts.streamIdleMs`), so a pause shorter than that costs it nothing.
   */
  #engineHung(replicaId: string, err: EngineTimeoutError): void {
    this.replicaFailed(replicaId, err);
    const { moved, stayed } = this.#failOver(replicaId, err);
    this.#o.logger.warn(
      { replicaId, engine: err.url, moved, stayed },
      'dispatcher: engine stopped answering; its requests with nothing sent go to other replicas',
    );
  }

  /**
   * Fails over each of this dispatcher's requests on `replicaId` with nothing sent to its client
   * (see `#engineHung`); counts those moved and those left for want of another
   * replica.
   */
  #failOver(replicaId: string, err: EngineTimeoutError): { moved: number; stayed: number } {
    const elsewhere = new Map<string, boolean>();
    let moved = 0;
    let stayed = 0;
    for (const t of this.#tickets.values()) {
      if (t.replica !== replicaId) continue;
      let other = elsewhere.get(t.pool);
      if (other === undefined) {
        other = this.#suspects.replicas(t.pool).some((r) => !r.stale && r.id !== replicaId);
        elsewhere.set(t.pool, other);
      }
      if (!other) stayed++;
      else if (t.failOver(err)) moved++;
    }
    return { moved, stayed };
  }

  /**
   * Finds engines that answer but make no progress — a stuck engine core (a hung collective, a
   * wedged GPU) behind an HTTP server that still serves `/health` and `/metrics`: requests running
   * or waiting on it (its heartbeats say so) while its prompt, generation and finish counters
   * stand still for the pool's `engineTimeouts.streamIdleMs`, the longest silence a stream is
   * allowed. Such an engine counts as hung (its requests with nothing sent fail over) and is held
   * out until it makes progress again: its hold is renewed on every probe round it stands still.
   * Counters frozen with the bus (down or silent) say nothing: they are not judged then.
   */
  #findStalled(): void {
    const o = this.#o;
    if (!o.registry.busConnected) {
      this.#progress.clear();
      return;
    }
    const now = o.timer.now();
    const seen = new Set<string>();
    for (const v of o.registry.list()) {
      const h = v.heartbeat;
      if (h === undefined || v.stale) continue;
      seen.add(v.id);
      const total = h.promptTokensTotal + h.generationTokensTotal + h.requestsFinishedTotal;
      const was = this.#progress.get(v.id);
      if (was === undefined || was.epoch !== h.epoch || was.total !== total || h.running + h.waiting === 0) {
        this.#progress.set(v.id, { epoch: h.epoch, total, sinceMs: now, found: false });
        continue;
      }
      const stallMs = o.timeoutsFor(o.replicas.poolOf(v) ?? v.registration.pool).streamIdleMs;
      if (now - was.sinceMs < stallMs) continue;
      const err = new EngineTimeoutError(v.registration.url, 'GET /metrics', 'stalled', stallMs);
      if (was.found) {
        // Still no progress: the hold is renewed here (other dispatchers find it themselves), and
        // what could not move before, for want of another replica, may move now.
        this.#suspects.mark(v.id, h.epoch);
        const { moved } = this.#failOver(v.id, err);
        if (moved > 0)
          o.logger.warn({ replicaId: v.id, moved }, 'dispatcher: requests moved off a stalled engine');
        continue;
      }
      was.found = true;
      this.#engineHung(v.id, err);
    }
    for (const id of this.#progress.keys()) if (!seen.has(id)) this.#progress.delete(id);
  }

  /**
   * A request this dispatcher holds may be picked by another dispatcher whose assignment message
   * never comes: the bus was down (or came back only a moment ago), or the picker was killed
   * between its pick in the store and its message. The store records where each request runs, so
   * the waiting requests are looked up there (one pipelined read) and started on the replica they
   * were placed on, instead of waiting for the queue timeout. While the bus is down every waiting
   * request is looked up on each probe; otherwise, once per `assignGraceMs`, those that have waited
   * at least `minWaitMs` (a normal assignment arrives within milliseconds of the pick).
   *
   * A waiting request the store has no record of was released by a picker that took this
   * dispatcher for dead (its assignment found no subscriber for `assignGraceMs`: this dispatcher
   * was cut off from the bus that long). Still unknown `assignGraceMs` later — not a state the
   * store passes through, nor a Redis restart that this dispatcher's repair puts back first — it
   * goes back to its queue (`putBackLost`), so its client is served rather than timed out.
   */
  async #catchUpPlacements(minWaitMs: number): Promise<void> {
    const waiting: string[] = [];
    /** Each looked-up ticket's put-backs: an answer about an earlier placement is not adopted. */
    const putBacks = new Map<string, number>();
    const before = this.#o.timer.now() - minWaitMs;
    for (const t of this.#tickets.values())
      if (
        t.replica === undefined &&
        !t.puttingBack &&
        t.submittedAt !== undefined &&
        t.submittedAt <= before
      ) {
        waiting.push(t.id);
        putBacks.set(t.id, t.putBacks);
      }
    if (waiting.length === 0) {
      this.#unknownSince.clear();
      return;
    }
    try {
      // Look-ups go on the control connection, which Redis may serve before a put-back sent on
      // the other one: a request put back since it was looked up may be answered where it was.
      const { running, unknown } = await this.gateway.options.store.locate(waiting);
      for (const [requestId, replicaId] of running) {
        const ticket = this.#tickets.get(requestId);
        if (
          ticket !== undefined &&
          ticket.replica === undefined &&
          ticket.putBacks === putBacks.get(requestId)
        )
          this.#adopt(requestId, replicaId);
      }
      await this.#putBackLost(unknown);
    } catch (err) {
      this.#o.logger.warn({ err: errText(err) }, 'dispatcher: placement look-up failed');
    }
  }

  /** Puts back waiting requests the store has not known for `assignGraceMs` (see `#catchUpPlacements`). */
  async #putBackLost(unknown: readonly string[]): Promise<void> {
    const now = this.#o.timer.now();
    const since = new Map<string, number>();
    const lost: string[] = [];
    for (const id of unknown) {
      const first = this.#unknownSince.get(id) ?? now;
      if (now - first >= this.#o.options.assignGraceMs) lost.push(id);
      else since.set(id, first);
    }
    this.#unknownSince = since;
    const waiting = lost.filter((id) => {
      const t = this.#tickets.get(id);
      return t !== undefined && t.replica === undefined;
    });
    if (waiting.length === 0) return;
    this.#o.logger.warn(
      { requestIds: waiting },
      'dispatcher: waiting requests the store no longer holds (released by a picker that took this dispatcher for gone); putting them back',
    );
    await this.gateway.putBackLost(waiting);
    // A client that gave up during the put-back: its request must not stay queued for nobody.
    for (const id of waiting) if (!this.#tickets.has(id)) void this.gateway.cancel(id).catch(() => undefined);
  }

  /**
   * Ends the wait of requests whose pool has had no replica taking work (all dead, silent or
   * failing) for `noReplicaWaitMs`: their clients get a 503 now rather than a 504 at the queue
   * timeout. Models the control plane may swap a replica to keep waiting.
   */
  #failUnservable(): void {
    const o = this.#o;
    const now = o.timer.now();
    const queued = this.queuedByPool();
    for (const pool of this.#unservedSince.keys()) if (!queued.has(pool)) this.#unservedSince.delete(pool);
    for (const pool of queued.keys()) {
      if (this.serving(pool)) {
        this.#unservedSince.delete(pool);
        continue;
      }
      const since = this.#unservedSince.get(pool) ?? now;
      this.#unservedSince.set(pool, since);
      if (now - since < o.options.noReplicaWaitMs) continue;
      for (const t of this.#tickets.values())
        if (t.pool === pool && t.replica === undefined && !o.waitsForReplica?.(t.req.model))
          t.markUnservable();
    }
  }

  async #renew(): Promise<void> {
    await this.gateway.heartbeat();
    this.#renewedAt = this.#o.clock.now();
  }

  async #reclaim(): Promise<void> {
    // Through the gateway's store: a reclaim that finds the state lost starts its repair.
    const r = await this.gateway.options.store.reclaim(this.#o.clock.now());
    if (r.dropped.length + r.released.length === 0) return;
    this.#o.logger.info(
      { dropped: r.dropped.length, released: r.released.length },
      'dispatcher: reclaimed the holdings of expired dispatchers',
    );
    await this.gateway.pump();
  }

  async #chargeTick(): Promise<void> {
    let due = false;
    for (const [id, meter] of this.#meters) due = this.gateway.recordTokens(id, meter.generated()) || due;
    if (due || this.gateway.flushDue()) await this.#flush();
  }

  async #flush(): Promise<void> {
    if (this.#flushing) return;
    this.#flushing = true;
    try {
      await this.gateway.flush();
    } catch (err) {
      this.#o.logger.warn({ err: errText(err) }, 'dispatcher: charge flush failed');
    } finally {
      this.#flushing = false;
    }
  }
}
