export type { SubmitOptions, SubmitResult } from './admission.ts';
export {
  type AdmissionContext,
  type AdmissionFunction,
  type AdmissionRules,
  admitAll,
  composeRules,
  fromAdmissionPolicy,
  toRules,
} from './admission-rules.ts';
export { ChargeCoalescer } from './charge-coalescer.ts';
export { DrainRate } from './drain-rate.ts';
export { GatewayError, GatewayErrorCode, UnknownSloClassError } from './errors.ts';
export { Gateway, type GatewayStats, MAX_MOVES, MOVE_EVERY_MS } from './gateway.ts';
export {
  type Dispatched,
  type GatewayOptions,
  type ReserveMode,
  type ResolvedGatewayOptions,
  resolveGatewayOptions,
} from './gateway-options.ts';
export {
  type KvBlockEvents,
  KvBlockIndex,
  type KvBlockIndexOptions,
  type KvBlockMatch,
} from './kv-block-index.ts';
export type { ReplicaPredictionErrors } from './output-prediction.ts';
export type {
  AffinityOutcome,
  KvAffinity,
  PrefixAffinityMode,
  PrefixAffinityOptions,
  PrefixLearned,
} from './prefix-affinity.ts';
export { PrefixIndex, type PrefixIndexOptions } from './prefix-index.ts';
export {
  QlmControl,
  type QlmControlOptions,
  type QlmControlStats,
  type SwapCost,
} from './qlm-control.ts';
export { QueueDeadlines } from './queue-deadline.ts';
export {
  type RateLimitState,
  type RateLimits,
  rateLimitsAfter,
  rateLimitsAtRefusal,
} from './rate-limit-state.ts';
export {
  type Headroom,
  type ReplicaInfo,
  type ReplicaSource,
  replicaState,
  reservableCapacity,
  toCandidate,
} from './replica-view.ts';
export { decodeRequest, encodeRequest, parseRequest, requestDescriptorSchema } from './request-payload.ts';
export {
  type DesiredReplicasAdvice,
  ScalingAdvisor,
  type ScalingAdvisorOptions,
} from './scaling-advisor.ts';
export type {
  ControlOp,
  ControlReplica,
  RunningRequest,
  SloControl,
  SloControlContext,
} from './slo-control.ts';
