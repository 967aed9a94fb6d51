import type {
  Bus,
  ControlReport,
  ControlRoutes,
  EngineTiming,
  ReplicaRegistry,
  Unsubscribe,
} from '@fairway/bus';
import type { Clock, ControlConfig, Logger, ScalingConfig, SloClass } from '@fairway/core';
import { RESTART_OVERHEAD_S, swapCostOf } from '@fairway/perf';
import {
  loadHighsSolver,
  type MilpSolver,
  type QueuePlanner,
  type RwtProfile,
  VirtualQueueRouter,
} from '@fairway/policy';
import {
  type ControlOp,
  type ControlReplica,
  QlmControl,
  ScalingAdvisor,
  type SloControl,
  type SwapCost,
} from '@fairway/scheduler';
import type { SchedulingStore } from '@fairway/store';
import { ControlFeed } from './control-feed.ts';
import { liveProfiles, type ReplicaShape } from './control-profiles.ts';
import type { LeaseBackend } from './leader-lease.ts';
import { LeaderLease } from './leader-lease.ts';
import type { RegistryReplicaSource } from './replica-source.ts';

/** What a dispatcher holds, for its control report (see the bus's `controlReport`). */
export type Holdings = Pick<ControlReport, 'queued' | 'running' | 'finished'>;

/** Options of {@link ControlPlane}. */
export interface ControlPlaneOptions {
  /** This dispatcher's id. */
  readonly id: string;
  readonly control: ControlConfig;
  readonly scaling: readonly ScalingConfig[];
  /** The planner of `ordering: qlm | edf`; undefined runs the desired-replicas signal only. */
  readonly planner: QueuePlanner | undefined;
  /** SLO classes as configured (deadlines, sheddability). */
  readonly sloClasses: readonly SloClass[];
  /** Band a class is queued in at the gateways (EDF queues every class in one band). */
  readonly gatewayBandOf: (sloClass: string) => number;
  readonly bus: Bus;
  readonly registry: ReplicaRegistry;
  readonly replicas: RegistryReplicaSource;
  readonly store: SchedulingStore;
  readonly lease: LeaseBackend;
  /** Store clock, ms. */
  readonly clock: Clock;
  readonly logger: Logger;
  /** What this dispatcher holds now (and what finished since the last call). */
  readonly holdings: () => Holdings;
  /** Called when new routes apply (the gateway offers queued work again). */
  readonly onRoutes?: (() => void) | undefined;
  /** Fraction of KV the gateways never reserve, for the planner's free-room estimate. */
  readonly headroomFraction: number;
  /** Sets the `fairway_desired_replicas{pool}` gauge. */
  readonly gauge?: ((pool: string, desired: number) => void) | undefined;
  /** Sets the `fairway_qlm_estimator_ms` gauges from a profile the planner used. */
  readonly profileGauge?: ((model: string, gpu: string, tp: number, profile: RwtProfile) => void) | undefined;
}

/** What only the leader keeps; rebuilt whenever a dispatcher becomes the leader. */
interface LeaderState {
  readonly control: QlmControl | undefined;
  readonly feed: ControlFeed;
  readonly advisors: Map<string, ScalingAdvisor>;
  /** Replica → the model it drains for; `sent` once the agent was told to load it. */
  readonly swaps: Map<string, { to: string; sent: boolean }>;
  round: number;
}

/** How long an agent may take to load another model before the swap counts as failed, ms. */
const SWAP_TIMEOUT_MS = 600_000;

const NOOP_CONTROL: SloControl = {
  name: 'none',
  intervalMs: 0,
  start: () => undefined,
  onArrival: () => undefined,
  onRejected: () => undefined,
  onDispatched: () => undefined,
  onEvicted: () => undefined,
  onFinished: () => undefined,
  onSwapped: () => undefined,
  tick: async () => [],
};

/** Swap cost of restarting the engine with `model` (the agent's `swapModel`), from `@fairway/perf`'s presets. */
function restartCost(model: string): (gpu: string, tp: number) => SwapCost {
  return (gpu, tp) => {
    try {
      return swapCostOf(model, 'reload')(gpu, tp);
    } catch {
      return { costS: RESTART_OVERHEAD_S, mechanism: 'reload' };
    }
  };
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * QLM's (and EDF's) control serving live traffic, off the request path. Every dispatcher reports
 * what it holds on the bus every `intervalMs` and routes its gateway's dispatches by the latest
 * routes the leader published. One dispatcher — the holder of a lease in the store — is the
 * leader: it merges the fresh reports into the global queue, runs the shared {@link QlmControl}
 * (the simulator's code) against the registry's replicas and the store's reservations, publishes
 * the routes, sends evictions to the owning dispatchers (which re-queue and resume the requests),
 * drains and swaps replicas through their agents, and publishes each pool's desired replicas.
 */
export class ControlPlane {
  /** The router this dispatcher's gateway dispatches through (undefined without a planner). */
  readonly router: VirtualQueueRouter | undefined;
  readonly #o: ControlPlaneOptions;
  readonly #lease: LeaderLease;
  readonly #reports = new Map<string, { report: ControlReport; receivedAt: number }>();
  readonly #unsubs: Unsubscribe[] = [];
  readonly #timers: NodeJS.Timeout[] = [];
  #leader: LeaderState | undefined;
  #seq = 0;
  #routes: { leaderId: string; round: number; at: number } | undefined;
  #held = new Set<string>();
  #busy = false;
  #started = false;
  #stopReports: Unsubscribe | undefined;
  #milp: Promise<MilpSolver | undefined> | undefined;

  constructor(o: ControlPlaneOptions) {
    this.#o = o;
    this.router =
      o.planner === undefined
        ? undefined
        : new VirtualQueueRouter({ pull: o.control.pull, workConserving: o.control.loadBalance });
    this.#lease = new LeaderLease({
      backend: o.lease,
      holder: o.id,
      leaseMs: o.control.leaseMs,
      clock: o.clock,
      logger: o.logger,
      onChange: (leader) => this.#onLeadership(leader),
    });
  }

  /** Whether this dispatcher runs the planner now. */
  get isLeader(): boolean {
    return this.#lease.isLeader;
  }

  /** What the leader's control did so far (undefined on followers and without a planner). */
  stats(): ReturnType<QlmControl['stats']> | undefined {
    return this.#leader?.control?.stats();
  }

  /** Subscribes to reports and routes, starts the lease and the control timer. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    const o = this.#o;
    this.#unsubs.push(o.bus.subscribe('controlRoutes', (r) => this.#applyRoutes(r)));
    await o.bus.flush();
    await this.#lease.start();
    const t = setInterval(() => {
      this.#tick().catch((err: unknown) => o.logger.warn({ err: errText(err) }, 'control: round failed'));
    }, o.control.intervalMs);
    t.unref();
    this.#timers.push(t);
  }

  /**
   * Only the leader reads the reports (each is validated on receipt, so followers would spend CPU
   * on every dispatcher's report for nothing); a new leader has them within one interval.
   */
  #onLeadership(leader: boolean): void {
    const o = this.#o;
    this.#stopReports?.();
    this.#stopReports = undefined;
    this.#reports.clear();
    this.#leader = undefined;
    if (!leader || !this.#started) return;
    this.#stopReports = o.bus.subscribe('controlReport', (r) => {
      const last = this.#reports.get(r.dispatcherId);
      if (last !== undefined && last.report.seq >= r.seq && r.seq !== 0) return;
      this.#reports.set(r.dispatcherId, { report: r, receivedAt: o.clock.now() });
    });
  }

  /** Stops reporting and planning and gives the lease up. */
  async stop(): Promise<void> {
    if (!this.#started) return;
    this.#started = false;
    for (const t of this.#timers.splice(0)) clearInterval(t);
    for (const u of this.#unsubs.splice(0)) u();
    this.#onLeadership(false);
    await this.#lease.stop();
  }

  async #tick(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      this.#report();
      this.#expireRoutes();
      if (this.#lease.isLeader) await this.#round();
    } finally {
      this.#busy = false;
    }
  }

  #report(): void {
    const o = this.#o;
    const h = o.holdings();
    o.bus.publish('controlReport', {
      dispatcherId: o.id,
      seq: this.#seq++,
      // The earliest admitted first (tickets are kept in admission order); the rest wait unseen.
      queued:
        h.queued.length > o.control.maxReportedQueued
          ? h.queued.slice(0, o.control.maxReportedQueued)
          : h.queued,
      running: h.running,
      finished: h.finished,
      at: o.clock.now(),
    });
  }

  #staleMs(): number {
    return this.#o.control.staleIntervals * this.#o.control.intervalMs;
  }

  /** Without fresh routes (the leader died and none has taken over yet) every replica pulls every band. */
  #expireRoutes(): void {
    if (this.#routes === undefined || this.router === undefined) return;
    if (this.#o.clock.now() - this.#routes.at <= this.#staleMs()) return;
    this.#routes = undefined;
    this.router.setQueues({});
    for (const r of this.#held) this.router.hold(r, false);
    this.#held = new Set();
  }

  #applyRoutes(r: ControlRoutes): void {
    const router = this.router;
    if (router === undefined) return;
    const last = this.#routes;
    if (last !== undefined && last.leaderId === r.leaderId && last.round >= r.round) return;
    this.#routes = { leaderId: r.leaderId, round: r.round, at: this.#o.clock.now() };
    router.setQueues(r.queues);
    const held = new Set(r.held);
    for (const id of this.#held) if (!held.has(id)) router.hold(id, false);
    for (const id of held) router.hold(id, true);
    this.#held = held;
    // Routes changed: offer queued work to the replicas that may take it now.
    this.#o.onRoutes?.();
  }

  /** HiGHS, loaded once when `milp` is on (undefined: EDF + local search). */
  async #solver(): Promise<MilpSolver | undefined> {
    if (!this.#o.control.milp) return undefined;
    this.#milp ??= loadHighsSolver().catch((err: unknown) => {
      this.#o.logger.warn({ err: errText(err) }, 'control: MILP solver not loaded; planning with EDF');
      return undefined;
    });
    return this.#milp;
  }

  #newLeaderState(solver: MilpSolver | undefined): LeaderState {
    const o = this.#o;
    const c = o.control;
    // A profile is built the first time its (model, gpu, tp) is planned for, from a replica of
    // that shape registered then (its KV capacity and batch limit).
    const shapeOf = (model: string, gpu: string, tp: number): ReplicaShape | undefined => {
      const v = o.registry
        .list({ model })
        .find((x) => (x.registration.gpu ?? c.profileGpu) === gpu && x.registration.tp === tp);
      return (
        v && { kvCapacityTokens: v.registration.kvCapacityTokens, maxNumSeqs: v.registration.maxNumSeqs }
      );
    };
    let control: QlmControl | undefined;
    if (o.planner !== undefined) {
      // Every replica of the shape that measured its engine's speed corrects the preset.
      const timingsOf = (model: string, gpu: string, tp: number): EngineTiming[] => {
        const out: EngineTiming[] = [];
        for (const v of o.registry.list({ model })) {
          if ((v.registration.gpu ?? c.profileGpu) !== gpu || v.registration.tp !== tp) continue;
          const t = o.registry.timingOf(v.id);
          if (t !== undefined) out.push(t);
        }
        return out;
      };
      const live = liveProfiles(c, shapeOf, timingsOf);
      const profileOf = (model: string, gpu: string, tp: number): RwtProfile => {
        const p = live(model, gpu, tp);
        o.profileGauge?.(model, gpu, tp, p);
        return p;
      };
      const first = o.registry.list()[0]?.registration;
      const batch = first
        ? profileOf(first.model, first.gpu ?? c.profileGpu, first.tp).batchSize
        : profileOf(c.profileModel, c.profileGpu, 1).batchSize;
      const single = o.planner !== 'qlm';
      control = new QlmControl(
        {
          sloClasses: o.sloClasses,
          gatewayBandOf: o.gatewayBandOf,
          groupBands: !single && c.groupBands,
          planner: o.planner,
          // The baselines order single requests and never evict, as in the simulator.
          flags: single
            ? { evict: false, swap: c.swap }
            : { pull: c.pull, evict: c.evict, loadBalance: c.loadBalance, swap: c.swap },
          intervalMs: c.intervalMs,
          profileOf,
          solver,
          budget: { maxNodes: c.milpMaxNodes, timeLimitS: c.milpTimeLimitS },
          milpIntervalMs: c.milpIntervalMs,
          ...(c.swappable.length > 0
            ? {
                swappable: Object.fromEntries(c.swappable.map((m) => [m, restartCost(m)])),
              }
            : {}),
          groupSize: single ? 1 : undefined,
          outputPrior: { mean: c.outputMean, variance: c.outputStd * c.outputStd },
          headroomFraction: o.headroomFraction,
        },
        batch,
      );
      control.start({ store: o.store, replicas: () => this.#controlReplicas() });
    }
    const advisors = new Map<string, ScalingAdvisor>();
    for (const s of o.scaling)
      advisors.set(
        s.pool,
        new ScalingAdvisor({
          pool: s.pool,
          model: {
            k: s.k,
            c: s.c,
            thresholdRate: 0,
            lowRate: [],
            quality: { samples: 0, mape: 0, maxApe: 0, r2: 1 },
          },
          clock: o.clock,
          windowMs: s.windowS * 1000,
          minReplicas: s.minReplicas,
          ...(s.maxReplicas !== undefined ? { maxReplicas: s.maxReplicas } : {}),
          publish: (advice) => {
            try {
              o.bus.publish('desiredReplicas', advice);
            } catch (err) {
              o.logger.warn({ err: errText(err) }, 'control: desiredReplicas not sent');
            }
          },
          ...(o.gauge ? { gauge: o.gauge } : {}),
        }),
      );
    const feed = new ControlFeed(control ?? NOOP_CONTROL, new Set(o.sloClasses.map((s) => s.name)), (req) =>
      advisors.get(o.replicas.poolFor(req.model) ?? req.model)?.recordArrival(),
    );
    const lastRound = this.#routes?.round ?? 0;
    o.logger.info({ id: o.id, planner: o.planner ?? 'none' }, 'control: leading');
    return { control, feed, advisors, swaps: new Map(), round: lastRound + 1 };
  }

  #controlReplicas(): ControlReplica[] {
    const st = this.#leader;
    const running = st?.feed.running() ?? new Map();
    const c = this.#o.control;
    return this.#o.registry
      .list()
      .filter((v) => !v.stale && v.reportedState !== 'gone')
      .map((v) => {
        const r = v.registration;
        return {
          id: r.replicaId,
          model: r.model,
          gpu: r.gpu ?? c.profileGpu,
          tp: r.tp,
          kvCapacityTokens: r.kvCapacityTokens,
          maxNumSeqs: r.maxNumSeqs,
          swapping: st?.swaps.has(r.replicaId) ?? false,
          running: running.get(r.replicaId) ?? [],
        };
      });
  }

  async #round(): Promise<void> {
    const o = this.#o;
    if (this.#leader === undefined) {
      const solver = await this.#solver();
      if (!this.#lease.isLeader) return;
      this.#leader = this.#newLeaderState(solver);
    }
    const st = this.#leader;
    const now = o.clock.now();
    const fresh: ControlReport[] = [];
    for (const [id, r] of this.#reports) {
      if (now - r.receivedAt <= this.#staleMs()) fresh.push(r.report);
      else this.#reports.delete(id);
    }
    st.feed.apply(fresh);
    if (st.control !== undefined) {
      const ops = await st.control.tick(now);
      if (this.#leader !== st) return; // leadership lost while planning
      this.#publishRoutes(st);
      this.#execute(st, ops);
      this.#progressSwaps(st);
    }
    for (const [pool, advisor] of st.advisors)
      advisor.advise(o.replicas.replicas(pool).filter((r) => !r.stale).length);
  }

  #publishRoutes(st: LeaderState): void {
    const o = this.#o;
    const router = st.control?.router;
    if (router === undefined) return;
    const queues: Record<string, number[]> = {};
    const held: string[] = [];
    for (const v of o.registry.list()) {
      const q = router.queueOf(v.id);
      if (q !== undefined) queues[v.id] = [...q];
      if (router.isHeld(v.id)) held.push(v.id);
    }
    o.bus.publish('controlRoutes', {
      leaderId: o.id,
      round: st.round++,
      queues,
      held,
      pull: o.control.pull,
      workConserving: o.control.loadBalance,
      at: o.clock.now(),
    });
  }

  #execute(st: LeaderState, ops: readonly ControlOp[]): void {
    const o = this.#o;
    for (const op of ops) {
      if (op.kind === 'evict') {
        o.logger.info({ replica: op.replica, requests: op.requestIds.length }, 'control: evicting');
        o.bus.publish('evict', {
          replicaId: op.replica,
          requestIds: [...op.requestIds],
          reason: 'qlm: a request group with an earlier deadline needs the room',
          at: o.clock.now(),
        });
      } else if (!st.swaps.has(op.replica)) st.swaps.set(op.replica, { to: op.to, sent: false });
    }
  }

  /**
   * A replica drains (held, so it takes nothing new) until none of its requests runs, then its
   * agent loads the other model; it is released once the registry shows it serving that model.
   */
  #progressSwaps(st: LeaderState): void {
    const o = this.#o;
    const running = st.feed.running();
    for (const [replica, swap] of st.swaps) {
      const view = o.registry.get(replica);
      if (view === undefined) {
        st.swaps.delete(replica);
        st.control?.onSwapped(replica);
        continue;
      }
      if (swap.sent) {
        if (view.registration.model === swap.to && view.acceptsWork) {
          st.swaps.delete(replica);
          st.control?.onSwapped(replica);
        }
        continue;
      }
      if ((running.get(replica)?.length ?? 0) > 0) continue;
      swap.sent = true;
      // Not awaited: a restart takes as long as the engine needs to load (minutes for vLLM), and
      // the rounds go on meanwhile; success shows in the registry, a refusal releases the replica.
      o.bus
        .request(
          'command',
          { replicaId: replica, type: 'swapModel', model: swap.to },
          { timeoutMs: SWAP_TIMEOUT_MS },
        )
        .then((reply) => {
          if (!reply.ok) throw new Error(reply.error ?? 'refused');
        })
        .catch((err: unknown) => {
          o.logger.warn({ replica, model: swap.to, err: errText(err) }, 'control: model swap failed');
          if (st.swaps.get(replica) !== swap) return;
          st.swaps.delete(replica);
          st.control?.onSwapped(replica);
        });
    }
  }
}
