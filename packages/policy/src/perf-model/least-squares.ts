import { FitError } from '../errors.ts';

/** How well a fitted model explains its samples. */
export interface FitQuality {
  /** Samples the fit used. */
  readonly samples: number;
  /** Mean absolute percentage error, as a fraction (0.05 = 5%); samples with a zero target are skipped. */
  readonly mape: number;
  /** Largest absolute percentage error over the samples, as a fraction. */
  readonly maxApe: number;
  /** Coefficient of determination (1 = perfect; 0 = no better than the mean). */
  readonly r2: number;
}

/** Coefficients of a linear least-squares fit and its quality. */
export interface LinearFit {
  /** One coefficient per feature column, in the order given. */
  readonly coefficients: readonly number[];
  readonly quality: FitQuality;
}

/**
 * Ordinary least squares `y ≈ X·β` by the normal equations, for the handful of unknowns the
 * performance models have (at most four). Columns are scaled to unit magnitude first so that
 * features of very different size (tokens in the batch next to a constant 1) stay well conditioned.
 *
 * @param rows feature rows, one per sample (include a 1 for an intercept)
 * @param targets observed values, one per row
 * @param target what is being fitted, named in errors
 */
export function leastSquares(
  rows: readonly (readonly number[])[],
  targets: readonly number[],
  target: string,
): LinearFit {
  const n = rows.length;
  const p = rows[0]?.length ?? 0;
  if (n !== targets.length) throw new FitError(target, n, `${targets.length} targets for ${n} rows`);
  if (p === 0) throw new FitError(target, n, 'no samples');
  if (n < p) throw new FitError(target, n, `needs at least ${p} samples`);

  const scale = new Array<number>(p).fill(0);
  for (const row of rows) {
    if (row.length !== p) throw new FitError(target, n, 'rows differ in length');
    for (let j = 0; j < p; j++) scale[j] = Math.max(scale[j] ?? 0, Math.abs(row[j] ?? 0));
  }
  for (let j = 0; j < p; j++) {
    if ((scale[j] ?? 0) === 0) throw new FitError(target, n, `feature ${j} is zero in every sample`);
  }

  // Augmented normal equations [XᵀX | Xᵀy] on the scaled columns.
  const a: number[][] = Array.from({ length: p }, () => new Array<number>(p + 1).fill(0));
  for (let s = 0; s < n; s++) {
    const row = rows[s] as readonly number[];
    const y = targets[s] as number;
    for (let i = 0; i < p; i++) {
      const xi = (row[i] as number) / (scale[i] as number);
      const ai = a[i] as number[];
      for (let j = 0; j < p; j++)
        ai[j] = (ai[j] as number) + xi * ((row[j] as number) / (scale[j] as number));
      ai[p] = (ai[p] as number) + xi * y;
    }
  }
  const beta = solveGaussian(a, p, target, n);
  const coefficients = beta.map((b, j) => b / (scale[j] as number));
  const predictions = rows.map((row) => row.reduce((acc, x, j) => acc + x * (coefficients[j] as number), 0));
  return { coefficients, quality: fitQuality(predictions, targets) };
}

function solveGaussian(a: number[][], p: number, target: string, n: number): number[] {
  for (let col = 0; col < p; col++) {
    let pivot = col;
    for (let r = col + 1; r < p; r++) {
      if (Math.abs((a[r] as number[])[col] as number) > Math.abs((a[pivot] as number[])[col] as number))
        pivot = r;
    }
    const pivotRow = a[pivot] as number[];
    const diag = pivotRow[col] as number;
    // Relative to the scaled problem's magnitude (entries are O(n)); anything this small is collinear.
    if (Math.abs(diag) < 1e-10 * n) {
      throw new FitError(target, n, 'samples do not vary enough to separate the coefficients');
    }
    a[pivot] = a[col] as number[];
    a[col] = pivotRow;
    for (let r = 0; r < p; r++) {
      if (r === col) continue;
      const row = a[r] as number[];
      const factor = (row[col] as number) / diag;
      if (factor === 0) continue;
      for (let c = col; c <= p; c++) row[c] = (row[c] as number) - factor * (pivotRow[c] as number);
    }
  }
  return a.map((row, i) => (row[p] as number) / (row[i] as number));
}

/** Mean and worst absolute percentage error and R² of `predictions` against `observed`. */
export function fitQuality(predictions: readonly number[], observed: readonly number[]): FitQuality {
  const n = observed.length;
  let apeSum = 0;
  let apeCount = 0;
  let maxApe = 0;
  let mean = 0;
  for (const y of observed) mean += y / n;
  let ssRes = 0;
  let ssTot = 0;
  for (let i = 0; i < n; i++) {
    const y = observed[i] as number;
    const f = predictions[i] as number;
    ssRes += (y - f) ** 2;
    ssTot += (y - mean) ** 2;
    if (y !== 0) {
      const ape = Math.abs((y - f) / y);
      apeSum += ape;
      apeCount++;
      maxApe = Math.max(maxApe, ape);
    }
  }
  return {
    samples: n,
    mape: apeCount === 0 ? 0 : apeSum / apeCount,
    maxApe,
    r2: ssTot === 0 ? (ssRes === 0 ? 1 : 0) : 1 - ssRes / ssTot,
  };
}
