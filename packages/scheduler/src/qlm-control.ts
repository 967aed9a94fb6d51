/**
 * QLM's queue management run beside the gateways (QLM sections 4–7), by the simulator's runner
 * and by the live dispatchers' control plane alike: requests are classified into request groups as
 * they arrive, a planning event every `intervalMs` (virtual time in the simulator) asks the RWT estimator whether the virtual queues as they stand will miss an SLO and, if so,
 * runs the global scheduler (MILP with a node-limited, deterministic budget, EDF plus local search
 * as its warm start and fallback); the chosen virtual queues become the gateways' routes (which
 * bands each replica pulls, in which order), and its evictions and model swaps are returned for
 * the host to execute. The same class runs the EDF and FCFS baselines (planner `edf` / `fcfs`,
 * typically with one request per group and no eviction).
 */
import type { RequestDescriptor, SloClass } from '@fairway/core';
import {
  DEFAULT_PROFILE_BOUNDARIES,
  type GroupKey,
  GroupTable,
  groupBand,
  groupKeyString,
  type MilpBudget,
  type MilpSolver,
  OutputLengthStats,
  planQueues,
  type QlmFlags,
  type QlmReplica,
  type QlmRequest,
  type QlmRunningRequest,
  type QueuePlanner,
  type RwtProfile,
  resolveFlags,
  type SwapMechanism,
  toQlmRequest,
  UnknownSloClassError,
  VirtualQueueRouter,
} from '@fairway/policy';
import type { ControlOp, SloControl, SloControlContext } from './slo-control.ts';

function sloClassOf(name: string, classes: ReadonlyMap<string, SloClass>): SloClass {
  const cls = classes.get(name);
  if (!cls) throw new UnknownSloClassError(name, [...classes.keys()]);
  return cls;
}

/** What it costs to load a model on a replica. */
export interface SwapCost {
  readonly costS: number;
  readonly mechanism: SwapMechanism;
}

/** Options of {@link QlmControl}. */
export interface QlmControlOptions {
  /** SLO classes the requests name (their TTFT targets, bands and sheddability drive the plan). */
  readonly sloClasses: readonly SloClass[];
  /**
   * Band a class is queued in at the gateways (the run's band mapping); the routes are given in
   * these bands. @default the class's own band
   */
  readonly gatewayBandOf?: ((sloClass: string) => number) | undefined;
  /**
   * Whether the gateways split each class's band by the request groups' prompt buckets
   * (`GatewayOptions.promptBands` set to {@link promptBands}): the routes then name each group's
   * own band, so the plan's order of a class's groups and their assignment to replicas are carried
   * out, not only its order of classes. @default false
   */
  readonly groupBands?: boolean | undefined;
  /** @default 'qlm' */
  readonly planner?: QueuePlanner | undefined;
  /** Serving operations allowed (the ablation turns one off). @default all */
  readonly flags?: QlmFlags | undefined;
  /** MILP solver of the global scheduler; without one QLM uses EDF improved by local search. */
  readonly solver?: MilpSolver | undefined;
  /**
   * Work limit of one solve. Use `maxNodes` for deterministic replays; the time limit is only a
   * safety net. @default { maxNodes: 50, timeLimitS: 30 }
   */
  readonly budget?: MilpBudget | undefined;
  /**
   * Least time between two MILP solves, ms of the host's clock. A planning round that predicts a violation
   * sooner than this uses the MILP's own warm start (EDF improved by local search), which takes
   * milliseconds; the MILP refines it at most this often. @default 10000
   */
  readonly milpIntervalMs?: number | undefined;
  /**
   * Groups per virtual queue the MILP decides (rolling horizon; see the global scheduler's
   * `headPositions`); undefined decides whole queues. @default 3
   */
  readonly headPositions?: number | undefined;
  /** Planning interval, ms of the host's clock. @default 1000 */
  readonly intervalMs?: number | undefined;
  /** Estimator profile of `model` on a replica of `gpu` × `tp` (from profiling runs). */
  readonly profileOf: (model: string, gpu: string, tp: number) => RwtProfile;
  /**
   * Models every replica may load, with the cost of loading each (multi-model pools); a replica
   * serves only its loaded model when absent. @default none
   */
  readonly swappable?: Readonly<Record<string, (gpu: string, tp: number) => SwapCost>> | undefined;
  /** See `OperationOptions.minSwapWorkFactor` (policy). @default 10 */
  readonly minSwapWorkFactor?: number | undefined;
  /**
   * See `OperationOptions.maxEvictions` (policy). An evicted request here recomputes its prompt
   * and output so far when it resumes (QLM moves its KV to CPU memory instead), so each eviction
   * costs the replica that work again; one per request keeps an eviction from ever cycling.
   * @default 1
   */
  readonly maxEvictions?: number | undefined;
  /** Requests per group: QLM's δ × batch size. @default 4 × the estimator's batch size */
  readonly groupSize?: number | undefined;
  /** Output-length prior of a group with too little history (QLM fits it from history). */
  readonly outputPrior: { readonly mean: number; readonly variance: number };
  /** Prompt-length bucket bounds of the groups' token profile. @default [256, 1024, 4096] */
  readonly profileBoundaries?: readonly number[] | undefined;
  /** Fraction of KV the gateways never reserve (the run's headroom), for the free-room estimate. @default 0.01 */
  readonly headroomFraction?: number | undefined;
}

/** What the control did during a run. */
export interface QlmControlStats {
  readonly ticks: number;
  /** Ticks on which the global scheduler ran (a violation was predicted, or a baseline re-plans). */
  readonly replans: number;
  /**
   * Global-scheduler runs by where the plan came from: `milp`, `warm-start` (the MILP ran and did
   * not beat its warm start), `edf-fallback` (the MILP ran and returned no plan), and
   * `between-solves` (a replan before the next MILP solve is due, which uses the warm start: EDF
   * improved by local search).
   */
  readonly planSources: Readonly<Record<string, number>>;
  /** Rounds on which the MILP was handed the problem. */
  readonly milpSolves: number;
  readonly evictions: number;
  readonly swapsOrdered: number;
  readonly largestQueue: number;
  readonly largestGroups: number;
}

/** QLM's global queue, estimator and global scheduler as an {@link SloControl}. */
export class QlmControl implements SloControl {
  readonly name: string;
  readonly router: VirtualQueueRouter;
  readonly intervalMs: number;
  readonly #opts: QlmControlOptions;
  readonly #classes: ReadonlyMap<string, SloClass>;
  readonly #flags: ReturnType<typeof resolveFlags>;
  readonly #table: GroupTable;
  readonly #stats: OutputLengthStats;
  readonly #queued = new Map<string, QlmRequest>();
  #ctx: SloControlContext | undefined;
  #queues: Record<string, readonly string[]> = {};
  /** Replica → model it is draining for or loading. */
  readonly #swapTo = new Map<string, string>();
  #ticks = 0;
  #replans = 0;
  #lastMilpMs = Number.NEGATIVE_INFINITY;
  #milpSolves = 0;
  #evictions = 0;
  /** Times each queued or running request was evicted, until it finishes or is refused. */
  readonly #evictedTimes = new Map<string, number>();
  #swaps = 0;
  #largestQueue = 0;
  #largestGroups = 0;
  readonly #sources: Record<string, number> = {};

  constructor(options: QlmControlOptions, batchSize: number) {
    this.#opts = options;
    this.#classes = new Map(options.sloClasses.map((c) => [c.name, c]));
    this.#flags = resolveFlags(options.flags);
    this.name = `${options.planner ?? 'qlm'}-control`;
    this.intervalMs = options.intervalMs ?? 1000;
    this.router = new VirtualQueueRouter({ pull: this.#flags.pull, workConserving: this.#flags.loadBalance });
    const groupSize = options.groupSize ?? 4 * batchSize;
    this.#table = new GroupTable({
      avgBatchSize: batchSize,
      delta: groupSize / Math.max(batchSize, 1),
      ...(options.profileBoundaries ? { profileBoundaries: options.profileBoundaries } : {}),
    });
    this.#stats = new OutputLengthStats(options.outputPrior);
  }

  /** The prompt-length bounds the gateways split bands by under `groupBands` (else undefined). */
  get promptBands(): readonly number[] | undefined {
    return this.#opts.groupBands ? (this.#opts.profileBoundaries ?? DEFAULT_PROFILE_BOUNDARIES) : undefined;
  }

  start(ctx: SloControlContext): void {
    this.#ctx = ctx;
  }

  onArrival(req: RequestDescriptor): void {
    const q = toQlmRequest(req, this.#classes);
    this.#queued.set(req.id, q);
    this.#table.add(q);
  }

  onRejected(id: string): void {
    this.#table.remove(id);
    this.#queued.delete(id);
    this.#evictedTimes.delete(id);
  }

  onDispatched(id: string): void {
    this.#table.remove(id);
  }

  onEvicted(id: string, generated: number): void {
    const q = this.#queued.get(id);
    if (q === undefined) return;
    this.#evictions++;
    this.#evictedTimes.set(id, (this.#evictedTimes.get(id) ?? 0) + 1);
    this.#table.requeue({ ...q, generated });
  }

  onFinished(req: RequestDescriptor, generated: number): void {
    this.#queued.delete(req.id);
    this.#evictedTimes.delete(req.id);
    this.#stats.observe(groupKeyString(this.#keyOf(req)), generated);
  }

  onSwapped(replica: string): void {
    this.#swapTo.delete(replica);
    this.router.hold(replica, false);
  }

  /** What the control did so far. */
  stats(): QlmControlStats {
    return {
      ticks: this.#ticks,
      replans: this.#replans,
      planSources: { ...this.#sources },
      milpSolves: this.#milpSolves,
      evictions: this.#evictions,
      swapsOrdered: this.#swaps,
      largestQueue: this.#largestQueue,
      largestGroups: this.#largestGroups,
    };
  }

  #keyOf(req: Pick<RequestDescriptor, 'model' | 'sloClass' | 'inputTokens'>): GroupKey {
    return { model: req.model, sloClass: req.sloClass, profile: this.#table.profileOf(req) };
  }

  async tick(nowMs: number): Promise<readonly ControlOp[]> {
    const ctx = this.#ctx;
    if (ctx === undefined) return [];
    this.#ticks++;
    const groups = this.#table.groups();
    this.#largestQueue = Math.max(this.#largestQueue, this.#table.size);
    this.#largestGroups = Math.max(this.#largestGroups, groups.length);
    const headroom = this.#opts.headroomFraction ?? 0.01;
    const replicas: QlmReplica[] = [];
    for (const r of ctx.replicas()) {
      const model = this.#swapTo.get(r.id) ?? r.model;
      const reserved = await ctx.store.reserved(r.id);
      const loadable: Record<string, { costS: number; mechanism: SwapMechanism }> = {};
      const profiles: Record<string, RwtProfile> = { [model]: this.#opts.profileOf(model, r.gpu, r.tp) };
      for (const [m, cost] of Object.entries(this.#opts.swappable ?? {})) {
        if (m === model) continue;
        loadable[m] = cost(r.gpu, r.tp);
        profiles[m] = this.#opts.profileOf(m, r.gpu, r.tp);
      }
      const swapping = this.#swapTo.has(r.id);
      const running: QlmRunningRequest[] = swapping
        ? []
        : r.running.map(({ req, generated }) => {
            const cls = sloClassOf(req.sloClass, this.#classes);
            const mean = this.#stats.get(groupKeyString(this.#keyOf(req))).mean;
            return {
              id: req.id,
              model: req.model,
              band: cls.band,
              sheddable: cls.sheddable,
              inputTokens: req.inputTokens,
              generated,
              expectedOutput: Math.max(mean, generated + 1),
              evictions: this.#evictedTimes.get(req.id) ?? 0,
            };
          });
      replicas.push({
        id: r.id,
        model,
        loadable,
        profiles,
        running,
        freeTokens: swapping ? 0 : Math.floor(r.kvCapacityTokens * (1 - headroom)) - reserved.tokens,
        freeSeqs: swapping ? 0 : r.maxNumSeqs - reserved.seqs,
      });
    }
    const live = new Set(groups.map((g) => g.id));
    const current: Record<string, string[]> = {};
    for (const r of replicas) current[r.id] = (this.#queues[r.id] ?? []).filter((id) => live.has(id));

    const milpDue = nowMs - this.#lastMilpMs >= (this.#opts.milpIntervalMs ?? 10_000);
    const decision = planQueues(
      { nowMs, replicas, groups, queues: current },
      {
        planner: this.#opts.planner ?? 'qlm',
        flags: this.#flags,
        solver: milpDue ? this.#opts.solver : undefined,
        budget: this.#opts.budget ?? { maxNodes: 50, timeLimitS: 30 },
        minSwapWorkFactor: this.#opts.minSwapWorkFactor ?? 10,
        maxEvictions: this.#opts.maxEvictions ?? 1,
        headPositions: 'headPositions' in this.#opts ? this.#opts.headPositions : 3,
        outputStats: (key) => this.#stats.get(groupKeyString(key)),
      },
    );
    if (decision.replanned) this.#replans++;
    if (decision.schedule?.milp) {
      this.#lastMilpMs = nowMs;
      this.#milpSolves++;
    }
    if (decision.schedule) {
      const src =
        decision.schedule.milp === undefined && !milpDue ? 'between-solves' : decision.schedule.source;
      this.#sources[src] = (this.#sources[src] ?? 0) + 1;
    }

    // Virtual queues in group terms (for the next round) and in gateway bands (for the routes).
    const byId = new Map(groups.map((g) => [g.id, g]));
    const classBand = this.#opts.gatewayBandOf ?? ((c: string) => sloClassOf(c, this.#classes).band);
    const bounds = this.promptBands;
    const bandOf = (key: GroupKey): number =>
      bounds === undefined
        ? classBand(key.sloClass)
        : groupBand(classBand(key.sloClass), key.profile, bounds);
    const bands: Record<string, number[]> = {};
    this.#queues = {};
    for (const [replica, ids] of Object.entries(decision.queues)) {
      const real = ids.filter((id) => byId.has(id));
      this.#queues[replica] = real;
      bands[replica] = real.map((id) => bandOf((byId.get(id) as (typeof groups)[number]).key));
    }
    this.router.setQueues(bands);

    const ops: ControlOp[] = [];
    for (const op of decision.ops) {
      if (op.kind === 'evict') ops.push({ kind: 'evict', replica: op.replica, requestIds: op.requestIds });
      else if (op.kind === 'swap' && !this.#swapTo.has(op.replica)) {
        this.#swapTo.set(op.replica, op.to);
        this.router.hold(op.replica, true);
        this.#swaps++;
        ops.push({ kind: 'swap', replica: op.replica, to: op.to, costS: op.costS });
      }
    }
    return ops;
  }
}
