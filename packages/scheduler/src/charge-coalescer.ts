import type { RequestDescriptor } from '@fairway/core';
import type { OrderingPolicy } from '@fairway/policy';
import type { ChargeItem } from '@fairway/store';

/** A running request whose output is being charged as it streams. */
interface Stream {
  readonly id: string;
  readonly req: RequestDescriptor;
  readonly predicted: number | undefined;
  /** Output tokens seen so far. */
  generated: number;
  /** Output tokens already charged to the store. */
  charged: number;
  /** Tokens to grow its reservation by, not yet sent to the store. */
  grow: number;
  /** Cost to charge beyond its output's, not yet sent to the store (its prompt re-priced). */
  extra: number;
}

/**
 * Coalesces streamed-output charges of one gateway (DESIGN.md request path, step 5): tokens are
 * recorded as they stream and sent to the store in one `charge` call per flush, so store load stays
 * bounded while the extra unfairness is bounded by what one flush interval can stream.
 */
export class ChargeCoalescer {
  readonly #flushTokens: number;
  readonly #streams = new Map<string, Stream>();
  readonly #dirty = new Set<Stream>();
  #pending = 0;

  /** @param flushTokens tokens recorded since the last flush that make a flush due */
  constructor(flushTokens: number) {
    this.#flushTokens = flushTokens;
  }

  /**
   * Starts charging a request's output; a resumed request (re-queued after an eviction) starts
   * from the `generated` tokens it already had, which were settled by the re-queue.
   */
  open(id: string, req: RequestDescriptor, predicted: number | undefined, generated = 0): void {
    this.#streams.set(id, { id, req, predicted, generated, charged: generated, grow: 0, extra: 0 });
  }

  /** Stops charging (the request settles with its true usage). */
  close(id: string): void {
    const s = this.#streams.get(id);
    if (s === undefined) return;
    if (this.#dirty.delete(s)) this.#pending -= s.generated - s.charged;
    this.#streams.delete(id);
  }

  /**
   * Records that request `id` has generated `generated` tokens in total. Returns true when the
   * tokens waiting to be charged reach the flush threshold. Unknown ids are ignored.
   */
  record(id: string, generated: number): boolean {
    const s = this.#streams.get(id);
    if (s === undefined || generated <= s.generated) return false;
    this.#pending += generated - s.generated;
    s.generated = generated;
    this.#dirty.add(s);
    return this.#pending >= this.#flushTokens;
  }

  /**
   * Grows request `id`'s reservation on its replica by `tokens` with the next flush (its output
   * outran its prediction); the growth rides on the charge call that flush makes. Unknown ids
   * are ignored.
   */
  grow(id: string, tokens: number): void {
    const s = this.#streams.get(id);
    if (s === undefined || tokens <= 0) return;
    s.grow += tokens;
    this.#dirty.add(s);
  }

  /**
   * Charges request `id` `amount` more (or less) with the next flush, beside its output: its
   * prompt was re-priced. Unknown ids are ignored.
   */
  adjust(id: string, amount: number): void {
    const s = this.#streams.get(id);
    if (s === undefined || amount === 0) return;
    s.extra += amount;
    this.#dirty.add(s);
  }

  /** Tokens recorded but not yet charged. */
  get pendingTokens(): number {
    return this.#pending;
  }

  /** Whether the next flush has something to send (tokens, growth or an adjustment). */
  get pending(): boolean {
    return this.#dirty.size > 0;
  }

  /** Streams being charged. */
  get size(): number {
    return this.#streams.size;
  }

  /**
   * Takes the charges due since the last flush, priced by the ordering policy's output cost, with
   * the reservation growth of each request (`reserveTokens`) when it has some.
   */
  drain(ordering: OrderingPolicy): ChargeItem[] {
    const items: ChargeItem[] = [];
    for (const s of this.#dirty) {
      const amount =
        (s.generated > s.charged ? ordering.outputCost(s.req, s.charged, s.generated, s.predicted) : 0) +
        s.extra;
      s.charged = s.generated;
      s.extra = 0;
      if (s.grow > 0) {
        items.push({ id: s.id, amount, reserveTokens: s.grow });
        s.grow = 0;
      } else if (amount !== 0) items.push({ id: s.id, amount });
    }
    this.#dirty.clear();
    this.#pending = 0;
    return items;
  }
}
