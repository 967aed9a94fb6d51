/**
 * The contract between an SLO-class control (QLM's global scheduler and serving operations) and
 * whatever runs it beside the gateways: the simulation runner, or the live dispatcher's control
 * plane. The host owns the engines and the gateways; the control reads the fleet through
 * {@link SloControlContext}, routes dispatches through its `router`, and returns serving
 * operations from `tick`, which the host executes for real: it aborts evicted requests on their
 * engines and re-queues them through the gateway that owns them, and it drains a replica, loads
 * the other model (waiting the swap cost) and serves the new model's pool. One implementation
 * serves both (STYLE practice 3).
 */
import type { RequestDescriptor } from '@fairway/core';
import type { DispatchRouter } from '@fairway/policy';
import type { SchedulingStore } from '@fairway/store';

/** A request running on a replica, as the host knows it. */
export interface RunningRequest {
  readonly req: RequestDescriptor;
  /** Output tokens it has streamed so far (including any from before an eviction). */
  readonly generated: number;
}

/** One replica as the control sees it. */
export interface ControlReplica {
  readonly id: string;
  /** Model loaded now: the replica serves this model's pool. */
  readonly model: string;
  readonly gpu: string;
  readonly tp: number;
  /** KV-cache capacity of the loaded model, tokens. */
  readonly kvCapacityTokens: number;
  readonly maxNumSeqs: number;
  /** Draining for a model swap or loading another model now: it takes no new work. */
  readonly swapping: boolean;
  /** Requests dispatched to it and not finished (running or waiting in its engine). */
  readonly running: readonly RunningRequest[];
}

/** What a control may read while the run goes on. */
export interface SloControlContext {
  readonly store: SchedulingStore;
  /** The fleet now. */
  replicas(): readonly ControlReplica[];
}

/** A serving operation for the host to execute. */
export type ControlOp =
  /** Abort these requests on the replica and re-queue them with their output so far. */
  | { readonly kind: 'evict'; readonly replica: string; readonly requestIds: readonly string[] }
  /**
   * Load `to` on the replica: it takes no new work, finishes what it runs, then spends `costS`
   * seconds loading (sleep/wake, LoRA load or reload) before it serves `to`'s pool.
   */
  | { readonly kind: 'swap'; readonly replica: string; readonly to: string; readonly costS: number };

/** A control a host drives (see the module comment). */
export interface SloControl {
  readonly name: string;
  /** Router the gateways dispatch through, if the control routes. */
  readonly router?: DispatchRouter | undefined;
  /** Prompt-length bounds the gateways split each class's band by (`GatewayOptions.promptBands`). */
  readonly promptBands?: readonly number[] | undefined;
  /** Interval of the control's planning event, ms of the host's clock (virtual in the simulator). */
  readonly intervalMs: number;
  /** Called once before the first event. */
  start(ctx: SloControlContext): void;
  /** A request arrives (before the gateway admits it, so it is known when dispatched at once). */
  onArrival(req: RequestDescriptor): void;
  /** The gateway rejected it. */
  onRejected(id: string): void;
  /** A gateway dispatched it to `replica`. */
  onDispatched(id: string, replica: string): void;
  /** It was evicted with `generated` output tokens and is queued again. */
  onEvicted(id: string, generated: number): void;
  /** It finished with `generated` output tokens. */
  onFinished(req: RequestDescriptor, generated: number): void;
  /** A replica finished loading `model`. */
  onSwapped(replica: string, model: string): void;
  /** The planning event: the operations to execute now. */
  tick(nowMs: number): Promise<readonly ControlOp[]>;
}
