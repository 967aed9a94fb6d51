import type { ControlReport } from '@fairway/bus';
import type { SloControl } from '@fairway/scheduler';
import { describe, expect, it } from 'vitest';
import { ControlFeed } from '../src/control-feed.ts';

/** A control that records the events it is given, in order. */
function recorder(): { control: SloControl; events: string[] } {
  const events: string[] = [];
  return {
    events,
    control: {
      name: 'recorder',
      intervalMs: 100,
      start: () => undefined,
      onArrival: (r) => events.push(`arrive ${r.id}`),
      onRejected: (id) => events.push(`gone ${id}`),
      onDispatched: (id, replica) => events.push(`dispatch ${id} ${replica}`),
      onEvicted: (id, generated) => events.push(`evict ${id} ${generated}`),
      onFinished: (r, generated) => events.push(`finish ${r.id} ${generated}`),
      onSwapped: () => undefined,
      tick: async () => [],
    },
  };
}

const req = (id: string, sloClass = 'interactive', generated = 0) => ({
  requestId: id,
  model: 'm',
  sloClass,
  inputTokens: 10,
  maxTokens: 100,
  arrivalMs: 1,
  generated,
});

function report(
  seq: number,
  parts: Partial<Pick<ControlReport, 'queued' | 'running' | 'finished'>>,
): ControlReport {
  return { dispatcherId: 'd1', seq, queued: [], running: [], finished: [], at: 0, ...parts };
}

describe('ControlFeed', () => {
  it('turns a request moving between reports into arrival, dispatch, eviction and finish events', () => {
    const { control, events } = recorder();
    const arrivals: string[] = [];
    const feed = new ControlFeed(control, new Set(['interactive', 'batch']), (r) => arrivals.push(r.id));
    feed.apply([report(0, { queued: [req('a')] })]);
    feed.apply([report(1, { running: [{ ...req('a', 'interactive', 5), replicaId: 'r1' }] })]);
    expect(
      feed
        .running()
        .get('r1')
        ?.map((r) => [r.req.id, r.generated]),
    ).toEqual([['a', 5]]);
    feed.apply([report(2, { queued: [req('a', 'interactive', 7)] })]);
    feed.apply([report(3, { running: [{ ...req('a', 'interactive', 9), replicaId: 'r2' }] })]);
    feed.apply([report(4, { finished: [req('a', 'interactive', 20)] })]);
    expect(events).toEqual(['arrive a', 'dispatch a r1', 'evict a 7', 'dispatch a r2', 'finish a 20']);
    expect(arrivals).toEqual(['a']);
    expect(feed.running().size).toBe(0);
  });

  it('learns from requests that came and went between two reports, once, and drops vanished ones', () => {
    const { control, events } = recorder();
    const feed = new ControlFeed(control, new Set(['interactive']));
    feed.apply([report(0, { queued: [req('q')], finished: [req('f', 'interactive', 3)] })]);
    // The same report again (no newer one arrived): its finished list is not applied twice.
    feed.apply([report(0, { queued: [req('q')], finished: [req('f', 'interactive', 3)] })]);
    feed.apply([report(1, {})]);
    expect(events).toEqual(['arrive q', 'arrive f', 'dispatch f unknown', 'finish f 3', 'gone q']);
  });

  it('leaves out requests of classes the control does not know', () => {
    const { control, events } = recorder();
    const feed = new ControlFeed(control, new Set(['interactive']));
    feed.apply([report(0, { queued: [req('x', 'mystery')] })]);
    expect(events).toEqual([]);
    expect(feed.queued).toBe(0);
  });
});
