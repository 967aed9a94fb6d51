import { createRng, type Rng } from '@fairway/core';
import { type AladdinPlacementOptions, aladdinPlacement } from '../aladdin/aladdin-placement.ts';
import { PolicyInputError } from '../errors.ts';
import { joinShortestQueuePlacement } from './join-shortest-queue.ts';
import { leastKvPlacement } from './least-kv.ts';
import type { PlacementPolicy } from './placement-policy.ts';
import { powerOfTwoPlacement } from './power-of-two.ts';
import { roundRobinPlacement } from './round-robin.ts';

/** Placement policies selectable by name (config `policy.placement`, CLI `--placement`). */
export const PLACEMENT_NAMES = ['round-robin', 'jsq', 'least-kv', 'power-of-two', 'aladdin'] as const;
export type PlacementName = (typeof PLACEMENT_NAMES)[number];

/** What some placement policies need beyond their name. */
export interface PlacementPolicyOptions {
  /** Aladdin's performance models, SLO and workload (without them it orders by fullness only). */
  readonly aladdin?: AladdinPlacementOptions | undefined;
}

/**
 * Builds a placement policy by name; `rng` seeds power-of-two (default: seed 0, so runs replay).
 * Throws a {@link PolicyInputError} listing the known names for an unknown one.
 */
export function placementByName(
  name: string,
  rng: Rng = createRng(0),
  options: PlacementPolicyOptions = {},
): PlacementPolicy {
  switch (name) {
    case 'round-robin':
      return roundRobinPlacement();
    case 'jsq':
      return joinShortestQueuePlacement();
    case 'least-kv':
      return leastKvPlacement();
    case 'power-of-two':
      return powerOfTwoPlacement(rng.fork('power-of-two'));
    case 'aladdin':
      return aladdinPlacement(options.aladdin);
    default:
      throw new PolicyInputError('placementByName', [
        { path: 'placement', message: `unknown placement "${name}"; known: ${PLACEMENT_NAMES.join(', ')}` },
      ]);
  }
}
