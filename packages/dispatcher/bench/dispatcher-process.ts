// One dispatcher process for overhead.bench.ts: what `fairway serve` runs (Redis store, NATS bus,
// the config file), plus a `baseline` mode that hides the store's fused operations so the
// gateway makes the calls it made before them — per arrival an admission, reservation reads
// and a dispatch round; per completion a settlement, reads and a round — for a before/after
// comparison in one run. Prints "listening on <url>" when ready; stops on SIGTERM.
import { createLogger, loadConfig, systemClock } from '@fairway/core';
import type { SchedulingStore } from '@fairway/store';
import { connectInfrastructure, serveSettings, startDispatcher } from '../src/index.ts';

interface Args {
  readonly configPath: string;
  readonly redisUrl: string;
  readonly natsUrl: string;
  readonly prefix: string;
  readonly name: string;
  readonly baseline: boolean;
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

const a = JSON.parse(process.argv[2] ?? '{}') as Args;
const settings = serveSettings(
  {},
  {
    configPath: a.configPath,
    redisUrl: a.redisUrl,
    natsUrl: a.natsUrl,
    prefix: a.prefix,
    port: 0,
    dispatcherId: a.name,
    logLevel: 'warn',
    // Before the fused operations every dispatch round read the reservations from the store.
    ...(a.baseline ? { options: { reservationsMaxAgeMs: 0, predictionTtlMs: 0 } } : {}),
  },
);
const logger = createLogger({ level: 'warn', name: a.name });
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
});
console.log(`dispatcher ${running.id}${a.baseline ? ' (baseline)' : ''} listening on ${running.url}`);
process.once('SIGTERM', () => {
  void running
    .close()
    .then(() => infra.close())
    .finally(() => process.exit(0));
});
