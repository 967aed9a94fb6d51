import { normalizeKindOrder, type PlanGroup, type PlanInstance, type QueuePlan } from './plan-instance.ts';

/** Order in which a list planner takes groups. */
export type ListOrder =
  /** Earliest deadline first (QLM's EDF baseline and the global scheduler's fallback). */
  | 'edf'
  /** Earliest arrival first (vLLM's FCFS). */
  | 'fcfs';

function cmp(a: number, b: number): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * List scheduling: groups taken in EDF or FCFS order, each appended to the queue where it would
 * start earliest (counting drain and model load when the queue's last model differs), or to the
 * queue it is pinned to. Groups of running requests stay at the head of their queue: neither
 * baseline evicts. Groups no queue can serve are left out and reported. Groups in `prefix` keep
 * their queue and order and the rest are appended after them.
 */
export function listPlan(
  instance: PlanInstance,
  order: ListOrder,
  prefix: QueuePlan = {},
): { plan: QueuePlan; unplaced: string[] } {
  const { groups, queues } = instance;
  const index = new Map(groups.map((g, i) => [g.id, i]));
  const state = queues.map((q) => ({ t: q.readyS, model: q.currentModel, order: [] as string[] }));
  const append = (q: number, i: number, start: number) => {
    const s = state[q] as (typeof state)[number];
    s.order.push((groups[i] as PlanGroup).id);
    s.model = (groups[i] as PlanGroup).model;
    s.t = start + ((instance.serviceS[i] as readonly number[])[q] as number);
  };
  const startOn = (q: number, i: number): number | undefined => {
    const queue = queues[q] as PlanInstance['queues'][number];
    const g = groups[i] as PlanGroup;
    const service = (instance.serviceS[i] as readonly number[])[q] as number;
    if (!Number.isFinite(service)) return undefined;
    const s = state[q] as (typeof state)[number];
    if (g.model === s.model) return s.t;
    const load = queue.swapS[g.model];
    if (load === undefined) return undefined;
    return s.t + (s.order.length === 0 ? queue.firstDrainS : queue.drainS) + load;
  };

  const placed = new Set<string>();
  for (const [q, queue] of queues.entries()) {
    for (const id of prefix[queue.id] ?? []) {
      const i = index.get(id);
      if (i === undefined || placed.has(id)) continue;
      append(q, i, startOn(q, i) ?? (state[q] as (typeof state)[number]).t);
      placed.add(id);
    }
  }

  const key = (g: PlanGroup) => (order === 'edf' ? g.deadlineS : g.arrivalS);
  const indexed = groups.map((g, i) => ({ g, i })).filter(({ g }) => !placed.has(g.id));
  // Running groups go first so they are never evicted.
  const running = indexed.filter(({ g }) => g.pinnedFirst || g.running);
  const rest = indexed
    .filter((e) => !running.includes(e))
    .sort((a, b) => cmp(key(a.g), key(b.g)) || cmp(a.g.arrivalS, b.g.arrivalS) || a.i - b.i);
  const unplaced: string[] = [];
  for (const { g, i } of [...running, ...rest]) {
    let best: { q: number; start: number } | undefined;
    for (const [q, queue] of queues.entries()) {
      if (g.pinnedQueue !== undefined && g.pinnedQueue !== queue.id) continue;
      const start = startOn(q, i);
      if (start !== undefined && (!best || start < best.start)) best = { q, start };
    }
    if (best) append(best.q, i, best.start);
    else unplaced.push(g.id);
  }
  const plan = Object.fromEntries(queues.map((q, k) => [q.id, (state[k] as (typeof state)[number]).order]));
  return { plan: normalizeKindOrder(instance, plan), unplaced };
}
