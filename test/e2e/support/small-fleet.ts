import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { poolEngineArgs, singleTenantConfig } from './fleet-config.ts';
import { type FairwayProcess, startEngineSims, startServe, untilServed } from './processes.ts';

/** A small real fleet: two engine-sims and one dispatcher. */
export interface SmallFleet {
  readonly engines: readonly FairwayProcess[];
  readonly dispatcher: FairwayProcess;
  /** The dispatcher's operator URL (`/metrics`). */
  readonly operatorUrl: string;
}

/**
 * Starts two `fairway engine-sim` processes (`speed`, default 100) registered in the e2e pool over `natsUrl`,
 * and one `fairway serve` (id `id`, logging errors only) with one tenant and its `key`
 * ({@link singleTenantConfig}) on `redisUrl` and `natsUrl`, all under `prefix`; resolves once
 * `attempt` (one request through the dispatcher, answering its HTTP status) answers 200.
 */
export async function startSmallFleet(o: {
  readonly id: string;
  readonly key: string;
  readonly redisUrl: string;
  readonly natsUrl: string;
  readonly prefix: string;
  readonly attempt: (dispatcher: FairwayProcess) => Promise<number>;
  readonly speed?: number;
}): Promise<SmallFleet> {
  const dir = mkdtempSync(join(tmpdir(), `fairway-${o.id}-`));
  const configPath = join(dir, 'fairway.yaml');
  writeFileSync(configPath, singleTenantConfig(o.key, 30));
  const engines = await startEngineSims(2, [
    ...poolEngineArgs(o.natsUrl, o.prefix),
    '--speed',
    String(o.speed ?? 100),
  ]);
  const { proc: dispatcher, operatorUrl } = await startServe(
    o.id,
    { configPath, redisUrl: o.redisUrl, natsUrl: o.natsUrl, prefix: o.prefix },
    { FAIRWAY_LOG_LEVEL: 'error' },
  );
  await untilServed(dispatcher, () => o.attempt(dispatcher));
  return { engines, dispatcher, operatorUrl };
}
