export {
  parseInput,
  ScriptErrorCode,
  StoreError,
  StoreErrorCode,
  StoreInputError,
  StoreScriptError,
  scriptErrorFromCode,
} from './errors.ts';
export {
  KEY_LAYOUT,
  type KeyKind,
  SLOT_GROUP_NAME,
  STORE_LAYOUT_VERSION,
  StoreKeys,
  slotGroupPrefix,
  tenantScoped,
} from './keys.ts';
export { MemoryStore } from './memory-store.ts';
export { RedisStore, type RedisStoreOptions } from './redis-store.ts';
export { isCluster, type RedisClient } from './script-loader.ts';
export {
  DEFAULT_SLOT_GROUP,
  type RedisSlotGroupStoreOptions,
  redisSlotGroupStore,
  SlotGroupStore,
  type SlotGroupStoreOptions,
} from './slot-group-store.ts';
export type {
  AdmitAndDispatchInput,
  AdmitAndDispatchResult,
  AdmitInput,
  AdmitRejectCode,
  AdmitResult,
  ChargeItem,
  DispatchInput,
  DispatchResult,
  LiftMode,
  OrderingMode,
  PrefixPart,
  QueuedRequest,
  QueueSnapshot,
  QuotaAlert,
  QuotaCheck,
  ReplicaCandidate,
  RequestLocations,
  RequeueInput,
  Reservation,
  RestoredRequest,
  RestoredWindowEntry,
  RestoredWindowUse,
  RestoreInput,
  RestoreResult,
  SchedulingStore,
  SettleAndDispatchInput,
  SettleAndDispatchResult,
  SettleInput,
  UsageAccount,
  UsageQuery,
  UsageRow,
  WindowHeld,
  WindowLimit,
} from './store.ts';
export { HISTORY_LENGTH, type StoreOptions, USAGE_RETENTION_DAYS } from './store-options.ts';
export { purgeStore } from './store-purge.ts';
