export type {
  CompletionBody,
  CompletionEndpoint,
  CompletionResult,
  Engine,
  EngineModelCard,
  EngineStream,
  GenerateOptions,
  StreamOptions,
} from './engine.ts';
export {
  type EngineProfileOptions,
  type EngineProfileSamples,
  type FittedEngineProfile,
  fitEngineProfile,
  type ProfiledReplica,
  profileEngineMetrics,
} from './engine-profiler.ts';
export {
  addEngineSimFlags,
  engineSimOptionsFromFlags,
  type RunEngineSimHooks,
  runEngineSimCommand,
} from './engine-sim/cli.ts';
export {
  type FaultConfig,
  FaultInjector,
  type FaultPlan,
  faultConfigSchema,
  faultPatchSchema,
} from './engine-sim/faults.ts';
export { EngineSimMetrics, type FinishedReason, type RequestTimings } from './engine-sim/metrics.ts';
export {
  type EngineSimOptions,
  type EngineSimOptionsInput,
  engineSimOptionsSchema,
} from './engine-sim/options.ts';
export {
  monotonicClock,
  RealtimeDriver,
  type RealtimeDriverOptions,
  type SeqListener,
} from './engine-sim/realtime-driver.ts';
export {
  buildEngineSimApp,
  type EngineSimApp,
  type EngineSimDeps,
  type EngineSimHandle,
  type StartEngineSimOptions,
  startEngineSim,
} from './engine-sim/server.ts';
export {
  EngineAbortedError,
  EngineBadResponseError,
  EngineConnectionLostError,
  EngineError,
  EngineErrorCode,
  EngineHttpError,
  EngineProfileError,
  EngineTimeoutError,
  type EngineTimeoutPhase,
  EngineUnreachableError,
  MetricsFormatError,
  TokenizerLoadError,
} from './errors.ts';
export {
  type HistogramTotals,
  type ParseVllmMetricsOptions,
  parseVllmMetrics,
  VLLM_METRIC,
  type VllmMetrics,
} from './metrics-parser.ts';
export { type EngineUsage, type SseDataLine, SseScanner } from './sse.ts';
export { type LoadedTokenizer, loadTokenizer } from './tokenizer.ts';
export { VllmClient, type VllmClientOptions } from './vllm-client.ts';
