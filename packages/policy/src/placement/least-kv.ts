import { kvLoad, orderBy, type PlacementPolicy, queueLength } from './placement-policy.ts';

/**
 * Least KV: the replica with the smallest fraction of its KV capacity reserved or in use, so
 * replicas of different sizes (GPU types) fill in proportion; ties by queue length, then id.
 */
export function leastKvPlacement(): PlacementPolicy {
  const policy: PlacementPolicy = {
    name: 'least-kv',
    order: (replicas) => orderBy(replicas, (r) => [kvLoad(r), queueLength(r)]),
    forDispatcher: () => policy,
  };
  return policy;
}
