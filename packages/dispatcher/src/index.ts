export {
  AdminEventApplier,
  type AdminEventApplierOptions,
  type AdminOutcome,
  type AdminTrust,
  adminTrustOf,
  followAdminEvents,
} from './admin-events.ts';
export { buildDispatcher, type Dispatcher, type DispatcherDeps } from './app.ts';
export {
  Authenticator,
  hashApiKey,
  INTERNAL_KEY_HEADER,
  type KeyCheck,
  type KeyGrant,
  type KeyInfo,
  KeyRing,
  keyExpiry,
  keyRingFromConfig,
  newApiKey,
  type Principal,
} from './auth.ts';
export { ControlFeed } from './control-feed.ts';
export { ControlPlane, type ControlPlaneOptions, type Holdings } from './control-plane.ts';
export { liveProfiles, type ReplicaShape } from './control-profiles.ts';
export {
  type DispatcherOptions,
  type ResolvedDispatcherOptions,
  resolveDispatcherOptions,
} from './dispatcher-options.ts';
export { type EngineFactory, EnginePool } from './engine-pool.ts';
export {
  ApiError,
  type ApiErrorName,
  ApiErrors,
  DispatcherError,
  DispatcherErrorCode,
  type OpenAIErrorBody,
} from './errors.ts';
export { END_OUTCOMES, type EndOutcome, GatewayMetrics, type RequestOutcome } from './gateway-metrics.ts';
export {
  GatewayRuntime,
  type GatewayRuntimeOptions,
  type RuntimeHoldings,
  type RuntimeSubmit,
  type WaitOutcome,
} from './gateway-runtime.ts';
export {
  closeRedis,
  connectInfrastructure,
  type Infrastructure,
  type InfrastructureOptions,
  type RedisClusterSettings,
  type RedisSentinelSettings,
} from './infrastructure.ts';
export {
  type InternalAnswer,
  type InternalCompletion,
  InternalCompletions,
} from './internal-completion.ts';
export {
  LeaderLease,
  type LeaderLeaseOptions,
  type LeaseBackend,
  MemoryLeaseBackend,
  RedisLeaseBackend,
} from './leader-lease.ts';
export { chatCompletionSchema, completionSchema } from './openai-schemas.ts';
export type { PrometheusSource } from './prometheus-producer.ts';
export { RegistryReplicaSource } from './replica-source.ts';
export { FairwayHeaders } from './request-headers.ts';
export { type SchedulingSetup, schedulingFromConfig } from './scheduling-config.ts';
export {
  newDispatcherId,
  parseHostPorts,
  type ServeOverrides,
  type ServeSettings,
  type StoreConnection,
  serveEnvSchema,
  serveSettings,
  storeConnection,
} from './serve-settings.ts';
export {
  type DispatcherPlugin,
  monotonicTimer,
  type RunningDispatcher,
  type StartDispatcherInput,
  startDispatcher,
} from './start-dispatcher.ts';
export {
  enabledInstrumentations,
  givenTracer,
  INSTRUMENTATIONS,
  type InstrumentationName,
  metricsExportEnabled,
  startTelemetry,
  type TelemetryHandle,
  TRACER_NAME,
  tracingEnabled,
} from './telemetry.ts';
export { type LimitsScope, TenantDirectory, type TenantEntry } from './tenant-directory.ts';
export { RequestTrace } from './tracing.ts';
export { UsageChunkFilter } from './usage-chunk-filter.ts';
