import { byId, type PlacementPolicy, type ReplicaState } from './placement-policy.ts';

/**
 * Round-robin: each call starts one replica further along (by id order), skipping stale replicas,
 * so consecutive dispatches spread over the pool regardless of load.
 */
export function roundRobinPlacement(): PlacementPolicy {
  let cursor = 0;
  return {
    name: 'round-robin',
    order(replicas: readonly ReplicaState[]): readonly ReplicaState[] {
      const fresh = replicas.filter((r) => !r.stale).sort(byId);
      const stale = replicas.filter((r) => r.stale).sort(byId);
      if (fresh.length === 0) return stale;
      const start = cursor % fresh.length;
      cursor = (start + 1) % fresh.length;
      return [...fresh.slice(start), ...fresh.slice(0, start), ...stale];
    },
    forDispatcher: () => roundRobinPlacement(),
  };
}
