/**
 * A binary min-heap that knows where each element sits, so an element whose key changed can be
 * moved (`update`) or taken out (`remove`) in O(log n). The memory store keeps its backlogged flows
 * and its score-ordered requests in these, so picks stay cheap with large backlogs.
 */
export class IndexedHeap<T> {
  readonly #items: T[] = [];
  readonly #pos = new Map<T, number>();
  readonly #less: (a: T, b: T) => boolean;

  /** `less(a, b)` must be a strict total order over the elements present. */
  constructor(less: (a: T, b: T) => boolean) {
    this.#less = less;
  }

  get size(): number {
    return this.#items.length;
  }

  has(item: T): boolean {
    return this.#pos.has(item);
  }

  peek(): T | undefined {
    return this.#items[0];
  }

  push(item: T): void {
    this.#items.push(item);
    this.#pos.set(item, this.#items.length - 1);
    this.#up(this.#items.length - 1);
  }

  pop(): T | undefined {
    const top = this.#items[0];
    if (top !== undefined) this.remove(top);
    return top;
  }

  /** Takes an element out; returns false if it was not in the heap. */
  remove(item: T): boolean {
    const i = this.#pos.get(item);
    if (i === undefined) return false;
    const last = this.#items.pop() as T;
    this.#pos.delete(item);
    if (i < this.#items.length) {
      this.#items[i] = last;
      this.#pos.set(last, i);
      this.#fix(i);
    }
    return true;
  }

  /** Restores heap order after the element's key changed; no-op if it is not in the heap. */
  update(item: T): void {
    const i = this.#pos.get(item);
    if (i !== undefined) this.#fix(i);
  }

  /** The elements in heap (not sorted) order. */
  values(): readonly T[] {
    return this.#items;
  }

  #fix(i: number): void {
    if (i > 0 && this.#less(this.#items[i] as T, this.#items[(i - 1) >> 1] as T)) this.#up(i);
    else this.#down(i);
  }

  #up(i: number): void {
    const items = this.#items;
    const item = items[i] as T;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = items[p] as T;
      if (!this.#less(item, parent)) break;
      items[i] = parent;
      this.#pos.set(parent, i);
      i = p;
    }
    items[i] = item;
    this.#pos.set(item, i);
  }

  #down(i: number): void {
    const items = this.#items;
    const n = items.length;
    const item = items[i] as T;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      let c = l;
      if (r < n && this.#less(items[r] as T, items[l] as T)) c = r;
      const child = items[c] as T;
      if (!this.#less(child, item)) break;
      items[i] = child;
      this.#pos.set(child, i);
      i = c;
    }
    items[i] = item;
    this.#pos.set(item, i);
  }
}
