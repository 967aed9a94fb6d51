export {
  type AdmissionContext,
  type AdmissionPolicy,
  composeAdmission,
  type InteractionRef,
  NO_ADMISSION_LIMITS,
  reservedTokensOf,
  type WindowLimit,
} from './admission.ts';
export { fcfsPolicy } from './fcfs.ts';
export { appOf, kvOverloaded, type OitOptions, oitAdmission, userOf } from './oit.ts';
export type { LiftMode, OrderingMode, OrderingPolicy } from './ordering.ts';
export {
  ORDERING_POLICY_NAMES,
  type OrderingPolicyName,
  type OrderingPolicyOptions,
  orderingPolicyByName,
} from './ordering-registry.ts';
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
export { MINUTE_MS, type RateLimitOptions, rateLimitAdmission, rpmWindow, tpmWindow } from './rate-limits.ts';
export { lcfPolicy, type OutputPrediction, type VtcOptions, vtcPolicy, weightedVtcPolicy } from './vtc.ts';
export { continuesInteraction, type WscOptions, wscFlowOf, wscPolicy } from './wsc.ts';
