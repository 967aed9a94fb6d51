export { describeError, ExitCode, UsageError } from './cli-error.ts';
export { type CliIo, processIo } from './cli-io.ts';
export { buildProgram, run } from './main.ts';
export { PLACEMENT_POLICIES, type PlacementEntry } from './placement-table.ts';
export { ORDERING_POLICIES, type PolicyContext, type PolicyEntry } from './policy-table.ts';
