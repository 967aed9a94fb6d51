import type { RequestDescriptor, Usage } from '@fairway/core';
import { groupBand } from '@fairway/policy';
import type { ReplicaCandidate } from '@fairway/store';
import { Admission, type SubmitOptions, type SubmitResult } from './admission.ts';
import { Candidates } from './candidates.ts';
import { Charging } from './charging.ts';
import { DispatchRounds } from './dispatch.ts';
import { Eviction } from './eviction.ts';
import {
  type Dispatched,
  type GatewayOptions,
  type ResolvedGatewayOptions,
  resolveGatewayOptions,
} from './gateway-options.ts';
import { OutputPredictions, type ReplicaPredictionErrors } from './output-prediction.ts';
import { OwnedRequests } from './owned-requests.ts';
import { type AffinityOutcome, PrefixAffinity } from './prefix-affinity.ts';
import { Recovery } from './recovery.ts';
import { ReservationView } from './reservation-view.ts';
import { Settlement } from './settlement.ts';
import { AdmissionLog, recoveringStore } from './state-recovery.ts';

/** Counters of one gateway, for metrics and tests. */
export interface GatewayStats {
  /** Requests this gateway owns that wait in the store's queues. */
  readonly queued: number;
  /** Requests this gateway owns that run on a replica. */
  readonly running: number;
  /** Output tokens recorded but not yet charged. */
  readonly pendingChargeTokens: number;
  readonly admitted: number;
  readonly rejected: number;
  /** Requests this gateway picked (any owner). */
  readonly dispatched: number;
  readonly settled: number;
  readonly flushes: number;
  /** Running requests this gateway evicted and re-queued (`evict`). */
  readonly evicted: number;
  /**
   * Times a running request's output was predicted again (it outran its prediction); only with
   * `repredict` does its reservation grow.
   */
  readonly repredictions: number;
  /** Prediction errors per replica (`reserve: 'predicted'` only), by replica id. */
  readonly predictionErrors: Readonly<Record<string, ReplicaPredictionErrors>>;
  /** Times this gateway found the store's state lost and put back what it holds. */
  readonly repairs: number;
  /** Requests put back by those repairs (queued and running). */
  readonly restored: number;
  /** Requests with prefix keys this gateway dispatched, by what affinity did for them. */
  readonly affinity: Readonly<Record<AffinityOutcome, number>>;
}

/** How often the dispatchers and the simulator look for requests to move out of engine queues, ms. */
export const MOVE_EVERY_MS = 200;

/** Most times one request is moved out of an engine's queue. */
export const MAX_MOVES = 2;

/**
 * The gateway scheduler, one per dispatcher (DESIGN.md principles 1, 3 and 4; request path 2–6).
 * It admits a request into the shared store, holds it there until a replica of its pool has room
 * (tokens and sequence slots, with headroom), and dispatches work-conservingly — on arrival, on
 * completion and on capacity change — taking requests in the ordering policy's order and replicas
 * in the placement policy's order. A dispatched request reserves input + predicted (or maximum)
 * output on its replica and is charged its dispatch cost; streamed output is charged in coalesced
 * flushes; completion settles the true cost and frees the reservation. The live dispatcher and the
 * simulator run this same class; only the clock, the store backend and `onDispatch` differ.
 *
 * The class composes one part per step, each in its own file: `Admission` (admission.ts),
 * `DispatchRounds` (dispatch.ts, with placement in candidates.ts), `Charging` (charging.ts),
 * `Eviction` (eviction.ts), `Settlement` (settlement.ts) and `Recovery` (recovery.ts), over the
 * state they share: the requests it owns (owned-requests.ts), its view of the store's reservations
 * (reservation-view.ts) and its output predictions (output-prediction.ts).
 */
export class Gateway {
  readonly id: string;
  readonly options: ResolvedGatewayOptions;
  readonly #owned = new OwnedRequests();
  readonly #predictions: OutputPredictions;
  readonly #charging: Charging;
  readonly #dispatch: DispatchRounds;
  readonly #admission: Admission;
  readonly #eviction: Eviction;
  readonly #settlement: Settlement;
  readonly #recovery: Recovery;
  readonly #affinity: PrefixAffinity;

  /** Validates `options` (throws a `GatewayError` naming the field) and builds an idle gateway. */
  constructor(options: GatewayOptions) {
    const resolved = resolveGatewayOptions(options);
    this.options = { ...resolved, store: recoveringStore(resolved.store, () => this.#recovery.repair()) };
    this.id = this.options.id;
    const o = this.options;
    const owned = this.#owned;
    const bandOf = new Map(o.sloClasses.map((c) => [c.name, c.band]));
    const bounds = o.promptBands;
    const bands = [...new Set(bandOf.values())]
      .flatMap((b) =>
        bounds === undefined
          ? [b]
          : Array.from({ length: bounds.length + 1 }, (_, i) => groupBand(b, i, bounds)),
      )
      .sort((a, b) => a - b);
    /** Window entries this gateway admitted that may still count (rebuilt after a lost state). */
    const log = new AdmissionLog();
    const view = new ReservationView(o);
    const candidates = new Candidates(o, owned);
    const predictions = new OutputPredictions(o);
    const affinity = new PrefixAffinity(o.prefixAffinity, o.clock);
    this.#affinity = affinity;
    const charging = new Charging({ options: o, owned, view, predictions, affinity });
    const dispatch = new DispatchRounds({
      options: o,
      bands,
      owned,
      view,
      candidates,
      predictions,
      charging,
      affinity,
      // Recovery is made below, with these rounds; the rounds call it only once running.
      releaseOrphan: (id) => this.#recovery.releaseOrphanedPick(id),
    });
    const settlement = new Settlement({
      options: o,
      owned,
      log,
      view,
      candidates,
      predictions,
      charging,
      dispatch,
    });
    const recovery = new Recovery({ options: o, owned, log, view, candidates, dispatch, settlement });
    this.#predictions = predictions;
    this.#charging = charging;
    this.#dispatch = dispatch;
    this.#settlement = settlement;
    this.#recovery = recovery;
    this.#admission = new Admission({
      options: o,
      bandOf,
      owned,
      log,
      view,
      candidates,
      predictions,
      dispatch,
      recovery,
      affinity,
    });
    this.#eviction = new Eviction({ options: o, owned, view, charging });
  }

  /** {@inheritDoc Admission.submit} */
  submit(request: RequestDescriptor, options?: SubmitOptions): Promise<SubmitResult> {
    return this.#admission.submit(request, options);
  }

  /** {@inheritDoc DispatchRounds.pump} */
  pump(pool?: string): Promise<number> {
    return this.#dispatch.pump(pool);
  }

  /** {@inheritDoc Charging.started} */
  started(d: Pick<Dispatched, 'id' | 'replica'> & Partial<Pick<Dispatched, 'predicted'>>): void {
    this.#charging.started(d);
  }

  /** {@inheritDoc Eviction.evict} */
  evict(id: string, generated: number): Promise<boolean> {
    return this.#eviction.evict(id, generated);
  }

  /** {@inheritDoc Eviction.requeueUnserved} */
  requeueUnserved(id: string, moveTo?: ReplicaCandidate): Promise<boolean> {
    return this.#eviction.requeueUnserved(id, moveTo);
  }

  /**
   * Aladdin's re-balancing where an engine queue allows it: of the requests this gateway runs on
   * `from` that wait in its engine's queue (`queued`, each with when it was dispatched), up to
   * `waiting` — the latest dispatched first, as an engine admits its queue in arrival order — each
   * with the replica it moves to ({@link moveTarget}), one request per target (`targets` collects
   * the targets over a round's calls). The caller stops their engine calls and re-queues them with
   * {@link requeueUnserved}.
   */
  planMoves(
    pool: string,
    from: string,
    waiting: number,
    queued: readonly { readonly id: string; readonly dispatchedAtMs: number }[],
    targets: Set<string>,
  ): { readonly id: string; readonly to: ReplicaCandidate }[] {
    const moves: { id: string; to: ReplicaCandidate }[] = [];
    for (const q of [...queued].sort((a, b) => b.dispatchedAtMs - a.dispatchedAtMs)) {
      if (moves.length >= waiting) break;
      const reserve = this.reservedTokensOf(q.id);
      if (reserve === undefined) continue;
      const to = this.#dispatch.moveTarget(pool, reserve, from, targets);
      if (to === undefined) continue;
      targets.add(to.id);
      moves.push({ id: q.id, to });
    }
    return moves;
  }

  /** {@inheritDoc DispatchRounds.moveTarget} */
  moveTarget(
    pool: string,
    reserveTokens: number,
    from: string,
    skip?: ReadonlySet<string>,
  ): ReplicaCandidate | undefined {
    return this.#dispatch.moveTarget(pool, reserveTokens, from, skip);
  }

  /**
   * The store's answer to the admission of request `id` (quota share, alerts), while this gateway
   * owns it; read once `submit` resolved or the request was dispatched.
   */
  admissionOf(id: string): Extract<SubmitResult, { ok: true }> | undefined {
    return this.#owned.get(id)?.admission;
  }

  /**
   * KV tokens the store holds reserved for request `id` on its replica (its reservation, grown as
   * its output streamed past it), while this gateway owns it running; undefined otherwise.
   */
  reservedTokensOf(id: string): number | undefined {
    const own = this.#owned.get(id);
    return own?.state === 'running' ? own.reserveTokens + own.grown : undefined;
  }

  /** {@inheritDoc Charging.recordTokens} */
  recordTokens(id: string, generated: number): boolean {
    return this.#charging.recordTokens(id, generated);
  }

  /** {@inheritDoc Charging.flushDue} */
  flushDue(): boolean {
    return this.#charging.flushDue();
  }

  /** {@inheritDoc Charging.flush} */
  flush(): Promise<number> {
    return this.#charging.flush();
  }

  /** {@inheritDoc Settlement.complete} */
  complete(id: string, usage: Usage): Promise<void> {
    return this.#settlement.complete(id, usage);
  }

  /** {@inheritDoc Settlement.cancel} */
  cancel(id: string, usage?: Usage): Promise<boolean> {
    return this.#settlement.cancel(id, usage);
  }

  /** {@inheritDoc Recovery.releaseOrphanedPick} */
  releaseOrphanedPick(id: string): Promise<void> {
    return this.#recovery.releaseOrphanedPick(id);
  }

  /** {@inheritDoc Recovery.putBackLost} */
  putBackLost(ids: readonly string[]): Promise<number> {
    return this.#recovery.putBackLost(ids);
  }

  /** {@inheritDoc Recovery.heartbeat} */
  heartbeat(): Promise<void> {
    return this.#recovery.heartbeat();
  }

  stats(): GatewayStats {
    return {
      queued: this.#owned.size - this.#owned.running,
      running: this.#owned.running,
      pendingChargeTokens: this.#charging.pendingTokens,
      admitted: this.#admission.admitted,
      rejected: this.#admission.rejected,
      dispatched: this.#dispatch.dispatched,
      settled: this.#settlement.settled,
      flushes: this.#charging.flushes,
      evicted: this.#eviction.evicted,
      repredictions: this.#predictions.repredictions,
      predictionErrors: this.#predictions.errors(),
      repairs: this.#recovery.repairs,
      restored: this.#recovery.restored,
      affinity: { ...this.#affinity.outcomes },
    };
  }
}
