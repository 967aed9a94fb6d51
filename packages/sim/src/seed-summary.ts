/**
 * Claims about fairness or SLOs are judged over several seeds, never one random stream: a run is
 * repeated under {@link EVIDENCE_SEEDS} (arrivals, length noise and engine step-time noise all
 * re-drawn) and a measure is reported as its median and its worst case.
 */

/** The seeds every fairness or SLO claim is judged over. */
export const EVIDENCE_SEEDS: readonly number[] = [1, 2, 3, 4, 5];

/** A measure over seeds. */
export interface SeedSummary {
  /** Per seed, in the order given. */
  readonly values: readonly number[];
  readonly median: number;
  /** The worst value: the largest when larger is worse, else the smallest. */
  readonly worst: number;
  readonly best: number;
}

/**
 * Median and worst case of one value per seed.
 * @param worse which direction is worse. @default 'higher'
 */
export function summarizeSeeds(values: readonly number[], worse: 'higher' | 'lower' = 'higher'): SeedSummary {
  if (values.length === 0) throw new RangeError('summarizeSeeds needs at least one value');
  const sorted = [...values].sort((a, b) => a - b);
  const n = sorted.length;
  const median = n % 2 === 1 ? sorted[(n - 1) / 2]! : (sorted[n / 2 - 1]! + sorted[n / 2]!) / 2;
  const hi = sorted[n - 1]!;
  const lo = sorted[0]!;
  return { values, median, worst: worse === 'higher' ? hi : lo, best: worse === 'higher' ? lo : hi };
}

/** Runs `fn` once per seed (in order, one at a time) and summarises what it returns. */
export async function overSeeds(
  fn: (seed: number) => Promise<number> | number,
  options: { readonly seeds?: readonly number[]; readonly worse?: 'higher' | 'lower' } = {},
): Promise<SeedSummary> {
  const values: number[] = [];
  for (const seed of options.seeds ?? EVIDENCE_SEEDS) values.push(await fn(seed));
  return summarizeSeeds(values, options.worse);
}
