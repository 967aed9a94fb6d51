import type { RequestDescriptor, SloClass } from '@fairway/core';
import { PolicyInputError, UnknownSloClassError } from '../errors.ts';

/** A queued request as QLM schedules it. */
export interface QlmRequest {
  readonly id: string;
  readonly model: string;
  readonly sloClass: string;
  readonly band: number;
  readonly sheddable: boolean;
  readonly inputTokens: number;
  readonly maxTokens: number;
  readonly arrivalMs: number;
  /** Arrival plus the class's TTFT target, ms. */
  readonly deadlineMs: number;
  /** Output already produced before an eviction; it is resumed, not redone. @default 0 */
  readonly generated?: number | undefined;
}

/** What makes requests interchangeable for the estimator: model, SLO class and token profile (QLM §4). */
export interface GroupKey {
  readonly model: string;
  readonly sloClass: string;
  /** Token-profile bucket (0 = shortest prompts). */
  readonly profile: number;
}

/** A request group: homogeneous queued requests served FCFS among themselves (QLM definition 4.1). */
export interface RequestGroup {
  readonly id: string;
  readonly key: GroupKey;
  readonly band: number;
  /** Queued members in FCFS order (evicted requests re-enter at the front). */
  readonly members: readonly QlmRequest[];
}

/** Options of {@link GroupTable}. */
export interface GroupTableOptions {
  /** Average running batch size of a replica, sequences. */
  readonly avgBatchSize: number;
  /** Group size as a multiple of the batch size (QLM's δ; section 8.3 picks 4). @default 4 */
  readonly delta?: number;
  /** Prompt-length bucket upper bounds, tokens; a prompt above the last is in the last bucket + 1. @default [256, 1024, 4096] */
  readonly profileBoundaries?: readonly number[];
}

/** Key of a group as a string, e.g. for {@link OutputLengthStats}. */
export function groupKeyString(key: GroupKey): string {
  return `${key.model}|${key.sloClass}|${key.profile}`;
}

/** Converts a request descriptor into QLM's view using its SLO class. */
export function toQlmRequest(req: RequestDescriptor, classes: ReadonlyMap<string, SloClass>): QlmRequest {
  const cls = classes.get(req.sloClass);
  if (!cls) throw new UnknownSloClassError(req.sloClass, [...classes.keys()]);
  return {
    id: req.id,
    model: req.model,
    sloClass: req.sloClass,
    band: cls.band,
    sheddable: cls.sheddable,
    inputTokens: req.inputTokens,
    maxTokens: req.maxTokens,
    arrivalMs: req.arrivalMs,
    deadlineMs: req.arrivalMs + cls.ttftS * 1000,
  };
}

/** Prompt-length bounds of the request groups' buckets (QLM's token profile). */
export const DEFAULT_PROFILE_BOUNDARIES: readonly number[] = [256, 1024, 4096];

/** The bucket of a prompt of `inputTokens`: the first bound it does not exceed, else one past the last. */
export function profileBucket(inputTokens: number, boundaries: readonly number[]): number {
  const i = boundaries.findIndex((b) => inputTokens <= b);
  return i === -1 ? boundaries.length : i;
}

/**
 * The gateway band of a request group's key when each SLO class's band is split by prompt bucket:
 * `classBand × (buckets) + bucket`, so every class's buckets stay between its band and the next
 * class's, shortest prompts first.
 */
export function groupBand(classBand: number, bucket: number, boundaries: readonly number[]): number {
  return classBand * (boundaries.length + 1) + bucket;
}

interface MutableGroup {
  id: string;
  key: GroupKey;
  band: number;
  members: QlmRequest[];
}

/**
 * The request groups of the global queue (QLM section 4, Algorithm 1). Requests join the newest
 * group of their key while it has fewer than δ × batch-size members, else open a new group — the
 * cap the paper enforces by splitting oversized clusters, applied as requests arrive. Grouping by
 * exact key (model, class, prompt-length bucket) stands in for the paper's k-means over token
 * distributions. A pure data structure; ids are `g1`, `g2`, … in creation order.
 */
export class GroupTable {
  readonly #maxSize: number;
  readonly #boundaries: readonly number[];
  readonly #groups = new Map<string, MutableGroup>();
  readonly #open = new Map<string, MutableGroup>();
  readonly #groupOf = new Map<string, MutableGroup>();
  #seq = 0;

  constructor(options: GroupTableOptions) {
    this.#maxSize = Math.max(1, Math.round((options.delta ?? 4) * options.avgBatchSize));
    this.#boundaries = options.profileBoundaries ?? DEFAULT_PROFILE_BOUNDARIES;
  }

  /** Most queued members a group may hold. */
  get maxGroupSize(): number {
    return this.#maxSize;
  }

  /** Token-profile bucket of a request. */
  profileOf(req: Pick<QlmRequest, 'inputTokens'>): number {
    return profileBucket(req.inputTokens, this.#boundaries);
  }

  /** Adds a queued request to its group; returns the group id. */
  add(req: QlmRequest): string {
    return this.#insert(req, false);
  }

  /** Puts an evicted request back at the front of a group of its key (it keeps its output so far). */
  requeue(req: QlmRequest): string {
    return this.#insert(req, true);
  }

  #insert(req: QlmRequest, front: boolean): string {
    if (this.#groupOf.has(req.id)) {
      throw new PolicyInputError('GroupTable.add', [
        { path: 'id', message: `request ${req.id} is already queued` },
      ]);
    }
    const key: GroupKey = { model: req.model, sloClass: req.sloClass, profile: this.profileOf(req) };
    const k = groupKeyString(key);
    let group = this.#open.get(k);
    if (!group || group.members.length >= this.#maxSize) {
      this.#seq++;
      group = { id: `g${this.#seq}`, key, band: req.band, members: [] };
      this.#groups.set(group.id, group);
      this.#open.set(k, group);
    }
    if (front) group.members.unshift(req);
    else group.members.push(req);
    this.#groupOf.set(req.id, group);
    return group.id;
  }

  /** Removes a request (pulled onto a replica, cancelled); drops its group when it empties. */
  remove(id: string): boolean {
    const group = this.#groupOf.get(id);
    if (!group) return false;
    this.#groupOf.delete(id);
    group.members.splice(
      group.members.findIndex((m) => m.id === id),
      1,
    );
    if (group.members.length === 0) {
      this.#groups.delete(group.id);
      const k = groupKeyString(group.key);
      if (this.#open.get(k) === group) this.#open.delete(k);
    }
    return true;
  }

  /** Group holding a queued request. */
  groupOf(id: string): string | undefined {
    return this.#groupOf.get(id)?.id;
  }

  /** A group by id. */
  get(id: string): RequestGroup | undefined {
    return this.#groups.get(id);
  }

  /** Every non-empty group, in creation order. */
  groups(): RequestGroup[] {
    return [...this.#groups.values()];
  }

  /** Queued requests across all groups. */
  get size(): number {
    return this.#groupOf.size;
  }
}
