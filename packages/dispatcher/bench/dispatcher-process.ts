// One dispatcher process for overhead.bench.ts: what `fairway serve` runs (Redis store, NATS bus,
// the config file), plus a `baseline` mode that hides the store's fused operations so the
// gateway makes the calls it made before them — per arrival an admission, reservation reads
// and a dispatch round; per completion a settlement, reads and a round — for a before/after
// comparison in one run. Prints "listening on <url>" when ready; stops on SIGTERM. On SIGUSR2 it
// prints one `diag {json}` line — event-loop delay percentiles and GC pauses by kind since the
// previous SIGUSR2 — so the orchestrator can see, per phase, how long the loop stalled and why.
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { constants, monitorEventLoopDelay, PerformanceObserver, performance } from 'node:perf_hooks';
import { createLogger, loadConfig, systemClock } from '@fairway/core';
import { type Engine, VllmClient } from '@fairway/engine';
import type { SchedulingStore } from '@fairway/store';
import { connectInfrastructure, serveSettings, startDispatcher } from '../src/index.ts';

interface Args {
  readonly configPath: string;
  readonly redisUrl: string;
  readonly natsUrl: string;
  readonly prefix: string;
  readonly name: string;
  readonly baseline: boolean;
  /** The dispatcher's log level: `fairway serve`'s default (info: access log on) unless told. */
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  /** Measure event-loop delay and GC pauses, reported on SIGUSR2. */
  readonly diagnose: boolean;
  /**
   * Where to write a sampling heap profile of every allocation (collected ones included) made
   * until SIGTERM, to find what the request path allocates; none when absent.
   */
  readonly heapProfile?: string;
  /** Keep only what outlived a scavenge in the heap profile (promoted objects), not every allocation. */
  readonly promotedOnly?: boolean;
}

const FUSED = new Set(['admitAndDispatch', 'settleAndDispatch']);

/** The store without its fused operations (the gateway falls back to separate calls). */
function withoutFused(store: SchedulingStore): SchedulingStore {
  return new Proxy(store, {
    get(target, prop) {
      if (FUSED.has(String(prop))) return undefined;
      const v = Reflect.get(target, prop, target);
      // Bound to the store itself: its methods use private fields.
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/** ms the engine calls took as the dispatcher saw them (to the body, or to a stream's headers). */
let engineMs: number[] = [];

/** A `VllmClient` whose generation calls are timed into `engineMs`. */
function timedEngine(url: string): Engine {
  const e = new VllmClient({ url });
  const complete = e.complete.bind(e);
  const stream = e.stream.bind(e);
  const timed = async <T>(call: Promise<T>): Promise<T> => {
    const t0 = performance.now();
    const out = await call;
    engineMs.push(performance.now() - t0);
    return out;
  };
  e.complete = (endpoint, body, options) => timed(complete(endpoint, body, options));
  e.stream = (endpoint, body, options) => timed(stream(endpoint, body, options));
  return e;
}

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round((s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN) * 100) / 100;
};

/** Event-loop delay (sampled every 2 ms) and GC pauses, reset at every report. */
function startDiagnostics(): () => string {
  const loop = monitorEventLoopDelay({ resolution: 2 });
  loop.enable();
  const kinds: Record<number, string> = {
    [constants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
    [constants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact',
    [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
    [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak-callbacks',
  };
  let gc: Record<string, { n: number; totalMs: number; maxMs: number; over2ms: number }> = {};
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = kinds[(e as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other';
      const g = gc[kind] ?? { n: 0, totalMs: 0, maxMs: 0, over2ms: 0 };
      gc[kind] = g;
      g.n++;
      g.totalMs += e.duration;
      g.maxMs = Math.max(g.maxMs, e.duration);
      if (e.duration > 2) g.over2ms++;
    }
  });
  obs.observe({ entryTypes: ['gc'] });
  return () => {
    const ms = (ns: number): number => Math.round(ns / 1e4) / 100;
    const out = JSON.stringify({
      // monitorEventLoopDelay reports how late each 2 ms sample fired, so ~2 ms is "no delay".
      loop: {
        p50: ms(loop.percentile(50)),
        p99: ms(loop.percentile(99)),
        p999: ms(loop.percentile(99.9)),
        max: ms(loop.max),
        samples: loop.count,
      },
      gc,
      engine: { p50: quantile(engineMs, 0.5), p99: quantile(engineMs, 0.99), n: engineMs.length },
      heapMb: Math.round(process.memoryUsage().heapUsed / 1e6),
    });
    loop.reset();
    gc = {};
    engineMs = [];
    return out;
  };
}

const a = JSON.parse(process.argv[2] ?? '{}') as Args;
if (a.diagnose) {
  const report = startDiagnostics();
  process.on('SIGUSR2', () => console.log(`diag ${report()}`));
}
let stopHeapProfile = async (): Promise<void> => undefined;
if (a.heapProfile !== undefined) {
  const path = a.heapProfile;
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: a.promotedOnly !== true,
  });
  stopHeapProfile = async () => {
    const { profile } = await session.post('HeapProfiler.stopSampling');
    writeFileSync(path, JSON.stringify(profile));
  };
}
const settings = serveSettings(
  {},
  {
    configPath: a.configPath,
    redisUrl: a.redisUrl,
    natsUrl: a.natsUrl,
    prefix: a.prefix,
    port: 0,
    operatorPort: 0,
    dispatcherId: a.name,
    logLevel: a.logLevel,
    // Before the fused operations every dispatch round read the reservations from the store.
    ...(a.baseline ? { options: { reservationsMaxAgeMs: 0, predictionTtlMs: 0 } } : {}),
  },
);
const logger = createLogger({ level: a.logLevel, name: a.name });
const infra = await connectInfrastructure({
  redisUrl: a.redisUrl,
  natsUrl: a.natsUrl,
  prefix: a.prefix,
  defaultLeaseMs: 10_000,
  staleAfterMs: settings.staleAfterMs,
  name: a.name,
  clock: systemClock,
  logger,
});
const running = await startDispatcher({
  settings,
  config: loadConfig(a.configPath),
  logger,
  infrastructure: a.baseline ? { ...infra, store: withoutFused(infra.store) } : infra,
  ...(a.diagnose ? { engines: timedEngine } : {}),
});
console.log(`dispatcher ${running.id}${a.baseline ? ' (baseline)' : ''} listening on ${running.url}`);
process.once('SIGTERM', () => {
  void stopHeapProfile()
    .then(() => running.close())
    .then(() => infra.close())
    .finally(() => process.exit(0));
});
