import {
  type Clock,
  type EngineTimeoutsConfig,
  type Logger,
  queueDeadlineMs,
  type SloClass,
  type Usage,
} from '@fairway/core';
import type { Engine } from '@fairway/engine';
import { type Span, SpanKind } from '@opentelemetry/api';
import type { FastifyReply } from 'fastify';
import type { AnswerShape } from './answer-shape.ts';
import type { ResolvedDispatcherOptions } from './dispatcher-options.ts';
import type { EnginePool } from './engine-pool.ts';
import { type ProxyEvents, type ProxyResult, proxy } from './engine-proxy.ts';
import { engineApiError, isReplicaFailure } from './error-mapping.ts';
import { ApiError, LifecycleError } from './errors.ts';
import type { EndOutcome, GatewayMetrics } from './gateway-metrics.ts';
import type { GatewayRuntime, OutputMeter } from './gateway-runtime.ts';
import type { RegistryReplicaSource } from './replica-source.ts';
import type { DescribedRequest, Endpoint } from './request-descriptor.ts';
import type { RecordedRequest, RequestRecord } from './request-record.ts';
import { continuable } from './resumed-answer.ts';
import type { StopSignal } from './stop-signal.ts';
import { callEnding, type Ticket } from './ticket.ts';

/**
 * Where an admitted request is in its life at this dispatcher (DESIGN.md request path, steps 4–6):
 *
 * - `admitted`: the store admitted and queued it (one round trip); it may already be dispatched.
 * - `queued`: waiting for a replica with room (first, after a retry, or to resume after an eviction).
 * - `dispatched`: placed on a replica (its tokens reserved there); the engine call is being opened.
 * - `streaming`: the engine answered; its output is metered until the answer ends.
 * - `requeued`: the engine failed before anything reached the client: back at the head of its
 *   flow (reservation released, charge undone) to be served by another replica.
 * - `evicted`: the control plane took its replica (QLM section 5): back at the head of its flow,
 *   charged for the output so far, to resume on its next replica.
 * - `settled`: the answer ended; charged the engine's usage, reservation released.
 * - `abandoned`: ended after a dispatch without a whole answer (engine failure, client gone,
 *   eviction it cannot resume from): charged what it used, reservation released.
 * - `withdrawn`: left the queue without running (client gone, queue timeout, no replica, shutdown);
 *   the store dropped it.
 *
 * A request refused at admission never gets here: the pool changed nothing in the store.
 */
export type LifecycleState =
  | 'admitted'
  | 'queued'
  | 'dispatched'
  | 'streaming'
  | 'requeued'
  | 'evicted'
  | 'settled'
  | 'abandoned'
  | 'withdrawn';

/**
 * The states each state may move to. Any non-terminal state may be abandoned: a failure nobody
 * foresaw still releases what the store holds for the request. The terminal states lead nowhere,
 * so a request is settled exactly once.
 *
 * ```
 * admitted → queued → dispatched → streaming → settled             the answer ended
 *              │           │             │
 *              │           ├─────────────┴─→ requeued → queued   failed before answering: next replica
 *              │           ├─────────────┴─→ evicted → queued    evicted: resumes where it stopped
 *              │           └─────────────┴─→ abandoned           ended early: charged what it used
 *              └─→ withdrawn                                     left the queue without running
 * ```
 */
export const LIFECYCLE_TRANSITIONS: Readonly<Record<LifecycleState, readonly LifecycleState[]>> = {
  admitted: ['queued', 'abandoned'],
  queued: ['dispatched', 'withdrawn', 'abandoned'],
  dispatched: ['streaming', 'requeued', 'evicted', 'abandoned'],
  streaming: ['settled', 'requeued', 'evicted', 'abandoned'],
  requeued: ['queued', 'abandoned'],
  evicted: ['queued', 'abandoned'],
  settled: [],
  abandoned: [],
  withdrawn: [],
};

/** Whether a request in `state` has ended: the store holds nothing more for it. */
export function isTerminal(state: LifecycleState): boolean {
  return LIFECYCLE_TRANSITIONS[state].length === 0;
}

/**
 * The state a request in `from` moves to when asked for `to`: `to` itself, or a
 * {@link LifecycleError} thrown when the table has no such edge (settling twice, streaming while
 * queued): the caller has not touched the store yet, so nothing is settled twice.
 */
export function transition(requestId: string, from: LifecycleState, to: LifecycleState): LifecycleState {
  if (!LIFECYCLE_TRANSITIONS[from].includes(to)) throw new LifecycleError(requestId, from, to);
  return to;
}

/** How an evicted request resumes (an SLO-class control plane routes this dispatcher). */
export interface Resume {
  /** The engine of a replica the request is dispatched to again; undefined if it left. */
  readonly engineFor: (replica: string) => Engine | undefined;
  /** How long a resumed request may wait for its next dispatch, ms. */
  readonly queueTimeoutMs: number;
}

/** What a request's lifecycle needs from its dispatcher (built once per dispatcher). */
export interface LifecycleContext {
  readonly runtime: GatewayRuntime;
  readonly replicas: RegistryReplicaSource;
  readonly engines: EnginePool;
  readonly metrics: GatewayMetrics;
  readonly options: ResolvedDispatcherOptions;
  readonly sloClasses: ReadonlyMap<string, SloClass>;
  /** A pool's `engineTimeouts`. */
  readonly timeoutsFor: (pool: string) => EngineTimeoutsConfig | undefined;
  /** Monotonic ms clock for timings. */
  readonly timer: Clock;
  readonly logger: Logger;
  /** How evicted requests resume, when an SLO-class control plane routes this dispatcher. */
  readonly resume: Resume | undefined;
}

/** An admitted request and its client, as the completion handler hands it over. */
export interface AdmittedRequest {
  readonly ticket: Ticket;
  readonly described: DescribedRequest;
  readonly endpoint: Endpoint;
  readonly request: RecordedRequest;
  readonly reply: FastifyReply;
  readonly record: RequestRecord;
  /** Aborted when the client leaves. */
  readonly gone: StopSignal;
  /** Ends the request's waits and engine call when the client leaves. */
  readonly leave: () => void;
  /** Rewrites the answer for a client of another API. */
  readonly shape: AnswerShape | undefined;
}

/**
 * One admitted request's life, from admission to the end that settles it: the one place that
 * waits for its dispatch, retries it, resumes it and settles it. It owns the request's
 * {@link Ticket} (what the store holds: its place in the queue, its reservation, its meter) and
 * moves it through {@link LIFECYCLE_TRANSITIONS} only; the engine proxy moves bytes and reports
 * what happened through the {@link ProxyEvents} this implements.
 */
export class RequestLifecycle implements ProxyEvents, OutputMeter {
  #state: LifecycleState = 'admitted';
  readonly #ctx: LifecycleContext;
  readonly #a: AdmittedRequest;
  /** How the request ended, for the paths that end it with an error thrown. */
  end: EndOutcome | undefined;
  /** The engine call of this dispatch: its first try is 1. */
  #attempt = 0;
  /** Why the last engine call failed, while the request is retried on another replica. */
  #failure: ApiError | undefined;
  /** Replicas this request failed on: never its next place while another replica takes work. */
  #failedOn: Set<string> | undefined;
  /** Set when a failed request found no other replica of its pool taking work. */
  #noneLeft = false;
  /** Set when the engine call ended because the request moved out of its engine's queue. */
  #moved = false;
  /** The replica its current dispatch placed it on. */
  #replica = '';
  /** The stream being metered, and the output tokens of the runs before it. */
  #metered: { readonly completionTokens: number } | undefined;
  #before = 0;

  constructor(ctx: LifecycleContext, admitted: AdmittedRequest) {
    this.#ctx = ctx;
    this.#a = admitted;
  }

  /** Where the request is now. */
  get state(): LifecycleState {
    return this.#state;
  }

  /**
   * Serves the request: waits for its dispatch, proxies it (again on another replica when the
   * engine failed before answering) and returns what happened, or undefined when the client left
   * while it was queued. An error thrown is the client's answer; the request has ended by then,
   * and one that a failure left running is abandoned before the error goes on.
   */
  async serve(): Promise<ProxyResult | undefined> {
    try {
      return await this.#serve();
    } catch (err) {
      if (!isTerminal(this.#state)) await this.#abandon(this.#inputOnly());
      throw err;
    }
  }

  async #serve(): Promise<ProxyResult | undefined> {
    const ctx = this.#ctx;
    const { ticket, described, request, reply, record, gone } = this.#a;
    const req = described.descriptor;
    const tr = record.trace;
    const arrivedAt = record.arrivedAt;
    const attempts = ctx.options.engineAttempts;
    // Times it was placed again where it had failed (by a dispatcher that had not heard yet).
    let misplaced = 0;
    // The first wait ends at the class's queue deadline: admission refuses what it predicts would
    // start later, and this refuses what its prediction let through (later arrivals of a class
    // served first, a drain slower than measured) — no request waits past its deadline.
    const deadlineMs = queueDeadlineMs(ctx.sloClasses.get(req.sloClass), ctx.options.queueTimeoutMs);
    const deadlineBinds = deadlineMs < ctx.options.queueTimeoutMs;

    if (request.raw.socket?.destroyed === true) this.#a.leave();
    for (let attempt = 1; ; attempt++) {
      this.#attempt = attempt;
      // 1. Queued until a replica has room (or the deadline, the client or the dispatcher ends it).
      const queue = tr === undefined ? undefined : this.#queueSpan(attempt);
      const bound =
        attempt === 1 && deadlineBinds
          ? Math.max(0, deadlineMs - (ctx.timer.now() - arrivedAt))
          : ctx.options.queueTimeoutMs;
      this.#to('queued');
      const waited = await ctx.runtime.waitForDispatch(ticket, bound, gone);
      tr?.close(queue);
      if (waited !== 'dispatched') {
        this.#to('withdrawn');
        const failure = this.#failure;
        if (waited === 'timeout') {
          this.end = failure === undefined ? 'timed_out' : 'failed';
          if (failure === undefined && attempt === 1 && deadlineBinds)
            throw new ApiError(
              'OVER_DEADLINE',
              `the fleet is overloaded: this request did not start within its SLO class's queue deadline (${deadlineMs / 1000} s); retry after the time given`,
              { retryAfterS: Math.max(1, Math.ceil(deadlineMs / 1000)) },
            );
          throw (
            failure ?? new ApiError('QUEUE_TIMEOUT', `no capacity within ${ctx.options.queueTimeoutMs} ms`)
          );
        }
        if (waited === 'shutdown') {
          this.end = 'shutdown';
          throw new ApiError('NOT_READY', 'this dispatcher is shutting down; retry', { retryAfterS: 1 });
        }
        if (waited === 'no_replica') {
          this.end = 'no_replica';
          throw noReplica(
            req.model,
            failure ??
              new ApiError(
                'NO_REPLICA',
                `no replica has taken work for ${ctx.options.noReplicaWaitMs / 1000} s`,
              ),
          );
        }
        // The client left while it was queued: nothing was served.
        this.end = 'cancelled';
        record.outcome = 'cancelled';
        reply.hijack();
        reply.raw.destroy();
        return undefined;
      }

      // 2. Dispatched: its tokens are reserved on the replica and its input charged.
      this.#to('dispatched');
      if (attempt === 1 && misplaced === 0)
        ctx.metrics.queueWait.observe({ slo_class: req.sloClass }, ticket.queueMs() / 1000);
      record.queueMs = Math.round(ticket.queueMs() * 10) / 10;
      const replica = ticket.replica ?? '';
      this.#replica = replica;
      record.replica = replica;
      record.affinity = ticket.affinity;
      // Placed again where it failed, by a dispatcher that had not yet heard of the failure: back
      // to the queue without spending an engine call (a bounded number of times).
      if (this.#failedOn?.has(replica) === true && misplaced < attempts) {
        misplaced++;
        if (await this.#requeue()) {
          attempt--;
          continue;
        }
      }
      const url = ctx.replicas.urlOf(replica);
      // Only the engine span reads it.
      const engineAddress = url === undefined || tr === undefined ? undefined : hostOf(url);
      if (tr !== undefined) {
        const dispatch = tr.child('fairway.dispatch');
        if (dispatch.isRecording()) {
          dispatch.setAttributes({ 'fairway.replica': replica, 'fairway.attempt': attempt });
          if (engineAddress !== undefined) dispatch.setAttribute('server.address', engineAddress);
          tr.server.setAttribute('fairway.replica', replica);
        }
        tr.close(dispatch);
      }
      if (url === undefined) {
        this.#failure = new ApiError(
          'NO_REPLICA',
          'the replica chosen for this request left the fleet; retry',
          {
            retryAfterS: 1,
          },
        );
        if (await this.#retry()) continue;
        await this.#abandon(this.#inputOnly());
        throw this.#failure;
      }

      // 3. The engine call: the proxy reports back through the ProxyEvents below, which settle,
      // retry or resume the request; `retried` means it is queued again for another replica.
      let r: ProxyResult;
      try {
        r = await proxy({
          events: this,
          ticket,
          engine: ctx.engines.get(url),
          endpoint: this.#a.endpoint,
          described,
          reply,
          gone,
          timer: ctx.timer,
          arrivedAt,
          trace: tr,
          engineAddress,
          resumable: ctx.resume !== undefined,
          timeouts: ctx.timeoutsFor(ticket.pool),
          shape: this.#a.shape,
        });
      } catch (err) {
        // Nowhere left to retry: say so (503) rather than pass on this replica's failure.
        throw this.#noneLeft && err instanceof ApiError && err.status >= 500
          ? noReplica(req.model, err)
          : err;
      }
      if (r.outcome !== 'retried') return r;
      if (this.#moved) {
        // Taken out of its engine's queue for a replica with room: not a failed attempt.
        this.#moved = false;
        attempt--;
        ctx.metrics.moves.inc();
        record.movedFrom ??= [];
        record.movedFrom.push(replica);
        ctx.logger.info({ requestId: req.id, from: replica }, 'dispatcher: moved out of an engine queue');
        continue;
      }
      ctx.metrics.engineRetries.inc();
      ctx.logger.warn(
        { requestId: req.id, replica, err: this.#failure?.message },
        'dispatcher: engine call failed before answering; retrying on another replica',
      );
    }
  }

  /** The signal of the next engine call: aborted when the request is evicted or the client leaves. */
  startCall(): StopSignal {
    return this.#a.ticket.startCall(this.#a.gone);
  }

  /** The client left: its engine call, if one is under way, is aborted. */
  clientLeft(): void {
    this.#a.ticket.stopCall('client closed');
  }

  /**
   * The engine answered: from now on its output (`stream.completionTokens` after `before` tokens
   * of earlier runs) is charged as it streams, coalesced (DESIGN.md request path, step 5).
   */
  answering(stream: { readonly completionTokens: number } | undefined, before: number): void {
    this.#to('streaming');
    if (stream === undefined) return;
    this.#metered = stream;
    this.#before = before;
    this.#ctx.runtime.meter(this.#a.ticket, this);
  }

  /** Output tokens streamed so far, over every run (read once per charge tick). */
  generated(): number {
    return this.#before + (this.#metered?.completionTokens ?? 0);
  }

  /**
   * The answer reached the client whole: the request settles with the engine's usage (and the
   * freed room goes to the queue in the same store call), traced as `fairway.settle`.
   */
  completed(usage: Usage): void {
    this.#to('settled');
    const { ticket, record } = this.#a;
    const runtime = this.#ctx.runtime;
    const tr = record.trace;
    const span = tr?.child('fairway.settle', SpanKind.INTERNAL, undefined, false);
    const done =
      tr === undefined ? runtime.finish(ticket, usage) : tr.within(span, () => runtime.finish(ticket, usage));
    if (span !== undefined) void done.finally(() => span.end());
  }

  /**
   * The engine call failed before anything reached the client. A failure that is the replica's
   * sends the request to another replica while attempts remain (`retried`); otherwise it settles
   * with the input it was sent, and the client is dropped (it left) or told why.
   */
  async failedBeforeAnswer(failed: unknown, signal: StopSignal): Promise<'retried' | 'cancelled' | ApiError> {
    const { ticket, gone } = this.#a;
    const { err, stopped } = callEnding(failed, signal);
    const moveTo = ticket.moveTo;
    if (moveTo !== undefined) {
      ticket.moveTo = undefined;
      if (!gone.aborted && (await this.#ctx.runtime.move(ticket, moveTo))) {
        this.#to('requeued');
        this.#moved = true;
        return 'retried';
      }
    }
    if (!stopped && isReplicaFailure(err)) {
      this.#replicaFailed(err);
      this.#failure = engineApiError(err);
      if (await this.#retry()) return 'retried';
    }
    await this.#abandon(this.#inputOnly());
    if (this.#a.gone.aborted) return 'cancelled';
    return stopped ? evictedError() : engineApiError(err);
  }

  /**
   * The engine call ended early after the client had part of the answer (or was stopped): the
   * request settles with what it used, and the client is dropped (it left) or told why. A stream
   * its engine cut holds the replica out of placement (its streams just ended).
   */
  cutShort(failed: unknown, signal: StopSignal, used: Usage): 'cancelled' | ApiError {
    void this.#abandon(used);
    if (this.#a.gone.aborted) return 'cancelled';
    const { err, stopped } = callEnding(failed, signal);
    if (!stopped && isReplicaFailure(err)) this.#replicaFailed(err);
    return stopped ? evictedError() : engineApiError(err);
  }

  /**
   * The request was evicted from its replica with `generated` output tokens delivered. Under a
   * control plane it goes back to the head of its flow charged for them, and once dispatched again
   * resumes on the engine returned; one that cannot continue (its body, the store refused, nothing
   * took it back in time) ends with the error returned, or `cancelled` when the client left.
   */
  async evicted(
    err: unknown,
    signal: StopSignal,
    generated: number,
    used: Usage,
  ): Promise<'cancelled' | ApiError | Engine> {
    const resume = this.#ctx.resume;
    if (resume === undefined) return this.cutShort(err, signal, used);
    const { ticket, endpoint, described, gone } = this.#a;
    if (
      endpoint === 'embeddings' ||
      endpoint === 'responses' ||
      !continuable(endpoint, described.forwardBody) ||
      !(await this.#ctx.runtime.evict(ticket, generated))
    ) {
      await this.#abandon(used);
      return evictedError();
    }
    this.#to('evicted');
    this.#to('queued');
    const waited = await this.#ctx.runtime.waitForDispatch(ticket, resume.queueTimeoutMs, gone);
    if (waited === 'aborted') {
      this.#to('withdrawn');
      return 'cancelled';
    }
    if (waited !== 'dispatched') {
      this.#to('withdrawn');
      return waited === 'no_replica'
        ? new ApiError('NO_REPLICA', 'evicted, and no replica takes work to resume it; retry', {
            retryAfterS: 1,
          })
        : new ApiError('QUEUE_TIMEOUT', `evicted, and not resumed within ${resume.queueTimeoutMs} ms`);
    }
    this.#to('dispatched');
    // A failure of the resumed run is its new replica's, and the answer's end comes from it.
    this.#replica = ticket.replica ?? '';
    this.#a.record.replica = this.#replica;
    const next = resume.engineFor(this.#replica);
    if (next !== undefined) return next;
    await this.#abandon(used);
    return new ApiError('NO_REPLICA', 'the replica chosen for this request left the fleet; retry', {
      retryAfterS: 1,
    });
  }

  /**
   * Sends the request back to the queue for another replica, while this dispatch's attempt is not
   * its last and another replica of its pool takes work.
   */
  async #retry(): Promise<boolean> {
    if (this.#attempt >= this.#ctx.options.engineAttempts) return false;
    const outcome = await this.#ctx.runtime.retry(this.#a.ticket);
    this.#noneLeft = outcome === 'no_replica';
    if (outcome !== 'requeued') return false;
    this.#to('requeued');
    return true;
  }

  /** Back to the queue from a replica it was placed on again after failing there. */
  async #requeue(): Promise<boolean> {
    if ((await this.#ctx.runtime.retry(this.#a.ticket)) !== 'requeued') return false;
    this.#to('requeued');
    return true;
  }

  /** Settles a request that ended early with what it used (its reservation released). */
  #abandon(usage: Usage): Promise<void> {
    this.#to('abandoned');
    return this.#ctx.runtime.abandon(this.#a.ticket, usage);
  }

  /** What a request that produced nothing used: the input it was sent. */
  #inputOnly(): Usage {
    return { inputTokens: this.#a.ticket.req.inputTokens, outputTokens: 0 };
  }

  /** Holds the replica of this dispatch out of placement, here and fleet-wide. */
  #replicaFailed(err: unknown): void {
    this.#failedOn ??= new Set();
    this.#failedOn.add(this.#replica);
    this.#ctx.runtime.replicaFailed(this.#replica, err);
  }

  /** Moves to `to`, or throws if the state machine has no such edge (nothing is settled twice). */
  #to(to: LifecycleState): void {
    this.#state = transition(this.#a.ticket.id, this.#state, to);
  }

  /** The queue-wait span of a dispatch attempt, with the flow and band the fairness decision uses. */
  #queueSpan(attempt: number): Span | undefined {
    const tr = this.#a.record.trace;
    if (tr === undefined) return undefined;
    const req = this.#a.described.descriptor;
    const span = tr.child('fairway.queue', SpanKind.INTERNAL);
    if (span.isRecording())
      span.setAttributes({
        'fairway.flow': req.app === undefined ? req.tenant : `${req.tenant}/${req.app}`,
        'fairway.band': this.#ctx.sloClasses.get(req.sloClass)?.band ?? 0,
        'fairway.attempt': attempt,
      });
    return span;
  }
}

/** The 503 of a request evicted from its replica that cannot resume. */
function evictedError(): ApiError {
  return new ApiError('NOT_READY', 'the request was evicted from its replica; retry', { retryAfterS: 1 });
}

/** The 503 of a request that failed and found no other replica of its pool taking work. */
function noReplica(model: string, cause: ApiError): ApiError {
  return new ApiError(
    'NO_REPLICA',
    `every replica serving model "${model}" failed or is unavailable (${cause.message}); retry`,
    { retryAfterS: 1, cause },
  );
}

/** `host:port` of an engine URL (the engine span's `server.address`). */
function hostOf(url: string): string {
  const i = url.indexOf('://');
  return url.slice(i < 0 ? 0 : i + 3).replace(/\/.*$/, '');
}
