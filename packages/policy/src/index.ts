export { fcfsPolicy } from './fcfs.ts';
export type { LiftMode, OrderingMode, OrderingPolicy } from './ordering.ts';
export { joinShortestQueuePlacement } from './placement/join-shortest-queue.ts';
export { leastKvPlacement } from './placement/least-kv.ts';
export {
  byId,
  compareKeys,
  kvLoad,
  orderBy,
  type PlacementPolicy,
  queueLength,
  type ReplicaState,
} from './placement/placement-policy.ts';
export { PLACEMENT_NAMES, type PlacementName, placementByName } from './placement/placement-registry.ts';
export { powerOfTwoPlacement } from './placement/power-of-two.ts';
export { roundRobinPlacement } from './placement/round-robin.ts';
