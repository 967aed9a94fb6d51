import { ChargeCoalescer } from './charge-coalescer.ts';
import { GatewayError, GatewayErrorCode } from './errors.ts';
import type { Dispatched, ResolvedGatewayOptions } from './gateway-options.ts';
import type { OutputPredictions } from './output-prediction.ts';
import type { Owned, OwnedRequests } from './owned-requests.ts';
import type { PrefixAffinity } from './prefix-affinity.ts';
import type { ReservationView } from './reservation-view.ts';

/**
 * Charging of a gateway's running requests (DESIGN.md request path, step 5): a request starts
 * being charged when its owner learns it was dispatched; its streamed output is recorded as it
 * arrives and charged in coalesced flushes, which also grow re-predicted reservations.
 */
export class Charging {
  readonly #o: ResolvedGatewayOptions;
  readonly #id: string;
  readonly #owned: OwnedRequests;
  readonly #view: ReservationView;
  readonly #predictions: OutputPredictions;
  readonly #affinity: PrefixAffinity | undefined;
  readonly #charges: ChargeCoalescer;
  #lastFlushMs: number;
  /** Flushes that sent something. */
  flushes = 0;

  constructor(deps: {
    options: ResolvedGatewayOptions;
    owned: OwnedRequests;
    view: ReservationView;
    predictions: OutputPredictions;
    affinity?: PrefixAffinity;
  }) {
    this.#o = deps.options;
    this.#id = deps.options.id;
    this.#owned = deps.owned;
    this.#view = deps.view;
    this.#predictions = deps.predictions;
    this.#affinity = deps.affinity;
    this.#charges = new ChargeCoalescer(this.#o.flushTokens);
    this.#lastFlushMs = this.#o.clock.now();
  }

  /** Output tokens recorded but not yet charged. */
  get pendingTokens(): number {
    return this.#charges.pendingTokens;
  }

  /**
   * The owner learns that its request was dispatched (by itself, or by another gateway sharing the
   * store) and starts charging its output. Only the request id and replica are read, so an owner
   * that learns of a dispatch over the bus (an assignment) can call it without the full record.
   */
  started(d: Pick<Dispatched, 'id' | 'replica'> & Partial<Pick<Dispatched, 'predicted'>>): void {
    const own = this.#owned.get(d.id);
    if (own === undefined || own.state !== 'queued')
      throw new GatewayError(
        GatewayErrorCode.UNKNOWN_REQUEST,
        this.#id,
        `request "${d.id}" is not queued here`,
        {
          requestId: d.id,
        },
      );
    own.state = 'running';
    own.replica = d.replica;
    const repriced = this.#repricePrompt(own, d.replica);
    if (d.predicted !== undefined) own.predicted = d.predicted;
    own.outputBound = own.reserveTokens - own.req.inputTokens;
    own.grown = 0;
    own.underEstimated = false;
    this.#owned.running++;
    this.open(own);
    if (repriced !== 0) this.#charges.adjust(own.req.id, repriced);
  }

  /**
   * What a request's first dispatch charges beyond its queued cost once its prompt is priced by
   * what `replica`'s prefix cache holds now (by its engine's KV cache events), rather than by what
   * was known or predicted when it was admitted — a request can wait long enough for caches to
   * change. 0 without a KV block index, block keys, or after the first dispatch.
   */
  #repricePrompt(own: Owned, replica: string): number {
    const keys = own.promptBlockKeys;
    own.promptBlockKeys = undefined;
    if (own.promptRepriced === true || own.resumeFrom > 0 || this.#affinity === undefined) return 0;
    own.promptRepriced = true;
    const cached = this.#affinity.kvCachedOn(own.req, keys, own.pool, replica);
    if (cached === undefined || cached === own.req.cachedPromptTokens) return 0;
    const now = this.#o.ordering.dispatchCost({ ...own.req, cachedPromptTokens: cached }, own.predicted);
    return now - own.queuedCost;
  }

  /** Starts (or restarts) charging `own`'s output from where it resumes. */
  open(own: Owned): void {
    this.#charges.open(own.req.id, own.req, own.predicted, own.resumeFrom);
  }

  /** Stops charging request `id` (it settles with its true usage, or is re-queued). */
  close(id: string): void {
    this.#charges.close(id);
  }

  /**
   * Records that request `id` has streamed `generated` output tokens in total. Returns true when
   * enough tokens wait to be charged that the caller should `flush()` now.
   */
  recordTokens(id: string, generated: number): boolean {
    const due = this.#charges.record(id, generated);
    if (this.#o.reserve !== 'predicted' && this.#o.reserve !== 'max-tokens') return due;
    const own = this.#owned.get(id);
    if (own === undefined || own.state !== 'running' || generated <= own.outputBound) return due;
    if (this.#o.reserve === 'predicted') {
      const growth = this.#predictions.repredict(own, generated);
      if (growth > 0 && this.#o.repredict) this.#charges.grow(id, growth);
    } else if (own.req.outputCap !== undefined) {
      // A request without an output cap streamed past the output it reserved: its reservation
      // grows ahead of it (doubling, up to the engine's cap), whatever the replica's room — the
      // tokens are in its KV cache already.
      const next = Math.min(own.req.outputCap, Math.max(generated, 2 * own.outputBound));
      const growth = next - own.outputBound;
      if (growth > 0) {
        own.outputBound = next;
        this.#charges.grow(id, growth);
      }
    }
    return due;
  }

  /** True when `flushMs` has passed since the last flush and charges wait to be sent. */
  flushDue(): boolean {
    return this.#charges.pending && this.#o.clock.now() - this.#lastFlushMs >= this.#o.flushMs;
  }

  /**
   * Charges every output token recorded since the last flush, and every prompt re-priced, in one
   * store call; returns the items sent.
   */
  async flush(): Promise<number> {
    this.#lastFlushMs = this.#o.clock.now();
    if (!this.#charges.pending) return 0;
    const items = this.#charges.drain(this.#o.ordering);
    if (items.length === 0) return 0;
    this.flushes++;
    for (const item of items) {
      if (item.reserveTokens === undefined) continue;
      // The store grows it in this call; a request it no longer runs is ignored there and here.
      const own = this.#owned.get(item.id);
      if (own === undefined || own.state !== 'running' || own.replica === undefined) continue;
      own.grown += item.reserveTokens;
      this.#view.add(own.replica, item.reserveTokens, 0);
      this.#predictions.errorsOf(own.replica).grownTokens += item.reserveTokens;
    }
    await this.#o.store.charge(items);
    return items.length;
  }
}
