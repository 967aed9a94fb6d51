import { kvLoad, orderBy, type PlacementPolicy, queueLength } from './placement-policy.ts';

/**
 * Join the shortest queue: fewest requests on the replica (reserved by the gateways or reported by
 * the engine, whichever is larger), ties by KV load, then id.
 */
export function joinShortestQueuePlacement(): PlacementPolicy {
  const policy: PlacementPolicy = {
    name: 'jsq',
    order: (replicas) => orderBy(replicas, (r) => [queueLength(r), kvLoad(r)]),
    forDispatcher: () => policy,
  };
  return policy;
}
