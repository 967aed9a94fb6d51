/**
 * Buckets per window: an amount admitted at `t` counts until `t + windowMs` rounded up to a
 * multiple of `ceil(windowMs / WINDOW_BUCKETS)` ms, so a window holds at most
 * `WINDOW_BUCKETS + 1` buckets whatever it admitted (for one `windowMs`). `includes/windows.lua` uses the same number.
 */
export const WINDOW_BUCKETS = 60;

/**
 * When an amount admitted at `atMs` leaves a window of `windowMs`: `atMs + windowMs` rounded up to
 * the window's bucket grid (never earlier, so a limit is never exceeded). The Lua library computes
 * it with the same float operations (`bucketEnd` in `includes/windows.lua`).
 */
export function bucketEnd(atMs: number, windowMs: number): number {
  const g = Math.ceil(windowMs / WINDOW_BUCKETS);
  const x = atMs + windowMs;
  let end = Math.ceil(x / g) * g;
  // The quotient may round down to an integer below the true one: never leave early.
  if (end < x) end += g;
  return end;
}

/**
 * One sliding window of the memory store: the sum admitted in each bucket (keyed by the bucket's
 * end, see {@link bucketEnd}) and their running total. Admissions land in the newest bucket; the
 * older ones are kept in end order. The Redis backend (`includes/windows.lua`) keeps the same
 * buckets and performs the same float operations in the same order, so totals and retry times
 * match exactly. Nothing is kept per request (a request's record holds its bucket and amount for
 * true-up), and a refusal reads at most {@link WINDOW_BUCKETS} + 1 buckets.
 */
export class SlidingWindow {
  /** When the window was created (ms): it has counted every admission into it since. */
  readonly bornMs: number;
  /** The newest bucket's end and sum. */
  #last: number;
  #lastSum: number;
  /** The older buckets' ends and sums, ascending, live from `#head` on. */
  #ends: number[] = [];
  #sums: number[] = [];
  #head = 0;
  #total: number;
  /** Entries put back by `restore` that the window counts, by request id → bucket end. */
  #restored: Map<string, number> | undefined;
  #empty = false;

  /** A window created at `nowMs` by `amount` counted in the bucket ending at `endMs`. */
  constructor(nowMs: number, endMs: number, amount: number) {
    this.bornMs = nowMs;
    this.#last = endMs;
    this.#lastSum = 0 + amount;
    this.#total = 0 + amount;
  }

  /** The amounts the window counts. */
  get total(): number {
    return this.#total;
  }

  /** When its oldest bucket ends (ms): the first time the window holds less. */
  get oldestEnd(): number {
    return this.#head < this.#ends.length ? (this.#ends[this.#head] as number) : this.#last;
  }

  /** Whether every bucket ended (the store then forgets the window, as Redis deletes its keys). */
  isEmpty(): boolean {
    return this.#empty;
  }

  /** Drops the buckets that ended at or before `nowMs` (their amounts left the window). */
  purge(nowMs: number): void {
    const ends = this.#ends;
    const oldest = this.#head < ends.length ? (ends[this.#head] as number) : this.#last;
    if (oldest > nowMs) return;
    if (this.#last <= nowMs) {
      this.#empty = true;
      return;
    }
    while (this.#head < ends.length && (ends[this.#head] as number) <= nowMs) {
      this.#total -= this.#sums[this.#head] as number;
      this.#head++;
    }
    if (this.#restored !== undefined) {
      for (const [id, end] of this.#restored) if (end <= nowMs) this.#restored.delete(id);
      if (this.#restored.size === 0) this.#restored = undefined;
    }
    if (this.#head > 64 && this.#head * 2 > ends.length) {
      this.#ends = ends.slice(this.#head);
      this.#sums = this.#sums.slice(this.#head);
      this.#head = 0;
    }
  }

  /**
   * Undefined if `amount` fits under `limit`; otherwise how long until enough buckets leave the
   * window for it to fit (`windowMs` if it never can). Walks from the end nearer the answer, as
   * the Redis backend does: from the oldest bucket when less must leave than may stay, else from
   * the newest.
   */
  retryAfter(amount: number, limit: number, windowMs: number, nowMs: number): number | undefined {
    const total = this.#total;
    if (total + amount <= limit) return undefined;
    if (amount > limit) return windowMs;
    const ends = this.#ends;
    const sums = this.#sums;
    if (total + amount - limit <= limit - amount) {
      let rem = total;
      for (let i = this.#head; i < ends.length; i++) {
        rem -= sums[i] as number;
        if (rem + amount <= limit) return (ends[i] as number) - nowMs;
      }
      rem -= this.#lastSum;
      return rem + amount <= limit ? this.#last - nowMs : windowMs;
    }
    let kept = this.#lastSum;
    if (kept + amount > limit) return this.#last - nowMs;
    for (let i = ends.length - 1; i >= this.#head; i--) {
      kept += sums[i] as number;
      if (kept + amount > limit) return (ends[i] as number) - nowMs;
    }
    return windowMs;
  }

  /** Counts `amount` in the bucket ending at `endMs` (after a purge: the window is not empty). */
  add(endMs: number, amount: number): void {
    if (endMs === this.#last) {
      this.#lastSum += amount;
    } else if (endMs > this.#last) {
      this.#ends.push(this.#last);
      this.#sums.push(this.#lastSum);
      this.#last = endMs;
      this.#lastSum = 0 + amount;
    } else {
      // Admitted out of order (another dispatcher's clock, a restore): into its own older bucket.
      const i = this.#older(endMs);
      if (this.#ends[i] === endMs) this.#sums[i] = (this.#sums[i] as number) + amount;
      else {
        this.#ends.splice(i, 0, endMs);
        this.#sums.splice(i, 0, 0 + amount);
      }
    }
    this.#total += amount;
  }

  /**
   * Replaces `old`, counted in the bucket ending at `endMs`, by `amount` (never below an empty
   * bucket), if that bucket has not ended by `nowMs` and is still counted.
   */
  trueUp(endMs: number, old: number, amount: number, nowMs: number): void {
    if (endMs <= nowMs) return;
    let sum: number;
    let next: number;
    if (endMs === this.#last) {
      sum = this.#lastSum;
      next = sum - old + amount;
      if (next < 0) next = 0;
      this.#lastSum = next;
    } else {
      const i = this.#older(endMs);
      if (this.#ends[i] !== endMs) return;
      sum = this.#sums[i] as number;
      next = sum - old + amount;
      if (next < 0) next = 0;
      this.#sums[i] = next;
    }
    this.#total += next - sum;
  }

  /** Whether an entry `restore` puts back is counted already: the window predates it, or it was put back. */
  counts(id: string, atMs: number): boolean {
    return this.bornMs <= atMs || this.#restored?.has(id) === true;
  }

  /** Records that the entry of `id`, in the bucket ending at `endMs`, was put back. */
  restored(id: string, endMs: number): void {
    this.#restored ??= new Map();
    this.#restored.set(id, endMs);
  }

  /** Index of the first older bucket ending at or after `endMs` (searched back from the newest). */
  #older(endMs: number): number {
    let i = this.#ends.length;
    while (i > this.#head && (this.#ends[i - 1] as number) >= endMs) i--;
    return i;
  }
}
