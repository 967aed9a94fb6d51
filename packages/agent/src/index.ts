export {
  type AdvertisedUrl,
  type AdvertiseUrlInput,
  type AdvertiseUrlSource,
  chooseAdvertiseUrl,
  isLoopbackHost,
  isWildcardHost,
  type NetworkInterfaces,
} from './advertise-url.ts';
export { type AgentStopOptions, NodeAgent, type NodeAgentOptions } from './agent.ts';
export {
  argsWithModel,
  EngineProcess,
  type EngineProcessEvent,
  type EngineProcessOptions,
} from './engine-process.ts';
export { AgentError, AgentErrorCode, EngineStartError } from './errors.ts';
export {
  isWildcardKvEventsEndpoint,
  KV_EVENTS_ENDPOINT,
  KvEventRelay,
  type KvEventRelayOptions,
  localKvEventsEndpoint,
} from './kv-event-relay.ts';
