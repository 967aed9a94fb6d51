export {
  parseInput,
  ScriptErrorCode,
  StoreError,
  StoreErrorCode,
  StoreInputError,
  StoreScriptError,
  scriptErrorFromCode,
} from './errors.ts';
export { KEY_LAYOUT, type KeyKind, STORE_LAYOUT_VERSION, StoreKeys, tenantScoped } from './keys.ts';
export { MemoryStore } from './memory-store.ts';
export { RedisStore, type RedisStoreOptions } from './redis-store.ts';
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
  QueuedRequest,
  QueueSnapshot,
  QuotaAlert,
  QuotaCheck,
  ReplicaCandidate,
  RequeueInput,
  Reservation,
  RestoredRequest,
  RestoredWindowEntry,
  RestoreInput,
  RestoreResult,
  SchedulingStore,
  SettleAndDispatchInput,
  SettleAndDispatchResult,
  SettleInput,
  UsageAccount,
  UsageQuery,
  UsageRow,
  WindowLimit,
} from './store.ts';
export { HISTORY_LENGTH, type StoreOptions } from './store-options.ts';
export { purgeStore } from './store-purge.ts';
