import { MemoryBus } from '@fairway/bus';
import { ManualClock, silentLogger } from '@fairway/core';
import type { SequenceProgress } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { SequenceReports } from '../src/sequence-reports.ts';

/** Every dispatcher places by each replica's sequences as all of them run them (Aladdin's reports). */

const running = (input: number, generated: number, reserved: number): SequenceProgress => ({
  inputTokens: input,
  generated,
  decodeMs: 0,
  prefilled: generated > 0,
  reservedTokens: reserved,
});

/** A dispatcher whose running requests are `held`, reporting over `bus` on the shared `clock`. */
function dispatcher(bus: MemoryBus, id: string, clock: ManualClock, held: Map<string, SequenceProgress[]>) {
  const reports = new SequenceReports({
    bus,
    dispatcherId: id,
    timer: clock,
    clock,
    local: () => new Map([...held].map(([r, list]) => [r, [...list]])),
    intervalMs: 200,
    logger: silentLogger,
  });
  reports.start();
  return reports;
}

describe('sequence reports shared by every dispatcher', () => {
  it("gives each dispatcher the union of its own sequences and the others' last reports", async () => {
    const bus = new MemoryBus();
    const clock = new ManualClock(1_000);
    const heldA = new Map([['sim-1', [running(100, 700, 1500)]]]);
    const heldB = new Map([
      ['sim-1', [running(100, 20, 2000)]],
      ['sim-2', [running(3000, 5, 3020)]],
    ]);
    const a = dispatcher(bus, 'a', clock, heldA);
    const b = dispatcher(bus, 'b', clock, heldB);
    a.send();
    b.send();
    await bus.flush();
    clock.advance(60);
    a.version();
    expect(a.sequencesOf('sim-1').map((s) => s.reservedTokens)).toEqual([1500, 2000]);
    expect(a.sequencesOf('sim-2')).toEqual([running(3000, 5, 3020)]);
    expect(b.sequencesOf('sim-2')).toEqual([]);
    b.version();
    expect(b.sequencesOf('sim-1').map((s) => s.generated)).toEqual([20, 700]);
    a.stop();
    b.stop();
  });

  it('places by a reported sequence as it was reported while the report ages: time decoded and output together', async () => {
    const bus = new MemoryBus();
    const clock = new ManualClock(0);
    // 11 tokens in 200 ms since the first; one just started.
    const paced = { ...running(100, 11, 600), decodeMs: 200 };
    const a = dispatcher(bus, 'a', clock, new Map());
    const b = dispatcher(bus, 'b', clock, new Map([['sim-1', [paced, running(40, 1, 300)]]]));
    b.send();
    await bus.flush();
    clock.advance(70);
    a.version();
    expect(a.sequencesOf('sim-1')).toEqual([paced, running(40, 1, 300)]);
    a.stop();
    b.stop();
  });

  it('drops a report three intervals (2 s at least) old, so a silent dispatcher’s reservations count in full', async () => {
    const bus = new MemoryBus();
    const clock = new ManualClock(0);
    const a = dispatcher(bus, 'a', clock, new Map());
    const b = dispatcher(bus, 'b', clock, new Map([['sim-1', [running(100, 50, 600)]]]));
    b.send();
    await bus.flush();
    clock.advance(100);
    const v = a.version();
    expect(a.sequencesOf('sim-1')).toHaveLength(1);
    // Three 200-ms intervals are not enough: a dispatcher may stall that long.
    clock.advance(600);
    a.version();
    expect(a.sequencesOf('sim-1')).toHaveLength(1);
    clock.advance(1400);
    expect(a.version()).toBeGreaterThan(v);
    expect(a.sequencesOf('sim-1')).toEqual([]);
    a.stop();
    b.stop();
  });

  it('clears a dispatcher’s sequences with the empty report it sends once its last request ends', async () => {
    const bus = new MemoryBus();
    const clock = new ManualClock(0);
    const held = new Map([['sim-1', [running(100, 50, 600)]]]);
    const a = dispatcher(bus, 'a', clock, new Map());
    const b = dispatcher(bus, 'b', clock, held);
    b.send();
    await bus.flush();
    clock.advance(100);
    a.version();
    expect(a.sequencesOf('sim-1')).toHaveLength(1);
    held.clear();
    b.send();
    await bus.flush();
    clock.advance(100);
    a.version();
    expect(a.sequencesOf('sim-1')).toEqual([]);
    a.stop();
    b.stop();
  });

  it('refuses a report whose counts are out of bounds', async () => {
    const bus = new MemoryBus();
    const clock = new ManualClock(0);
    const a = dispatcher(bus, 'a', clock, new Map());
    expect(() =>
      bus.publish('sequenceReport', {
        dispatcherId: 'x',
        replicas: [{ replicaId: 'sim-1', sequences: [[-1, 0, 0, 1, 10]] }],
        at: 0,
      }),
    ).toThrow();
    const tooMany = Array.from(
      { length: 4097 },
      () => [1, 1, 0, 1, 2] as [number, number, number, 0 | 1, number],
    );
    expect(() =>
      bus.publish('sequenceReport', {
        dispatcherId: 'x',
        replicas: [{ replicaId: 'sim-1', sequences: tooMany }],
        at: 0,
      }),
    ).toThrow();
    clock.advance(100);
    a.version();
    expect(a.sequencesOf('sim-1')).toEqual([]);
    a.stop();
  });
});
