import type { Cluster, ClusterMember } from './cluster.ts';

/** Options of an elastic fleet (`RunInput.elastic`). */
export interface ElasticFleetOptions {
  /** Members open at the start (the rest are closed bins). @default 1 */
  readonly openAtStart?: number | undefined;
  /** A member with nothing on it this long closes (never the last open one), seconds. */
  readonly closeAfterS: number;
  /** The mean counts open members up to this time only (e.g. the arrivals' window), seconds. @default the whole run */
  readonly meanUntilS?: number | undefined;
}

/** How many bins an elastic fleet held open. */
export interface ElasticFleetUsage {
  /** Most members open at once. */
  readonly peakOpen: number;
  /** Members open on average over the run, or up to `meanUntilS` (GPU-seconds per second, at TP 1). */
  readonly meanOpen: number;
  /** Times a closed member was opened. */
  readonly opened: number;
}

/**
 * Aladdin's Algorithm 1 with bins that open and close (section 4.2): placement sees only the open
 * members; when requests are left waiting because no open member can take them, the next closed
 * member opens (at once: no cold start) and the queue is offered to it — as many times as that
 * places something — and a member that has held nothing for `closeAfterS` closes again. The
 * fleet's members are the most bins it may open.
 */
export class ElasticFleet {
  readonly #cluster: Cluster;
  readonly #closeAfterMs: number;
  readonly #meanUntilMs: number;
  /** Since when each open member has held nothing (clock ms). */
  readonly #idleSince = new Map<string, number>();
  #open: number;
  #peak: number;
  #opened = 0;
  /** Open members × ms, up to `#lastMs`. */
  #openMs = 0;
  #lastMs = 0;

  constructor(cluster: Cluster, options: ElasticFleetOptions) {
    this.#cluster = cluster;
    this.#closeAfterMs = options.closeAfterS * 1000;
    this.#meanUntilMs = (options.meanUntilS ?? Number.POSITIVE_INFINITY) * 1000;
    const open = Math.max(1, Math.min(options.openAtStart ?? 1, cluster.members.length));
    for (const m of cluster.members.slice(open)) cluster.close(m.id);
    this.#open = open;
    this.#peak = open;
  }

  #account(nowMs: number): void {
    const until = Math.min(nowMs, this.#meanUntilMs);
    if (until > this.#lastMs) this.#openMs += this.#open * (until - this.#lastMs);
    this.#lastMs = Math.max(this.#lastMs, until);
  }

  /**
   * After an event at `nowMs`: opens closed members while requests wait and each opening places
   * some (`queued` counts them; `pump` offers the queue to the fleet again), then closes members
   * idle for `closeAfterS` (`holds` says whether a member has anything on it).
   */
  async after(
    nowMs: number,
    queued: () => number,
    pump: () => Promise<void>,
    holds: (m: ClusterMember) => boolean,
  ): Promise<void> {
    this.#account(nowMs);
    let waiting = queued();
    while (waiting > 0) {
      const next = this.#cluster.members.find((m) => this.#cluster.isClosed(m.id));
      if (next === undefined) break;
      this.#cluster.open(next.id);
      this.#open++;
      await pump();
      const left = queued();
      if (left >= waiting) {
        // Nothing the new bin could take: the wait is not for room (or nothing fits anywhere).
        this.#cluster.close(next.id);
        this.#open--;
        break;
      }
      this.#opened++;
      this.#peak = Math.max(this.#peak, this.#open);
      this.#idleSince.delete(next.id);
      waiting = left;
    }
    for (const m of this.#cluster.members) {
      if (this.#cluster.isClosed(m.id)) continue;
      if (holds(m)) {
        this.#idleSince.delete(m.id);
        continue;
      }
      const since = this.#idleSince.get(m.id);
      if (since === undefined) this.#idleSince.set(m.id, nowMs);
      else if (nowMs - since >= this.#closeAfterMs && this.#open > 1) {
        this.#cluster.close(m.id);
        this.#open--;
        this.#idleSince.delete(m.id);
      }
    }
  }

  /** What the fleet held open up to `endMs`. */
  usage(endMs: number): ElasticFleetUsage {
    this.#account(endMs);
    const span = Math.min(endMs, this.#meanUntilMs);
    return {
      peakOpen: this.#peak,
      meanOpen: span > 0 ? this.#openMs / span : this.#open,
      opened: this.#opened,
    };
  }
}
