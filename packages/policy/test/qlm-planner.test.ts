import { DEFAULT_SLO_CLASSES, type RequestDescriptor } from '@fairway/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { sloClassMap } from '../src/edf.ts';
import { loadHighsSolver, type MilpSolver } from '../src/qlm/milp-solver.ts';
import { planOperations, type ServingOp } from '../src/qlm/operations.ts';
import { OutputLengthStats } from '../src/qlm/output-stats.ts';
import { planQueues, predictViolations, type QueuePlannerOptions } from '../src/qlm/qlm-planner.ts';
import type { QlmFlags, QlmReplica, QlmRunningRequest, QlmState } from '../src/qlm/qlm-state.ts';
import { GroupTable, groupKeyString, toQlmRequest } from '../src/qlm/request-group.ts';
import type { RwtProfile } from '../src/qlm/rwt-estimator.ts';

let solver: MilpSolver;
beforeAll(async () => {
  solver = await loadHighsSolver();
});

const classes = sloClassMap(DEFAULT_SLO_CLASSES);
// Θ = 32 / 50 ms = 640 tokens/s.
const profile: RwtProfile = {
  decodeMsPerIteration: 50,
  batchSize: 32,
  inefficiency: 1,
  prefillMs: 200,
  maxOutputTokens: 1024,
};
const lengths = new OutputLengthStats({ mean: 200, variance: 100 ** 2 });
const options = (over: Partial<QueuePlannerOptions> = {}): QueuePlannerOptions => ({
  outputStats: (key) => lengths.get(groupKeyString(key)),
  solver,
  budget: { timeLimitS: 10 },
  ...over,
});

const NOW = 100_000;
const request = (id: string, over: Partial<RequestDescriptor> = {}) =>
  toQlmRequest(
    {
      id,
      tenant: 't',
      model: 'm',
      sloClass: 'interactive',
      inputTokens: 100,
      maxTokens: 1024,
      arrivalMs: NOW,
      ...over,
    },
    classes,
  );

const batchRunning = (n: number): QlmRunningRequest[] =>
  Array.from({ length: n }, (_, i) => ({
    id: `run${i}`,
    model: 'm',
    band: 2,
    sheddable: true,
    inputTokens: 100,
    generated: 100 + i,
    expectedOutput: 1000,
  }));

const replica = (id: string, over: Partial<QlmReplica> = {}): QlmReplica => ({
  id,
  model: 'm',
  loadable: {},
  profiles: { m: profile },
  running: [],
  freeTokens: 10_000,
  freeSeqs: 32,
  ...over,
});

function stateWith(
  replicas: QlmReplica[],
  add: (t: GroupTable) => void,
  queues: QlmState['queues'] = {},
): QlmState {
  const table = new GroupTable({ avgBatchSize: 32 });
  add(table);
  return { nowMs: NOW, replicas, groups: table.groups(), queues };
}

const ofKind = <K extends ServingOp['kind']>(ops: readonly ServingOp[], kind: K) =>
  ops.filter((o): o is Extract<ServingOp, { kind: K }> => o.kind === kind);

describe('planQueues', () => {
  it('keeps the queues and pulls the head while no violation is predicted', () => {
    const state = stateWith([replica('r0')], (t) => {
      for (let i = 0; i < 4; i++) t.add(request(`i${i}`));
    });
    const decision = planQueues(state, options());
    expect(decision.replanned).toBe(false);
    expect(decision.predicted).toEqual([]);
    expect(ofKind(decision.ops, 'assign')).toEqual([
      { kind: 'assign', groupId: 'g1', replica: 'r0', position: 0, previous: undefined },
    ]);
    expect(ofKind(decision.ops, 'pull')).toEqual([
      { kind: 'pull', replica: 'r0', requestIds: ['i0', 'i1', 'i2', 'i3'] },
    ]);
  });

  it('evicts just enough lower-band running requests when an interactive group would miss its TTFT', () => {
    // 32 batch-2 requests with ~900 tokens left hold the replica for ~45 s; interactive TTFT is 20 s.
    const busy = replica('r0', { running: batchRunning(32), freeTokens: 0, freeSeqs: 0 });
    const state = stateWith([busy], (t) => {
      for (let i = 0; i < 4; i++) t.add(request(`i${i}`));
    });
    expect(predictViolations(state, options()).map((v) => v.groupId)).toEqual(['g1']);

    const decision = planQueues(state, options());
    expect(decision.replanned).toBe(true);
    expect(decision.schedule?.source).toBe('milp');
    expect(decision.queues.r0).toEqual(['g1', 'running@r0']);
    const [evict] = ofKind(decision.ops, 'evict');
    // Four sequences of 100 + 200 tokens need 1200 tokens; each victim frees its 100 + ~100.
    expect(evict?.requestIds).toEqual(['run0', 'run1', 'run2', 'run3', 'run4', 'run5']);
    expect(evict?.forGroup).toBe('g1');
    expect(ofKind(decision.ops, 'pull')[0]?.requestIds).toEqual(['i0', 'i1', 'i2', 'i3']);
    expect(decision.evaluation.feasible && decision.evaluation.penalty).toBe(0);

    const noEvict = planQueues(state, options({ flags: { evict: false } }));
    expect(ofKind(noEvict.ops, 'evict')).toEqual([]);
    expect(ofKind(noEvict.ops, 'pull')).toEqual([]);
    expect(noEvict.evaluation.feasible && noEvict.evaluation.penalty).toBeGreaterThan(0);
  });

  it('evicts nothing for a group placed ahead when the running requests free its room in time', () => {
    // The same full replica, but every running request is expected to end within 40 decode steps
    // (2 s): the interactive group starts long before its 20-s TTFT without cutting any of them.
    const running = batchRunning(32).map((r) => ({ ...r, expectedOutput: r.generated + 40 }));
    const ending = replica('r0', { running, freeTokens: 0, freeSeqs: 0 });
    const state = stateWith([ending], (t) => {
      for (let i = 0; i < 4; i++) t.add(request(`i${i}`));
    });
    const ahead = { r0: ['g1', 'running@r0'] };
    expect(ofKind(planOperations(state, ahead, options()), 'evict')).toEqual([]);
    // With most of its slack gone (13 s waited of 20), the same wait is too long: it evicts.
    const late = stateWith([ending], (t) => {
      for (let i = 0; i < 4; i++) t.add(request(`i${i}`, { arrivalMs: NOW - 17_000 }));
    });
    expect(ofKind(planOperations(late, ahead, options()), 'evict')).toHaveLength(1);
  });

  it('never evicts a request more often than maxEvictions', () => {
    // A full replica whose batch requests would all free the room only in ~45 s: the group evicts.
    const running = batchRunning(32).map((r, i) => ({ ...r, evictions: i < 3 ? 1 : 0 }));
    const busy = replica('r0', { running, freeTokens: 0, freeSeqs: 0 });
    const state = stateWith([busy], (t) => {
      for (let i = 0; i < 4; i++) t.add(request(`i${i}`));
    });
    const ahead = { r0: ['g1', 'running@r0'] };
    const once = ofKind(planOperations(state, ahead, options({ maxEvictions: 1 })), 'evict');
    // The three evicted before are passed over; the next six, least progress first, make the room.
    expect(once[0]?.requestIds).toEqual(['run3', 'run4', 'run5', 'run6', 'run7', 'run8']);
    const unbounded = ofKind(planOperations(state, ahead, options()), 'evict');
    expect(unbounded[0]?.requestIds).toEqual(['run0', 'run1', 'run2', 'run3', 'run4', 'run5']);
  });

  it('moves a group to another replica when its own would make it late, unless load balancing is off', () => {
    const stuck = replica('r1', {
      running: batchRunning(32).map((r) => ({ ...r, sheddable: false, band: 0 })),
      freeTokens: 0,
      freeSeqs: 0,
    });
    const state = stateWith([replica('r0'), stuck], (t) => t.add(request('i0')), { r1: ['g1'] });
    const balanced = planQueues(state, options());
    expect(balanced.queues.r0).toEqual(['g1']);
    expect(ofKind(balanced.ops, 'assign')).toEqual([
      { kind: 'assign', groupId: 'g1', replica: 'r0', position: 0, previous: 'r1' },
    ]);

    const pinned = planQueues(state, options({ flags: { loadBalance: false } }));
    expect(pinned.queues.r1).toEqual(['g1']);
    expect(ofKind(pinned.ops, 'assign')).toEqual([]);
  });

  it('swaps the model when the head group needs one the replica can load', () => {
    const r0 = replica('r0', {
      model: 'a',
      profiles: { a: profile, b: profile },
      loadable: { b: { costS: 30, mechanism: 'sleep-wake' } },
    });
    const state = stateWith([r0], (t) => t.add(request('x', { model: 'b', sloClass: 'batch-1' })));
    const decision = planQueues(state, options());
    expect(ofKind(decision.ops, 'swap')).toEqual([
      {
        kind: 'swap',
        replica: 'r0',
        from: 'a',
        to: 'b',
        costS: 30,
        mechanism: 'sleep-wake',
        afterDrain: false,
      },
    ]);
    const frozen = planQueues(state, options({ flags: { swap: false } as QlmFlags }));
    expect(frozen.unplaced).toEqual(['g1']);
    expect(frozen.ops).toEqual([]);
  });

  it('pushes everything assigned to a replica when pulling is disabled', () => {
    const full = replica('r0', { freeTokens: 0, freeSeqs: 0 });
    const state = stateWith([full], (t) => {
      for (let i = 0; i < 3; i++) t.add(request(`b${i}`, { sloClass: 'batch-2' }));
    });
    expect(ofKind(planQueues(state, options()).ops, 'pull')).toEqual([]);
    expect(ofKind(planQueues(state, options({ flags: { pull: false } })).ops, 'push')).toEqual([
      { kind: 'push', replica: 'r0', requestIds: ['b0', 'b1', 'b2'] },
    ]);
  });

  it('orders by deadline under EDF and by arrival under FCFS', () => {
    const state = stateWith([replica('r0', { freeTokens: 0, freeSeqs: 0 })], (t) => {
      t.add(request('old-batch', { sloClass: 'batch-2', arrivalMs: NOW - 5000 }));
      t.add(request('new-inter', { sloClass: 'interactive' }));
    });
    expect(planQueues(state, options({ planner: 'edf' })).queues.r0).toEqual(['g2', 'g1']);
    expect(planQueues(state, options({ planner: 'fcfs' })).queues.r0).toEqual(['g1', 'g2']);
  });
});
