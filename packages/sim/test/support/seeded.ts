import type { SeedSummary } from '../../src/seed-summary.ts';

/** Five seeds of full runs take minutes on a loaded machine: well above vitest's default 60 s. */
export const SEEDED_TIMEOUT_MS = 600_000;

/** A seed summary for an assertion message: median, worst and every seed's value. */
export function showSeeds(s: SeedSummary, digits = 3): string {
  const f = (x: number) => x.toFixed(digits);
  return `median ${f(s.median)}, worst ${f(s.worst)} (${s.values.map(f).join(', ')})`;
}
