export {
  type LengthSampler,
  type LengthSpec,
  lengthSampler,
  sampleGamma,
  searchCdf,
  zipfCdf,
} from './distributions.ts';
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
  buildRunInput,
  type LoadedScenario,
  listScenarios,
  loadScenario,
  parseScenario,
  type ScenarioOverrides,
  type ScenarioRunInput,
} from './scenario.ts';
export { type Scenario, type ScenarioInput, scenarioSchema } from './scenario-schema.ts';
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
