import {
  expectedLength,
  kvCapacityOf,
  type PlacedRequest,
  type ReplicaView,
  type ResolvedAladdinOptions,
  seqCapacityOf,
} from './replica-view.ts';

/** Weighted context `l_in + γ·l_out` of one request (Aladdin section 4.2). */
export function weightedContext(req: PlacedRequest, gamma: number): number {
  return req.inputTokens + gamma * expectedLength(req);
}

/**
 * Aladdin's `capacity_norm`: the L2 norm of a replica's batch size and the weighted context
 * `Σ(l_in + γ·l_out)` of its requests (section 4.2); best fit places on the largest norm that still
 * meets every SLO. Normalised, each dimension is divided by the replica's capacity in it.
 */
export function capacityNorm(replica: ReplicaView, options: ResolvedAladdinOptions): number {
  let context = 0;
  for (const r of replica.requests) context += weightedContext(r, options.gamma);
  const batch = replica.requests.length;
  if (!options.normaliseNorm) return Math.hypot(batch, context);
  return Math.hypot(batch / seqCapacityOf(replica), context / kvCapacityOf(replica));
}
