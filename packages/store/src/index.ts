export {
  parseInput,
  ScriptErrorCode,
  StoreError,
  StoreErrorCode,
  StoreInputError,
  StoreScriptError,
  scriptErrorFromCode,
} from './errors.ts';
export { MemoryStore } from './memory-store.ts';
export type {
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
  ReplicaCandidate,
  SchedulingStore,
  SettleInput,
  WindowLimit,
} from './store.ts';
export { HISTORY_LENGTH, type StoreOptions } from './store-options.ts';
