import type { RequestDescriptor, Usage } from '@fairway/core';
import type { AdmissionPolicy } from './admission.ts';

/** How the next request is chosen inside a queue (one (pool, band) fairness domain). */
export type OrderingMode =
  /** Backlogged flow with the least virtual counter, then its oldest request (VTC, LCF, WSC). */
  | 'fair'
  /** Request with the least `score` across all flows (FCFS with score = arrival, EDF with deadline). */
  | 'score';

/** Counter lift when a flow becomes backlogged (VTC Algorithm 2, lines 8–13). */
export type LiftMode =
  /** `c = max(c, min counter of backlogged flows)`, or the last-left counter when none is backlogged. */
  | 'vtc'
  /** No lift (LCF). */
  | 'none';

/**
 * An ordering policy, written once and used by the simulator and the live dispatcher alike. It is
 * pure: it says how requests map to flows, scores and costs; the store applies it atomically.
 * Costs returned here are already divided by the flow's weight (weighted VTC, VTC section 4.3).
 */
export interface OrderingPolicy {
  readonly name: string;
  readonly mode: OrderingMode;
  readonly lift: LiftMode;
  /** The fairness flow of a request: its tenant, or `user@app` under WSC. */
  flowOf(req: RequestDescriptor): string;
  /** Ordering key under `score` mode (arrival ms for FCFS, deadline ms for EDF). */
  score(req: RequestDescriptor): number;
  /** Weighted cost charged when the request is dispatched (input, plus predicted output for VTC(predict)). */
  dispatchCost(req: RequestDescriptor, predictedOutput: number | undefined): number;
  /** Weighted cost to add as output streams from `before` to `after` generated tokens. */
  outputCost(
    req: RequestDescriptor,
    before: number,
    after: number,
    predictedOutput: number | undefined,
  ): number;
  /** Total weighted cost the request should have been charged once it ends with `usage` (the engine's count of its prompt and output, which settles admission's estimate). */
  finalCost(req: RequestDescriptor, usage: Usage): number;
  /**
   * Called once when a request settles with its true usage (not on eviction), after `finalCost`:
   * policies that learn from traffic (WSC's app profiles) learn here. @default none
   */
  settled?(req: RequestDescriptor, usage: Usage): void;
  /**
   * Whether the request continues an ongoing interaction and should be served before the other
   * requests of its queue (WSC, FairServe Algorithm 1 lines 31–35); the store's `continuation`.
   * @default () => false
   */
  continuation?(req: RequestDescriptor): boolean;
  /** Admission limits that come with the policy (RPM for `rpm`, OIT for `wsc-oit`); none if absent. */
  readonly admission?: AdmissionPolicy;
}
