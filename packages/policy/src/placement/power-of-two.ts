import type { Rng } from '@fairway/core';
import {
  byId,
  compareKeys,
  kvLoad,
  orderBy,
  type PlacementPolicy,
  queueLength,
  type ReplicaState,
} from './placement-policy.ts';

/**
 * Power of two choices (Mitzenmacher): sample two distinct fresh replicas with the seeded RNG and
 * prefer the one with the shorter queue; the rest follow by queue length so a dispatch still finds
 * room when both samples are full. Each dispatcher draws from its own forked RNG stream.
 */
export function powerOfTwoPlacement(rng: Rng): PlacementPolicy {
  const load = (r: ReplicaState): readonly number[] => [queueLength(r), kvLoad(r)];
  return {
    name: 'power-of-two',
    order(replicas: readonly ReplicaState[]): readonly ReplicaState[] {
      const fresh = replicas.filter((r) => !r.stale).sort(byId);
      if (fresh.length <= 2) return orderBy(replicas, load);
      const i = rng.int(0, fresh.length - 1);
      let j = rng.int(0, fresh.length - 2);
      if (j >= i) j++;
      const a = fresh[i]!;
      const b = fresh[j]!;
      // The first sample wins ties, so the pick stays uniform among equally loaded replicas.
      const pair = compareKeys(load(b), load(a)) < 0 ? [b, a] : [a, b];
      const rest = orderBy(
        replicas.filter((r) => r !== a && r !== b),
        load,
      );
      return [...pair, ...rest];
    },
    forDispatcher: (id: string) => powerOfTwoPlacement(rng.fork(`placement:${id}`)),
  };
}
