export { describeError, ExitCode, UsageError } from './cli-error.ts';
export { type CliIo, processIo } from './cli-io.ts';
export { type AgentHandle, type StartAgentOptions, startAgent } from './commands/agent.ts';
export {
  type DemoKey,
  demoKeys,
  EXAMPLE_CONFIG,
  startUp,
  type UpHandle,
  type UpOptions,
  upBanner,
} from './commands/up.ts';
export { buildProgram, run } from './main.ts';
export { PLACEMENT_POLICIES, type PlacementEntry } from './placement-table.ts';
export { ORDERING_POLICIES, type PolicyContext, type PolicyEntry } from './policy-table.ts';
