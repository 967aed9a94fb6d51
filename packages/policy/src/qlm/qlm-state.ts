import type { RequestGroup } from './request-group.ts';
import type { RwtProfile } from './rwt-estimator.ts';

/** How a replica switches models (QLM section 5, model swapping; DESIGN.md vLLM lifecycle). */
export type SwapMechanism =
  /** vLLM sleep mode: `POST /sleep` the loaded model, `POST /wake_up` the other. */
  | 'sleep-wake'
  /** A LoRA adapter on a shared base: `POST /v1/load_lora_adapter`. */
  | 'lora'
  /** Restart the engine with the other model. */
  | 'reload';

/** A request running on a replica. */
export interface QlmRunningRequest {
  readonly id: string;
  readonly model: string;
  readonly band: number;
  readonly sheddable: boolean;
  readonly inputTokens: number;
  /** Output tokens generated so far. */
  readonly generated: number;
  /** Expected total output tokens (prediction or its group's mean). */
  readonly expectedOutput: number;
  /** Times it was evicted before (each time it resumed with its output so far). @default 0 */
  readonly evictions?: number | undefined;
}

/** One LLM serving instance and its virtual queue's owner. */
export interface QlmReplica {
  readonly id: string;
  /** Model loaded now; undefined when none is. */
  readonly model: string | undefined;
  /** Models the replica can switch to, with the cost of doing so. */
  readonly loadable: Readonly<Record<string, { readonly costS: number; readonly mechanism: SwapMechanism }>>;
  /** Estimator profile for every model the replica can serve (loaded or loadable). */
  readonly profiles: Readonly<Record<string, RwtProfile>>;
  readonly running: readonly QlmRunningRequest[];
  /** KV tokens free for new requests now. */
  readonly freeTokens: number;
  /** Sequence slots free for new requests now. */
  readonly freeSeqs: number;
}

/** Everything the QLM planner reads: the global queue's groups, the replicas and the current virtual queues. */
export interface QlmState {
  /** Now on the injected clock, ms. */
  readonly nowMs: number;
  readonly replicas: readonly QlmReplica[];
  /** Queued request groups, in creation order (as `GroupTable.groups()` returns them). */
  readonly groups: readonly RequestGroup[];
  /** Current virtual queues: replica id → group ids in order. Groups in none are new. */
  readonly queues: Readonly<Record<string, readonly string[]>>;
}

/**
 * Which serving operations QLM may use; turning one off gives the paper's ablation (QLM section 8,
 * Figures 11 and 14). All default to on.
 */
export interface QlmFlags {
  /**
   * Replicas pull from the head of their virtual queue when they have room. Off: every request is
   * pushed to its replica's engine queue as soon as it is assigned, so the engine's FCFS decides.
   */
  readonly pull?: boolean;
  /** Lower-band running requests may be evicted for a group placed ahead of them. */
  readonly evict?: boolean;
  /** Groups may be (re)assigned across virtual queues. Off: a new group is assigned round-robin and stays. */
  readonly loadBalance?: boolean;
  /** Replicas may swap models. Off: a replica serves only the model it has loaded. */
  readonly swap?: boolean;
}

/** {@link QlmFlags} with defaults applied. */
export interface ResolvedQlmFlags {
  readonly pull: boolean;
  readonly evict: boolean;
  readonly loadBalance: boolean;
  readonly swap: boolean;
}

/** Applies the defaults of {@link QlmFlags}. */
export function resolveFlags(flags: QlmFlags = {}): ResolvedQlmFlags {
  return {
    pull: flags.pull ?? true,
    evict: flags.evict ?? true,
    loadBalance: flags.loadBalance ?? true,
    swap: flags.swap ?? true,
  };
}

/** Id of the pseudo-group standing for a replica's evictable running requests in a plan. */
export function runningGroupId(replica: string): string {
  return `running@${replica}`;
}
