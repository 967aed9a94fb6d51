/**
 * A one-shot abort signal for the request path, used where an `AbortSignal` would be: it has the
 * `aborted`, `reason` and abort listeners that undici (the engine client) and the dispatcher's own
 * waits read, and nothing else. Node tenures every `AbortSignal` it creates — each survives the
 * young-generation collections and is promoted to the old generation (measured: a loop creating
 * only `new AbortController().signal` copies ~2.7 MB per scavenge, where a plain object of the
 * same shape copies none) — so two of them per request were about one MB promoted per scavenge
 * at 1,000 req/s, and old-generation collections. This one is an ordinary object.
 */
export class StopSignal {
  /** Set once by {@link StopSignal.abort}. */
  aborted = false;
  /** What {@link StopSignal.abort} was given. */
  reason: unknown = undefined;
  /** Listeners still waiting (usually none or one). */
  #listeners: (() => void)[] | undefined;

  /** Aborts (first call wins) and calls every listener once, in the order they were added. */
  abort(reason: unknown = 'aborted'): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.#listeners;
    this.#listeners = undefined;
    if (listeners !== undefined) for (const l of listeners) l();
  }

  /** Calls `listener` once when aborted (never if it already was: check `aborted` first). */
  addEventListener(_type: 'abort', listener: () => void, _options?: unknown): void {
    if (this.aborted) return;
    if (this.#listeners === undefined) this.#listeners = [listener];
    else this.#listeners.push(listener);
  }

  /** Removes a listener added by {@link StopSignal.addEventListener}. */
  removeEventListener(_type: 'abort', listener: () => void): void {
    const ls = this.#listeners;
    if (ls === undefined) return;
    const i = ls.indexOf(listener);
    if (i >= 0) ls.splice(i, 1);
  }
}
