import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { natsUrl, redisUrl, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { E2E_MODEL, poolEngineArgs, singleTenantConfig } from './support/fleet-config.ts';
import {
  FAIRWAY_BIN,
  type FairwayProcess,
  startEngineSims,
  startProcess,
  stopFleet,
  untilServed,
} from './support/processes.ts';

const KEY = 'sk-fairway-log-behind-0001';
/** Requests sent while nobody reads the dispatcher's stderr: their access-log lines are several times what a pipe holds. */
const REQUESTS = 2000;
const CONCURRENCY = 16;

/**
 * A dispatcher whose log reader (a container runtime's log driver) stops reading: `fairway serve`
 * at its default log level, one access-log line per request, with nobody reading its stderr.
 */
describe('fairway serve while nobody reads its logs', () => {
  const prefix = uniquePrefix('log-behind');
  let engines: FairwayProcess[] = [];
  let serve: FairwayProcess | undefined;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-log-behind-'));
    const config = join(dir, 'fairway.yaml');
    writeFileSync(config, singleTenantConfig(KEY, 30));
    engines = await startEngineSims(1, [
      ...poolEngineArgs(natsUrl(), prefix),
      '--speed',
      '1000',
      '--max-num-seqs',
      '256',
    ]);
    serve = await startProcess(
      process.execPath,
      [FAIRWAY_BIN, 'serve', '-c', config, '--port', '0', '--operator-port', '0'],
      /listening on (http:\/\/\S+)/,
      { env: { REDIS_URL: redisUrl(), NATS_URL: natsUrl(), FAIRWAY_PREFIX: prefix }, leaveOtherUnread: true },
    );
  }, 60_000);
  afterAll(async () => {
    await stopFleet([...(serve === undefined ? [] : [serve]), ...engines], undefined, prefix);
  });

  const chat = async (d: FairwayProcess): Promise<number> => {
    const res = await fetch(`${d.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: E2E_MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      // A dispatcher stopped by its own log writes would leave the request hanging: fail instead.
      signal: AbortSignal.timeout(15_000),
    });
    await res.arrayBuffer();
    return res.status;
  };

  it("keeps serving, and every request's access-log line arrives once the reader catches up", async () => {
    const d = serve as FairwayProcess;
    await untilServed(d, () => chat(d));
    const statuses: number[] = [];
    let next = 0;
    let failed = false;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        // Every lane stops at the first request not served (0: no answer in time).
        while (next < REQUESTS && !failed) {
          next++;
          const status = await chat(d).catch(() => 0);
          statuses.push(status);
          if (status !== 200) failed = true;
        }
      }),
    );
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    expect(statuses).toHaveLength(REQUESTS);

    // The log shipper catches up: every line it reads is whole, and each request has its line.
    let text = '';
    const stderr = d.proc.stderr!;
    stderr.setEncoding('utf8').on('data', (chunk: string) => {
      text += chunk;
    });
    stderr.resume();
    const served = (): number =>
      text
        .split('\n')
        .filter((l) => l.length > 0)
        .map((l) => JSON.parse(l) as { log?: string; status?: number })
        .filter((l) => l.log === 'access' && l.status === 200).length;
    const deadline = Date.now() + 15_000;
    while (served() < REQUESTS + 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    // The measured requests and the one untilServed got through (those before it found no replica yet).
    expect(served()).toBe(REQUESTS + 1);
  });
});
