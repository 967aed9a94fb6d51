import type { Clock } from '@fairway/core';
import type { EngineEvent, EngineModelApi, EngineSeqInput, EngineStats, StepResult } from '@fairway/perf';

/** Most overdue steps run in one turn of the event loop before I/O gets a turn. */
const MAX_STEPS_PER_TURN = 16;
/** Real ms one turn of the event loop may spend handing out events before I/O gets a turn. */
const TURN_BUDGET_MS = 2;

/** A monotonic millisecond clock (`performance.now()`), immune to wall-clock jumps. */
export const monotonicClock: Clock = { now: () => performance.now() };

/** Receives the events of one sequence, at the real time its step ends. */
export type SeqListener = (event: EngineEvent) => void;

/** Options of {@link RealtimeDriver}. */
export interface RealtimeDriverOptions {
  /** Model milliseconds per real millisecond: 10 runs the engine ten times faster. @default 1 */
  readonly speed?: number;
  /** Real-time source. @default monotonicClock */
  readonly clock?: Clock;
  /**
   * How far (real ms) the loop may fall behind the model's schedule; beyond it the lag is
   * forgotten, so a stall is not followed by a long burst of instant steps. @default 50
   */
  readonly maxLagMs?: number;
  /** Called after each step's events were delivered, with the step and its real start time. */
  readonly onStep?: (step: StepResult, startedAtMs: number) => void;
  /** Called when a listener throws; the loop carries on with the other sequences. */
  readonly onListenerError?: (error: unknown, event: EngineEvent) => void;
}

/**
 * Runs an engine model in real time: while the model has work it takes a step, waits the step's
 * duration divided by the speed factor on real timers, then delivers the step's events to the
 * sequences' listeners. A request that arrives mid-step waits for the next step, as in vLLM's
 * engine loop. Steps are scheduled against absolute deadlines, so timer overshoot does not
 * accumulate over a long generation.
 */
export class RealtimeDriver {
  readonly #model: EngineModelApi;
  readonly #speed: number;
  readonly #clock: Clock;
  readonly #maxLagMs: number;
  readonly #onStep: ((step: StepResult, startedAtMs: number) => void) | undefined;
  readonly #onListenerError: ((error: unknown, event: EngineEvent) => void) | undefined;
  readonly #listeners = new Map<string, SeqListener>();
  readonly #startMs: number;
  #looping = false;
  /** Set by {@link RealtimeDriver.stall}: no step is taken. */
  #stalled = false;
  #modelBusyMs = 0;
  #steps = 0;
  #closed = false;
  /** Real time at which the step in flight ends. */
  #deadline = 0;
  #inFlight: { readonly step: StepResult; readonly startedAt: number; readonly endsAt: number } | undefined;
  /** Steps whose events are being handed out, oldest first, with the index of the next event. */
  readonly #delivering: { readonly step: StepResult; readonly startedAt: number; next: number }[] = [];
  /** The step whose events are being handed out right now, if any. */
  #current: { readonly step: StepResult; readonly startedAt: number } | undefined;
  #timeout: NodeJS.Timeout | undefined;
  #immediate: NodeJS.Immediate | undefined;

  constructor(model: EngineModelApi, options: RealtimeDriverOptions = {}) {
    this.#model = model;
    this.#speed = options.speed ?? 1;
    if (!(this.#speed > 0)) throw new RangeError(`speed must be > 0 (got ${this.#speed})`);
    this.#clock = options.clock ?? monotonicClock;
    this.#maxLagMs = options.maxLagMs ?? 50;
    this.#onStep = options.onStep;
    this.#onListenerError = options.onListenerError;
    this.#startMs = this.#clock.now();
  }

  /** The model being driven. */
  get model(): EngineModelApi {
    return this.#model;
  }

  /** Model milliseconds elapsed since the driver started (real elapsed × speed). */
  modelNowMs(): number {
    return (this.#clock.now() - this.#startMs) * this.#speed;
  }

  /**
   * Model ms at which a request submitted now arrives: now, unless the loop has fallen behind the
   * model's schedule (a busy machine at a high speed factor), in which case the start of the next
   * scheduled step — the request is taken by that step, and latencies measured on the schedule
   * must not start later than the step that serves them.
   */
  arrivalModelMs(): number {
    const now = this.modelNowMs();
    if (!this.#looping) return now;
    return Math.min(now, (this.#deadline - this.#startMs) * this.#speed);
  }

  /**
   * While a listener runs: when the step that produced its event started and ended on the model's
   * schedule, model ms since the driver started. Unlike {@link modelNowMs} at delivery, it carries
   * no timer overshoot (which a high speed factor would magnify), so latencies measured with it
   * are what the simulated GPU would take. Undefined outside a listener call.
   */
  currentStepModelMs(): { readonly startMs: number; readonly endMs: number } | undefined {
    const c = this.#current;
    if (c === undefined) return undefined;
    const startMs = (c.startedAt - this.#startMs) * this.#speed;
    return { startMs, endMs: startMs + c.step.durationMs };
  }

  /**
   * Model milliseconds of the steps taken so far. Compared with real time × speed it says whether
   * the driver keeps up with its speed factor (1) or the machine holds it back (< 1 while busy).
   */
  get modelBusyMs(): number {
    return this.#modelBusyMs;
  }

  /** Steps taken so far. */
  get steps(): number {
    return this.#steps;
  }

  /** Model milliseconds per real millisecond. */
  get speed(): number {
    return this.#speed;
  }

  /** Sequences submitted and not yet finished or aborted. */
  get active(): number {
    return this.#listeners.size;
  }

  /** The model's live counters. */
  stats(): EngineStats {
    return this.#model.stats();
  }

  /** Adds a sequence to the model; `listener` gets its events until it finishes or is aborted. */
  submit(seq: EngineSeqInput, listener: SeqListener): void {
    if (this.#closed) throw new Error('the engine driver is closed');
    this.#model.add(seq);
    this.#listeners.set(seq.id, listener);
    this.#wake();
  }

  /** Removes a sequence from the model (its KV blocks are freed at once); false if unknown. */
  abort(id: string): boolean {
    this.#listeners.delete(id);
    const known = this.#model.abort(id);
    // Freed blocks may let a waiting sequence run.
    if (known) this.#wake();
    return known;
  }

  /** Ids of the sequences submitted and not yet finished or aborted. */
  activeIds(): string[] {
    return [...this.#listeners.keys()];
  }

  /** Stops the loop; events of the step in flight are dropped. */
  close(): void {
    this.#closed = true;
    this.#inFlight = undefined;
    this.#delivering.length = 0;
    if (this.#timeout !== undefined) clearTimeout(this.#timeout);
    if (this.#immediate !== undefined) clearImmediate(this.#immediate);
    this.#timeout = undefined;
    this.#immediate = undefined;
    this.#listeners.clear();
  }

  /**
   * Stops taking steps (`true`: a stuck engine; the step in flight ends only once it goes on) or
   * takes them again from now (`false`).
   */
  stall(stalled: boolean): void {
    if (this.#stalled === stalled) return;
    this.#stalled = stalled;
    if (stalled) {
      if (this.#timeout !== undefined) clearTimeout(this.#timeout);
      if (this.#immediate !== undefined) clearImmediate(this.#immediate);
      this.#timeout = undefined;
      this.#immediate = undefined;
      this.#looping = false;
      return;
    }
    this.#wake();
  }

  #wake(): void {
    if (this.#looping || this.#closed || this.#stalled) return;
    this.#looping = true;
    this.#deadline = this.#clock.now();
    this.#schedule(0);
  }

  #schedule(delayMs: number): void {
    // Events are never delivered before their step ends. A timer cannot wait less than ~1 ms, so
    // short steps overshoot a little; the absolute deadline lets the next step catch up.
    if (delayMs > 0) this.#timeout = setTimeout(this.#tick, delayMs);
    else this.#immediate = setImmediate(this.#tick);
  }

  readonly #tick = (): void => {
    this.#timeout = undefined;
    this.#immediate = undefined;
    if (this.#closed) return;
    const turnStart = this.#clock.now();
    // Finish handing out earlier steps' events first: events keep their order.
    if (!this.#drain(turnStart)) {
      this.#schedule(0);
      return;
    }
    const flight = this.#inFlight;
    if (flight) {
      // Timers fire on the loop's millisecond clock, up to ~1 ms before the precise deadline.
      const wait = flight.endsAt - this.#clock.now();
      if (wait > 1) {
        this.#schedule(wait);
        return;
      }
      this.#inFlight = undefined;
      this.#delivering.push({ step: flight.step, startedAt: flight.startedAt, next: 0 });
      if (!this.#drain(turnStart)) {
        this.#schedule(0);
        return;
      }
    }
    const now = this.#clock.now();
    if (now - this.#deadline > this.#maxLagMs) this.#deadline = now - this.#maxLagMs;
    // Steps whose end is already past run back to back: a loaded engine catches up, and the
    // chunks a stream gets from them leave in one socket write.
    for (let n = 0; n < MAX_STEPS_PER_TURN; n++) {
      if (this.#closed) return;
      if (!this.#model.hasWork()) {
        this.#looping = false;
        return;
      }
      const startedAt = this.#deadline;
      const step = this.#model.step();
      if (step.durationMs <= 0 && step.events.length === 0) {
        // The model has work it cannot start (e.g. a sequence waiting for blocks); sleep until an
        // arrival or an abort changes that.
        this.#looping = false;
        return;
      }
      this.#deadline = startedAt + step.durationMs / this.#speed;
      this.#modelBusyMs += step.durationMs;
      this.#steps++;
      if (this.#deadline > this.#clock.now()) {
        this.#inFlight = { step, startedAt, endsAt: this.#deadline };
        this.#schedule(this.#deadline - this.#clock.now());
        return;
      }
      this.#delivering.push({ step, startedAt, next: 0 });
      if (!this.#drain(turnStart)) break;
    }
    // Let I/O (new requests, disconnects) in before going on.
    this.#schedule(0);
  };

  /**
   * Hands out queued events until the turn's budget is spent; true when the queue is empty. A
   * step of thousands of sequences is spread over several turns of the event loop, because Node
   * accepts about one new connection per turn when the loop is busy.
   */
  #drain(turnStart: number): boolean {
    const queue = this.#delivering;
    while (queue.length > 0) {
      const d = queue[0]!;
      const events = d.step.events;
      while (d.next < events.length) {
        const ev = events[d.next++]!;
        const listener = this.#listeners.get(ev.id);
        if (listener) {
          if (ev.kind === 'finished') this.#listeners.delete(ev.id);
          this.#current = d;
          try {
            listener(ev);
          } catch (error) {
            this.#onListenerError?.(error, ev);
          } finally {
            this.#current = undefined;
          }
        }
        if ((d.next & 63) === 0 && this.#clock.now() - turnStart > TURN_BUDGET_MS) return false;
      }
      queue.shift();
      this.#onStep?.(d.step, d.startedAt);
    }
    return true;
  }
}
