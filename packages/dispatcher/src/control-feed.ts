import type { ControlReport } from '@fairway/bus';
import type { RequestDescriptor } from '@fairway/core';
import type { RunningRequest, SloControl } from '@fairway/scheduler';

type Entry = ControlReport['queued'][number];

interface Known {
  readonly req: RequestDescriptor;
  state: 'queued' | 'running';
  replica: string | undefined;
  generated: number;
}

function descriptorOf(e: Entry, dispatcherId: string): RequestDescriptor {
  return {
    id: e.requestId,
    // The planner groups by model, class and prompt length; the tenant is the owner's business.
    tenant: dispatcherId,
    model: e.model,
    sloClass: e.sloClass,
    inputTokens: e.inputTokens,
    maxTokens: e.maxTokens,
    arrivalMs: e.arrivalMs,
  };
}

/**
 * Turns the dispatchers' periodic reports into the request events an {@link SloControl} expects
 * (arrival, dispatch, eviction, finish, gone), as the simulator's runner calls them: the leader's
 * view of the global queue is the union of the latest fresh report of every dispatcher, and a
 * request's move between reports is the event. A request that vanishes from every report without
 * a finish (cancelled, or its dispatcher died) leaves the control as a rejection does.
 */
export class ControlFeed {
  readonly #control: SloControl;
  readonly #classes: ReadonlySet<string>;
  readonly #onNew: ((req: RequestDescriptor) => void) | undefined;
  readonly #known = new Map<string, Known>();
  /** The last report seq whose `finished` list was applied, per dispatcher. */
  readonly #finishedSeq = new Map<string, number>();

  /**
   * @param classes SLO classes the control knows; requests naming others are left out
   * @param onNew called once for every request first seen (arrival-rate signals)
   */
  constructor(control: SloControl, classes: ReadonlySet<string>, onNew?: (req: RequestDescriptor) => void) {
    this.#control = control;
    this.#classes = classes;
    this.#onNew = onNew;
  }

  /** Requests known to run on each replica, with their output so far. */
  running(): Map<string, RunningRequest[]> {
    const out = new Map<string, RunningRequest[]>();
    for (const k of this.#known.values()) {
      if (k.state !== 'running' || k.replica === undefined) continue;
      const list = out.get(k.replica) ?? [];
      list.push({ req: k.req, generated: k.generated });
      out.set(k.replica, list);
    }
    return out;
  }

  /** Requests known to be queued. */
  get queued(): number {
    let n = 0;
    for (const k of this.#known.values()) if (k.state === 'queued') n++;
    return n;
  }

  /** Applies the latest fresh report of every dispatcher. */
  apply(reports: readonly ControlReport[]): void {
    const seen = new Set<string>();
    const c = this.#control;
    const known = (e: Entry): boolean => this.#classes.has(e.sloClass);
    for (const r of reports) {
      for (const e of r.queued.filter(known)) {
        seen.add(e.requestId);
        const k = this.#known.get(e.requestId);
        if (k === undefined) this.#arrive(e, r.dispatcherId, 'queued', undefined);
        else if (k.state === 'running') {
          // Back in the queue with output: evicted (and re-queued by its owner).
          k.state = 'queued';
          k.replica = undefined;
          k.generated = e.generated;
          c.onEvicted(e.requestId, e.generated);
        }
      }
      for (const e of r.running.filter(known)) {
        seen.add(e.requestId);
        const k = this.#known.get(e.requestId) ?? this.#arrive(e, r.dispatcherId, 'queued', undefined);
        if (k.state === 'queued' || k.replica !== e.replicaId) c.onDispatched(e.requestId, e.replicaId);
        k.state = 'running';
        k.replica = e.replicaId;
        k.generated = e.generated;
      }
      if ((this.#finishedSeq.get(r.dispatcherId) ?? -1) < r.seq) {
        this.#finishedSeq.set(r.dispatcherId, r.seq);
        for (const e of r.finished.filter(known)) {
          const k = this.#known.get(e.requestId) ?? this.#arrive(e, r.dispatcherId, 'queued', undefined);
          if (k.state === 'queued') c.onDispatched(e.requestId, 'unknown');
          c.onFinished(k.req, e.generated);
          this.#known.delete(e.requestId);
          seen.delete(e.requestId);
        }
      }
    }
    for (const [id] of this.#known)
      if (!seen.has(id)) {
        c.onRejected(id);
        this.#known.delete(id);
      }
  }

  #arrive(e: Entry, dispatcherId: string, state: 'queued', replica: undefined): Known {
    const req = descriptorOf(e, dispatcherId);
    const k: Known = { req, state, replica, generated: e.generated };
    this.#known.set(e.requestId, k);
    this.#onNew?.(req);
    this.#control.onArrival(req);
    return k;
  }
}
