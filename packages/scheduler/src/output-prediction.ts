import type { RequestDescriptor } from '@fairway/core';
import { OutputHistory, promptBucket, repredictOutput } from '@fairway/policy';
import type { ResolvedGatewayOptions } from './gateway-options.ts';
import type { Owned } from './owned-requests.ts';

/** Most flows whose predicted output a gateway keeps (flows can be users, which clients name). */
const PREDICTION_CACHE_FLOWS = 10_000;

/**
 * Aladdin's output-length prediction errors on one replica (section 4.3), accumulated over the
 * gateway's life: requests that outran their prediction (under-estimated) and requests that
 * finished before it (over-estimated).
 */
export interface ReplicaPredictionErrors {
  /** `l^e`: tokens re-predicted beyond the first predictions, minus tokens predicted but not generated. */
  readonly lengthError: number;
  /** `b^e`: under-estimated requests minus over-estimated ones. */
  readonly batchError: number;
  readonly underEstimated: number;
  readonly overEstimated: number;
  /** Reservation growth sent to the store (tokens). */
  readonly grownTokens: number;
}

type Errors = { -readonly [K in keyof ReplicaPredictionErrors]: ReplicaPredictionErrors[K] };

/**
 * A gateway's output-length predictions: each flow's predicted output (read from the store, cached
 * for `predictionTtlMs`), what a request reserves beyond its input, re-prediction of running
 * requests that outrun their prediction and the prediction errors per replica (Aladdin 4.3).
 */
export class OutputPredictions {
  readonly #o: ResolvedGatewayOptions;
  /** Predicted output per flow with the clock ms it was read (`predictionTtlMs` > 0 only). */
  readonly #predictions = new Map<string, { value: number | undefined; atMs: number }>();
  readonly #refreshing = new Set<string>();
  /** Past outputs by pool and prompt bucket, for re-prediction (`repredict` without a repredictor). */
  readonly #outputs = new OutputHistory();
  readonly #errors = new Map<string, Errors>();
  /** Times a running request's output was predicted again. */
  repredictions = 0;

  constructor(options: ResolvedGatewayOptions) {
    this.#o = options;
  }

  /** Output tokens `req` reserves beyond its input under the `reserve` mode. */
  reservedOutput(req: RequestDescriptor, predicted: number | undefined): number {
    switch (this.#o.reserve) {
      case 'max-tokens':
        return req.maxTokens;
      case 'predicted': {
        const p = this.#o.outputPredictor?.(req) ?? predicted;
        return p === undefined ? req.maxTokens : Math.min(req.maxTokens, Math.ceil(p));
      }
      case 'oracle':
        return Math.min(req.maxTokens, req.outputTokens ?? req.maxTokens);
    }
  }

  /**
   * Whether the ordering policy's dispatch price depends on the flow's output history. Compared
   * between two histories (none and `max_tokens` are not enough: VTC(predict) prices a flow
   * without history at `max_tokens` too).
   */
  pricesPrediction(req: RequestDescriptor): boolean {
    const o = this.#o.ordering;
    return o.dispatchCost(req, 0) !== o.dispatchCost(req, req.maxTokens);
  }

  /**
   * The flow's predicted output (mean of its last five outputs, from the store). With
   * `predictionTtlMs` > 0 a known value is served from memory and refreshed in the background
   * once older than that, so only a flow's first request waits for the store.
   */
  async predictedOutput(flow: string): Promise<number | undefined> {
    const o = this.#o;
    if (o.predictionTtlMs <= 0) return o.store.predictedOutput(flow);
    const hit = this.#predictions.get(flow);
    if (hit === undefined) return this.#readPrediction(flow);
    if (o.clock.now() - hit.atMs >= o.predictionTtlMs && !this.#refreshing.has(flow)) {
      this.#refreshing.add(flow);
      // A failed refresh keeps the old value; the next request past the ttl tries again.
      this.#readPrediction(flow)
        .catch(() => undefined)
        .finally(() => this.#refreshing.delete(flow));
    }
    return hit.value;
  }

  async #readPrediction(flow: string): Promise<number | undefined> {
    const atMs = this.#o.clock.now();
    const value = await this.#o.store.predictedOutput(flow);
    this.#predictions.delete(flow);
    if (this.#predictions.size >= PREDICTION_CACHE_FLOWS) {
      const oldest = this.#predictions.keys().next().value;
      if (oldest !== undefined) this.#predictions.delete(oldest);
    }
    this.#predictions.set(flow, { value, atMs });
    return value;
  }

  /**
   * Aladdin section 4.3: a running request passed its predicted output — predict its output again
   * (the conditional average of past outputs longer than `generated`) and mark its replica
   * under-estimated. Returns the tokens its prediction grew by (0 if it did not); with
   * `repredict` the caller grows its reservation by that much with the next flush.
   */
  repredict(own: Owned, generated: number): number {
    const o = this.#o;
    const req = own.req;
    const mean =
      o.outputRepredictor?.(req, generated) ??
      this.#outputs.conditionalMean(this.#historyKey(own), generated);
    const next = repredictOutput(generated, req.outputCap ?? req.maxTokens, mean);
    const growth = next - own.outputBound;
    if (growth <= 0 || own.replica === undefined) return 0;
    own.outputBound = next;
    this.repredictions++;
    const e = this.errorsOf(own.replica);
    e.lengthError += growth;
    if (!own.underEstimated) {
      own.underEstimated = true;
      e.underEstimated++;
      e.batchError++;
    }
    return growth;
  }

  /** A request finished: its output joins the history; an early finish marks its replica over-estimated. */
  noteFinished(own: Owned, outputTokens: number): void {
    this.#outputs.record(this.#historyKey(own), outputTokens);
    const predicted = own.reserveTokens - own.req.inputTokens;
    if (own.replica === undefined || own.underEstimated || outputTokens >= predicted) return;
    const e = this.errorsOf(own.replica);
    e.lengthError += outputTokens - predicted;
    e.batchError--;
    e.overEstimated++;
  }

  /** The prediction errors of `replica`, to be added to. */
  errorsOf(replica: string): Errors {
    let e = this.#errors.get(replica);
    if (e === undefined) {
      e = { lengthError: 0, batchError: 0, underEstimated: 0, overEstimated: 0, grownTokens: 0 };
      this.#errors.set(replica, e);
    }
    return e;
  }

  /** A copy of the prediction errors per replica, by replica id. */
  errors(): Record<string, ReplicaPredictionErrors> {
    return Object.fromEntries([...this.#errors].map(([id, e]) => [id, { ...e }]));
  }

  #historyKey(own: Owned): string {
    return `${own.pool}\u0000${promptBucket(own.req.inputTokens)}`;
  }
}
