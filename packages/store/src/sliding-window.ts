/**
 * Buckets per window: an amount admitted at `t` counts until `t + windowMs` rounded up to a
 * multiple of `ceil(windowMs / WINDOW_BUCKETS)` ms, so a window holds at most
 * `WINDOW_BUCKETS + 1` buckets whatever it admitted. `includes/windows.lua` uses the same number.
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
 * One sliding window of the memory store: the sums admitted per bucket (keyed by the bucket's end,
 * see {@link bucketEnd}), kept in end order, and their running total. The Redis backend keeps the
 * same buckets in a sorted set and a hash and performs the same float operations in the same order,
 * so totals match exactly. A refusal walks at most {@link WINDOW_BUCKETS} + 1 buckets; nothing is
 * kept per request (a request's record holds its bucket and amount for true-up).
 */
export class SlidingWindow {
  /** When the window was created (ms): it has counted every admission into it since. */
  readonly bornMs: number;
  /** Bucket ends, ascending, live from `#head` on. */
  #ends: number[] = [];
  #head = 0;
  readonly #sums = new Map<number, number>();
  #total = 0;
  /** Entries put back by `restore` that the window counts, by request id → bucket end. */
  #restored: Map<string, number> | undefined;

  constructor(bornMs: number) {
    this.bornMs = bornMs;
  }

  /** Whether no bucket is left (the store then forgets the window, as Redis deletes its keys). */
  isEmpty(): boolean {
    return this.#sums.size === 0;
  }

  /** Drops the buckets that ended at or before `nowMs` (their amounts left the window). */
  purge(nowMs: number): void {
    const ends = this.#ends;
    const from = this.#head;
    while (this.#head < ends.length) {
      const end = ends[this.#head] as number;
      if (end > nowMs) break;
      this.#total -= this.#sums.get(end) as number;
      this.#sums.delete(end);
      this.#head++;
    }
    if (this.#restored !== undefined && this.#head > from) {
      for (const [id, end] of this.#restored) if (end <= nowMs) this.#restored.delete(id);
      if (this.#restored.size === 0) this.#restored = undefined;
    }
    if (this.#head > 64 && this.#head * 2 > ends.length) {
      this.#ends = ends.slice(this.#head);
      this.#head = 0;
    }
  }

  /**
   * Undefined if `amount` fits under `limit`; otherwise how long until enough buckets leave the
   * window for it to fit (`windowMs` if it never can).
   */
  retryAfter(amount: number, limit: number, windowMs: number, nowMs: number): number | undefined {
    if (this.#total + amount <= limit) return undefined;
    if (amount > limit) return windowMs;
    let rem = this.#total;
    for (let i = this.#head; i < this.#ends.length; i++) {
      const end = this.#ends[i] as number;
      rem -= this.#sums.get(end) as number;
      if (rem + amount <= limit) return end - nowMs;
    }
    return windowMs;
  }

  /** Counts `amount` in the bucket ending at `endMs`. */
  add(endMs: number, amount: number): void {
    const sum = this.#sums.get(endMs);
    this.#sums.set(endMs, (sum ?? 0) + amount);
    this.#total += amount;
    if (sum !== undefined) return;
    // Admission times are nearly monotone: search back from the tail for the end's position.
    const ends = this.#ends;
    let i = ends.length;
    while (i > this.#head && (ends[i - 1] as number) > endMs) i--;
    if (i === ends.length) ends.push(endMs);
    else ends.splice(i, 0, endMs);
  }

  /**
   * Replaces `old`, counted in the bucket ending at `endMs`, by `amount` (never below an empty
   * bucket), if that bucket has not ended by `nowMs`.
   */
  trueUp(endMs: number, old: number, amount: number, nowMs: number): void {
    if (endMs <= nowMs) return;
    const sum = this.#sums.get(endMs);
    if (sum === undefined) return;
    let next = sum - old + amount;
    if (next < 0) next = 0;
    this.#sums.set(endMs, next);
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
}
