import type { Usage } from '@fairway/core';
import type { SettleInput } from '@fairway/store';
import type { Candidates } from './candidates.ts';
import type { Charging } from './charging.ts';
import type { DispatchRounds } from './dispatch.ts';
import { GatewayError, GatewayErrorCode } from './errors.ts';
import type { ResolvedGatewayOptions } from './gateway-options.ts';
import type { OutputPredictions } from './output-prediction.ts';
import type { Owned, OwnedRequests } from './owned-requests.ts';
import { NOTHING, type ReservationView } from './reservation-view.ts';
import type { AdmissionLog } from './state-recovery.ts';

/**
 * Settlement for one gateway (DESIGN.md request path, step 6): a finished or given-up request is
 * charged its true cost, its reservation freed, and the room it freed dispatched into.
 * Settlements the store did not answer are kept and sent again (see `retryUnsettled`).
 */
export class Settlement {
  readonly #o: ResolvedGatewayOptions;
  readonly #id: string;
  readonly #owned: OwnedRequests;
  readonly #log: AdmissionLog;
  readonly #view: ReservationView;
  readonly #candidates: Candidates;
  readonly #predictions: OutputPredictions;
  readonly #charging: Charging;
  readonly #dispatch: DispatchRounds;
  /**
   * Settlements whose store call failed without an answer (Redis unreachable): the request may
   * still hold its reservation there, which would keep its replica's room taken for good. Sent
   * again on every heartbeat until the store answers.
   */
  readonly #unsettled = new Map<string, SettleInput>();
  /** Requests whose settlement is on its way to the store (a repair must not forget them). */
  readonly #settling = new Set<string>();
  /** Requests settled. */
  settled = 0;

  constructor(deps: {
    options: ResolvedGatewayOptions;
    owned: OwnedRequests;
    log: AdmissionLog;
    view: ReservationView;
    candidates: Candidates;
    predictions: OutputPredictions;
    charging: Charging;
    dispatch: DispatchRounds;
  }) {
    this.#o = deps.options;
    this.#id = deps.options.id;
    this.#owned = deps.owned;
    this.#log = deps.log;
    this.#view = deps.view;
    this.#candidates = deps.candidates;
    this.#predictions = deps.predictions;
    this.#charging = deps.charging;
    this.#dispatch = deps.dispatch;
  }

  /**
   * Settles a finished request with its true usage: corrects its counter to the policy's final
   * cost, frees its reservation, records its output length; then dispatches into the freed room.
   */
  async complete(id: string, usage: Usage): Promise<void> {
    const own = this.#owned.get(id);
    if (own === undefined || own.state !== 'running')
      throw new GatewayError(
        GatewayErrorCode.UNKNOWN_REQUEST,
        this.#id,
        `request "${id}" is not running here`,
        {
          requestId: id,
        },
      );
    if (this.#o.reserve === 'predicted') this.#predictions.noteFinished(own, usage.outputTokens);
    await this.#settle(id, own, usage);
  }

  /**
   * Gives up a request (client gone, timeout): a queued one leaves the queue; a running one is
   * settled with what it has used so far. Returns false if this gateway does not own it.
   */
  async cancel(id: string, usage?: Usage): Promise<boolean> {
    const own = this.#owned.get(id);
    if (own === undefined) return false;
    if (own.state === 'queued') {
      const removed = await this.#o.store.cancel(id, this.#o.clock.now());
      if (removed) {
        this.#owned.delete(id);
        this.#log.trueUp(id, 0);
      }
      return removed;
    }
    await this.#settle(id, own, usage ?? { inputTokens: own.req.inputTokens, outputTokens: 0 });
    return true;
  }

  /** Sends again every settlement the store did not answer, until it does. */
  async retryUnsettled(): Promise<void> {
    for (const [id, settle] of [...this.#unsettled]) {
      // False when the first call went through after all, or the state it settled was lost.
      await this.#o.store.settle(settle);
      this.#unsettled.delete(id);
    }
  }

  /** Requests whose settlement is on its way to the store or was not answered. */
  pending(): string[] {
    return [...this.#settling, ...this.#unsettled.keys()];
  }

  /**
   * Settles a running request with its true usage and dispatches into the room it freed: one
   * `settleAndDispatch` call when the store has it and no router splits the pool (a dispatch round
   * follows only when work is left queued), else `settle` and a dispatch round.
   */
  async #settle(id: string, own: Owned, usage: Usage): Promise<void> {
    const o = this.#o;
    this.#charging.close(id);
    this.#owned.delete(id);
    this.#owned.running--;
    this.settled++;
    const settle: SettleInput = {
      id,
      nowMs: o.clock.now(),
      finalCost: o.ordering.finalCost(own.req, usage),
      actualTokens: usage.inputTokens + usage.outputTokens,
      outputTokens: usage.outputTokens,
    };
    o.ordering.settled?.(own.req, usage);
    this.#log.trueUp(id, settle.actualTokens);
    this.#settling.add(id);
    try {
      await this.#settleAndDispatch(own, settle);
    } catch (err) {
      // No answer: the store may still hold the request running (see `heartbeat`).
      this.#unsettled.set(id, settle);
      throw err;
    } finally {
      this.#settling.delete(id);
    }
  }

  async #settleAndDispatch(own: Owned, settle: SettleInput): Promise<void> {
    const o = this.#o;
    const pool = own.pool;
    const states = this.#view.states(pool, own);
    const offered =
      o.store.settleAndDispatch === undefined || o.router !== undefined
        ? undefined
        : this.#candidates.list(states, { pool });
    const candidates = offered?.replicas ?? [];
    if (o.store.settleAndDispatch === undefined || candidates.length === 0) {
      if (await o.store.settle(settle)) this.#view.release(own);
      await this.#dispatch.pump(pool);
      return;
    }
    const r = await o.store.settleAndDispatch({
      settle,
      dispatch: this.#dispatch.input(pool, this.#dispatch.bands, candidates, states),
    });
    for (const [i, c] of candidates.entries()) this.#view.set(c.id, r.reserved[i] ?? NOTHING);
    this.#dispatch.deadlines.poolQueued(pool, r.poolQueued, o.clock.now());
    if (r.dispatch.kind === 'blocked') {
      await this.#dispatch.afterBlocked(pool, offered, r.dispatch.reserveTokens);
      return;
    }
    if (r.dispatch.kind !== 'dispatched') return;
    this.#dispatch.countDispatch(pool);
    await this.#dispatch.handOn(r.dispatch, false);
    if (r.poolQueued > 0) await this.#dispatch.pump(pool);
  }
}
