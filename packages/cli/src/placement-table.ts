import { createRng } from '@fairway/core';
import { type PlacementPolicy, placementByName } from '@fairway/policy';

/** A placement policy selectable by name on the command line. */
export interface PlacementEntry {
  readonly description: string;
  /** Builds the policy; `seed` seeds the randomised ones so runs replay. */
  readonly create: (seed: number) => PlacementPolicy;
}

const byName = (name: string) => (seed: number) => placementByName(name, createRng(seed));

/** Placement policies by CLI name (`--placement`). */
export const PLACEMENT_POLICIES: Readonly<Record<string, PlacementEntry>> = {
  'least-kv': { description: 'replica with the least KV cache in use', create: byName('least-kv') },
  'round-robin': { description: 'replicas in turn', create: byName('round-robin') },
  jsq: { description: 'join the shortest queue (running + waiting)', create: byName('jsq') },
  'power-of-two': { description: 'the less loaded of two random replicas', create: byName('power-of-two') },
  aladdin: {
    description: 'Aladdin best fit: fullest replica first by capacity norm (SLO capacities: fairway plan)',
    create: byName('aladdin'),
  },
};
