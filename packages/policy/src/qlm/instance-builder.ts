import type { LengthStats } from './output-stats.ts';
import type { PlanGroup, PlanInstance, PlanQueue } from './plan-instance.ts';
import {
  type QlmFlags,
  type QlmReplica,
  type QlmState,
  type ResolvedQlmFlags,
  resolveFlags,
  runningGroupId,
} from './qlm-state.ts';
import { type GroupKey, groupKeyString, type RequestGroup } from './request-group.ts';
import { normalQuantile, type RwtProfile, tokenThroughput, waitingTime } from './rwt-estimator.ts';

/** How the planner turns estimates into the MILP's numbers. */
export interface EstimatorOptions {
  /** Output-length statistics of a group's key (see `OutputLengthStats.get`). */
  readonly outputStats: (key: GroupKey) => LengthStats;
  /** One-sided confidence of waiting-time estimates (TTFT SLOs are p99). @default 0.99 */
  readonly confidence?: number;
  /** Lateness weight per request of a band. @default 10^(−band): an interactive second outweighs 10 batch ones */
  readonly bandWeight?: (band: number) => number;
  /** Weight of size-weighted start times, relative to lateness: drains queues sooner. @default 0.001 */
  readonly waitWeight?: number;
  readonly flags?: QlmFlags;
}

/** Lateness offsets are clamped here so a group without deadlines keeps the LP's numbers bounded. */
const NO_DEADLINE_S = -1e6;

function stableIndex(id: string, n: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    h ^= id.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % n;
}

function remainingTokens(r: QlmReplica): {
  evictable: number;
  fixed: number;
  tailTokens: number;
  evictableCount: number;
} {
  let evictable = 0;
  let fixed = 0;
  let tailTokens = 0;
  let evictableCount = 0;
  for (const req of r.running) {
    const left = Math.max(req.expectedOutput - req.generated, 1);
    tailTokens = Math.max(tailTokens, left);
    if (req.sheddable) {
      evictable += left;
      evictableCount++;
    } else fixed += left;
  }
  return { evictable, fixed, tailTokens, evictableCount };
}

function canServe(replica: QlmReplica, model: string, flags: ResolvedQlmFlags): boolean {
  if (!replica.profiles[model]) return false;
  if (replica.model === model) return true;
  // Without swapping an empty replica may still load its first model.
  if (!flags.swap && replica.model !== undefined) return false;
  return replica.loadable[model] !== undefined;
}

/**
 * Builds the global scheduler's instance from QLM's state using the RWT estimator: each group's
 * service time on each replica is its expected output tokens over the replica's throughput
 * (QLM Eq. 2), and its lateness offset is the worst member's TTFT within the group — prefill plus
 * the CLT upper bound of the wait for the members ahead of it in the group — minus that member's
 * deadline. Running requests become the queue's ready time, or, where eviction is allowed, a
 * pseudo-group of the sheddable ones that other groups may be placed before.
 */
export function buildPlanInstance(state: QlmState, options: EstimatorOptions): PlanInstance {
  const flags = resolveFlags(options.flags);
  const z = normalQuantile(options.confidence ?? 0.99);
  const bandWeight = options.bandWeight ?? ((band: number) => 10 ** -band);
  const nowMs = state.nowMs;
  const assigned = new Map<string, string>();
  for (const [replica, ids] of Object.entries(state.queues)) for (const id of ids) assigned.set(id, replica);

  const queues: PlanQueue[] = state.replicas.map((r) => {
    const profile = r.model !== undefined ? r.profiles[r.model] : undefined;
    const theta = profile ? tokenThroughput(profile) : 1;
    const left = remainingTokens(r);
    const fixed = flags.evict ? left.fixed : left.fixed + left.evictable;
    const swapS: Record<string, number> = {};
    if (r.model !== undefined) swapS[r.model] = 0;
    if (flags.swap || r.model === undefined) {
      for (const [m, l] of Object.entries(r.loadable)) if (m !== r.model) swapS[m] = l.costS;
    }
    let drainS = 0;
    for (const p of Object.values(r.profiles)) {
      drainS = Math.max(drainS, (p.maxOutputTokens * p.inefficiency * p.decodeMsPerIteration) / 1000);
    }
    return {
      id: r.id,
      currentModel: r.model,
      readyS: profile ? fixed / theta : 0,
      swapS,
      drainS,
      firstDrainS:
        profile && r.running.length > 0
          ? (left.tailTokens * profile.inefficiency * profile.decodeMsPerIteration) / 1000
          : 0,
    };
  });

  const groups: PlanGroup[] = [];
  const serviceS: number[][] = [];
  const lateOffsetS: number[][] = [];

  if (flags.evict) {
    for (const [q, r] of state.replicas.entries()) {
      const left = remainingTokens(r);
      const profile = r.model !== undefined ? r.profiles[r.model] : undefined;
      if (left.evictableCount === 0 || !profile || r.model === undefined) continue;
      groups.push({
        id: runningGroupId(r.id),
        model: r.model,
        size: left.evictableCount,
        weight: 0,
        deadlineS: Number.POSITIVE_INFINITY,
        arrivalS: Number.NEGATIVE_INFINITY,
        pinnedQueue: r.id,
        running: true,
      });
      serviceS.push(
        queues.map((_, k) =>
          k === q ? left.evictable / tokenThroughput(profile) : Number.POSITIVE_INFINITY,
        ),
      );
      lateOffsetS.push(queues.map(() => NO_DEADLINE_S));
    }
  }

  for (const group of state.groups) {
    const stats = options.outputStats(group.key);
    const eligible = state.replicas.filter((r) => canServe(r, group.key.model, flags));
    let pinnedQueue: string | undefined;
    if (!flags.loadBalance) {
      pinnedQueue = assigned.get(group.id);
      if (pinnedQueue === undefined && eligible.length > 0)
        pinnedQueue = eligible[stableIndex(group.id, eligible.length)]?.id;
    }
    let deadlineS = Number.POSITIVE_INFINITY;
    let arrivalS = Number.POSITIVE_INFINITY;
    let weight = 0;
    for (const m of group.members) {
      arrivalS = Math.min(arrivalS, (m.arrivalMs - nowMs) / 1000);
      // A resumed (evicted) request already had its first token: its TTFT is settled.
      if ((m.generated ?? 0) > 0) continue;
      deadlineS = Math.min(deadlineS, (m.deadlineMs - nowMs) / 1000);
      weight += bandWeight(m.band);
    }
    groups.push({
      id: group.id,
      model: group.key.model,
      size: group.members.length,
      weight,
      deadlineS,
      arrivalS,
      pinnedQueue,
      orderKey: groupKeyString(group.key),
    });
    serviceS.push(
      state.replicas.map((r) => {
        const profile = r.profiles[group.key.model];
        if (!profile || !eligible.includes(r)) return Number.POSITIVE_INFINITY;
        return groupTokens(group, stats) / tokenThroughput(profile);
      }),
    );
    lateOffsetS.push(
      state.replicas.map((r) => {
        const profile = r.profiles[group.key.model];
        if (!profile || !eligible.includes(r)) return NO_DEADLINE_S;
        return Math.max(NO_DEADLINE_S, worstLateness(group, profile, stats, z, nowMs));
      }),
    );
  }
  return { groups, queues, serviceS, lateOffsetS, waitWeight: options.waitWeight ?? 0.001 };
}

/** Expected output tokens still to generate for the group's members. */
function groupTokens(group: RequestGroup, stats: LengthStats): number {
  let tokens = 0;
  for (const m of group.members) tokens += Math.max(stats.mean - (m.generated ?? 0), 1);
  return tokens;
}

/** `P + max_k (W_k − D_k)` over members k still waiting for their first token, seconds. */
function worstLateness(
  group: RequestGroup,
  profile: RwtProfile,
  stats: LengthStats,
  z: number,
  nowMs: number,
): number {
  let worst = Number.NEGATIVE_INFINITY;
  for (const [k, m] of group.members.entries()) {
    if ((m.generated ?? 0) > 0) continue;
    const wait = waitingTime(profile, k, stats, z).upperS;
    worst = Math.max(worst, wait - (m.deadlineMs - nowMs) / 1000);
  }
  return worst === Number.NEGATIVE_INFINITY ? NO_DEADLINE_S : profile.prefillMs / 1000 + worst;
}
