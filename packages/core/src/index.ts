export { type Clock, ManualClock, systemClock } from './clock.ts';
export {
  type BusConfig,
  busConfigSchema,
  type ControlConfig,
  configIdSchema,
  controlConfigSchema,
  DEFAULT_ENGINE_TIMEOUTS,
  type EngineTimeoutsConfig,
  engineTimeoutsSchema,
  type FairwayConfig,
  fairwayConfigSchema,
  hashApiKey,
  type LimitsConfig,
  limitsSchema,
  loadConfig,
  type MetricsConfig,
  type ModelPrice,
  metricsConfigSchema,
  modelPriceSchema,
  type NatsAuthConfig,
  type NatsTlsConfig,
  natsAuthConfigSchema,
  natsTlsConfigSchema,
  type PolicyConfig,
  parseConfig,
  policyConfigSchema,
  type QuotasConfig,
  quotasSchema,
  type RedisSentinelConfig,
  redisSentinelConfigSchema,
  type ScalingConfig,
  type ServerConfig,
  type StorageConfig,
  scalingConfigSchema,
  serverConfigSchema,
  sloClassSchema,
  storageConfigSchema,
  type TenantConfig,
  type TenantStorageConfig,
  telemetryConfigSchema,
  tenantStorageSchema,
  tracingConfigSchema,
} from './config.ts';
export {
  type CostFunction,
  type CostFunctionName,
  costFunctionByName,
  linearCost,
  profiledCost,
} from './cost.ts';
export {
  type LengthSampler,
  type LengthSpec,
  lengthSampler,
  sampleGamma,
  searchCdf,
  zipfCdf,
} from './distributions.ts';
export {
  type AppProfile,
  DEFAULT_SLO_CLASSES,
  type GpuSpec,
  type ModelSpec,
  type PoolSpec,
  type RequestDescriptor,
  type SloClass,
  type Tenant,
  tenantUserId,
  type Usage,
} from './domain.ts';
export { GATEWAY_OWNED_FIELDS, RESTRICTED_ENGINE_FIELDS } from './engine-fields.ts';
export { ConfigError, ErrorCode, FairwayError } from './errors.ts';
export { createLogger, type Logger, type LoggerOptions, LogThrottle, silentLogger } from './logger.ts';
export { REDACTED, redactSecrets, redactUrls, SECRET_FIELDS, secretLogPaths } from './redaction.ts';
export { createRng, type Rng } from './rng.ts';
export { GPUS, type GpuName, gpuSpec, MODELS, type ModelName, modelSpec } from './specs.ts';
export {
  CHARS_PER_TOKEN,
  countPromptTokens,
  estimateChatPromptTokens,
  estimateJsonTokens,
  estimateTextTokens,
  JSON_CHARS_PER_TOKEN,
  MAX_MEDIA_PARTS,
  MEDIA_PART_TOKENS,
  type PromptEndpoint,
  type RenderedPrompt,
  renderChatPrompt,
  TOKENS_PER_MESSAGE,
  TOKENS_PER_TOOL,
  type TokenCounter,
} from './tokens.ts';
export { formatPath, parseWith, readStructuredFile } from './validate.ts';
