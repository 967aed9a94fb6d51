import type { ReplicaState } from '@fairway/policy';
import type { Reservation } from '@fairway/store';
import type { ResolvedGatewayOptions } from './gateway-options.ts';
import type { Owned } from './owned-requests.ts';
import { replicaState } from './replica-view.ts';

/** No reservation. */
export const NOTHING: Reservation = { tokens: 0, seqs: 0 };

/**
 * What the store has reserved on each replica, as this gateway last learned it: from every
 * `admitAndDispatch` result (authoritative for its candidates), from dispatch rounds' reads, and
 * from this gateway's own dispatches, settlements and evictions in between. Arrivals order
 * replicas and judge overload from it, so the request path reads nothing; the store's own
 * atomic fit check keeps reservations exact whatever the view says.
 */
export class ReservationView {
  readonly #o: ResolvedGatewayOptions;
  readonly #reservations = new Map<string, Reservation>();
  /**
   * What this gateway's admissions sent and not yet answered will likely reserve, by replica (see
   * {@link ReservationView.expect}): counted in {@link ReservationView.states} until the answer,
   * so arrivals within one round trip do not all see the same replica emptiest.
   */
  readonly #expected = new Map<string, { tokens: number; seqs: number }>();
  /** Clock ms at which each pool's reservations were last read from the store. */
  readonly #readAt = new Map<string, number>();

  constructor(options: ResolvedGatewayOptions) {
    this.#o = options;
  }

  /**
   * The pool's replicas as placement sees them, with reservations from this view; the room of
   * `leaving` (a request being settled in the same call) already counted as free.
   */
  states(pool: string, leaving?: Owned): ReplicaState[] {
    const h = this.#o.headroom;
    const expected = this.#expected;
    return this.#o.replicas.replicas(pool).map((info) => {
      const known = this.#reservations.get(info.id) ?? NOTHING;
      const more = expected.size === 0 ? undefined : expected.get(info.id);
      const r =
        more === undefined ? known : { tokens: known.tokens + more.tokens, seqs: known.seqs + more.seqs };
      const freed =
        leaving !== undefined && leaving.replica === info.id
          ? {
              tokens: Math.max(0, r.tokens - leaving.reserveTokens - leaving.grown),
              seqs: Math.max(0, r.seqs - 1),
            }
          : r;
      return replicaState(info, freed, h);
    });
  }

  /**
   * The pool's replicas for a dispatch round: reservations read from the store (concurrently, one
   * round-trip time for all replicas) unless the view was read less than
   * `reservationsMaxAgeMs` ago.
   */
  async roundStates(pool: string): Promise<ReplicaState[]> {
    const o = this.#o;
    const now = o.clock.now();
    const readAt = this.#readAt.get(pool);
    if (readAt !== undefined && now - readAt < o.reservationsMaxAgeMs) return this.states(pool);
    const infos = o.replicas.replicas(pool);
    const reserved = await Promise.all(infos.map((info) => o.store.reserved(info.id)));
    for (const [i, info] of infos.entries()) this.set(info.id, reserved[i] ?? NOTHING);
    this.#readAt.set(pool, now);
    return infos.map((info, i) => replicaState(info, reserved[i] ?? NOTHING, o.headroom));
  }

  /** Takes `r` as what the store reserves on `replica`. */
  set(replica: string, r: Reservation): void {
    if (r.seqs <= 0) this.#reservations.delete(replica);
    else this.#reservations.set(replica, { tokens: Math.max(0, r.tokens), seqs: r.seqs });
  }

  /** Adds `tokens` and `seqs` (negative to take away) to what `replica` reserves. */
  add(replica: string, tokens: number, seqs: number): void {
    const r = this.#reservations.get(replica) ?? NOTHING;
    this.set(replica, { tokens: r.tokens + tokens, seqs: r.seqs + seqs });
  }

  /**
   * An admission about to be sent will likely reserve `tokens` on `replica` (the first candidate
   * it offers the store): counted until {@link ReservationView.answered}, when the store's answer
   * says what was reserved.
   */
  expect(replica: string, tokens: number): void {
    const e = this.#expected.get(replica);
    if (e === undefined) this.#expected.set(replica, { tokens, seqs: 1 });
    else {
      // Counted in place: admissions in flight add nothing for the collector to copy.
      e.tokens += tokens;
      e.seqs++;
    }
  }

  /** The admission that {@link ReservationView.expect} counted on `replica` was answered. */
  answered(replica: string, tokens: number): void {
    const e = this.#expected.get(replica);
    if (e === undefined) return;
    if (e.seqs <= 1) this.#expected.delete(replica);
    else {
      e.tokens -= tokens;
      e.seqs--;
    }
  }

  /** A running request of this gateway left its replica (settled or re-queued). */
  release(own: Owned): void {
    if (own.replica !== undefined) this.add(own.replica, -own.reserveTokens - own.grown, -1);
    own.grown = 0;
  }

  /** Forgets everything (the store's state was lost); the next round reads the store again. */
  clear(): void {
    this.#reservations.clear();
    this.#readAt.clear();
  }
}
