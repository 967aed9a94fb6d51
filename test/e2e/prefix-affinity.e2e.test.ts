import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNatsServer, startRedisServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineMetric } from './support/chat.ts';
import { type ChatAnswer, type ChatMessage, chatAnswer, servedBy } from './support/completions.ts';
import { E2E_MODEL, E2E_POOL } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startServe, untilEachServed } from './support/processes.ts';

/**
 * Prefix-cache affinity across dispatchers, against a real fleet: three `fairway engine-sim`
 * processes caching prefixes (`--enable-prefix-caching --enable-prompt-tokens-details`) with
 * agents, two `fairway serve` dispatchers sharing a Redis server and a NATS
 * server of this test's own. Placement is round-robin, so without affinity consecutive requests go
 * to different replicas: a conversation's next turn, sent through the other dispatcher, reaching
 * the replica that served the turn before is affinity's doing — learned by one dispatcher, told to
 * the other over NATS — and the engine's usage shows the cached tokens it saved.
 */
/**
 * Watches the commands a Redis server runs (`MONITOR`, on a socket of its own, read line by line:
 * ioredis's monitor mode can misread lines that arrive with its mode switch), calling `seen` with
 * each command's name and first argument; resolves once Redis has started monitoring.
 */
async function watchCommands(
  url: string,
  seen: (name: string, first: string | undefined) => void,
): Promise<Socket> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  socket.setEncoding('utf8');
  let pending = '';
  let started: () => void = () => undefined;
  const monitoring = new Promise<void>((resolve, reject) => {
    started = resolve;
    socket.once('error', reject);
  });
  socket.on('data', (chunk: string) => {
    pending += chunk;
    for (let end = pending.indexOf('\r\n'); end >= 0; end = pending.indexOf('\r\n')) {
      const line = pending.slice(0, end);
      pending = pending.slice(end + 2);
      if (line === '+OK') started();
      const m = /^\+[\d.]+ \[[^\]]*\] "([^"]*)"(?: "([^"]*)")?/.exec(line);
      if (m?.[1] !== undefined) seen(m[1], m[2]);
    }
  });
  socket.write('MONITOR\r\n');
  await monitoring;
  return socket;
}

const KEY = 'sk-affinity-alpha-0001';
const CONFIG = `
tenants:
  - { id: alpha, keys: [{ key: ${KEY} }] }
pools:
  - { id: ${E2E_POOL}, model: ${E2E_MODEL}, prefixAffinity: bounded }
policy:
  ordering: vtc
  placement: round-robin
  queueTimeoutS: 60
`;

/** One non-streamed chat completion through a dispatcher. */
function ask(url: string, messages: readonly ChatMessage[]): Promise<ChatAnswer> {
  return chatAnswer(url, { model: E2E_MODEL, messages, output: 24, key: KEY });
}

/** A fairway counter's series with these labels, from a dispatcher's operator port (0 when absent). */
async function counter(operatorUrl: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${operatorUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('prefix-cache affinity across two dispatchers', () => {
  const prefix = uniquePrefix('affinity');
  let nats: TestServer;
  // A redis-server of this suite's own: one test watches it with MONITOR, which on a shared server
  // would see every other test's traffic.
  let redisServer: TestServer;
  let redis: Redis;
  const engines: FairwayProcess[] = [];
  const dispatchers: { proc: FairwayProcess; operatorUrl: string }[] = [];

  /** Completed requests per engine, in engine order. */
  const served = () => Promise.all(engines.map((e) => engineMetric(e.url, 'vllm:request_success_total')));

  /** Sends a turn and returns its answer and the engine that served it. */
  function turn(via: number, messages: readonly ChatMessage[]): Promise<ChatAnswer & { engine: number }> {
    return servedBy(
      engines.map((e) => e.url),
      () => ask(dispatchers[via]!.proc.url, messages),
    );
  }

  beforeAll(async () => {
    [nats, redisServer] = await Promise.all([startNatsServer(), startRedisServer()]);
    const dir = mkdtempSync(join(tmpdir(), 'fairway-affinity-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    const common = ['--nats-url', nats.url, '--prefix', prefix, '--pool', E2E_POOL, '--log-level', 'warn'];
    engines.push(
      ...(await startEngineSims(3, [
        '--speed',
        '20',
        '--enable-prefix-caching',
        '--enable-prompt-tokens-details',
        ...common,
      ])),
    );
    for (const id of ['a', 'b']) {
      dispatchers.push(
        await startServe(
          id,
          { configPath, redisUrl: redisServer.url, natsUrl: nats.url, prefix },
          // The access log (info) says what affinity did for each request.
          { FAIRWAY_LOG_LEVEL: 'info' },
        ),
      );
    }
    redis = new Redis(redisServer.url);
    // Every dispatcher has heard all three replicas register (short prompts: no prefix keys).
    await untilEachServed(
      dispatchers.map((d) => d.proc),
      3,
      (d, k) => ask(d.url, [{ role: 'user', content: `warm up ${k}` }]),
    );
    const deadline = Date.now() + 15_000;
    while ((await served()).some((n) => n === 0)) {
      if (Date.now() > deadline) throw new Error('not every replica served a warm-up request');
      await ask(dispatchers[0]!.proc.url, [{ role: 'user', content: 'warm up' }]);
    }
  }, 90_000);

  afterAll(async () => {
    await Promise.all([...dispatchers.map((d) => d.proc), ...engines].map((p) => p.stop()));
    redis?.disconnect();
    await Promise.all([nats?.stop(), redisServer?.stop()]);
  }, 60_000);

  for (const [first, second] of [
    [0, 1],
    [1, 0],
  ] as const) {
    it(`sends the second turn through dispatcher ${'ab'[second]} to the replica that served the first through dispatcher ${'ab'[first]}`, async () => {
      const logged = () =>
        dispatchers[second]!.proc.output.filter((l) => l.includes('"affinity":"hit"')).length;
      const loggedBefore = logged();
      const hitsBefore = await counter(
        dispatchers[second]!.operatorUrl,
        'fairway_prefix_affinity_total',
        'outcome="hit"',
      );
      // Three conversations in turn: with round-robin placement and no affinity, their second
      // turns would not all find their first turn's replica.
      for (let c = 0; c < 3; c++) {
        const history: ChatMessage[] = [
          {
            role: 'system',
            content: `You are assistant ${first}${c}. ${'Answer briefly and precisely. '.repeat(20)}`,
          },
          {
            role: 'user',
            content: `Conversation ${first}-${c}: ${'tell me about prefix caching in vLLM. '.repeat(15)}`,
          },
        ];
        const one = await turn(first, history);
        history.push({ role: 'assistant', content: one.content }, { role: 'user', content: 'And then?' });
        const two = await turn(second, history);
        expect(two.engine, `conversation ${c}`).toBe(one.engine);
        expect(two.cachedTokens).toBeGreaterThan(0);
        expect(two.cachedTokens).toBeLessThan(two.promptTokens);
      }
      const hitsAfter = await counter(
        dispatchers[second]!.operatorUrl,
        'fairway_prefix_affinity_total',
        'outcome="hit"',
      );
      expect(hitsAfter - hitsBefore).toBe(3);
      // The access log line is written as the response ends: give the last one a moment.
      for (let deadline = Date.now() + 2000; logged() - loggedBefore < 3 && Date.now() < deadline; )
        await new Promise((r) => setTimeout(r, 20));
      expect(logged() - loggedBefore).toBe(3);
    }, 60_000);
  }

  it('leaves no reservation and no held prompt part behind once conversations sharing a system prompt end', async () => {
    const system = {
      role: 'system',
      content: `Shared rules. ${'Answer briefly and precisely. '.repeat(30)}`,
    };
    // What the store's functions write, to see the shared parts held (Redis shows a script's calls).
    const held: string[] = [];
    const monitor = await watchCommands(redisServer.url, (name, first) => {
      if (name.toLowerCase() === 'mset' && first?.startsWith(`{${prefix}}:replicaPrefix:`)) held.push(first);
    });
    // Six conversations at once through both dispatchers, all starting with the same system prompt.
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, c) =>
        ask(dispatchers[c % 2]!.proc.url, [
          system,
          { role: 'user', content: `Question ${c}: ${'why? '.repeat(40)}` },
        ]),
      ),
    );
    expect(answers.every((a) => a.promptTokens > 0)).toBe(true);
    monitor.destroy();
    expect(held.length).toBeGreaterThanOrEqual(6);
    // The store writes a replica's reservation and its held parts as each request settles.
    const left = async () => {
      const keys: string[] = [];
      let cursor = '0';
      do {
        const [next, batch] = await redis.scan(cursor, 'MATCH', `{${prefix}}:replica*`, 'COUNT', 1000);
        cursor = next;
        keys.push(...batch);
      } while (cursor !== '0');
      return keys;
    };
    for (let deadline = Date.now() + 5000; (await left()).length > 0 && Date.now() < deadline; )
      await new Promise((r) => setTimeout(r, 50));
    expect(await left()).toEqual([]);
  }, 60_000);
});
