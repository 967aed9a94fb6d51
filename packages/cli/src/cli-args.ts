import { InvalidArgumentError } from 'commander';

/** Parses a flag value as a whole number (0, 1, 2, …); commander reports the error with the flag. */
export function wholeNumber(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('must be a whole number');
  return n;
}

/** Parses a flag value as a positive whole number (1, 2, …). */
export function positiveWholeNumber(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive whole number');
  return n;
}

/** Parses a flag value as a positive finite number. */
export function positiveNumber(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('must be a positive number');
  return n;
}
