/**
 * The discrete-event simulator's agenda: events ordered by time, then by insertion, so events at
 * the same instant run in the order they were scheduled and a run replays exactly.
 */
export class EventQueue<T> {
  #times: number[] = [];
  #seqs: number[] = [];
  #items: T[] = [];
  #seq = 0;

  get size(): number {
    return this.#items.length;
  }

  /** Schedules `item` at `timeMs`. */
  push(timeMs: number, item: T): void {
    const times = this.#times;
    const seqs = this.#seqs;
    const items = this.#items;
    const seq = this.#seq++;
    let i = items.length;
    times.push(timeMs);
    seqs.push(seq);
    items.push(item);
    while (i > 0) {
      const p = (i - 1) >> 1;
      const pt = times[p]!;
      if (pt < timeMs || (pt === timeMs && seqs[p]! < seq)) break;
      times[i] = pt;
      seqs[i] = seqs[p]!;
      items[i] = items[p]!;
      i = p;
    }
    times[i] = timeMs;
    seqs[i] = seq;
    items[i] = item;
  }

  /** Time of the next event, or undefined when empty. */
  peekTime(): number | undefined {
    return this.#times[0];
  }

  /** Removes and returns the next event. */
  pop(): { readonly timeMs: number; readonly item: T } | undefined {
    const items = this.#items;
    if (items.length === 0) return undefined;
    const times = this.#times;
    const seqs = this.#seqs;
    const top = { timeMs: times[0]!, item: items[0]! };
    const lastT = times.pop()!;
    const lastS = seqs.pop()!;
    const lastI = items.pop()!;
    const n = items.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        let c = l;
        if (r < n && (times[r]! < times[l]! || (times[r] === times[l] && seqs[r]! < seqs[l]!))) c = r;
        if (lastT < times[c]! || (lastT === times[c] && lastS < seqs[c]!)) break;
        times[i] = times[c]!;
        seqs[i] = seqs[c]!;
        items[i] = items[c]!;
        i = c;
      }
      times[i] = lastT;
      seqs[i] = lastS;
      items[i] = lastI;
    }
    return top;
  }
}
