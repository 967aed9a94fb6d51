import {
  ErrorCode,
  ManualClock,
  parseWith,
  type RequestDescriptor,
  type SloClass,
  type Tenant,
} from '@fairway/core';
import type { AdmissionPolicy, OrderingPolicy, PlacementPolicy } from '@fairway/policy';
import {
  type AdmissionFunction,
  type Dispatched,
  Gateway,
  type Headroom,
  type ReserveMode,
} from '@fairway/scheduler';
import { MemoryStore, type SchedulingStore } from '@fairway/store';
import { z } from 'zod';
import { Cluster, type ClusterMember } from './cluster.ts';
import type { EngineConfig, StepResult } from './engine-api.ts';
import { EventQueue } from './event-queue.ts';
import type { EngineSample, RequestRecord, SimRun } from './records.ts';

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
}

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
}

type SimEvent =
  | { readonly kind: 'arrival'; readonly index: number }
  | { readonly kind: 'step'; readonly member: ClusterMember; readonly result: StepResult }
  | { readonly kind: 'flush'; readonly gateway: number };

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
  const cluster = new Cluster(input.engines);
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

  const dispatchers = input.dispatchers ?? 1;
  const flushMs = input.flushMs ?? 50;
  const gateways: Gateway[] = [];
  const gatewayIndex = new Map<string, number>();
  const onDispatch = (d: Dispatched): void => {
    const rec = recs.get(d.id)!;
    rec.dispatchS = nowS();
    rec.replica = d.replica;
    if (d.owner !== d.picker) gateways[gatewayIndex.get(d.owner)!]!.started(d);
    const member = cluster.member(d.replica);
    member.engine.add({
      id: d.id,
      inputTokens: d.req.inputTokens,
      outputTokens: d.req.outputTokens ?? d.req.maxTokens,
      maxTokens: d.req.maxTokens,
      ...(d.req.priority !== undefined ? { priority: d.req.priority } : {}),
    });
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
        replicas: cluster,
        onDispatch,
        flushMs,
        ...(input.flushTokens !== undefined ? { flushTokens: input.flushTokens } : {}),
        ...(input.limits !== undefined ? { admission: input.limits } : {}),
        ...(input.reserve !== undefined ? { reserve: input.reserve } : {}),
        ...(input.headroom !== undefined ? { headroom: input.headroom } : {}),
        ...(input.sloClasses !== undefined ? { sloClasses: input.sloClasses } : {}),
      }),
    );
    queue.push((k * flushMs) / dispatchers, { kind: 'flush', gateway: k });
  }

  const kick = (m: ClusterMember): void => {
    if (busy[m.index] || !m.engine.hasWork()) return;
    const result = m.engine.step();
    if (result.durationMs === 0 && result.events.length === 0) return;
    busy[m.index] = true;
    queue.push(clock.now() + result.durationMs, { kind: 'step', member: m, result });
  };

  const onStepEnd = async (m: ClusterMember, result: StepResult): Promise<void> => {
    busy[m.index] = false;
    const t = nowS();
    for (const e of result.events) {
      switch (e.kind) {
        case 'token': {
          const rec = recs.get(e.id)!;
          rec.generated = e.generated;
          const gw = gateways[rec.gateway]!;
          if (gw.recordTokens(e.id, e.generated)) await gw.flush();
          break;
        }
        case 'first-token': {
          const rec = recs.get(e.id)!;
          if (rec.firstTokenS === undefined) rec.firstTokenS = t;
          break;
        }
        case 'preempted':
          recs.get(e.id)!.preemptions++;
          break;
        case 'finished': {
          const rec = recs.get(e.id)!;
          rec.generated = e.generated;
          if (e.ignored) rec.rejected = { code: 'context_too_long', atS: t };
          else rec.finishS = t;
          await gateways[rec.gateway]!.complete(e.id, {
            inputTokens: rec.req.inputTokens,
            outputTokens: e.generated,
          });
          break;
        }
        case 'scheduled':
          break;
      }
    }
    if (clock.now() - lastSample[m.index]! >= sampleMs) {
      lastSample[m.index] = clock.now();
      const s = m.engine.stats();
      samples.push({ replica: m.id, timeS: t, running: s.running, waiting: s.waiting, kvUsage: s.kvUsage });
    }
    toKick.add(m);
  };

  const arrivals = input.arrivals;
  const abandon = input.abandonRejectedInteractions ?? true;
  const abandoned = new Set<string>();
  if (arrivals.length > 0 && arrivals[0]!.arrivalMs <= durationMs)
    queue.push(Math.max(0, arrivals[0]!.arrivalMs), { kind: 'arrival', index: 0 });
  let nextProgressS = 1;

  for (;;) {
    const at = queue.peekTime();
    if (at === undefined || at > durationMs) break;
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
        const g = item.index % dispatchers;
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
        };
        recs.set(req.id, rec);
        records.push(rec);
        const res = await gateways[g]!.submit(req);
        if (!res.ok) {
          rec.rejected = { code: res.code, atS: nowS() };
          if (abandon && req.interactionId !== undefined) abandoned.add(req.interactionId);
        }
        break;
      }
      case 'step':
        await onStepEnd(item.member, item.result);
        break;
      case 'flush':
        await gateways[item.gateway]!.flush();
        queue.push(ev.timeMs + flushMs, item);
        break;
    }
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
  for (const m of cluster.members) {
    const s = m.engine.stats();
    engineSteps += s.stepsTotal;
    preemptions += s.preemptionsTotal;
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
    tenantWeights:
      input.tenantWeights ?? Object.fromEntries((input.tenants ?? []).map((t) => [t.id, t.weight])),
  };
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
  };
}
