/**
 * Deadline-aware admission: how long a new request would wait for dispatch, predicted from the
 * depth of the queues ahead of it and how fast the pool drains, so one that cannot start before
 * its class's queue deadline is refused at once, with an honest Retry-After, instead of waiting
 * past it. Bands are served in strict priority, so the queues ahead are the request's own band and
 * every band before it. Depths come from the store's answers to this gateway's admissions (the
 * shared queue, as of that call) and are drained at the measured rate between answers, so a
 * prediction never rests on a depth that stopped being true, and any dispatch's answer (the pool's
 * queued count) caps them; the rate is the engines' own finish counter. Without a measured rate nothing is refused.
 */
export class QueueDeadlines {
  /** Last known depth of each (pool, band) queue and when it was seen. */
  readonly #depths = new Map<string, Map<number, { depth: number; atMs: number }>>();

  /** Records the depth of a (pool, band) queue the store reported at `nowMs`. */
  observe(pool: string, band: number, depth: number, nowMs: number): void {
    let bands = this.#depths.get(pool);
    if (bands === undefined) {
      bands = new Map();
      this.#depths.set(pool, bands);
    }
    bands.set(band, { depth, atMs: nowMs });
  }

  /**
   * Records that `pool` holds `queued` requests in all bands at `nowMs` (a dispatch's answer from
   * the store; 0 when a dispatch found the queues empty): no band holds more than that.
   */
  poolQueued(pool: string, queued: number, nowMs: number): void {
    const bands = this.#depths.get(pool);
    if (bands === undefined) return;
    for (const d of bands.values())
      if (d.depth > queued) {
        d.depth = queued;
        d.atMs = nowMs;
      }
  }

  /**
   * ms by which a request of `band` admitted now would start after `deadlineMs`, or undefined if
   * it is predicted to start in time (or nothing drains measurably: `perS` ≤ 0).
   */
  lateBy(pool: string, band: number, deadlineMs: number, perS: number, nowMs: number): number | undefined {
    if (!(perS > 0)) return undefined;
    const bands = this.#depths.get(pool);
    if (bands === undefined) return undefined;
    let ahead = 0;
    for (const [b, d] of bands) {
      if (b > band) continue;
      // Drained since it was seen, at the whole pool's rate: optimistic, so no request is
      // refused on a depth that may have drained away; the next admission brings the truth.
      ahead += Math.max(0, d.depth - (perS * Math.max(0, nowMs - d.atMs)) / 1000);
    }
    const waitMs = (ahead / perS) * 1000;
    return waitMs > deadlineMs ? waitMs - deadlineMs : undefined;
  }
}
