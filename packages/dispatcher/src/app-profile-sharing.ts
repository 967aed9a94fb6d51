import type { Bus, Unsubscribe } from '@fairway/bus';
import type { Clock, Logger } from '@fairway/core';
import type { AppProfileLearner } from '@fairway/policy';

/** Options of {@link AppProfileSharing}. */
export interface AppProfileSharingOptions {
  readonly learner: AppProfileLearner;
  readonly bus: Bus;
  readonly dispatcherId: string;
  /** Timestamps of the messages (ms). */
  readonly clock: Clock;
  /** How often the calls observed since the last message are sent, ms. @default 1000 */
  readonly intervalMs?: number;
  readonly logger: Logger;
}

/**
 * WSC's app profiles learned by the whole fleet: every dispatcher sends the settled calls its
 * learner observed (the bus's `appSamples`, once a second) and learns from every other
 * dispatcher's, so all of them learn from every call and price the shared counters alike
 * (within the order in which calls arrive, which moves a running mean by a sample's weight).
 * A lost message costs the others those samples, nothing else.
 */
export class AppProfileSharing {
  readonly #o: AppProfileSharingOptions;
  #stop: Unsubscribe | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** Samples received from other dispatchers. */
  received = 0;

  constructor(options: AppProfileSharingOptions) {
    this.#o = options;
  }

  start(): void {
    const o = this.#o;
    this.#stop = o.bus.subscribe('appSamples', (m) => {
      if (m.dispatcherId === o.dispatcherId) return;
      o.learner.merge(m.samples);
      this.received += m.samples.length;
    });
    this.#timer = setInterval(() => this.flush(), o.intervalMs ?? 1000);
    this.#timer.unref();
  }

  /** Sends the calls observed since the last message, if any. */
  flush(): void {
    const o = this.#o;
    const samples = o.learner.drain();
    if (samples.length === 0) return;
    try {
      o.bus.publish('appSamples', { dispatcherId: o.dispatcherId, samples, at: o.clock.now() });
    } catch (err) {
      o.logger.warn({ err: (err as Error).message }, 'dispatcher: app profile samples not shared');
    }
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.flush();
    this.#stop?.();
  }
}
