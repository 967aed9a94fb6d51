export {
  type AdmissionContext,
  type AdmissionPolicy,
  composeAdmission,
  type InteractionRef,
  NO_ADMISSION_LIMITS,
  reservedTokensOf,
  type WindowLimit,
} from './admission.ts';
export {
  type AladdinPlacementOptions,
  aladdinBounds,
  aladdinPlacement,
  sloAwarePlacement,
} from './aladdin/aladdin-placement.ts';
export {
  asPlaced,
  byCapacityNorm,
  type IncomingRequest,
  type PlacementDecision,
  placeBestFit,
  type RejectedReplica,
  rankBestFit,
} from './aladdin/best-fit.ts';
export { capacityNorm, weightedContext } from './aladdin/capacity-norm.ts';
export {
  conditionalMeanOutput,
  OutputHistory,
  type OutputHistoryOptions,
  promptBucket,
  repredictOutput,
} from './aladdin/output-repredict.ts';
export {
  type FinishedRequest,
  type PredictionError,
  predictionErrors,
  type RebalanceMove,
  type RebalanceOptions,
  type RebalancePlan,
  type RebalanceReplica,
  rebalance,
} from './aladdin/rebalance.ts';
export {
  type AladdinOptions,
  expectedLength,
  type PlacedRequest,
  type ReplicaView,
  type ResolvedAladdinOptions,
  resolveAladdinOptions,
} from './aladdin/replica-view.ts';
export {
  fitWorkerCount,
  type RatePoint,
  replicasForRate,
  type WorkerCountFitOptions,
  type WorkerCountModel,
} from './aladdin/scaling.ts';
export {
  checkPlacement,
  type FeasibilityResult,
  futureKvPeak,
  type InfeasibleReason,
  type KvCourse,
  peakKvDemand,
  type ReplicaPrediction,
} from './aladdin/slo-feasibility.ts';
export {
  type BatchBottleneck,
  chooseTensorParallel,
  evaluateTp,
  type TpChoice,
  type TpEvaluation,
  type WorkerSlo,
  type WorkloadProfile,
} from './aladdin/worker-config.ts';
export {
  AppProfileLearner,
  type AppProfileLearnerOptions,
  type AppSample,
  MAX_LEARNED_STAGES,
} from './app-profile-learner.ts';
export { CachedShareHistory } from './cached-share.ts';
export { deadlineMs, edfPolicy, sloClassMap } from './edf.ts';
export {
  FitError,
  PolicyError,
  PolicyErrorCode,
  PolicyInputError,
  parseInput,
  SolverError,
  UnknownSloClassError,
} from './errors.ts';
export { fcfsPolicy } from './fcfs.ts';
export { appOf, kvOverloaded, type OitOptions, oitAdmission, userOf } from './oit.ts';
export type { LiftMode, OrderingMode, OrderingPolicy } from './ordering.ts';
export {
  ORDERING_POLICY_NAMES,
  type OrderingPolicyName,
  type OrderingPolicyOptions,
  orderingPolicyByName,
} from './ordering-registry.ts';
export {
  type DecodeModel,
  decodeIterationMs,
  fitDecodeModel,
  maxDecodeBatch,
  maxDecodeContext,
} from './perf-model/decode-model.ts';
export { fitKvModel, IDENTITY_KV_MODEL, type KvUsageModel, kvTokens } from './perf-model/kv-model.ts';
export { type FitQuality, fitQuality, type LinearFit, leastSquares } from './perf-model/least-squares.ts';
export {
  fitPerformanceModel,
  type PerformanceFitReport,
  type PerformanceModel,
  type PerformanceSamples,
} from './perf-model/performance-model.ts';
export {
  type PerformanceMeasurement,
  type PerformanceModelFile,
  parsePerformanceModelFile,
  performanceModelFileSchema,
  toPerformanceModelFile,
} from './perf-model/performance-model-file.ts';
export {
  fitPrefillModel,
  maxPrefillTokens,
  type PrefillModel,
  prefillMs,
} from './perf-model/prefill-model.ts';
export {
  type DecodeSample,
  decodeSampleSchema,
  type KvSample,
  kvSampleSchema,
  type PrefillSample,
  prefillSampleSchema,
  type SplitSamples,
  type StepSample,
  samplesFromSteps,
} from './perf-model/samples.ts';
export { joinShortestQueuePlacement } from './placement/join-shortest-queue.ts';
export { leastKvPlacement } from './placement/least-kv.ts';
export {
  byId,
  compareKeys,
  kvLoad,
  orderBy,
  type PlacementCandidate,
  type PlacementContext,
  type PlacementPolicy,
  queueLength,
  type ReplicaState,
  type SequenceProgress,
} from './placement/placement-policy.ts';
export {
  PLACEMENT_NAMES,
  type PlacementName,
  type PlacementPolicyOptions,
  placementByName,
} from './placement/placement-registry.ts';
export { powerOfTwoPlacement } from './placement/power-of-two.ts';
export { roundRobinPlacement } from './placement/round-robin.ts';
export {
  type GlobalSchedule,
  type GlobalScheduleOptions,
  type PlanSource,
  solveGlobalSchedule,
} from './qlm/global-scheduler.ts';
export { buildPlanInstance, type EstimatorOptions } from './qlm/instance-builder.ts';
export { type ListOrder, listPlan } from './qlm/list-planner.ts';
export { buildMilp, type MilpBuildOptions, type MilpModel } from './qlm/milp-model.ts';
export {
  highsSolver,
  loadHighsSolver,
  type MilpBudget,
  type MilpResult,
  type MilpSolver,
} from './qlm/milp-solver.ts';
export { type OperationOptions, planOperations, type ServingOp } from './qlm/operations.ts';
export { type LengthStats, OutputLengthStats } from './qlm/output-stats.ts';
export {
  evaluatePlan,
  type GroupOutcome,
  type PlanEvaluation,
  type PlanGroup,
  type PlanInstance,
  type PlanQueue,
  type QueuePlan,
} from './qlm/plan-instance.ts';
export { improvePlan, type PlanSearchOptions } from './qlm/plan-search.ts';
export {
  type PredictedViolation,
  planQueues,
  predictViolations,
  type QueueDecision,
  type QueuePlanner,
  type QueuePlannerOptions,
} from './qlm/qlm-planner.ts';
export {
  type QlmFlags,
  type QlmReplica,
  type QlmRunningRequest,
  type QlmState,
  type ResolvedQlmFlags,
  resolveFlags,
  runningGroupId,
  type SwapMechanism,
} from './qlm/qlm-state.ts';
export {
  DEFAULT_PROFILE_BOUNDARIES,
  type GroupKey,
  GroupTable,
  type GroupTableOptions,
  groupBand,
  groupKeyString,
  profileBucket,
  type QlmRequest,
  type RequestGroup,
  toQlmRequest,
} from './qlm/request-group.ts';
export {
  completionTime,
  conservativeDecodeS,
  measureInefficiency,
  normalQuantile,
  type RwtProfile,
  rwtProfileFromPerformance,
  sumEstimates,
  type TimeEstimate,
  tokenThroughput,
  waitingTime,
} from './qlm/rwt-estimator.ts';
export {
  type DispatchRoute,
  type DispatchRouter,
  VirtualQueueRouter,
  type VirtualQueueRouterOptions,
} from './qlm/virtual-queue-router.ts';
export { MINUTE_MS, type RateLimitOptions, rateLimitAdmission, rpmWindow, tpmWindow } from './rate-limits.ts';
export { lcfPolicy, type OutputPrediction, type VtcOptions, vtcPolicy, weightedVtcPolicy } from './vtc.ts';
export { continuesInteraction, type WscOptions, wscFlowOf, wscPolicy } from './wsc.ts';
