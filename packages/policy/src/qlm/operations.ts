import type { LengthStats } from './output-stats.ts';
import type { QueuePlan } from './plan-instance.ts';
import {
  type QlmFlags,
  type QlmReplica,
  type QlmState,
  resolveFlags,
  runningGroupId,
  type SwapMechanism,
} from './qlm-state.ts';
import type { GroupKey, RequestGroup } from './request-group.ts';
import { tokenThroughput } from './rwt-estimator.ts';

/**
 * A serving operation the planner decides and a runner (simulator or live dispatcher) executes
 * (QLM section 5, Figure 7). Pure data.
 */
export type ServingOp =
  /** Move the requests from the head of the replica's virtual queue into its running batch. */
  | { readonly kind: 'pull'; readonly replica: string; readonly requestIds: readonly string[] }
  /**
   * Without request pulling: hand every request assigned to the replica to its engine queue now,
   * in virtual-queue order, whatever the room; the engine's FCFS takes over.
   */
  | { readonly kind: 'push'; readonly replica: string; readonly requestIds: readonly string[] }
  /**
   * Abort these lower-band running requests so `forGroup` can run: re-queue each at the front of
   * its group with the output so far, and charge only what was served.
   */
  | {
      readonly kind: 'evict';
      readonly replica: string;
      readonly requestIds: readonly string[];
      readonly forGroup: string;
    }
  /** Load balancing: the group now belongs to this replica's virtual queue (from `previous`, if any). */
  | {
      readonly kind: 'assign';
      readonly groupId: string;
      readonly replica: string;
      readonly position: number;
      readonly previous?: string | undefined;
    }
  /**
   * Switch the replica to another model. With `afterDrain` the runner lets the running batch
   * finish first (no new pulls meanwhile); `costS` is the planner's estimate of the switch itself.
   */
  | {
      readonly kind: 'swap';
      readonly replica: string;
      readonly from: string | undefined;
      readonly to: string;
      readonly costS: number;
      readonly mechanism: SwapMechanism;
      readonly afterDrain: boolean;
    };

/** Options of {@link planOperations}. */
export interface OperationOptions {
  readonly flags?: QlmFlags;
  /** Output-length statistics, to reserve a pulled request's expected tokens. */
  readonly outputStats: (key: GroupKey) => LengthStats;
  /**
   * A swap is ordered only when the consecutive groups of the new model at the head of the queue
   * hold at least this many times the swap's cost in service time (their expected output tokens
   * over the replica's throughput for that model): a swap for a few requests costs the replica more
   * than it serves, and the plan, which sees only queued work, cannot weigh the loaded model's
   * future arrivals. @default 0 (any head of another model swaps)
   */
  readonly minSwapWorkFactor?: number;
  /**
   * A running request evicted this many times already is not evicted again, so an eviction can
   * never cycle: its recomputation is paid at most this many times per request. @default no bound
   */
  readonly maxEvictions?: number;
}

/**
 * Translates a virtual-queue plan into serving operations (QLM section 5): `assign` for every
 * group that changes queue, `evict` when the plan puts a group before the replica's evictable
 * running requests and waiting for them would make it late (`startsInTime`; only as many, lowest
 * band and least progress first, as the head group needs room for), `swap` when the head group
 * needs another model, and `pull` of head requests (FCFS within groups, groups in queue order,
 * same model only) while their input plus expected output fits the replica's free tokens and
 * sequence slots — or `push` of everything when pulling is disabled.
 */
export function planOperations(state: QlmState, plan: QueuePlan, options: OperationOptions): ServingOp[] {
  const flags = resolveFlags(options.flags);
  const groups = new Map<string, RequestGroup>(state.groups.map((g) => [g.id, g]));
  const previous = new Map<string, string>();
  for (const [replica, ids] of Object.entries(state.queues)) for (const id of ids) previous.set(id, replica);
  const ops: ServingOp[] = [];

  for (const replica of state.replicas) {
    const order = plan[replica.id] ?? [];
    for (const [position, id] of order.entries()) {
      if (!groups.has(id)) continue;
      const from = previous.get(id);
      if (from !== replica.id)
        ops.push({ kind: 'assign', groupId: id, replica: replica.id, position, previous: from });
    }
  }

  for (const replica of state.replicas) {
    const order = (plan[replica.id] ?? []).filter(
      (id) => groups.has(id) || id === runningGroupId(replica.id),
    );
    const runningAt = order.indexOf(runningGroupId(replica.id));
    const queued = order.filter((id) => groups.has(id)).map((id) => groups.get(id) as RequestGroup);
    let freeTokens = replica.freeTokens;
    let freeSeqs = replica.freeSeqs;
    let stillRunning = replica.running.length;

    const head = queued[0];
    if (runningAt > 0 && head && flags.evict) {
      const mean = options.outputStats(head.key).mean;
      let needTokens = 0;
      for (const m of head.members)
        needTokens += m.inputTokens + Math.max(mean - (m.generated ?? 0), 1) + (m.generated ?? 0);
      const needSeqs = head.members.length;
      // Evict only for a predicted violation, and only what the head group needs: lowest band
      // first, then the least progress lost, never a request evicted maxEvictions times already.
      if (!startsInTime(state.nowMs, replica, head, needTokens, needSeqs)) {
        const maxEvictions = options.maxEvictions ?? Number.POSITIVE_INFINITY;
        const candidates = replica.running
          .filter((r) => r.sheddable && r.band > head.band && (r.evictions ?? 0) < maxEvictions)
          .sort((a, b) => b.band - a.band || a.generated - b.generated || (a.id < b.id ? -1 : 1));
        const victims: string[] = [];
        for (const v of candidates) {
          if (freeTokens >= needTokens && freeSeqs >= needSeqs) break;
          victims.push(v.id);
          freeTokens += v.inputTokens + v.generated;
          freeSeqs++;
          stillRunning--;
        }
        if (victims.length > 0)
          ops.push({ kind: 'evict', replica: replica.id, requestIds: victims, forGroup: head.id });
      }
    }
    if (!head) continue;

    const model = replica.model;
    if (head.key.model !== model) {
      const load = replica.loadable[head.key.model];
      if (!load) continue;
      const factor = options.minSwapWorkFactor ?? 0;
      if (factor > 0) {
        const profile = replica.profiles[head.key.model];
        let workS = 0;
        for (const g of queued) {
          if (g.key.model !== head.key.model) break;
          const mean = options.outputStats(g.key).mean;
          for (const m of g.members) workS += Math.max(mean - (m.generated ?? 0), 1);
        }
        if (profile) workS /= tokenThroughput(profile);
        if (workS < factor * load.costS) continue;
      }
      ops.push({
        kind: 'swap',
        replica: replica.id,
        from: model,
        to: head.key.model,
        costS: load.costS,
        mechanism: load.mechanism,
        afterDrain: stillRunning > 0,
      });
      // Nothing joins the batch until the swap is done; the next round pulls for the new model.
      continue;
    }

    const ids: string[] = [];
    for (const group of queued) {
      if (group.key.model !== model) break;
      const mean = options.outputStats(group.key).mean;
      let full = false;
      for (const m of group.members) {
        if (flags.pull) {
          const need = m.inputTokens + (m.generated ?? 0) + Math.max(mean - (m.generated ?? 0), 1);
          if (freeSeqs < 1 || freeTokens < need) {
            full = true;
            break;
          }
          freeSeqs--;
          freeTokens -= need;
        }
        ids.push(m.id);
      }
      if (full) break;
    }
    if (ids.length > 0)
      ops.push({ kind: flags.pull ? 'pull' : 'push', replica: replica.id, requestIds: ids });
  }
  return ops;
}

/**
 * Whether `head` starts on `replica` in time without an eviction (QLM section 5: eviction is for a
 * predicted SLO violation): the running requests, each finishing after its expected output at the
 * replica's decode pace, free room for the group's `needTokens` and `needSeqs` within half the time
 * left to its earliest member's deadline, its prefill included. The other half covers the
 * estimate's error and the next planning round; a request that outruns its expected output counts
 * as one iteration from its end, so the wait is re-judged, shorter slack each round, until either
 * the room frees or the group evicts. Without a profile for the replica's model the answer is
 * no, and the group evicts as the plan asks.
 */
function startsInTime(
  nowMs: number,
  replica: QlmReplica,
  head: RequestGroup,
  needTokens: number,
  needSeqs: number,
): boolean {
  const profile = replica.model === undefined ? undefined : replica.profiles[replica.model];
  if (profile === undefined) return false;
  let deadlineMs = Number.POSITIVE_INFINITY;
  for (const m of head.members) deadlineMs = Math.min(deadlineMs, m.deadlineMs);
  const iterationMs = profile.decodeMsPerIteration * profile.inefficiency;
  const finishing = replica.running
    .map((r) => ({
      atMs: Math.max(r.expectedOutput - r.generated, 1) * iterationMs,
      tokens: r.inputTokens + Math.max(r.expectedOutput, r.generated),
    }))
    .sort((a, b) => a.atMs - b.atMs);
  let tokens = replica.freeTokens;
  let seqs = replica.freeSeqs;
  let startMs = 0;
  for (const f of finishing) {
    if (tokens >= needTokens && seqs >= needSeqs) break;
    tokens += f.tokens;
    seqs++;
    startMs = f.atMs;
  }
  if (tokens < needTokens || seqs < needSeqs) return false;
  return startMs + profile.prefillMs <= (deadlineMs - nowMs) / 2;
}
