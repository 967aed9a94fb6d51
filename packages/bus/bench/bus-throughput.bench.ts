/**
 * How much the bus carries on this machine: heartbeat fan-in (publish → validated delivery),
 * node-command round trips, and admin-event appends and replays, over real NATS and in process.
 *
 *   npm run bench:bus                      # NATS at NATS_URL, else nats://127.0.0.1:4222
 *   HEARTBEATS=200000 npm run bench:bus
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { type Bus, MemoryBus, type MessageInput, NatsBus, Subjects } from '../src/index.ts';

const HEARTBEATS = Number(process.env.HEARTBEATS ?? 100_000);
const REQUESTS = Number(process.env.REQUESTS ?? 2_000);
const ADMIN_EVENTS = Number(process.env.ADMIN_EVENTS ?? 2_000);
const NATS = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

function heartbeat(i: number): MessageInput<'heartbeat'> {
  return {
    replicaId: `gpu-node-${i % 64}`,
    epoch: 'bench',
    seq: i,
    ts: i,
    state: 'ready',
    running: i % 200,
    waiting: i % 7,
    kvUsage: (i % 100) / 100,
    kvUsedTokens: (i % 100) * 1000,
    promptTokensTotal: i * 300,
    generationTokensTotal: i * 200,
    preemptionsTotal: 0,
    adapters: ['sql-lora'],
  };
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function run(name: string, pub: Bus, sub: Bus): Promise<void> {
  // Heartbeat fan-in: 64 replicas' heartbeats into one registry-like subscriber.
  let received = 0;
  let done: () => void = () => undefined;
  const all = new Promise<void>((r) => {
    done = r;
  });
  const off = sub.subscribe('heartbeat', () => {
    if (++received === HEARTBEATS) done();
  });
  await sub.flush();
  const t0 = performance.now();
  for (let i = 1; i <= HEARTBEATS; i++) {
    pub.publish('heartbeat', heartbeat(i));
    // Yield now and then so the subscriber's socket is read while we publish.
    if (i % 1000 === 0) await new Promise((r) => setImmediate(r));
  }
  await pub.flush();
  await all;
  const hbMs = performance.now() - t0;
  off();

  // Node-command round trips, one at a time.
  const offServe = sub.serve('command', () => ({ ok: true, state: 'ready' }), { key: 'gpu-node-1' });
  await sub.flush();
  const rtts: number[] = [];
  for (let i = 0; i < REQUESTS; i++) {
    const s = performance.now();
    await pub.request('command', { replicaId: 'gpu-node-1', type: 'drain' });
    rtts.push(performance.now() - s);
  }
  offServe();
  rtts.sort((a, b) => a - b);

  // Admin events: durable appends (awaiting each ack), then a full replay.
  const a0 = performance.now();
  for (let i = 0; i < ADMIN_EVENTS; i++) {
    await pub.publishAdminEvent({
      type: 'limitsSet',
      at: i,
      scope: 'tenant',
      id: `t${i % 50}`,
      limits: { rpm: i },
    });
  }
  const appendMs = performance.now() - a0;
  const r0 = performance.now();
  const replayed = await sub.replayAdminEvents();
  const replayMs = performance.now() - r0;

  console.log(`\n${name}`);
  console.log(
    `  heartbeats   ${HEARTBEATS} in ${hbMs.toFixed(0)} ms = ${Math.round(HEARTBEATS / (hbMs / 1000)).toLocaleString()} msg/s delivered and validated`,
  );
  console.log(
    `  commands     ${REQUESTS} round trips: p50 ${pct(rtts, 50).toFixed(3)} ms, p99 ${pct(rtts, 99).toFixed(3)} ms`,
  );
  console.log(
    `  admin events ${ADMIN_EVENTS} appends in ${appendMs.toFixed(0)} ms = ${Math.round(ADMIN_EVENTS / (appendMs / 1000)).toLocaleString()}/s; replay of ${replayed.length} in ${replayMs.toFixed(0)} ms`,
  );
}

const prefix = `bench-${randomBytes(4).toString('hex')}`;
const memory = new MemoryBus({ prefix });
await run('MemoryBus (in process)', memory, memory);
await memory.close();

const a = await NatsBus.connect({ servers: NATS, prefix });
const b = await NatsBus.connect({ servers: NATS, prefix });
await run(`NatsBus (${NATS}, two connections)`, a, b);
await Promise.all([a.close(), b.close()]);
// Leave the shared server as it was.
const nc = await connect({ servers: NATS });
await (await jetstreamManager(nc)).streams.delete(new Subjects(prefix).adminStream);
await nc.drain();
