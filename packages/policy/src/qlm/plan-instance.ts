/**
 * The global scheduler's problem in the abstract (QLM section 7): request groups to be ordered on
 * the virtual queues of the replicas, with each group's service time and lateness on each queue
 * already estimated by the RWT estimator, and the model-swap costs of each queue.
 */

/** A request group as the planner sees it. */
export interface PlanGroup {
  readonly id: string;
  readonly model: string;
  /** Requests in the group. */
  readonly size: number;
  /** Penalty per second the group is late (size × band weight). */
  readonly weight: number;
  /** Earliest deadline of its members, seconds from now (EDF's key). */
  readonly deadlineS: number;
  /** Earliest arrival of its members, seconds from now (≤ 0; FCFS's key). */
  readonly arrivalS: number;
  /** Queue the group must stay on (running requests; load balancing disabled). */
  readonly pinnedQueue?: string | undefined;
  /** Group must stay at the head of its queue (running requests that may not be evicted). */
  readonly pinnedFirst?: boolean | undefined;
  /** Requests already running on `pinnedQueue`; placing another group before them evicts them. */
  readonly running?: boolean | undefined;
  /**
   * Groups with the same key are one kind of request split by the size cap; on a shared queue
   * they keep the order they have in `groups` (FCFS among them, as inside a group).
   */
  readonly orderKey?: string | undefined;
}

/** A virtual queue: one replica. */
export interface PlanQueue {
  readonly id: string;
  /** Model loaded on the replica now; undefined when none is. */
  readonly currentModel: string | undefined;
  /** Seconds until the queue's first position can start (work that cannot be reordered). */
  readonly readyS: number;
  /** Seconds to load each model the replica can serve (0 for the loaded one); absent = cannot serve. */
  readonly swapS: Readonly<Record<string, number>>;
  /** Seconds for a running batch to drain completely before a swap (the previous group's tail). */
  readonly drainS: number;
  /** Drain before a swap at the head of the queue (0 when nothing is running). */
  readonly firstDrainS: number;
}

/** The whole problem. Matrices are indexed [group][queue] in the order of `groups` and `queues`. */
export interface PlanInstance {
  readonly groups: readonly PlanGroup[];
  readonly queues: readonly PlanQueue[];
  /** Seconds the group occupies the queue (its output tokens over the replica's throughput); Infinity = cannot serve. */
  readonly serviceS: readonly (readonly number[])[];
  /** A group's lateness is `max(0, start + lateOffsetS)`: the worst member's TTFT minus its deadline. */
  readonly lateOffsetS: readonly (readonly number[])[];
  /** Weight of the groups' size-weighted start times in the objective (prefers draining sooner). */
  readonly waitWeight: number;
}

/** Group ids in order on each queue, keyed by queue id. */
export type QueuePlan = Readonly<Record<string, readonly string[]>>;

/** Where one group ends up under a plan. */
export interface GroupOutcome {
  readonly queue: string;
  readonly position: number;
  readonly startS: number;
  readonly latenessS: number;
}

/** A plan's cost under the instance's model, or why it is not a valid plan. */
export type PlanEvaluation =
  | {
      readonly feasible: true;
      /** `Σ weight·lateness + waitWeight·Σ size·start` — what the MILP minimises. */
      readonly objective: number;
      /** Total lateness penalty alone. */
      readonly penalty: number;
      readonly swaps: number;
      readonly groups: Readonly<Record<string, GroupOutcome>>;
    }
  | { readonly feasible: false; readonly reason: string };

/**
 * Start time, lateness and swaps of every group under `plan`, walking each queue in order: a group
 * of another model than the one before it first waits for the batch to drain and the new model to
 * load (QLM Eq. 10); lateness is clamped at zero (a met SLO earns nothing).
 */
export function evaluatePlan(instance: PlanInstance, plan: QueuePlan): PlanEvaluation {
  const groupIndex = new Map(instance.groups.map((g, i) => [g.id, i]));
  const seen = new Set<string>();
  const outcomes: Record<string, GroupOutcome> = {};
  let objective = 0;
  let penalty = 0;
  let swaps = 0;
  for (const [q, queue] of instance.queues.entries()) {
    let t = queue.readyS;
    let model = queue.currentModel;
    const order = plan[queue.id] ?? [];
    for (const [position, id] of order.entries()) {
      const i = groupIndex.get(id);
      if (i === undefined) return { feasible: false, reason: `unknown group ${id}` };
      if (seen.has(id)) return { feasible: false, reason: `group ${id} is planned twice` };
      seen.add(id);
      const group = instance.groups[i] as PlanGroup;
      const service = (instance.serviceS[i] as readonly number[])[q] as number;
      if (!Number.isFinite(service))
        return { feasible: false, reason: `queue ${queue.id} cannot serve ${id}` };
      if (group.pinnedQueue !== undefined && group.pinnedQueue !== queue.id) {
        return { feasible: false, reason: `group ${id} is pinned to ${group.pinnedQueue}` };
      }
      if (group.pinnedFirst && position !== 0)
        return { feasible: false, reason: `group ${id} must run first` };
      if (group.model !== model) {
        const load = queue.swapS[group.model];
        if (load === undefined)
          return { feasible: false, reason: `queue ${queue.id} cannot load ${group.model}` };
        t += (position === 0 ? queue.firstDrainS : queue.drainS) + load;
        swaps++;
        model = group.model;
      }
      const lateness = Math.max(0, t + ((instance.lateOffsetS[i] as readonly number[])[q] as number));
      outcomes[id] = { queue: queue.id, position, startS: t, latenessS: lateness };
      penalty += group.weight * lateness;
      objective += group.weight * lateness + instance.waitWeight * group.size * t;
      t += service;
    }
  }
  for (const g of instance.groups)
    if (!seen.has(g.id)) return { feasible: false, reason: `group ${g.id} is not planned` };
  return { feasible: true, objective, penalty, swaps, groups: outcomes };
}

/** The instance without the given groups (e.g. groups no queue can serve). */
export function withoutGroups(instance: PlanInstance, drop: ReadonlySet<string>): PlanInstance {
  if (drop.size === 0) return instance;
  const keep = instance.groups.map((g, i) => ({ g, i })).filter(({ g }) => !drop.has(g.id));
  return {
    ...instance,
    groups: keep.map(({ g }) => g),
    serviceS: keep.map(({ i }) => instance.serviceS[i] as readonly number[]),
    lateOffsetS: keep.map(({ i }) => instance.lateOffsetS[i] as readonly number[]),
  };
}

/**
 * Puts groups of one kind (`orderKey`) back in their instance order on every queue, each kind in
 * the positions it already holds — the order the MILP's symmetry-breaking rows require.
 */
export function normalizeKindOrder(instance: PlanInstance, plan: QueuePlan): QueuePlan {
  const rank = new Map(instance.groups.map((g, i) => [g.id, i]));
  const kind = new Map(instance.groups.map((g) => [g.id, g.orderKey]));
  const out: Record<string, string[]> = {};
  for (const [queue, ids] of Object.entries(plan)) {
    const byKind = new Map<string, string[]>();
    for (const id of ids) {
      const k = kind.get(id);
      if (k !== undefined) byKind.set(k, [...(byKind.get(k) ?? []), id]);
    }
    for (const list of byKind.values()) list.sort((a, b) => (rank.get(a) ?? 0) - (rank.get(b) ?? 0));
    out[queue] = ids.map((id) => {
      const k = kind.get(id);
      return k === undefined ? id : ((byKind.get(k) as string[]).shift() as string);
    });
  }
  return out;
}
