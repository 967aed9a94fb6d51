export {
  COST_MODEL_REFERENCES,
  type CostModelReference,
  cachedTokenWeightFor,
  cachedTokenWeightOf,
  costCoefficients,
  costModelPreset,
  LinearStepCostModel,
  type StepCostCoefficients,
} from './cost-models.ts';
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
} from './engine-api.ts';
export {
  engineConfigSchema,
  type ResolvedEngineConfig,
  resolveEngineConfig,
  stepNoiseSchema,
  VLLM_STEP_JITTER_CV,
} from './engine-config.ts';
export { EngineModel } from './engine-model.ts';
export { PerfError, PerfErrorCode } from './errors.ts';
export { HELD_OUT_GRID, type HeldOutError, heldOutError, jitteredCostModel } from './fit-validation.ts';
export {
  GPU_HARDWARE,
  type GpuHardware,
  MODEL_ARCHITECTURES,
  type ModelArchitecture,
} from './hardware-specs.ts';
export {
  FIXED_RESERVE_GIB,
  type KvCapacityBreakdown,
  type KvCapacityInput,
  kvCapacityBreakdown,
  kvCapacityTokens,
} from './kv-capacity.ts';
export {
  LORA_ADAPTER_GB,
  LORA_OVERHEAD_S,
  type ModelSwapCost,
  modelSwapSeconds,
  NODE_BANDWIDTH,
  type NodeBandwidth,
  RESTART_OVERHEAD_S,
  swapCostOf,
  WAKE_OVERHEAD_S,
} from './model-swap.ts';
export { IdealPrefixCache, type PrefixCacheListener } from './prefix-cache.ts';
export {
  fitEnginePerformance,
  type ProfiledModel,
  type ProfilingGrid,
  type ProfilingSamples,
  performanceCostModel,
  performanceEngineConfig,
  profileEngine,
  qlmProfile,
  type WorkloadLengths,
} from './profiling.ts';
