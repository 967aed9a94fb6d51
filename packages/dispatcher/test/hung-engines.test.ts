import { createServer, type Server, type Socket } from 'node:net';
import { EngineTimeoutError, VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnginePool } from '../src/engine-pool.ts';
import { EngineProbe } from '../src/engine-probe.ts';
import { HUNG_AFTER_CHECKS, HungEngines } from '../src/hung-engines.ts';

/**
 * Health checks, through the dispatcher's own engine probe, of a real engine and of an engine that
 * accepts connections and answers nothing (a frozen process): only the silent one is reported
 * hung, and only once it has left `HUNG_AFTER_CHECKS` checks in a row unanswered.
 */
describe('HungEngines', () => {
  let sim: EngineSimHandle;
  let silent: Server;
  let silentUrl: string;
  const sockets: Socket[] = [];
  let engines: EnginePool;
  let hungEngines: HungEngines;

  beforeAll(async () => {
    sim = await startEngineSim({ speed: 20 });
    silent = createServer((socket) => {
      sockets.push(socket);
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const address = silent.address();
    silentUrl = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`;
    engines = new EnginePool((url) => new VllmClient({ url }));
    const probe = new EngineProbe(engines, () => undefined, 150);
    hungEngines = new HungEngines({ answers: (url) => probe.answers(url), timeoutMs: 150 });
  });
  afterAll(async () => {
    await engines.close();
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
    await sim.close();
  });

  /** One check of `unheard`; the replicas reported hung, with their errors. */
  async function check(unheard: Record<string, string>): Promise<[string, EngineTimeoutError][]> {
    const hung: [string, EngineTimeoutError][] = [];
    await hungEngines.check(new Map(Object.entries(unheard)), (id, err) => hung.push([id, err]));
    return hung;
  }

  it('reports an engine that answers no health check, once it has left enough unanswered', async () => {
    for (let k = 1; k < HUNG_AFTER_CHECKS; k++) expect(await check({ frozen: silentUrl })).toEqual([]);
    const hung = await check({ frozen: silentUrl });
    expect(hung.map(([id]) => id)).toEqual(['frozen']);
    const err = hung[0]?.[1] as EngineTimeoutError;
    expect(err).toBeInstanceOf(EngineTimeoutError);
    expect(err.phase).toBe('hung');
    expect(err.url).toBe(silentUrl);
    expect(err.message).toContain('no health check answered within 150 ms');
    // Reported once: the count starts again.
    expect(await check({ frozen: silentUrl })).toEqual([]);
  });

  it('never reports an engine that answers, and counts again for a replica heard from in between', async () => {
    for (let k = 0; k < HUNG_AFTER_CHECKS + 1; k++) expect(await check({ live: sim.url })).toEqual([]);
    for (let k = 1; k < HUNG_AFTER_CHECKS; k++) expect(await check({ frozen: silentUrl })).toEqual([]);
    // Heard from again: left out of one check.
    expect(await check({})).toEqual([]);
    for (let k = 1; k < HUNG_AFTER_CHECKS; k++) expect(await check({ frozen: silentUrl })).toEqual([]);
    expect((await check({ frozen: silentUrl, live: sim.url })).map(([id]) => id)).toEqual(['frozen']);
  });
});
