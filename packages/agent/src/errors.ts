import { FairwayError } from '@fairway/core';

/** Stable codes of every error the node agent raises. */
export const AgentErrorCode = {
  /** Agent or engine-process options are invalid. */
  INVALID_OPTIONS: 'FAIRWAY_AGENT_INVALID_OPTIONS',
  /** The engine process did not become healthy, or exited while starting. */
  ENGINE_START_FAILED: 'FAIRWAY_AGENT_ENGINE_START_FAILED',
  /** The engine's metrics lack what registration needs (KV capacity from `cache_config_info`). */
  ENGINE_METRICS_INCOMPLETE: 'FAIRWAY_AGENT_ENGINE_METRICS_INCOMPLETE',
  /** A command cannot run in the replica's current state (e.g. sleep with requests in flight). */
  COMMAND_REJECTED: 'FAIRWAY_AGENT_COMMAND_REJECTED',
  /** A model swap needs a restart, but this agent does not manage the engine process. */
  ENGINE_NOT_MANAGED: 'FAIRWAY_AGENT_ENGINE_NOT_MANAGED',
  /** Evicted requests did not leave the engine within the timeout. */
  EVICT_UNCONFIRMED: 'FAIRWAY_AGENT_EVICT_UNCONFIRMED',
  /**
   * The URL to register for the engine is malformed or a wildcard address, or none can be chosen
   * (the engine listens on a wildcard address and the host has no external IPv4 address).
   */
  ADVERTISE_URL_INVALID: 'FAIRWAY_AGENT_ADVERTISE_URL_INVALID',
  /** The agent was used before `start()` or after `stop()`. */
  NOT_RUNNING: 'FAIRWAY_AGENT_NOT_RUNNING',
} as const;
export type AgentErrorCode = (typeof AgentErrorCode)[keyof typeof AgentErrorCode];

/** An error of the node agent: a stable code, the replica it concerns, and a cause. */
export class AgentError extends FairwayError {
  override readonly name = 'AgentError';
  readonly replicaId: string | undefined;

  constructor(code: AgentErrorCode, message: string, options: { replicaId?: string; cause?: unknown } = {}) {
    super(code, message, { cause: options.cause });
    this.replicaId = options.replicaId;
  }
}

/** The wrapped engine process failed to start or to become healthy. */
export class EngineStartError extends FairwayError {
  override readonly name = 'EngineStartError';
  readonly command: string;
  readonly args: readonly string[];
  /** The process's last output lines, for diagnosis. */
  readonly lastOutput: readonly string[];

  constructor(
    message: string,
    context: { command: string; args: readonly string[]; lastOutput: readonly string[] },
    options: { cause?: unknown } = {},
  ) {
    super(AgentErrorCode.ENGINE_START_FAILED, message, options);
    this.command = context.command;
    this.args = context.args;
    this.lastOutput = context.lastOutput;
  }
}
