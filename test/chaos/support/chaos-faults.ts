import type { ChaosFleet, FleetOptions } from './chaos-fleet.ts';

/**
 * The faults the chaos suite injects, in the order a full run takes them on one fleet (the Redis
 * restart without persistence last: it wipes the store).
 */
export const FAULT_NAMES = [
  'engine-kill',
  'engine-pause',
  'dispatcher-kill',
  'nats-restart',
  'nats-freeze',
  'redis-restart-aof',
  'redis-restart-none',
] as const;

/** One fault's name. */
export type FaultName = (typeof FAULT_NAMES)[number];

/** How long the timed faults last, ms. */
export interface FaultTiming {
  /** SIGSTOP to SIGCONT of the paused engine. @default 5000 */
  readonly pauseMs: number;
  /** NATS stopped to started again, or frozen to going on. @default 10000 */
  readonly natsDownMs: number;
  /** Redis killed to started again. @default 1000 */
  readonly redisDownMs: number;
}

/** Defaults of {@link FaultTiming}. */
export const DEFAULT_TIMING: FaultTiming = { pauseMs: 5000, natsDownMs: 10_000, redisDownMs: 1000 };

/** What an injection did that the summary needs. */
export interface Injected {
  /** Index of the dispatcher that was killed; its own clients may lose their connection. */
  readonly killedDispatcher?: number;
}

/** One fault: how the fleet is set up for it, what is done to it and for how long. */
export interface Fault {
  readonly name: FaultName;
  /** What is done, in a few words (the table's reader sees this). */
  action(t: FaultTiming, fleet: FleetOptions): string;
  /** Fleet settings this fault needs (the Redis persistence of a restart). */
  readonly fleet: Partial<FleetOptions>;
  /** From the injection until the fault repairs itself (restart, SIGCONT), ms. */
  durationMs(t: FaultTiming): number;
  /** Injects the fault; resolves once its own repair (if any) is done. */
  inject(fleet: ChaosFleet, t: FaultTiming): Promise<Injected>;
  /** Brings the fleet back to full strength for the next fault (restarts what was killed). */
  recover?(fleet: ChaosFleet): Promise<void>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function killAndWait(p: ChaosFleet['engines'][number]): Promise<void> {
  if (p.proc.exitCode !== null || p.proc.signalCode !== null) return;
  const exited = new Promise((r) => p.proc.once('exit', r));
  p.kill9();
  await exited;
}

async function restartRedis(fleet: ChaosFleet, t: FaultTiming): Promise<Injected> {
  await fleet.redis.restart({ signal: 'SIGKILL', downMs: t.redisDownMs });
  return {};
}

/** Whether an engine fault takes the agent along (it runs inside engine-sim). */
function withAgent(f: FleetOptions): string {
  return f.agents === 'embedded' ? ' (and its agent)' : ' (its agent stays)';
}

/** Every fault by name. */
export const FAULTS: Readonly<Record<FaultName, Fault>> = {
  'engine-kill': {
    name: 'engine-kill',
    action: (_, f) => `SIGKILL one engine${withAgent(f)}`,
    fleet: {},
    durationMs: () => 0,
    async inject(fleet) {
      await killAndWait(fleet.engines[0]!);
      return {};
    },
    recover: (fleet) => fleet.restartEngine(0),
  },
  'engine-pause': {
    name: 'engine-pause',
    action: (t, f) => `SIGSTOP one engine${withAgent(f)}, SIGCONT ${t.pauseMs / 1000} s later`,
    fleet: {},
    durationMs: (t) => t.pauseMs,
    async inject(fleet, t) {
      const engine = fleet.engines[0]!;
      engine.proc.kill('SIGSTOP');
      await sleep(t.pauseMs);
      engine.proc.kill('SIGCONT');
      return {};
    },
  },
  'dispatcher-kill': {
    name: 'dispatcher-kill',
    action: () => 'SIGKILL one dispatcher',
    fleet: {},
    durationMs: () => 0,
    async inject(fleet) {
      const killed = fleet.dispatchers.length - 1;
      await killAndWait(fleet.dispatchers[killed]!);
      return { killedDispatcher: killed };
    },
    recover: (fleet) => fleet.restartDispatcher(fleet.dispatchers.length - 1),
  },
  'redis-restart-aof': {
    name: 'redis-restart-aof',
    action: (t) =>
      `SIGKILL Redis (AOF, fsync every second), start it ${t.redisDownMs / 1000} s later from its AOF`,
    fleet: { redisPersistence: 'aof' },
    durationMs: (t) => t.redisDownMs,
    inject: restartRedis,
  },
  'redis-restart-none': {
    name: 'redis-restart-none',
    action: (t) => `SIGKILL Redis (no persistence), start it ${t.redisDownMs / 1000} s later empty`,
    fleet: { redisPersistence: 'none' },
    durationMs: (t) => t.redisDownMs,
    inject: restartRedis,
  },
  'nats-restart': {
    name: 'nats-restart',
    action: (t) => `stop NATS (SIGTERM), start it ${t.natsDownMs / 1000} s later on the same JetStream store`,
    fleet: {},
    durationMs: (t) => t.natsDownMs,
    async inject(fleet, t) {
      await fleet.nats.halt();
      await sleep(t.natsDownMs);
      await fleet.nats.resume();
      return {};
    },
  },
  'nats-freeze': {
    name: 'nats-freeze',
    action: (t) =>
      `SIGSTOP NATS (connections stay open, nothing answers), SIGCONT ${t.natsDownMs / 1000} s later`,
    fleet: {},
    durationMs: (t) => t.natsDownMs,
    async inject(fleet, t) {
      fleet.nats.freeze();
      try {
        await sleep(t.natsDownMs);
      } finally {
        fleet.nats.thaw();
      }
      return {};
    },
  },
};
