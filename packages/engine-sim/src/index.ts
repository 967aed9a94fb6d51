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
export { KvEventPublisher, type KvEventPublisherOptions } from './kv-event-publisher.ts';
export {
  type EngineSimEnv,
  intBlockHashes,
  type KvEventsConfig,
  type KvEventsConfigInput,
  kvEventsConfigSchema,
} from './kv-events-config.ts';
export { EngineSimMetrics, type FinishedReason, type RequestTimings } from './metrics.ts';
export {
  type EngineSimOptions,
  type EngineSimOptionsInput,
  engineSimOptionsSchema,
} from './options.ts';
export { promptTokenIds, SPECIAL_TOKEN_ID } from './prompt-blocks.ts';
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
