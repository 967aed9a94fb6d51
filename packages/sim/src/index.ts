/** Engine models, hardware specs, swap costs and fitting live in `@fairway/perf`; re-exported for the simulator's callers. */

export {
  type LengthSampler,
  type LengthSpec,
  lengthSampler,
  sampleGamma,
  searchCdf,
  zipfCdf,
} from '@fairway/core';
export type {
  BatchPolicy,
  BatchShape,
  EngineConfig,
  EngineEvent,
  EngineModelApi,
  EngineSeqInput,
  EngineStats,
  PlannedBatch,
  PreemptionMode,
  PreemptionVictim,
  StepCostModel,
  StepNoise,
  StepNoiseDistribution,
  StepResult,
} from '@fairway/perf';
export {
  COST_MODEL_REFERENCES,
  type CostModelReference,
  costCoefficients,
  costModelPreset,
  EngineModel,
  engineConfigSchema,
  FIXED_RESERVE_GIB,
  fitEnginePerformance,
  GPU_HARDWARE,
  type GpuHardware,
  HELD_OUT_GRID,
  type HeldOutError,
  heldOutError,
  jitteredCostModel,
  type KvCapacityBreakdown,
  type KvCapacityInput,
  kvCapacityBreakdown,
  kvCapacityTokens,
  LinearStepCostModel,
  LORA_ADAPTER_GB,
  LORA_OVERHEAD_S,
  MODEL_ARCHITECTURES,
  type ModelArchitecture,
  modelSwapSeconds,
  NODE_BANDWIDTH,
  type NodeBandwidth,
  type ProfiledModel,
  type ProfilingGrid,
  type ProfilingSamples,
  performanceCostModel,
  performanceEngineConfig,
  profileEngine,
  qlmProfile,
  RESTART_OVERHEAD_S,
  type ResolvedEngineConfig,
  resolveEngineConfig,
  type StepCostCoefficients,
  swapCostOf,
  VLLM_STEP_JITTER_CV,
  WAKE_OVERHEAD_S,
  type WorkloadLengths,
} from '@fairway/perf';
export { Cluster, type ClusterMember } from './cluster.ts';
export { SimError, SimErrorCode } from './errors.ts';
export { EventQueue } from './event-queue.ts';
export {
  type BackloggedGap,
  backloggedServiceGap,
  backlogIntervals,
  type VtcFairnessBound,
  vtcFairnessBound,
} from './fairness-bound.ts';
export {
  type AppProfileOptions,
  appProfilesOf,
  type FairServeOptions,
  fairserveOptionsOf,
  type OitLimitOptions,
  oitLimitsOf,
  peakWindowCounts,
} from './fairserve-profiles.ts';
export {
  computeInteractionMetrics,
  type InteractionCounts,
  type InteractionMetrics,
  type InteractionMetricsOptions,
  type UserInteractionMetrics,
} from './interaction-metrics.ts';
export {
  computeMetrics,
  type Distribution,
  distribution,
  type FairnessMetrics,
  jainIndex,
  type MetricSeries,
  type MetricsOptions,
  percentile,
  type SimMetrics,
  type SloAttainment,
  type TenantMetrics,
  windowServiceDifference,
} from './metrics.ts';
export { ServiceCurve, type ServiceSpan } from './metrics-curve.ts';
export {
  analyticLowerBound,
  OPTIMAL_LIMITS,
  type OptimalSchedule,
  type OptimalScheduleOptions,
  objectiveValue,
  replaySchedule,
  runHeuristic,
  type ScheduleObjective,
  type ScheduleOutcome,
  type ScheduleRequest,
  scheduleLowerBound,
  solveOptimalSchedule,
} from './optimal-schedule.ts';
export {
  bucketedOutputPredictor,
  type FleetPlan,
  type FleetPlanOptions,
  fewestPassing,
  type PlanPoint,
  type PlanProbe,
  type PlanSlo,
  type PolicyPlan,
  planFleet,
} from './plan.ts';
export {
  planPlotSpec,
  renderAttainmentPlot,
  renderPlanPlot,
  renderThroughputPlot,
} from './plan-plot.ts';
export { type Plot, renderPlots, renderSvg } from './plots.ts';
export {
  QlmControl,
  type QlmControlOptions,
  type QlmControlStats,
  type SwapCost,
} from './qlm-control.ts';
export type { EngineSample, RequestRecord, SimRun } from './records.ts';
export {
  buildReport,
  formatReport,
  reportJson,
  round,
  type SimReport,
  type TenantReport,
} from './report.ts';
export { type RunInput, runSimulation } from './runner.ts';
export {
  buildRunInput,
  fleetCachedTokenWeight,
  type LoadedScenario,
  listScenarios,
  loadScenario,
  parseScenario,
  type ScenarioOverrides,
  type ScenarioRunInput,
} from './scenario.ts';
export { type Scenario, type ScenarioInput, scenarioSchema } from './scenario-schema.ts';
export { FAIRSERVE_ABUSE_WINDOW_S, FAIRSERVE_ABUSER } from './scenarios/fairserve.ts';
export { EVIDENCE_SEEDS, overSeeds, type SeedSummary, summarizeSeeds } from './seed-summary.ts';
export type {
  ControlOp,
  ControlReplica,
  RunningRequest,
  SloControl,
  SloControlContext,
} from './slo-control.ts';
export {
  attainmentBounds,
  type ClassAttainment,
  runSloExperiment,
  SLO_POLICIES,
  type SloExperimentOptions,
  type SloExperimentResult,
  type SloPolicy,
  type SloPolicySetup,
  type SloSetupOptions,
  sloPolicySetup,
} from './slo-experiments.ts';
export {
  loadTrace,
  parseTraceCsv,
  resolveTracePath,
  splitTenantIds,
  splitTenants,
  type TenantSplit,
  TRACE_FILES,
  type TraceName,
  type TraceRow,
  type TraceWorkloadOptions,
  tracesDir,
  traceWorkload,
} from './trace.ts';
export {
  byArrival,
  generateStream,
  generateWorkload,
  type PrefixSpec,
  type StreamSpec,
  streamNames,
  type WorkloadSpec,
} from './workload.ts';
export {
  type DurationSpec,
  FAIRSERVE_SIZE_BUCKETS,
  type FollowUpSpec,
  type InteractionSizeSpec,
  type InteractionSpec,
} from './workload-interaction.ts';
export {
  type ArrivalProcess,
  type ArrivalSpec,
  arrivalTimes,
  expectedArrivals,
  type RatePhase,
  type RateSegment,
  rateSegments,
} from './workload-rate.ts';
