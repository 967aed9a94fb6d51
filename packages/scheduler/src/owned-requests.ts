import type { Clock, RequestDescriptor } from '@fairway/core';
import type { QueuedRequest } from '@fairway/store';
import type { SubmitResult } from './admission.ts';

/** A request this gateway owns (holds the client connection of). */
export interface Owned {
  /**
   * The request; a request of an interaction that names no stage gets the stage the store counted
   * at admission (the calls admitted before it while the interaction was open).
   */
  req: RequestDescriptor;
  readonly pool: string;
  /** Output predicted for the request (VTC(predict) prices streamed output against it). */
  predicted: number | undefined;
  state: 'queued' | 'running';
  replica: string | undefined;
  /** Tokens it reserves on its replica while it runs. */
  readonly reserveTokens: number;
  /** Output tokens it had when it was last evicted (it resumes from there); 0 if never evicted. */
  resumeFrom: number;
  /** Dispatch cost of its queue record (what `requeueUnserved` restores). */
  readonly queuedCost: number;
  /**
   * Output predicted for its current run: what it reserved beyond its input, raised by each
   * re-prediction (the reservation grows to match only with `repredict`).
   */
  outputBound: number;
  /** Tokens its reservation grew by in its current run, as sent to the store (flushed). */
  grown: number;
  /** Whether its output outran its prediction in its current run (Aladdin: under-estimated). */
  underEstimated: boolean;
  /** Its queue record as admitted: what a repair puts back after the store lost its state. */
  readonly record: QueuedRequest;
  /** Whether the store admitted it (a repair puts back only what the store had). */
  admitted: boolean;
  /**
   * Its prompt's block keys (`RequestDescriptor.promptBlockKeys`), kept while it waits so its
   * first dispatch can price the prompt by what its replica's cache holds then; dropped once it runs.
   */
  promptBlockKeys?: readonly string[] | undefined;
  /** Whether its first dispatch re-priced its prompt by its replica's cache (done once). */
  promptRepriced?: boolean;
  /** The answer to its admission, once admitted (quota share, alerts, rate-limit state). */
  admission?: Extract<SubmitResult, { ok: true }>;
}

/**
 * The requests one gateway owns, by id, in admission order (a map keeps insertion order), and how
 * many of them run on a replica; the rest wait in the store's queues.
 */
export class OwnedRequests extends Map<string, Owned> {
  /** Owned requests that run on a replica. */
  running = 0;

  /** Time the oldest request this gateway holds queued in `pool` has waited, ms (0 if none). */
  oldestQueuedWaitMs(pool: string, clock: Clock): number {
    // Owned requests are kept in admission order, so the first queued one of the pool is the oldest.
    for (const own of this.values())
      if (own.state === 'queued' && own.pool === pool) return Math.max(0, clock.now() - own.req.arrivalMs);
    return 0;
  }
}
