import type { Bus, SequenceReport, Unsubscribe } from '@fairway/bus';
import type { Clock, Logger } from '@fairway/core';
import type { SequenceProgress } from '@fairway/policy';

/** Options of {@link SequenceReports}. */
export interface SequenceReportsOptions {
  readonly bus: Bus;
  readonly dispatcherId: string;
  /** Monotonic clock: report ages and how long a merged view is kept. */
  readonly timer: Clock;
  /** Wall clock for the messages' timestamps. */
  readonly clock: Clock;
  /**
   * The requests this dispatcher runs, by replica (`GatewayRuntime.runningSequences`), given the
   * map in which it keeps when each one's first output token was seen.
   */
  readonly local: (firstSeen: Map<string, number>) => Map<string, SequenceProgress[]>;
  /** How often this dispatcher sends its sequences, ms. @default 200 */
  readonly intervalMs?: number;
  /** How long a merged view is served before it is built again, ms. @default 50 */
  readonly refreshMs?: number;
  /** Told each merged view as it is built (the placement gauges). */
  readonly onMerged?: (byReplica: ReadonlyMap<string, readonly SequenceProgress[]>) => void;
  readonly logger: Logger;
}

/** Another dispatcher's last report, by replica, and when it arrived (monotonic ms). */
interface Received {
  readonly atMs: number;
  readonly byReplica: ReadonlyMap<string, readonly SequenceProgress[]>;
}

/**
 * A report older than this many intervals, and at least {@link EXPIRY_MIN_MS}, is dropped: its
 * requests' reservations then count in full. The floor keeps a dispatcher whose event loop stalls
 * for a moment (a collection, a loaded machine) from making its replicas look full to the others.
 */
const EXPIRY_INTERVALS = 3;
const EXPIRY_MIN_MS = 2000;

/**
 * Each replica's sequences as every dispatcher runs them (Aladdin's per-sequence progress, section
 * 4.2): a dispatcher knows the requests it proxies — prompt, output streamed so far, time since the
 * first token, what the store reserved for each — and sends them over the bus (`sequenceReport`)
 * a few times a second; placement reads the union of its own, fresh, and the others' last reports.
 * A report is at most one interval old when it arrives; one from a dispatcher that went quiet is
 * dropped after three intervals (2 s at least), and its requests' reservations then count in full
 * (the placement's unreported reservations), never as free room.
 */
export class SequenceReports {
  readonly #o: SequenceReportsOptions;
  readonly #intervalMs: number;
  readonly #refreshMs: number;
  readonly #received = new Map<string, Received>();
  readonly #firstSeen = new Map<string, number>();
  #merged = new Map<string, SequenceProgress[]>();
  #mergedAt = Number.NEGATIVE_INFINITY;
  /** Increases every time the merged view is built again. */
  #version = 0;
  /** Whether the last report sent named any sequence (an empty one is sent once after). */
  #sentAny = false;
  /** Whether the last report could not be sent (logged once until one is). */
  #failing = false;
  #stop: Unsubscribe | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: SequenceReportsOptions) {
    this.#o = options;
    this.#intervalMs = options.intervalMs ?? 200;
    this.#refreshMs = options.refreshMs ?? 50;
  }

  start(): void {
    const o = this.#o;
    this.#stop = o.bus.subscribe('sequenceReport', (m) => {
      if (m.dispatcherId !== o.dispatcherId) this.#receive(m);
    });
    this.#timer = setInterval(() => {
      this.send();
      // Also built when no request asks, so a dispatcher's gauges follow the others' reports.
      this.version();
    }, this.#intervalMs);
    this.#timer.unref();
  }

  /** Sends this dispatcher's sequences (an empty report once, after the last ended). */
  send(): void {
    const o = this.#o;
    const local = o.local(this.#firstSeen);
    if (local.size === 0 && !this.#sentAny) return;
    this.#sentAny = local.size > 0;
    const replicas = [...local].map(([replicaId, list]) => ({
      replicaId,
      sequences: list.map(
        (s) =>
          [
            s.inputTokens,
            s.generated,
            Math.round(s.decodeMs),
            s.prefilled ? 1 : 0,
            s.reservedTokens ?? 0,
          ] as [number, number, number, 0 | 1, number],
      ),
    }));
    try {
      o.bus.publish('sequenceReport', { dispatcherId: o.dispatcherId, replicas, at: o.clock.now() });
      this.#failing = false;
    } catch (err) {
      // Every 200 ms while the bus is down: said once, until a report goes out again.
      if (!this.#failing)
        o.logger.warn({ err: (err as Error).message }, 'dispatcher: sequence reports not sent; retrying');
      this.#failing = true;
    }
  }

  #receive(m: SequenceReport): void {
    const byReplica = new Map<string, SequenceProgress[]>();
    for (const r of m.replicas)
      byReplica.set(
        r.replicaId,
        r.sequences.map(([inputTokens, generated, decodeMs, prefilled, reservedTokens]) => ({
          inputTokens,
          generated,
          decodeMs,
          prefilled: prefilled === 1,
          reservedTokens,
        })),
      );
    if (byReplica.size === 0) this.#received.delete(m.dispatcherId);
    else this.#received.set(m.dispatcherId, { atMs: this.#o.timer.now(), byReplica });
  }

  /**
   * A number that changes whenever {@link sequencesOf} may answer differently; builds the merged
   * view again when it is older than `refreshMs`.
   */
  version(): number {
    const now = this.#o.timer.now();
    if (now - this.#mergedAt >= this.#refreshMs) this.#merge(now);
    return this.#version;
  }

  /** The sequences on `replica` as this dispatcher and the others last reported them. */
  sequencesOf(replica: string): readonly SequenceProgress[] {
    return this.#merged.get(replica) ?? [];
  }

  #merge(now: number): void {
    const merged = this.#o.local(this.#firstSeen);
    const expiry = Math.max(EXPIRY_INTERVALS * this.#intervalMs, EXPIRY_MIN_MS);
    for (const [dispatcher, r] of this.#received) {
      if (now - r.atMs > expiry) {
        this.#received.delete(dispatcher);
        continue;
      }
      // A sequence is placed by as it was reported: its time decoded and output so far belong
      // together. Its ATGT slack then is what it had at the report, which grows while it keeps
      // pace; growing the time alone would make every sequence look stalled, and Aladdin gives up
      // on one past its target (no slack held for it).
      for (const [replica, list] of r.byReplica) {
        const into = merged.get(replica) ?? [];
        merged.set(replica, into);
        into.push(...list);
      }
    }
    this.#merged = merged;
    this.#mergedAt = now;
    this.#version++;
    this.#o.onMerged?.(merged);
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#stop?.();
  }
}
