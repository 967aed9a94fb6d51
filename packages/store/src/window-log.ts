interface Entry {
  readonly id: string;
  readonly t: number;
  amount: number;
}

/**
 * One sliding window of the memory store: the (time, request, amount) entries admitted within it,
 * kept in (time, id) order, and their running total. The Redis backend keeps the same entries in a
 * sorted set and performs the same float operations in the same order, so totals match exactly.
 */
export class WindowLog {
  #entries: Entry[] = [];
  #head = 0;
  readonly #byId = new Map<string, Entry>();
  #total = 0;

  isEmpty(): boolean {
    return this.#byId.size === 0;
  }

  /** Drops entries admitted at or before `cutoffMs` (they left the window). */
  purge(cutoffMs: number): void {
    const entries = this.#entries;
    while (this.#head < entries.length) {
      const e = entries[this.#head] as Entry;
      if (e.t > cutoffMs) break;
      this.#total -= e.amount;
      this.#byId.delete(e.id);
      this.#head++;
    }
    if (this.#head > 64 && this.#head * 2 > entries.length) {
      this.#entries = entries.slice(this.#head);
      this.#head = 0;
    }
  }

  /**
   * Undefined if `amount` fits under `limit`; otherwise how long until enough entries leave the
   * window for it to fit (`windowMs` if it never can).
   */
  retryAfter(amount: number, limit: number, windowMs: number, nowMs: number): number | undefined {
    if (this.#total + amount <= limit) return undefined;
    if (amount > limit) return windowMs;
    let rem = this.#total;
    for (let i = this.#head; i < this.#entries.length; i++) {
      const e = this.#entries[i] as Entry;
      rem -= e.amount;
      if (rem + amount <= limit) return e.t + windowMs - nowMs;
    }
    return windowMs;
  }

  add(id: string, t: number, amount: number): void {
    const entry = { id, t, amount };
    const entries = this.#entries;
    // Admission times are nearly monotone: search back from the tail for the (t, id) position.
    let i = entries.length;
    while (i > this.#head) {
      const prev = entries[i - 1] as Entry;
      if (prev.t < t || (prev.t === t && prev.id < id)) break;
      i--;
    }
    if (i === entries.length) entries.push(entry);
    else entries.splice(i, 0, entry);
    this.#byId.set(id, entry);
    this.#total += amount;
  }

  /** Whether the window counts the request. */
  has(id: string): boolean {
    return this.#byId.has(id);
  }

  /** Replaces a request's amount if its entry is still in the window. */
  set(id: string, amount: number): void {
    const e = this.#byId.get(id);
    if (e === undefined) return;
    this.#total = this.#total - e.amount + amount;
    e.amount = amount;
  }
}
