import type { RequestDescriptor } from '@fairway/core';
import type { ReplicaPredictionErrors } from '@fairway/scheduler';
import type { ElasticFleetUsage } from './elastic-fleet.ts';

/**
 * What the simulator records about every request: the boundary between the runner (which drives
 * engines and the gateway) and the metrics (which compute fairness, latency and throughput the way
 * the VTC artifact does). All times are seconds of simulated time from the start of the run.
 */
export interface RequestRecord {
  readonly req: RequestDescriptor;
  readonly arrivalS: number;
  /** Rejected at admission (limit, throttle, queue full): never ran. */
  readonly rejected?: { readonly code: string; readonly atS: number } | undefined;
  /** When the gateway dispatched it to an engine (last dispatch, if it was re-queued). */
  readonly dispatchS?: number | undefined;
  readonly replica?: string | undefined;
  /** When its first output token was produced. */
  readonly firstTokenS?: number | undefined;
  /** When it finished (last token), if it did within the run. */
  readonly finishS?: number | undefined;
  /** Output tokens generated within the run. */
  readonly generated: number;
  /** Times the engine preempted it (recompute). */
  readonly preemptions: number;
  /**
   * Prompt tokens the engine's prefix cache served (reported in its usage and charged at the
   * cached-token weight); absent when the engine does not cache prefixes.
   */
  readonly cachedTokens?: number | undefined;
  /** Times an SLO control evicted it and re-queued it at the gateway (QLM); absent when never. */
  readonly evictions?: number | undefined;
  /** Times it was moved out of an engine's queue (`RunInput.moves`); absent when never. */
  readonly moves?: number | undefined;
}

/** A sample of one engine's state, taken after each step (thinned by the runner). */
export interface EngineSample {
  readonly replica: string;
  readonly timeS: number;
  readonly running: number;
  readonly waiting: number;
  readonly kvUsage: number;
}

/** What one simulation run produces, before metrics. */
export interface SimRun {
  readonly scenario: string;
  readonly policy: string;
  readonly placement: string;
  readonly seed: number;
  /** Simulated duration, seconds (the scenario's duration; work still running at the end is cut). */
  readonly durationS: number;
  readonly records: readonly RequestRecord[];
  readonly samples: readonly EngineSample[];
  readonly engineSteps: number;
  readonly preemptions: number;
  /**
   * Prompt tokens the engines looked up in their prefix caches and found there (vLLM's
   * `prefix_cache_queries` / `prefix_cache_hits`), summed; absent unless an engine caches prefixes.
   */
  readonly prefixCache?: { readonly queries: number; readonly hits: number } | undefined;
  /**
   * Requests with prefix keys the gateways dispatched, by what prefix affinity did for them (placed
   * on their affinity replica, found one but placed elsewhere, found none); absent with affinity off.
   */
  readonly affinity?: { readonly hit: number; readonly bounded: number; readonly miss: number } | undefined;
  /**
   * Requests that finished in a sharded pool with hand-off, and how many of them handed the room
   * they freed to another shard (each one more store call, in that shard); absent otherwise.
   */
  readonly shardHandoffs?: { readonly completions: number; readonly handedOff: number } | undefined;
  /** Model swaps an SLO control completed (multi-model pools); absent without a control. */
  readonly swaps?: number | undefined;
  /**
   * Aladdin's output-length prediction errors per replica (`l^e`, `b^e`, section 4.3), summed
   * over the gateways, with the number of re-predictions; absent unless `reserve: 'predicted'`.
   */
  readonly prediction?:
    | {
        readonly repredictions: number;
        readonly errors: Readonly<Record<string, ReplicaPredictionErrors>>;
      }
    | undefined;
  /** How many engines an elastic fleet held open (`RunInput.elastic`); absent otherwise. */
  readonly elastic?: ElasticFleetUsage | undefined;
  /** Tenant id → weight, for weighted fairness metrics. */
  readonly tenantWeights: Readonly<Record<string, number>>;
}
