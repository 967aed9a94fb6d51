/**
 * VTC's fairness bound (Sheng et al., OSDI 2024, Theorem 4.4): for any two clients continuously
 * backlogged over an interval, VTC keeps the difference of the service they receive in it at most
 * `2·max(w_in·L_in, w_out·M)`, where `L_in` is the largest prompt of a request and `M` "the maximum
 * number of tokens that can be fitted in a running batch" (section 4.1.1) — the KV-cache capacity in
 * tokens, which bounds the prompt and output tokens of everything running at once. With gateways
 * sharing counters the running batch is the whole fleet's, so `M` sums the replicas' capacities.
 */
import type { RequestDescriptor } from '@fairway/core';
import type { EngineConfig } from './engine-api.ts';
import { EngineModel } from './engine-model.ts';

/** The bound and the quantities it is made of. */
export interface VtcFairnessBound {
  /** 2·max(w_in·L_in, w_out·M), cost units. */
  readonly bound: number;
  /** Largest prompt of any request, tokens. */
  readonly lInput: number;
  /** KV tokens the fleet's running batches can hold (Σ over replicas of blocks × block size). */
  readonly m: number;
  readonly wIn: number;
  readonly wOut: number;
}

/**
 * Computes VTC Theorem 4.4's bound for a fleet and a workload under the linear cost
 * `w_in·n_in + w_out·n_out`. `M` is read from the engine models themselves (the KV blocks they
 * allocate times the block size), so it is exactly the capacity the simulated engines enforce.
 * @param wIn weight of a prompt token. @default 1
 * @param wOut weight of an output token. @default 2
 */
export function vtcFairnessBound(
  engines: readonly { readonly config: EngineConfig }[],
  arrivals: readonly RequestDescriptor[],
  wIn = 1,
  wOut = 2,
): VtcFairnessBound {
  let m = 0;
  for (const e of engines) m += new EngineModel(e.config).stats().kvCapacityTokens;
  let lInput = 0;
  for (const r of arrivals) if (r.inputTokens > lInput) lInput = r.inputTokens;
  return { bound: 2 * Math.max(wIn * lInput, wOut * m), lInput, m, wIn, wOut };
}
