/** Something with buffered output to write. */
export interface Flushable {
  /** Writes whatever it has buffered. */
  flush(): void;
}

/**
 * Coalesces the SSE chunks of many streams into one socket write per stream every `intervalMs`.
 * A loaded simulated engine then pays one write per stream per interval instead of one per token,
 * the way a real server's chunks pile up in a socket buffer; each chunk still carries one token.
 */
export class StreamFlusher {
  readonly #intervalMs: number;
  readonly #dirty = new Set<Flushable>();
  #timer: NodeJS.Timeout | undefined;

  /** @param intervalMs longest time a chunk waits before it is written, ms (> 0). */
  constructor(intervalMs: number) {
    if (!(intervalMs > 0)) throw new RangeError(`intervalMs must be > 0 (got ${intervalMs})`);
    this.#intervalMs = intervalMs;
  }

  /** Registers a stream that has buffered output; it is flushed within the interval. */
  mark(stream: Flushable): void {
    this.#dirty.add(stream);
    this.#timer ??= setTimeout(this.#flushAll, this.#intervalMs);
  }

  /** Forgets a stream (it finished or was aborted and wrote or dropped its buffer itself). */
  forget(stream: Flushable): void {
    this.#dirty.delete(stream);
  }

  /** Stops the timer; buffered output is dropped. */
  close(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#dirty.clear();
  }

  readonly #flushAll = (): void => {
    this.#timer = undefined;
    const streams = [...this.#dirty];
    this.#dirty.clear();
    for (const s of streams) s.flush();
  };
}
