export {
  type BatchApiOptions,
  type BatchEnvOptions,
  batchApi,
  batchEnv,
  batchSloClass,
} from './batch-api.ts';
export { BatchInputError, BatchInputParser, type BatchRequestLine, parseBatchInput } from './batch-input.ts';
export { BatchKeys } from './batch-keys.ts';
export {
  BATCH_ENDPOINTS,
  type BatchEndpoint,
  type BatchLimits,
  DEFAULT_BATCH_LIMITS,
  defaultStorageLimits,
  type StorageLimits,
  storageLimitsOf,
} from './batch-limits.ts';
export type { BatchErrorEntry, BatchObject, BatchStatus, FileObject } from './batch-objects.ts';
export { type BatchRoutesOptions, batchRoutes } from './batch-routes.ts';
export { BATCH_QUEUE, BatchRunner, type BatchRunnerOptions } from './batch-runner.ts';
export {
  BatchStore,
  FILE_CHUNK_BYTES,
  type FileUpload,
  type LineCounter,
  UploadGoneError,
} from './batch-store.ts';
export { insufficientStorage, type StorageRefusal, storageError } from './errors.ts';
export { MemoryGuard, type MemoryGuardOptions, type MemoryReading } from './memory-guard.ts';
