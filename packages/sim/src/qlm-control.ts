/**
 * QLM's control lives in the shared scheduler, so the live dispatcher and the simulator run one
 * implementation; re-exported here for the simulator's callers.
 */
export { QlmControl, type QlmControlOptions, type QlmControlStats, type SwapCost } from '@fairway/scheduler';
