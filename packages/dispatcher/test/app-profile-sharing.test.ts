import { MemoryBus } from '@fairway/bus';
import { type RequestDescriptor, silentLogger, systemClock } from '@fairway/core';
import { AppProfileLearner } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { AppProfileSharing } from '../src/app-profile-sharing.ts';

/** Dispatchers learn WSC's app profiles from every dispatcher's settled calls, over the bus. */

const call = (app: string, stage: number): RequestDescriptor => ({
  id: `r-${app}-${stage}-${Math.random()}`,
  tenant: 't',
  app,
  model: 'm',
  sloClass: 'interactive',
  inputTokens: 120,
  systemTokens: 20,
  maxTokens: 64,
  arrivalMs: 0,
  interactionId: 'ix',
  interactionStage: stage,
});

/** A dispatcher's learner of the app `agent`, sharing on a bus of its own. */
function oneDispatcher() {
  const bus = new MemoryBus();
  const learner = new AppProfileLearner({ keep: 100, apps: new Set(['agent']) });
  const sharing = new AppProfileSharing({
    learner,
    bus,
    dispatcherId: 'd1',
    clock: systemClock,
    logger: silentLogger,
  });
  sharing.start();
  return { bus, learner, sharing };
}

describe('app profiles shared by every dispatcher', () => {
  it('gives a dispatcher that served none of an app’s calls the profile the others learned', async () => {
    const bus = new MemoryBus();
    const apps = new Set(['agent']);
    const learners = [0, 1].map(() => new AppProfileLearner({ keep: 100, apps }));
    const sharing = learners.map(
      (learner, i) =>
        new AppProfileSharing({
          learner,
          bus,
          dispatcherId: `d${i}`,
          clock: systemClock,
          logger: silentLogger,
        }),
    );
    for (const s of sharing) s.start();
    // Dispatcher 0 serves 25 calls of each of two stages; dispatcher 1 none.
    for (let i = 0; i < 25; i++) {
      learners[0]!.observe(call('agent', 0), { inputTokens: 120, outputTokens: 40 });
      learners[0]!.observe(call('agent', 1), { inputTokens: 120, outputTokens: 4 });
    }
    expect(learners[1]!.profile('agent')).toBeUndefined();
    sharing[0]!.flush();
    await bus.flush();
    expect(learners[1]!.profile('agent')).toEqual(learners[0]!.profile('agent'));
    expect(learners[1]!.profile('agent')?.stages).toEqual([
      { input: 100, system: 20, output: 40 },
      { input: 100, system: 20, output: 4 },
    ]);
    expect(sharing[1]!.received).toBe(50);
    // What a dispatcher learned from others is not sent back.
    sharing[1]!.flush();
    await bus.flush();
    expect(sharing[0]!.received).toBe(0);
    for (const s of sharing) s.stop();
  });

  it('learns nothing of an app the config does not name, from its own calls or another’s', async () => {
    const { bus, learner, sharing } = oneDispatcher();
    for (let i = 0; i < 30; i++)
      learner.observe(call(`made-up-${i % 3}`, 0), { inputTokens: 9, outputTokens: 9 });
    expect(learner.drain()).toEqual([]);
    bus.publish('appSamples', {
      dispatcherId: 'd2',
      samples: Array.from({ length: 30 }, () => ({
        app: 'made-up',
        stage: 0,
        input: 1,
        system: 0,
        output: 1,
      })),
      at: 0,
    });
    await bus.flush();
    expect(learner.profile('made-up')).toBeUndefined();
    sharing.stop();
  });

  it('refuses a malformed message (a negative stage, a count past any prompt) before a learner sees it', async () => {
    const { bus, learner, sharing } = oneDispatcher();
    const bad = {
      dispatcherId: 'd2',
      samples: [{ app: 'agent', stage: -1, input: 1e12, system: 0, output: 1 }],
      at: 0,
    };
    expect(() => bus.publish('appSamples', bad)).toThrow();
    await bus.flush();
    expect(sharing.received).toBe(0);
    expect(learner.drain()).toEqual([]);
    sharing.stop();
  });
});
