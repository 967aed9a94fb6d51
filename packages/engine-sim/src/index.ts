export {
  addEngineSimFlags,
  engineSimOptionsFromFlags,
  type RunEngineSimHooks,
  runEngineSimCommand,
} from './cli.ts';
export {
  type FaultConfig,
  FaultInjector,
  type FaultPlan,
  faultConfigSchema,
  faultPatchSchema,
} from './faults.ts';
export { EngineSimMetrics, type FinishedReason, type RequestTimings } from './metrics.ts';
export {
  type EngineSimOptions,
  type EngineSimOptionsInput,
  engineSimOptionsSchema,
} from './options.ts';
export {
  monotonicClock,
  RealtimeDriver,
  type RealtimeDriverOptions,
  type SeqListener,
} from './realtime-driver.ts';
export {
  buildEngineSimApp,
  type EngineSimApp,
  type EngineSimDeps,
  type EngineSimHandle,
  type StartEngineSimOptions,
  smallestFittingTp,
  startEngineSim,
} from './server.ts';
