import { ManualClock, silentLogger, systemClock } from '@fairway/core';
import { EngineTimeoutError, VllmClient } from '@fairway/engine';
import { afterEach, describe, expect, it } from 'vitest';
import { buildDispatcher, type Dispatcher } from '../src/index.ts';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * Two dispatchers on one bus, each on its own manual monotonic clock (the one replica holds are
 * timed on), with two real engines: a replica whose engine times out again while held out stays
 * held out, on every dispatcher, for a whole hold after its latest failure — a hung engine still
 * answers its health check, so a dispatcher that let the first hold lapse would place requests on it
 * again, among them the ones the other dispatcher just took off it.
 */
describe('replica holds across the fleet', () => {
  let stack: Stack | undefined;
  const built: Dispatcher[] = [];
  afterEach(async () => {
    for (const d of built.splice(0)) await d.app.close();
    await stack?.close();
    stack = undefined;
  });

  it('renews every dispatcher’s hold on a replica that fails again while held out', async () => {
    stack = await startStack({
      config: { pools: [{ id: 'chat', model: 'llama-2-7b' }] },
      engines: [{}, {}],
      dispatchers: 0,
    });
    const s = stack;
    const [hung, other] = s.replicas as [string, string];
    /** The engine URLs dispatcher B asked for their health, in order. */
    const healthChecks: string[] = [];
    const build = (id: string, timer: ManualClock): Dispatcher => {
      const d = buildDispatcher({
        id,
        config: s.config,
        store: s.store,
        bus: s.infra.bus,
        registry: s.infra.registry,
        engines: (url) =>
          new (class extends VllmClient {
            override async health(): Promise<void> {
              if (id === 'b') healthChecks.push(url);
              await super.health();
            }
          })({ url }),
        clock: systemClock,
        timer,
        logger: silentLogger,
        options: { suspectMs: 5000, probeEveryMs: 20 },
        adminTrust: { kind: 'in-process' },
      });
      built.push(d);
      return d;
    };
    const timerA = new ManualClock(0);
    const timerB = new ManualClock(0);
    const a = build('a', timerA);
    const b = build('b', timerB);
    await Promise.all([a.app.ready(), b.app.ready()]);
    const timeout = (replica: string) => new EngineTimeoutError(replica, 'chat completion', 'headers', 8000);

    // A sees the engine time out: both hold it out until 5000.
    a.runtime.replicaFailed(hung, timeout(hung));
    await waitFor(async () => b.runtime.isSuspect(hung), 5000, 'B to hear of the failure');
    // B holds the other replica out until 5000 too, on its own failure: its probe marks when B's
    // probing has run past that time.
    b.runtime.replicaFailed(other, timeout(other));

    // At 4000, a second call A had sent to the hung engine times out: a hold until 9000.
    timerA.advance(4000);
    timerB.advance(4000);
    a.runtime.replicaFailed(hung, timeout(hung));
    await s.infra.bus.flush();

    // At 6000 B probes what is due: the other replica, not the hung one (held until 9000).
    timerB.advance(2000);
    const otherUrl = s.sims[1]?.url ?? '';
    await waitFor(async () => !b.runtime.isSuspect(other), 5000, 'B to probe the other replica back');
    expect(healthChecks).toContain(otherUrl);
    expect(b.runtime.isSuspect(hung)).toBe(true);
    expect(a.runtime.isSuspect(hung)).toBe(true);
  });
});
