import { join } from 'node:path';
import { type Bus, type MessageMeta, NatsBus, ReplicaRegistry, type ReplicaView } from '@fairway/bus';
import { systemClock } from '@fairway/core';
import { EngineAbortedError, type EngineStream, VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { freePort, natsUrl, uniquePrefix } from '@fairway/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { EngineProcess, NodeAgent, type NodeAgentOptions } from '../src/index.ts';

const ENGINE_SIM = join(import.meta.dirname, 'fixtures', 'engine-sim-process.ts');
const KV_TOKENS = 10_000;

async function waitFor(check: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A streamed chat request that would run for a long time unless something stops it. */
function longChat(model: string): Record<string, unknown> {
  return {
    model,
    messages: [{ role: 'user', content: 'Tell me a very long story about the sea.' }],
    max_tokens: 3000,
    fairway_output_tokens: 3000,
    stream: true,
  };
}

/** Reads a stream to its end; resolves with the error that ended it, if any. */
async function drainStream(stream: EngineStream): Promise<unknown> {
  try {
    for await (const _ of stream) {
      // Bytes are not needed; the stream's counters are.
    }
    return undefined;
  } catch (err) {
    return err;
  }
}

describe('NodeAgent against engine-sim and NATS', () => {
  const cleanup: (() => Promise<unknown> | unknown)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  async function fleet(options: { engine?: EngineSimHandle; agent?: Partial<NodeAgentOptions> } = {}) {
    const prefix = uniquePrefix('agent');
    const engineSim =
      options.engine ?? (await startEngineSim({ speed: 1, kvCapacityTokens: KV_TOKENS, maxNumSeqs: 16 }));
    if (!options.engine) cleanup.push(() => engineSim.close());
    const engine = new VllmClient({ url: engineSim.url });
    cleanup.push(() => engine.close());
    const agentBus = await NatsBus.connect({ servers: natsUrl(), prefix });
    const bus = await NatsBus.connect({ servers: natsUrl(), prefix });
    cleanup.push(
      () => agentBus.close(),
      () => bus.close(),
    );
    const registry = new ReplicaRegistry({ bus, clock: systemClock, staleAfterMs: 1000 });
    registry.start();
    cleanup.push(() => registry.stop());
    await bus.flush();
    const makeAgent = (extra: Partial<NodeAgentOptions> = {}): NodeAgent => {
      const agent = new NodeAgent({
        bus: agentBus,
        engine,
        clock: systemClock,
        replicaId: 'gpu-node-1',
        pool: 'llama',
        model: engineSim.servedModelName,
        gpu: 'A100-80GB',
        maxNumSeqs: 16,
        heartbeatIntervalMs: 100,
        ...options.agent,
        ...extra,
      });
      cleanup.push(() => agent.stop({ stopEngine: false }));
      return agent;
    };
    const agent = makeAgent();
    return { prefix, engineSim, engine, agentBus, bus, registry, agent, makeAgent };
  }

  const view = (registry: ReplicaRegistry, id = 'gpu-node-1'): ReplicaView | undefined => registry.get(id);

  it('registers the replica with the KV capacity from cache_config_info and keeps its heartbeat fresh', async () => {
    const { registry, agent, engine, engineSim } = await fleet();
    await agent.start();
    await waitFor(() => view(registry)?.acceptsWork === true, 3000, 'registration');
    const m = await engine.metrics();
    const reg = view(registry)!.registration;
    expect(reg).toMatchObject({
      replicaId: 'gpu-node-1',
      url: engineSim.url,
      pool: 'llama',
      model: 'llama-2-7b',
      gpu: 'A100-80GB',
      tp: 1,
      maxNumSeqs: 16,
      blockSize: m.blockSize,
      kvCapacityTokens: (m.numGpuBlocks ?? 0) * (m.blockSize ?? 0),
      epoch: agent.epoch,
    });
    expect(reg.kvCapacityTokens).toBe(KV_TOKENS);
    // Sampled for 1.5 s, the replica is never stale: heartbeats arrive well inside the limit.
    const seqs = new Set<number>();
    for (let i = 0; i < 30; i++) {
      const v = view(registry);
      expect(v?.stale).toBe(false);
      if (v?.heartbeat) seqs.add(v.heartbeat.seq);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(seqs.size).toBeGreaterThan(5);
  });

  it('reports running requests and KV usage as they come and go', async () => {
    const { registry, agent, engine } = await fleet();
    await agent.start();
    const stream = await engine.stream('chat', longChat('llama-2-7b'));
    const ended = drainStream(stream);
    await waitFor(() => (view(registry)?.capacity.running ?? 0) === 1, 3000, 'running request');
    await waitFor(() => (view(registry)?.capacity.kvUsedTokens ?? 0) > 0, 3000, 'KV in use');
    const cap = view(registry)!.capacity;
    expect(cap.kvFreeTokens).toBe(KV_TOKENS - cap.kvUsedTokens);
    expect(cap.freeSeqs).toBe(15);
    stream.abort();
    await ended;
    await waitFor(() => view(registry)?.capacity.running === 0, 3000, 'request gone');
    await waitFor(() => view(registry)?.capacity.kvUsedTokens === 0, 3000, 'KV freed');
  });

  it('drains on command: the replica stays registered but gets no room, until resumed', async () => {
    const { registry, agent, bus } = await fleet();
    await agent.start();
    await waitFor(() => view(registry)?.acceptsWork === true);
    const reply = await bus.request('command', { replicaId: 'gpu-node-1', type: 'drain' });
    expect(reply).toEqual({ ok: true, state: 'draining' });
    await waitFor(() => view(registry)?.reportedState === 'draining');
    expect(view(registry)?.capacity).toMatchObject({ saturated: true, kvFreeTokens: 0 });
    expect(await bus.request('command', { replicaId: 'gpu-node-1', type: 'resume' })).toEqual({
      ok: true,
      state: 'ready',
    });
    await waitFor(() => view(registry)?.acceptsWork === true);
  });

  it('evicts a request mid-stream through the dispatcher that holds it, and the engine frees its KV', async () => {
    const { agent, bus, engine, registry } = await fleet();
    await agent.start();
    // This test plays the dispatcher: it holds the client connections and closes them on `evict`.
    const held = new Map<string, EngineStream>();
    const evictEvents: { requestIds: string[]; meta: MessageMeta }[] = [];
    bus.subscribe('evict', (e, meta) => {
      evictEvents.push({ requestIds: e.requestIds, meta });
      for (const id of e.requestIds) held.get(id)?.abort();
    });
    await bus.flush();
    const victim = await engine.stream('chat', longChat('llama-2-7b'));
    const survivor = await engine.stream('chat', longChat('llama-2-7b'));
    held.set('req-victim', victim);
    held.set('req-survivor', survivor);
    const victimEnded = drainStream(victim);
    const survivorEnded = drainStream(survivor);
    // Long enough that the victim holds several KV blocks: the survivor keeps decoding while the
    // eviction goes round, and must not grow by the victim's whole footprint in that time (a 5-token
    // victim held one block, and a survivor delayed under load could grow by as much).
    await waitFor(
      () => victim.completionTokens > 120 && survivor.completionTokens > 120,
      15_000,
      'both streaming',
    );
    const kvBefore = (await engine.metrics()).kvCacheUsage;

    const reply = await bus.request(
      'command',
      { replicaId: 'gpu-node-1', type: 'evict', requestIds: ['req-victim'] },
      { timeoutMs: 6000 },
    );
    expect(reply).toMatchObject({ ok: true });
    expect(await victimEnded).toBeInstanceOf(EngineAbortedError);
    expect(evictEvents).toHaveLength(1);
    expect(evictEvents[0]?.requestIds).toEqual(['req-victim']);
    const after = await engine.metrics();
    expect(after.running).toBe(1);
    expect(after.kvCacheUsage).toBeLessThan(kvBefore);
    expect(survivor.done).toBe(false);
    await waitFor(() => view(registry)?.capacity.running === 1, 3000, 'registry sees one running');
    survivor.abort();
    await survivorEnded;
  });

  it('answers an eviction nobody carries out with an unconfirmed failure', async () => {
    const { agent, bus, engine } = await fleet({ agent: { evictTimeoutMs: 300 } });
    await agent.start();
    const stream = await engine.stream('chat', longChat('llama-2-7b'));
    const ended = drainStream(stream);
    await waitFor(() => stream.completionTokens > 0, 5000, 'streaming');
    const reply = await bus.request('command', {
      replicaId: 'gpu-node-1',
      type: 'evict',
      requestIds: ['r-x'],
    });
    expect(reply.ok).toBe(false);
    expect(reply.error).toMatch(/in flight went from 1 to 1/);
    stream.abort();
    await ended;
  });

  it('puts the engine to sleep and wakes it, refusing to sleep with requests in flight', async () => {
    const { agent, bus, engine, registry } = await fleet();
    await agent.start();
    const stream = await engine.stream('chat', longChat('llama-2-7b'));
    const ended = drainStream(stream);
    await waitFor(() => stream.completionTokens > 0, 5000, 'streaming');
    const refused = await bus.request('command', { replicaId: 'gpu-node-1', type: 'sleep', level: 1 });
    expect(refused.ok).toBe(false);
    expect(refused.error).toMatch(/1 requests are in flight/);
    expect(await engine.isSleeping()).toBe(false);
    stream.abort();
    await ended;
    await waitFor(() => view(registry)?.capacity.running === 0, 3000, 'idle');

    expect(await bus.request('command', { replicaId: 'gpu-node-1', type: 'sleep', level: 1 })).toEqual({
      ok: true,
      state: 'sleeping',
    });
    expect(await engine.isSleeping()).toBe(true);
    await waitFor(() => view(registry)?.reportedState === 'sleeping');
    expect(view(registry)?.capacity.saturated).toBe(true);
    expect(await bus.request('command', { replicaId: 'gpu-node-1', type: 'wake' })).toEqual({
      ok: true,
      state: 'ready',
    });
    expect(await engine.isSleeping()).toBe(false);
    await waitFor(() => view(registry)?.acceptsWork === true);
  });

  it('loads and unloads a LoRA adapter, and reports it in heartbeats', async () => {
    const { agent, bus, engine, registry } = await fleet();
    await agent.start();
    const loaded = await bus.request('command', {
      replicaId: 'gpu-node-1',
      type: 'loadLora',
      name: 'sql-lora',
      path: '/adapters/sql',
    });
    expect(loaded).toEqual({ ok: true, state: 'ready' });
    expect((await engine.models()).map((c) => c.id)).toContain('sql-lora');
    await waitFor(() => view(registry)?.heartbeat?.adapters.includes('sql-lora') === true);
    // Serving the adapter needs no restart: a swap to it is a no-op.
    expect(
      (await bus.request('command', { replicaId: 'gpu-node-1', type: 'swapModel', model: 'sql-lora' })).ok,
    ).toBe(true);
    const again = await bus.request('command', {
      replicaId: 'gpu-node-1',
      type: 'loadLora',
      name: 'sql-lora',
      path: '/adapters/sql',
    });
    expect(again.ok).toBe(false);
    expect(again.error).toMatch(/already been loaded/);
    expect(
      (await bus.request('command', { replicaId: 'gpu-node-1', type: 'unloadLora', name: 'sql-lora' })).ok,
    ).toBe(true);
    await waitFor(() => view(registry)?.heartbeat?.adapters.length === 0);
  });

  it('refuses a full model swap when it does not run the engine process', async () => {
    const { agent, bus } = await fleet();
    await agent.start();
    const reply = await bus.request('command', {
      replicaId: 'gpu-node-1',
      type: 'swapModel',
      model: 'llama-2-13b',
    });
    expect(reply.ok).toBe(false);
    expect(reply.error).toMatch(/does not run the engine process/);
  });

  it('leaves on stop and is seen fresh again after an agent restart', async () => {
    const { agent, registry, makeAgent } = await fleet();
    await agent.start();
    await waitFor(() => view(registry)?.acceptsWork === true);
    await agent.stop();
    await waitFor(() => view(registry) === undefined, 3000, 'gone');
    const restarted = makeAgent();
    await restarted.start();
    await waitFor(() => view(registry)?.acceptsWork === true, 3000, 're-registered');
    expect(view(registry)?.registration.epoch).toBe(restarted.epoch);
    expect(restarted.epoch).not.toBe(agent.epoch);
  });

  it('drains on shutdown: reports draining while requests finish, then leaves', async () => {
    const { agent, registry, engine } = await fleet();
    await agent.start();
    const stream = await engine.stream('chat', {
      ...longChat('llama-2-7b'),
      max_tokens: 60,
      fairway_output_tokens: 60,
    });
    const ended = drainStream(stream);
    await waitFor(() => stream.completionTokens > 0, 5000, 'streaming');
    const states: (string | undefined)[] = [];
    const off = registry.onChange(() => states.push(view(registry)?.reportedState ?? 'removed'));
    await agent.stop({ drainTimeoutMs: 10_000 });
    expect(await ended).toBeUndefined();
    expect(stream.done).toBe(true);
    await waitFor(() => view(registry) === undefined, 3000, 'gone');
    off();
    expect(states).toContain('draining');
    expect(states.at(-1)).toBe('removed');
  });

  it('is discovered by a registry that starts after the agent', async () => {
    const { agent, bus } = await fleet();
    await agent.start();
    const late = new ReplicaRegistry({ bus, clock: systemClock });
    late.start();
    cleanup.push(() => late.stop());
    await waitFor(
      () => late.get('gpu-node-1')?.acceptsWork === true,
      3000,
      'late registry learns the replica',
    );
  });

  it('takes the replica out of the pool when the engine stops answering, and back when it returns', async () => {
    const port = await freePort();
    const first = await startEngineSim({ port, speed: 1, kvCapacityTokens: KV_TOKENS });
    const { agent, registry } = await fleet({ engine: first });
    await agent.start();
    await waitFor(() => view(registry)?.acceptsWork === true);
    await first.close();
    await waitFor(() => view(registry)?.acceptsWork !== true, 1000, 'replica out of the pool');
    await waitFor(() => view(registry) === undefined, 2000, 'gone');
    const second = await startEngineSim({ port, speed: 1, kvCapacityTokens: KV_TOKENS });
    cleanup.push(() => second.close());
    await waitFor(() => view(registry)?.acceptsWork === true, 3000, 'back in the pool');
  });
});

describe('NodeAgent with the engine process', () => {
  const cleanup: (() => Promise<unknown> | unknown)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  async function managed() {
    const prefix = uniquePrefix('agent');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const engine = new VllmClient({ url });
    const proc = new EngineProcess({
      command: process.execPath,
      args: [
        '--import',
        'tsx',
        ENGINE_SIM,
        '--port',
        String(port),
        '--model',
        'llama-2-7b',
        '--kv-capacity-tokens',
        String(KV_TOKENS),
      ],
      probe: () => engine.health(),
      probeIntervalMs: 50,
      startTimeoutMs: 20_000,
      backoffInitialMs: 200,
      stopTimeoutMs: 3000,
    });
    const agentBus = await NatsBus.connect({ servers: natsUrl(), prefix });
    const bus: Bus = await NatsBus.connect({ servers: natsUrl(), prefix });
    const registry = new ReplicaRegistry({ bus, clock: systemClock, staleAfterMs: 1000 });
    registry.start();
    await bus.flush();
    const agent = new NodeAgent({
      bus: agentBus,
      engine,
      clock: systemClock,
      replicaId: 'gpu-node-2',
      pool: 'llama',
      model: 'llama-2-7b',
      heartbeatIntervalMs: 100,
      process: proc,
    });
    cleanup.push(
      () => engine.close(),
      () => agentBus.close(),
      () => bus.close(),
      () => registry.stop(),
      () => agent.stop(),
    );
    return { proc, engine, bus, registry, agent };
  }

  it('restarts a crashed engine; the replica leaves the pool within the staleness limit and returns', async () => {
    const { proc, registry, agent } = await managed();
    await agent.start();
    await waitFor(() => registry.get('gpu-node-2')?.acceptsWork === true, 5000, 'registered');
    const pid = proc.pid!;
    process.kill(pid, 'SIGKILL');
    await waitFor(() => registry.get('gpu-node-2')?.acceptsWork !== true, 1000, 'out of the pool');
    await waitFor(
      () => proc.pid !== undefined && proc.pid !== pid && proc.running,
      20_000,
      'engine restarted',
    );
    await waitFor(() => registry.get('gpu-node-2')?.acceptsWork === true, 5000, 'back in the pool');
    expect(proc.restarts).toBe(1);
  });

  it('swaps the model by restarting the engine and registers the new model', async () => {
    const { proc, registry, agent, bus, engine } = await managed();
    await agent.start();
    await waitFor(() => registry.get('gpu-node-2')?.acceptsWork === true, 5000, 'registered');
    const reply = await bus.request(
      'command',
      { replicaId: 'gpu-node-2', type: 'swapModel', model: 'llama-2-13b' },
      { timeoutMs: 30_000 },
    );
    expect(reply).toEqual({ ok: true, state: 'ready' });
    expect(proc.args).toContain('llama-2-13b');
    expect((await engine.models()).map((c) => c.id)).toEqual(['llama-2-13b']);
    await waitFor(
      () => registry.get('gpu-node-2')?.registration.model === 'llama-2-13b',
      3000,
      'new model registered',
    );
    await waitFor(() => registry.get('gpu-node-2')?.acceptsWork === true, 3000, 'serving again');
    expect(agent.model).toBe('llama-2-13b');
  });
});
