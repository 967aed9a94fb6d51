/**
 * Time source injected everywhere: policies, the store, the simulator and the dispatcher never read
 * the wall clock themselves, so a simulation replays exactly (DESIGN.md principle 6).
 */
export interface Clock {
  /** Milliseconds since an arbitrary epoch (the Unix epoch for the system clock, 0 for a manual one). */
  now(): number;
}

/** The real wall clock. */
export const systemClock: Clock = { now: () => Date.now() };

/** A clock that moves only when told to; the simulator's virtual time and unit tests use it. */
export class ManualClock implements Clock {
  #ms: number;

  constructor(startMs = 0) {
    this.#ms = startMs;
  }

  now(): number {
    return this.#ms;
  }

  /** Moves time forward by `ms` (never backwards). */
  advance(ms: number): void {
    if (ms < 0) throw new RangeError(`cannot move a clock backwards (${ms} ms)`);
    this.#ms += ms;
  }

  /** Sets the time; it must not go backwards. */
  set(ms: number): void {
    if (ms < this.#ms) throw new RangeError(`cannot move a clock backwards (${this.#ms} -> ${ms} ms)`);
    this.#ms = ms;
  }
}
