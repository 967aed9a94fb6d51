import { orderBy, type PlacementPolicy, type ReplicaState } from '../placement/placement-policy.ts';

/**
 * Aladdin's best fit (section 4.2) as a gateway {@link PlacementPolicy}: fresh replicas fullest
 * first by capacity norm — the L2 norm of reserved sequences and reserved tokens, each over the
 * replica's capacity, from the store's reservations (input + predicted output, i.e. γ = 1) — so
 * the store's first-with-room pick is the tightest fit; stale replicas last.
 *
 * The placement contract passes no request, so this ordering cannot apply Aladdin's SLO checks
 * (the new request's TTFT, running requests' ATGT); `placeBestFit` / `rankBestFit` do, given the
 * request and each replica's requests and performance model.
 */
export function aladdinPlacement(): PlacementPolicy {
  const policy: PlacementPolicy = {
    name: 'aladdin',
    order: (replicas: readonly ReplicaState[]) => orderBy(replicas, (r) => [-fullness(r)]),
    forDispatcher: () => policy,
  };
  return policy;
}

function fullness(r: ReplicaState): number {
  const seqs = r.seqCapacity > 0 ? Math.max(r.reservedSeqs, r.running) / r.seqCapacity : 1;
  const tokens = r.tokenCapacity > 0 ? r.reservedTokens / r.tokenCapacity : 1;
  return Math.hypot(seqs, Math.max(tokens, r.kvUsage));
}
