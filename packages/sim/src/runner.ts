import {
  createRng,
  DEFAULT_SLO_CLASSES,
  ErrorCode,
  ManualClock,
  parseWith,
  promptPrefixOfBlocks,
  type RequestDescriptor,
  type SloClass,
  type Tenant,
} from '@fairway/core';
import { type EngineConfig, IdealPrefixCache, type StepResult } from '@fairway/perf';
import type { AdmissionPolicy, OrderingPolicy, PlacementPolicy } from '@fairway/policy';
import {
  type AdmissionFunction,
  type Dispatched,
  Gateway,
  type Headroom,
  KvBlockIndex,
  MAX_MOVES,
  MOVE_EVERY_MS,
  type PrefixAffinityMode,
  PrefixIndex,
  type ReplicaPredictionErrors,
  type ReserveMode,
} from '@fairway/scheduler';
import { MemoryStore, type SchedulingStore } from '@fairway/store';
import { z } from 'zod';
import { Cluster, type ClusterMember } from './cluster.ts';
import { ElasticFleet, type ElasticFleetOptions } from './elastic-fleet.ts';
import { SimError, SimErrorCode } from './errors.ts';
import { EventQueue } from './event-queue.ts';
import { type PoolShardsOptions, type ShardBacklog, ShardedReplicas } from './pool-shards.ts';
import type { EngineSample, RequestRecord, SimRun } from './records.ts';
import type { ControlOp, ControlReplica, SloControl } from './slo-control.ts';

/** Everything one simulation run needs: the fleet, the workload and the policies. */
export interface RunInput {
  readonly scenario: string;
  readonly seed: number;
  /** Simulated seconds; arrivals after it are dropped and work still running is cut. */
  readonly durationS: number;
  readonly engines: readonly { readonly id: string; readonly config: EngineConfig }[];
  /** Tenant id → weight, copied into the run for weighted fairness metrics. */
  readonly tenantWeights?: Readonly<Record<string, number>> | undefined;
  /** Tenants; their weights are used when `tenantWeights` is not given. */
  readonly tenants?: readonly Tenant[] | undefined;
  /** Sorted by `arrivalMs`, ids unique, each with `outputTokens` (the true length) set. */
  readonly arrivals: readonly RequestDescriptor[];
  readonly ordering: OrderingPolicy;
  readonly placement: PlacementPolicy;
  /** Gateway replicas (dispatchers) sharing one store; arrivals go to them in turn. @default 1 */
  readonly dispatchers?: number | undefined;
  /** Each gateway charges streamed output this often, ms; gateway k ticks at phase k/N. @default 50 */
  readonly flushMs?: number | undefined;
  /** …or once this many tokens wait to be charged. @default 512 */
  readonly flushTokens?: number | undefined;
  /** Admission limits per request (RPM/TPM/OIT), beside the ordering policy's own. @default none */
  readonly limits?: AdmissionFunction | AdmissionPolicy | undefined;
  /** What a request reserves on its replica. @default 'max-tokens' */
  readonly reserve?: ReserveMode | undefined;
  /** Replica capacity the gateways never reserve. @default 1% of KV, no sequence slots */
  readonly headroom?: Partial<Headroom> | undefined;
  /** SLO classes (bands). @default QLM's three classes */
  readonly sloClasses?: readonly SloClass[] | undefined;
  /** The scheduling store; the default is a fresh in-memory store. */
  readonly store?: SchedulingStore | undefined;
  /** Engine samples are taken at most this often per engine, simulated ms. @default 1000 */
  readonly sampleMs?: number | undefined;
  /** Called as simulated time advances (about once per simulated second), seconds. */
  readonly onProgress?: ((simulatedS: number) => void) | undefined;
  /**
   * Whether a client gives up an interaction once one of its calls is rejected at admission: its
   * later calls are never sent (a follow-up call needs the previous call's answer), so they are
   * neither submitted nor recorded. @default true
   */
  readonly abandonRejectedInteractions?: boolean | undefined;
  /**
   * An SLO-class control beside the gateways (QLM): the gateways dispatch through its router, its
   * `tick` runs as a timed event every `intervalMs` of virtual time, and the runner executes the
   * evictions and model swaps it returns. @default none
   */
  readonly control?: SloControl | undefined;
  /** Replicas report their sequences' progress to placement (Aladdin's decode-SLO check). @default false */
  readonly reportSequences?: boolean | undefined;
  /**
   * With `reportSequences`, each sequence is reported with the KV tokens its gateway reserved for
   * it, as live dispatchers report theirs, so Aladdin's KV check (e) is time-indexed; false keeps
   * the sum of reservations. @default true
   */
  readonly timeIndexedKv?: boolean | undefined;
  /**
   * The engines as bins that open and close (Aladdin's Algorithm 1, {@link ElasticFleet}): only
   * open ones are placed on, the next opens when requests wait with no open one able to take
   * them, and an idle one closes. `SimRun.elastic` says how many were open. @default every engine open
   */
  readonly elastic?: ElasticFleetOptions | undefined;
  /** Output predictor for `reserve: 'predicted'` (see the gateway's `outputPredictor`). @default none */
  readonly outputPredictor?: ((req: RequestDescriptor) => number | undefined) | undefined;
  /**
   * Aladdin's re-prediction of outputs that outrun their prediction, growing their reservations
   * (the gateway's `repredict`). @default false
   */
  readonly repredict?: boolean | undefined;
  /** Conditional average output for `repredict` (the gateway's `outputRepredictor`). @default the gateways' history */
  readonly outputRepredictor?:
    | ((req: RequestDescriptor, generated: number) => number | undefined)
    | undefined;
  /**
   * Each pool spread over several stores, tenants hashed to them, every replica's capacity shared
   * among them by hand-off as requests finish, or by epochs ({@link ShardedReplicas}); not with
   * `control`. @default one store per pool
   */
  readonly shards?: PoolShardsOptions | undefined;
  /**
   * Prefix-cache affinity of the gateways (their `prefixAffinity`): requests with `blockHashes`
   * get prefix keys from them (`promptPrefixOfBlocks`, blocks of their pool's engines), and the
   * gateways share one prefix index, as dispatchers that tell each other every placement at once.
   * @default 'off'
   */
  readonly prefixAffinity?: PrefixAffinityMode | undefined;
  /**
   * Placement by the engines' KV cache events (`prefixAffinity.kvBlocks`): the gateways share one
   * KV block index that every engine's prefix cache tells what it stores and evicts as it happens
   * (live, the events reach the dispatchers a few ms later, through the agents and the bus), and
   * admission looks each request's block hashes up in it, steering the request to the replica
   * holding the longest run of them and charging the tokens held there as cached. With
   * `prefixAffinity` other than 'off', and not with `shards`. @default false
   */
  readonly kvEvents?: boolean | undefined;
  /**
   * What-if: each request's prompt charge is corrected when its engine prefills it, to the cost of
   * what the prefix cache served then, instead of at settlement — as a gateway could if the engine
   * reported `cached_tokens` with its first chunk (vLLM reports them only in the final usage). For
   * an ordering whose dispatch charge is the prompt alone (no predicted output). @default false
   */
  readonly chargeCachedAtPrefill?: boolean | undefined;
  /**
   * What-if: the engines look prompts up in one {@link IdealPrefixCache} instead of their own prefix
   * caches — every block any engine of the run ever computed, never evicted, at no KV cost — so no
   * placement could find more cached: a ceiling for what more cache hits can bring. @default false
   */
  readonly idealPrefixCache?: boolean | undefined;
  /**
   * Requests taken out of an engine's queue, as the live dispatchers do (`policy.moves`): every
   * 200 ms of virtual time, on each engine with requests waiting, up to that many of its requests
   * without an output token `afterMs` after their dispatch — the latest dispatched first — are
   * aborted there and re-queued onto the first replica in placement order whose engine queues
   * nothing and that has room for them (at most twice per request). @default none: no moves
   */
  readonly moves?: { readonly afterMs: number } | undefined;
  /** Load bound of `bounded` affinity, × the pool's mean reserved KV tokens. @default 1.25 */
  readonly affinityLoadFactor?: number | undefined;
  /**
   * Least bound of `bounded` affinity, as a fraction of the pool's mean KV capacity (the gateway's
   * `prefixAffinity.floor`). @default 0.05
   */
  readonly affinityFloor?: number | undefined;
}

/** Events a run processes between two turns of the event loop (see runSimulation's loop). */
const YIELD_EVERY = 2_000;

const runInputSchema = z
  .object({
    scenario: z.string().min(1),
    seed: z.number().int(),
    durationS: z.number().positive(),
    engines: z.array(z.object({ id: z.string().min(1), config: z.object({}).loose() })).min(1),
    dispatchers: z.number().int().positive().optional(),
    flushMs: z.number().positive().optional(),
    flushTokens: z.number().int().positive().optional(),
    sampleMs: z.number().positive().optional(),
    elastic: z
      .object({
        openAtStart: z.number().int().positive().optional(),
        closeAfterS: z.number().min(0).finite(),
        meanUntilS: z.number().positive().optional(),
      })
      .optional(),
    arrivals: z.array(
      z
        .object({
          id: z.string().min(1),
          arrivalMs: z.number().finite(),
          inputTokens: z.number().int().positive(),
          maxTokens: z.number().int().nonnegative(),
          outputTokens: z.number().int().nonnegative(),
        })
        .loose(),
    ),
  })
  .loose()
  .superRefine((input, ctx) => {
    const ids = new Set<string>();
    let last = -Infinity;
    input.arrivals.forEach((a, i) => {
      if (a.arrivalMs < last)
        ctx.addIssue({
          code: 'custom',
          path: ['arrivals', i, 'arrivalMs'],
          message: 'arrivals must be sorted',
        });
      last = a.arrivalMs;
      if (ids.has(a.id))
        ctx.addIssue({ code: 'custom', path: ['arrivals', i, 'id'], message: `duplicate id "${a.id}"` });
      ids.add(a.id);
    });
  });

/** What the runner tracks about a request while it is in flight. */
interface Rec {
  readonly req: RequestDescriptor;
  readonly gateway: number;
  rejected: { readonly code: string; readonly atS: number } | undefined;
  dispatchS: number | undefined;
  replica: string | undefined;
  firstTokenS: number | undefined;
  finishS: number | undefined;
  generated: number;
  preemptions: number;
  /** Prompt tokens its engine's prefix cache served (its first run's, from its first token on). */
  cachedTokens: number | undefined;
  /** Output tokens it had when its current run on an engine started (after an eviction). */
  resumeFrom: number;
  evictions: number;
  /** Times it was moved out of an engine's queue (`moves`). */
  moves: number;
  /** Virtual ms of its latest dispatch, to tell its current run's events from an evicted run's. */
  dispatchMs: number;
  /** What its flow was charged when it was dispatched (the queue's price). */
  dispatchCost: number;
}

type SimEvent =
  | { readonly kind: 'arrival'; readonly index: number }
  /** A closed-loop follow-up sent by the client of `gateway` once the call before it finished. */
  | { readonly kind: 'follow-up'; readonly req: RequestDescriptor; readonly gateway: number }
  | { readonly kind: 'step'; readonly member: ClusterMember; readonly result: StepResult }
  | { readonly kind: 'flush'; readonly gateway: number }
  | { readonly kind: 'control' }
  | { readonly kind: 'swap-done'; readonly member: ClusterMember; readonly model: string }
  | { readonly kind: 'rebalance' }
  | { readonly kind: 'moves' };

/**
 * Runs a discrete-event simulation in virtual time (DESIGN.md principle 1): the production
 * {@link Gateway} code — one or several replicas sharing one store — admits, holds and dispatches
 * the arrivals onto a cluster of {@link EngineModel}s; engines step continuously while they have
 * work, each step taking the time its cost model says; token, completion and preemption events feed
 * back into the gateways (coalesced charges, settlement, new dispatches). Deterministic: the same
 * input gives the same {@link SimRun}.
 */
export async function runSimulation(input: RunInput): Promise<SimRun> {
  parseWith(runInputSchema, input, `simulation "${input.scenario}"`, ErrorCode.SCENARIO_INVALID);
  const durationMs = input.durationS * 1000;
  const clock = new ManualClock(0);
  // Engines with `stepNoise` draw it from the run's seed, one stream per engine.
  const cluster = new Cluster(
    input.engines,
    input.reportSequences ?? false,
    () => clock.now(),
    createRng(input.seed).fork('engine-step-noise'),
    input.timeIndexedKv === false ? undefined : (id) => reservedTokensOf(id),
    input.idealPrefixCache === true ? new IdealPrefixCache() : undefined,
  );
  const store = input.store ?? new MemoryStore({ validate: false });
  const queue = new EventQueue<SimEvent>();
  const recs = new Map<string, Rec>();
  const records: Rec[] = [];
  const samples: EngineSample[] = [];
  const sampleMs = input.sampleMs ?? 1000;
  const lastSample = cluster.members.map(() => -Infinity);
  const busy = cluster.members.map(() => false);
  const toKick = new Set<ClusterMember>();
  const nowS = () => clock.now() / 1000;
  const control = input.control;
  /** Requests dispatched to each member and not finished, in dispatch order. */
  const onMember = cluster.members.map(() => new Set<string>());
  /** A swap each member waits to start (after draining) or is doing. */
  const swaps = cluster.members.map(
    () => undefined as { to: string; costS: number; started: boolean } | undefined,
  );
  let swapsDone = 0;
  const stepStartMs = cluster.members.map(() => 0);

  const dispatchers = input.dispatchers ?? 1;
  const flushMs = input.flushMs ?? 50;
  if (input.shards !== undefined && control !== undefined)
    throw new SimError(SimErrorCode.RUN_INPUT_INVALID, 'shards and an SLO control cannot run together', {
      subject: input.scenario,
    });
  const sharded = input.shards === undefined ? undefined : new ShardedReplicas(cluster, input.shards);
  const gateways: Gateway[] = [];
  const elastic = input.elastic === undefined ? undefined : new ElasticFleet(cluster, input.elastic);
  /** The reservation the gateway running request `id` holds for it. */
  const reservedTokensOf = (id: string): number | undefined => {
    for (const g of gateways) {
      const reserved = g.reservedTokensOf(id);
      if (reserved !== undefined) return reserved;
    }
    return undefined;
  };
  const gatewayIndex = new Map<string, number>();
  const affinityMode = input.prefixAffinity ?? 'off';
  const prefixIndex = new PrefixIndex();
  const kvBlocks = input.kvEvents === true && sharded === undefined ? new KvBlockIndex() : undefined;
  if (kvBlocks !== undefined)
    for (const m of cluster.members) {
      const { blockSize, kvCapacityTokens } = m.engine.config;
      kvBlocks.setReplica(m.id, blockSize, kvCapacityTokens / blockSize);
      m.engine.watchCache({
        stored: (hash) => kvBlocks.store(m.id, [hash]),
        removed: (hash) => kvBlocks.remove(m.id, [hash]),
      });
    }
  const onDispatch = (d: Dispatched): void => {
    const rec = recs.get(d.id)!;
    const replica = sharded === undefined ? d.replica : sharded.baseReplica(d.replica);
    rec.dispatchS = nowS();
    rec.dispatchMs = clock.now();
    rec.dispatchCost = d.queued.dispatchCost;
    rec.replica = replica;
    if (d.owner !== d.picker) gateways[gatewayIndex.get(d.owner)!]!.started(d);
    const member = cluster.member(replica);
    // A request re-queued by an eviction resumes: its output so far is part of its prompt now.
    const done = rec.generated;
    rec.resumeFrom = done;
    member.engine.add({
      id: d.id,
      inputTokens: d.req.inputTokens + done,
      outputTokens: Math.max(1, (d.req.outputTokens ?? d.req.maxTokens) - done),
      maxTokens: Math.max(1, d.req.maxTokens - done),
      ...(d.req.priority !== undefined ? { priority: d.req.priority } : {}),
      ...(d.req.blockHashes !== undefined ? { blockHashes: d.req.blockHashes } : {}),
    });
    onMember[member.index]!.add(d.id);
    control?.onDispatched(d.id, d.replica);
    toKick.add(member);
  };
  for (let k = 0; k < dispatchers; k++) {
    const id = `gw-${k}`;
    gatewayIndex.set(id, k);
    gateways.push(
      new Gateway({
        id,
        store,
        clock,
        ordering: input.ordering,
        placement: dispatchers === 1 ? input.placement : input.placement.forDispatcher(id),
        replicas: sharded ?? cluster,
        ...(sharded !== undefined ? { poolOf: (req: RequestDescriptor) => sharded.poolOf(req) } : {}),
        onDispatch,
        flushMs,
        ...(input.flushTokens !== undefined ? { flushTokens: input.flushTokens } : {}),
        ...(input.limits !== undefined ? { admission: input.limits } : {}),
        ...(input.reserve !== undefined ? { reserve: input.reserve } : {}),
        ...(input.headroom !== undefined ? { headroom: input.headroom } : {}),
        ...(input.sloClasses !== undefined ? { sloClasses: input.sloClasses } : {}),
        ...(control?.router !== undefined ? { router: control.router } : {}),
        ...(control?.promptBands !== undefined ? { promptBands: control.promptBands } : {}),
        ...(input.outputPredictor !== undefined ? { outputPredictor: input.outputPredictor } : {}),
        ...(input.repredict !== undefined ? { repredict: input.repredict } : {}),
        ...(input.outputRepredictor !== undefined ? { outputRepredictor: input.outputRepredictor } : {}),
        ...(input.moves !== undefined ? { moves: true } : {}),
        ...(affinityMode !== 'off'
          ? {
              prefixAffinity: {
                mode: affinityMode,
                index: prefixIndex,
                ...(kvBlocks !== undefined ? { kvBlocks } : {}),
                ...(input.affinityLoadFactor !== undefined ? { loadFactor: input.affinityLoadFactor } : {}),
                ...(input.affinityFloor !== undefined ? { floor: input.affinityFloor } : {}),
              },
            }
          : {}),
      }),
    );
    queue.push((k * flushMs) / dispatchers, { kind: 'flush', gateway: k });
  }

  const kick = (m: ClusterMember): void => {
    const swap = swaps[m.index];
    if (swap !== undefined && !swap.started && !busy[m.index] && !m.engine.hasWork()) {
      // Drained: load the other model, which takes the swap cost in virtual time.
      swap.started = true;
      queue.push(clock.now() + swap.costS * 1000, { kind: 'swap-done', member: m, model: swap.to });
      return;
    }
    if (swap?.started || busy[m.index] || !m.engine.hasWork()) return;
    const result = m.engine.step();
    if (result.durationMs === 0 && result.events.length === 0) return;
    busy[m.index] = true;
    stepStartMs[m.index] = clock.now();
    cluster.stepInFlight(m.id, clock.now() + result.durationMs);
    queue.push(clock.now() + result.durationMs, { kind: 'step', member: m, result });
  };

  const onStepEnd = async (m: ClusterMember, result: StepResult): Promise<void> => {
    busy[m.index] = false;
    cluster.stepInFlight(m.id, undefined);
    const t = nowS();
    const here = onMember[m.index]!;
    /** Rooms handed to another shard in this step, by the gateway that settled each request. */
    const handedOff: { gateway: number; pool: string }[] = [];
    for (const e of result.events) {
      // A request evicted while this step ran has left the engine (and may already run again,
      // dispatched after the step began): the step's events for it are void.
      if ((control || input.moves) && (!here.has(e.id) || recs.get(e.id)!.dispatchMs > stepStartMs[m.index]!))
        continue;
      switch (e.kind) {
        case 'token': {
          const rec = recs.get(e.id)!;
          rec.generated = rec.resumeFrom + e.generated;
          const gw = gateways[rec.gateway]!;
          if (gw.recordTokens(e.id, rec.generated)) await gw.flush();
          break;
        }
        case 'first-token': {
          const rec = recs.get(e.id)!;
          if (rec.firstTokenS === undefined) rec.firstTokenS = t;
          // Its prompt is served: what the cache served counts from now, not from its end.
          if (rec.resumeFrom === 0 && e.cachedTokens !== undefined) {
            rec.cachedTokens = e.cachedTokens;
            if (input.chargeCachedAtPrefill) {
              const usage = {
                inputTokens: rec.req.inputTokens,
                outputTokens: 0,
                cachedTokens: e.cachedTokens,
              };
              const delta = input.ordering.finalCost(rec.req, usage) - rec.dispatchCost;
              if (delta !== 0) await store.charge([{ id: e.id, amount: delta }]);
            }
          }
          break;
        }
        case 'preempted':
          recs.get(e.id)!.preemptions++;
          break;
        case 'finished': {
          const rec = recs.get(e.id)!;
          rec.generated = rec.resumeFrom + e.generated;
          if (e.contextExceeded) rec.rejected = { code: 'context_length_exceeded', atS: t };
          else if (e.ignored) rec.rejected = { code: 'context_too_long', atS: t };
          else {
            rec.finishS = t;
            const follower = followers.get(e.id);
            if (follower)
              queue.push(clock.now() + (follower.thinkMs ?? 0), {
                kind: 'follow-up',
                req: follower,
                gateway: rec.gateway,
              });
          }
          // A run resumed after an eviction re-sends its prompt with the output so far; what its
          // cache served is not the original prompt's, so it settles without a cache hit.
          if (rec.resumeFrom === 0) rec.cachedTokens = e.cachedTokens;
          here.delete(e.id);
          if (sharded?.controller === 'handoff') {
            const held = reservedTokensOf(e.id);
            const to =
              held === undefined
                ? undefined
                : sharded.release(m.pool, m.id, sharded.shardOf(rec.req.tenant), held);
            if (to !== undefined)
              handedOff.push({ gateway: rec.gateway, pool: sharded.shardPool(m.pool, to) });
          }
          control?.onFinished(rec.req, rec.generated);
          await gateways[rec.gateway]!.complete(e.id, {
            inputTokens: rec.req.inputTokens,
            outputTokens: rec.generated,
            cachedTokens: rec.resumeFrom === 0 ? rec.cachedTokens : undefined,
          });
          break;
        }
        case 'scheduled':
          break;
      }
    }
    // The dispatcher that handed a room on dispatches into it, in the receiving shard's store.
    for (const h of handedOff) await gateways[h.gateway]!.pump(h.pool);
    if (clock.now() - lastSample[m.index]! >= sampleMs) {
      lastSample[m.index] = clock.now();
      const s = m.engine.stats();
      samples.push({ replica: m.id, timeS: t, running: s.running, waiting: s.waiting, kvUsage: s.kvUsage });
    }
    toKick.add(m);
  };

  const pumpAll = async (): Promise<void> => {
    for (const gw of gateways) await gw.pump();
  };

  const execute = async (ops: readonly ControlOp[]): Promise<void> => {
    for (const op of ops) {
      const m = cluster.member(op.replica);
      if (op.kind === 'swap') {
        if (swaps[m.index] === undefined && m.pool !== op.to) {
          swaps[m.index] = { to: op.to, costS: op.costS, started: false };
          toKick.add(m);
        }
        continue;
      }
      for (const id of op.requestIds) {
        const rec = recs.get(id);
        if (rec === undefined || !onMember[m.index]!.has(id)) continue;
        // An engine that already finished it (in the step now running) keeps it: no eviction.
        if (!m.engine.abort(id)) continue;
        onMember[m.index]!.delete(id);
        if (await gateways[rec.gateway]!.evict(id, rec.generated)) {
          rec.evictions++;
          control?.onEvicted(id, rec.generated);
        }
      }
      toKick.add(m);
    }
  };

  /** Moves requests waiting in engine queues to replicas with room (see `RunInput.moves`). */
  const moveQueued = async (afterMs: number): Promise<void> => {
    const targets = new Set<string>();
    for (const m of cluster.members) {
      const waiting = m.engine.stats().waiting;
      if (waiting === 0) continue;
      // Each gateway moves the requests it runs there (the engine's queue is exact here).
      const byGateway = new Map<number, { id: string; dispatchedAtMs: number }[]>();
      for (const id of onMember[m.index]!) {
        const r = recs.get(id)!;
        if (r.firstTokenS !== undefined || r.moves >= MAX_MOVES || clock.now() - r.dispatchMs < afterMs)
          continue;
        const list = byGateway.get(r.gateway) ?? [];
        byGateway.set(r.gateway, list);
        list.push({ id, dispatchedAtMs: r.dispatchMs });
      }
      for (const [g, queued] of byGateway)
        for (const { id, to } of gateways[g]!.planMoves(m.pool, m.id, waiting, queued, targets)) {
          if (!m.engine.abort(id)) continue;
          onMember[m.index]!.delete(id);
          if (!(await gateways[g]!.requeueUnserved(id, to))) continue;
          recs.get(id)!.moves++;
          toKick.add(m);
        }
    }
    if (targets.size > 0) await pumpAll();
  };
  if (input.moves !== undefined) queue.push(MOVE_EVERY_MS, { kind: 'moves' });

  if (control) {
    control.start({
      store,
      replicas: (): ControlReplica[] =>
        cluster.members.map((m) => ({
          id: m.id,
          model: m.pool,
          gpu: m.engine.config.gpu,
          tp: m.engine.config.tp,
          kvCapacityTokens: m.engine.config.kvCapacityTokens,
          maxNumSeqs: m.engine.config.maxNumSeqs,
          swapping: swaps[m.index] !== undefined,
          running: [...onMember[m.index]!].map((id) => {
            const rec = recs.get(id)!;
            return { req: rec.req, generated: rec.generated };
          }),
        })),
    });
    queue.push(control.intervalMs, { kind: 'control' });
  }

  const weightOf = (tenant: string): number =>
    input.tenantWeights?.[tenant] ?? input.tenants?.find((t) => t.id === tenant)?.weight ?? 1;
  if (sharded !== undefined) queue.push(sharded.intervalMs, { kind: 'rebalance' });

  const arrivals = input.arrivals;
  const abandon = input.abandonRejectedInteractions ?? true;
  const abandoned = new Set<string>();
  // Closed-loop follow-ups (`thinkMs`) by the id of the call they follow: sent when it finishes.
  const followers = new Map<string, RequestDescriptor>();
  const stages = new Map<string, RequestDescriptor>();
  for (const a of arrivals)
    if (a.interactionId !== undefined && a.interactionStage !== undefined)
      stages.set(`${a.interactionId}#${a.interactionStage}`, a);
  for (const a of arrivals) {
    if (a.thinkMs === undefined || !a.interactionStage) continue;
    const before = stages.get(`${a.interactionId}#${a.interactionStage - 1}`);
    if (before) followers.set(before.id, a);
  }
  const deferred = new Set(followers.values());
  const blockSizeOf = new Map(cluster.members.map((m) => [m.pool, m.engine.config.blockSize]));
  /**
   * Whole blocks of `bs` tokens before the ends of a request's prompt's parts: its system prompt
   * (`systemTokens`), and each earlier call of its interaction whose prompt its own starts with
   * (the same block hashes): that call's prompt (the user message) and its answer.
   */
  const partEnds = (req: RequestDescriptor, hashes: readonly string[], bs: number): number[] => {
    const ends = req.systemTokens ? [Math.floor(req.systemTokens / bs)] : [];
    for (let stage = 0; stage < (req.interactionStage ?? 0); stage++) {
      const before = stages.get(`${req.interactionId}#${stage}`);
      if (before?.blockHashes === undefined) continue;
      for (const tokens of [before.inputTokens, before.inputTokens + (before.outputTokens ?? 0)]) {
        const b = Math.floor(tokens / bs);
        const last = hashes[b - 1];
        if (last !== undefined && last === before.blockHashes[b - 1]) ends.push(b);
      }
    }
    return ends;
  };
  /**
   * The request with prefix keys from its block hashes (blocks of its pool's engines), cut at its
   * prompt's power-of-two blocks and its parts' ends.
   */
  const withPrefixKeys = (req: RequestDescriptor): RequestDescriptor => {
    if (req.blockHashes === undefined || req.prefixKeys !== undefined) return req;
    const bs = blockSizeOf.get(req.model) ?? 16;
    const prefix = promptPrefixOfBlocks(
      req.blockHashes,
      Math.floor(req.inputTokens / bs),
      bs,
      partEnds(req, req.blockHashes, bs),
    );
    return prefix.keys.length === 0 ? req : { ...req, prefixKeys: prefix.keys, prefixTokens: prefix.tokens };
  };
  const arrive = async (req: RequestDescriptor, g: number): Promise<void> => {
    const rec: Rec = {
      req,
      gateway: g,
      rejected: undefined,
      dispatchS: undefined,
      replica: undefined,
      firstTokenS: undefined,
      finishS: undefined,
      generated: 0,
      preemptions: 0,
      cachedTokens: undefined,
      resumeFrom: 0,
      evictions: 0,
      moves: 0,
      dispatchMs: 0,
      dispatchCost: 0,
    };
    recs.set(req.id, rec);
    records.push(rec);
    control?.onArrival(req);
    const res = await gateways[g]!.submit(affinityMode === 'off' ? req : withPrefixKeys(req));
    if (!res.ok) {
      control?.onRejected(req.id);
      rec.rejected = { code: res.code, atS: nowS() };
      if (abandon && req.interactionId !== undefined) abandoned.add(req.interactionId);
    }
  };
  if (arrivals.length > 0 && arrivals[0]!.arrivalMs <= durationMs)
    queue.push(Math.max(0, arrivals[0]!.arrivalMs), { kind: 'arrival', index: 0 });
  let nextProgressS = 1;

  // The run is one chain of promises that never leaves the microtask queue, so a long run would
  // hold its process's event loop for its whole length (timers, I/O and signals wait). Every
  // YIELD_EVERY events it lets the loop turn; nothing it simulates depends on when.
  let untilYield = YIELD_EVERY;
  for (;;) {
    const at = queue.peekTime();
    if (at === undefined || at > durationMs) break;
    if (--untilYield === 0) {
      untilYield = YIELD_EVERY;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    const ev = queue.pop()!;
    clock.set(ev.timeMs);
    const item = ev.item;
    switch (item.kind) {
      case 'arrival': {
        const req = arrivals[item.index]!;
        const next = arrivals[item.index + 1];
        if (next && next.arrivalMs <= durationMs)
          queue.push(next.arrivalMs, { kind: 'arrival', index: item.index + 1 });
        if (req.interactionId !== undefined && abandoned.has(req.interactionId)) break;
        if (deferred.has(req)) break;
        await arrive(req, item.index % dispatchers);
        break;
      }
      case 'follow-up':
        if (item.req.interactionId !== undefined && abandoned.has(item.req.interactionId)) break;
        await arrive({ ...item.req, arrivalMs: ev.timeMs }, item.gateway);
        break;
      case 'step':
        await onStepEnd(item.member, item.result);
        break;
      case 'flush':
        await gateways[item.gateway]!.flush();
        queue.push(ev.timeMs + flushMs, item);
        break;
      case 'control':
        if (control) {
          await execute(await control.tick(ev.timeMs));
          await pumpAll();
          queue.push(ev.timeMs + control.intervalMs, item);
        }
        break;
      case 'rebalance':
        if (sharded !== undefined) {
          // What each shard's store says: its backlogged flows' weights, over every band, and the
          // least of their counters (the dispatchers' view with hand-off; a leader's read once an
          // epoch).
          const bands = (input.sloClasses ?? DEFAULT_SLO_CLASSES).length;
          /** Hand-off: shard pools that received room from an idle shard. */
          const reclaimed = new Set<string>();
          for (const pool of cluster.pools()) {
            const backlog: ShardBacklog[] = [];
            for (let sh = 0; sh < sharded.count; sh++) {
              let weight = 0;
              let counter: number | undefined;
              for (let band = 0; band < bands; band++) {
                const snap = await store.snapshot(sharded.shardPool(pool, sh), band);
                for (const flow of snap.backlogged) {
                  weight += weightOf(flow);
                  const c = snap.counters[flow];
                  if (c !== undefined && (counter === undefined || c < counter)) counter = c;
                }
              }
              backlog.push({ weight, counter });
            }
            sharded.observe(pool, backlog);
            if (sharded.controller === 'handoff') {
              // Shards with nothing queued hand on the room their running requests do not hold.
              const idle = backlog.flatMap((b, sh) => (b.weight > 0 ? [] : [sh]));
              for (const m of cluster.members) {
                if (idle.length === 0 || m.pool !== pool) continue;
                const tokens = backlog.map(() => 0);
                const seqs = backlog.map(() => 0);
                for (const id of onMember[m.index]!) {
                  const sh = sharded.shardOf(recs.get(id)!.req.tenant);
                  tokens[sh] = tokens[sh]! + (reservedTokensOf(id) ?? 0);
                  seqs[sh] = seqs[sh]! + 1;
                }
                for (const sh of idle) {
                  const to = sharded.releaseIdle(pool, m.id, sh, tokens[sh]!, seqs[sh]!);
                  if (to !== undefined) reclaimed.add(sharded.shardPool(pool, to));
                }
              }
            }
          }
          // The rooms idle shards handed on are dispatched into, in the receiving shards' stores.
          for (const p of reclaimed) await gateways[0]!.pump(p);
          // New epoch shares make room for some shards (hand-off moves room as requests finish).
          if (sharded.controller === 'epoch') await pumpAll();
          queue.push(ev.timeMs + sharded.intervalMs, item);
        }
        break;
      case 'moves':
        if (input.moves !== undefined) {
          await moveQueued(input.moves.afterMs);
          queue.push(ev.timeMs + MOVE_EVERY_MS, item);
        }
        break;
      case 'swap-done':
        cluster.swapModel(item.member.id, item.model);
        swaps[item.member.index] = undefined;
        swapsDone++;
        control?.onSwapped(item.member.id, item.model);
        await pumpAll();
        break;
    }
    if (elastic !== undefined)
      await elastic.after(
        clock.now(),
        () => gateways.reduce((n, gw) => n + gw.stats().queued, 0),
        pumpAll,
        (m) => onMember[m.index]!.size > 0 || m.engine.hasWork(),
      );
    for (const m of toKick) kick(m);
    toKick.clear();
    if (input.onProgress && ev.timeMs >= nextProgressS * 1000) {
      input.onProgress(ev.timeMs / 1000);
      nextProgressS = Math.floor(ev.timeMs / 1000) + 1;
    }
  }
  input.onProgress?.(input.durationS);

  let engineSteps = 0;
  let preemptions = 0;
  let prefixCache: { queries: number; hits: number } | undefined;
  for (const m of cluster.members) {
    const s = m.engine.stats();
    engineSteps += s.stepsTotal;
    preemptions += s.preemptionsTotal;
    if (s.prefixCaching) {
      prefixCache ??= { queries: 0, hits: 0 };
      prefixCache.queries += s.prefixCacheQueriesTotal;
      prefixCache.hits += s.prefixCacheHitsTotal;
    }
  }
  return {
    scenario: input.scenario,
    policy: input.ordering.name,
    placement: input.placement.name,
    seed: input.seed,
    durationS: input.durationS,
    records: records.map(toRecord),
    samples,
    engineSteps,
    preemptions,
    ...(prefixCache ? { prefixCache } : {}),
    ...(sharded?.controller === 'handoff' ? { shardHandoffs: { ...sharded.handoffs } } : {}),
    ...(affinityMode !== 'off' ? { affinity: affinityOf(gateways) } : {}),
    ...(control ? { swaps: swapsDone } : {}),
    ...(input.reserve === 'predicted' ? { prediction: predictionOf(gateways) } : {}),
    ...(elastic !== undefined ? { elastic: elastic.usage(Math.min(clock.now(), durationMs)) } : {}),
    tenantWeights:
      input.tenantWeights ?? Object.fromEntries((input.tenants ?? []).map((t) => [t.id, t.weight])),
  };
}

/** What prefix affinity did for the gateways' dispatches, summed. */
function affinityOf(gateways: readonly Gateway[]): NonNullable<SimRun['affinity']> {
  const sum = { hit: 0, bounded: 0, miss: 0 };
  for (const gw of gateways) {
    const a = gw.stats().affinity;
    sum.hit += a.hit;
    sum.bounded += a.bounded;
    sum.miss += a.miss;
  }
  return sum;
}

/** The gateways' prediction errors, summed per replica. */
function predictionOf(gateways: readonly Gateway[]): NonNullable<SimRun['prediction']> {
  let repredictions = 0;
  const errors: Record<string, ReplicaPredictionErrors> = {};
  for (const gw of gateways) {
    const st = gw.stats();
    repredictions += st.repredictions;
    for (const [id, e] of Object.entries(st.predictionErrors)) {
      const sum = errors[id];
      errors[id] = sum
        ? {
            lengthError: sum.lengthError + e.lengthError,
            batchError: sum.batchError + e.batchError,
            underEstimated: sum.underEstimated + e.underEstimated,
            overEstimated: sum.overEstimated + e.overEstimated,
            grownTokens: sum.grownTokens + e.grownTokens,
          }
        : { ...e };
    }
  }
  return { repredictions, errors };
}

function toRecord(r: Rec): RequestRecord {
  return {
    req: r.req,
    arrivalS: r.req.arrivalMs / 1000,
    rejected: r.rejected,
    dispatchS: r.dispatchS,
    replica: r.replica,
    firstTokenS: r.firstTokenS,
    finishS: r.finishS,
    generated: r.generated,
    preemptions: r.preemptions,
    ...(r.cachedTokens === undefined ? {} : { cachedTokens: r.cachedTokens }),
    ...(r.evictions > 0 ? { evictions: r.evictions } : {}),
    ...(r.moves > 0 ? { moves: r.moves } : {}),
  };
}
