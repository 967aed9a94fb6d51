import { createLogger } from '@fairway/core';
import { afterEach, describe, expect, it } from 'vitest';
import { LifecycleError } from '../src/errors.ts';
import {
  isTerminal,
  LIFECYCLE_TRANSITIONS,
  type LifecycleState,
  transition,
} from '../src/request-lifecycle.ts';
import { recordedToday, type Stack, type StackOptions, startStack, waitFor } from './support/stack.ts';

const STATES = Object.keys(LIFECYCLE_TRANSITIONS) as LifecycleState[];

/** Moves a request through `path` from `admitted`, as its lifecycle does. */
function walk(path: readonly LifecycleState[]): LifecycleState {
  return path.reduce<LifecycleState>((from, to) => transition('r1', from, to), 'admitted');
}

describe('request lifecycle transitions', () => {
  it('ends every request settled, abandoned or withdrawn, and nothing leaves those', () => {
    expect(STATES.filter(isTerminal).sort()).toEqual(['abandoned', 'settled', 'withdrawn']);
    // Every state reachable from admission can still reach an end.
    const reachable = new Set<LifecycleState>(['admitted']);
    for (const s of reachable) for (const t of LIFECYCLE_TRANSITIONS[s]) reachable.add(t);
    expect([...reachable].sort()).toEqual([...STATES].sort());
    for (const s of STATES) {
      const ends = new Set<LifecycleState>([s]);
      for (const t of ends) for (const u of LIFECYCLE_TRANSITIONS[t]) ends.add(u);
      expect([...ends].some(isTerminal), s).toBe(true);
    }
  });

  it('refuses any move out of an ended request, so it is never settled twice', () => {
    for (const end of STATES.filter(isTerminal))
      for (const to of STATES) {
        expect(() => transition('r1', end, to)).toThrow(LifecycleError);
      }
  });

  it('refuses to stream or settle a request that was never dispatched', () => {
    expect(() => walk(['streaming'])).toThrow(LifecycleError);
    expect(() => walk(['settled'])).toThrow(LifecycleError);
    expect(() => walk(['queued', 'streaming'])).toThrow(LifecycleError);
    expect(() => walk(['queued', 'settled'])).toThrow(LifecycleError);
    expect(() => walk(['queued', 'dispatched', 'requeued', 'dispatched'])).toThrow(LifecycleError);
    expect(() => walk(['queued', 'dispatched', 'streaming', 'evicted', 'streaming'])).toThrow(LifecycleError);
    // A request settles only after the engine answered.
    expect(() => walk(['queued', 'dispatched', 'settled'])).toThrow(LifecycleError);
  });

  it('names the request and the refused move', () => {
    try {
      transition('req-7', 'settled', 'abandoned');
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(LifecycleError);
      expect(err).toMatchObject({
        requestId: 'req-7',
        from: 'settled',
        to: 'abandoned',
        code: 'FAIRWAY_DISPATCHER_ILLEGAL_TRANSITION',
      });
    }
  });

  it('follows a request retried on another replica and one resumed after an eviction', () => {
    const retried = walk([
      'queued',
      'dispatched',
      'requeued',
      'queued',
      'dispatched',
      'streaming',
      'settled',
    ]);
    expect(retried).toBe('settled');
    const resumed = walk([
      'queued',
      'dispatched',
      'streaming',
      'evicted',
      'queued',
      'dispatched',
      'streaming',
      'settled',
    ]);
    expect(resumed).toBe('settled');
    expect(walk(['queued', 'withdrawn'])).toBe('withdrawn');
    expect(walk(['queued', 'dispatched', 'streaming', 'abandoned'])).toBe('abandoned');
  });
});

const MODEL = 'llama-2-7b';
const KEY = 'sk-lifecycle-alpha-0001';
/** A QLM control plane that evicts batch requests for interactive ones. */
const QLM_CONFIG = {
  tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
  pools: [{ id: 'llama', model: MODEL }],
  sloClasses: [
    { name: 'interactive', ttftS: 20, band: 0, sheddable: false },
    { name: 'batch', ttftS: 600, band: 2, sheddable: true },
  ],
  policy: { ordering: 'qlm', control: { intervalMs: 150, leaseMs: 1200 } },
};

interface Answer {
  readonly status: number;
  readonly body: string;
}

/**
 * However a request ends — answered, the client gone mid-stream, its engine failing or falling
 * silent, its queue wait running out, evicted and resumed — the store settles it exactly once:
 * every replica's reservations return to zero, its usage is recorded once, and the gateway counts
 * one settlement per request that ran. Real dispatcher, engine-sims over HTTP, in this process.
 */
describe('request lifecycle through the dispatcher', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });
  async function stack(o: Partial<StackOptions> & { pool?: Record<string, unknown> }): Promise<Stack> {
    const { pool, ...rest } = o;
    const s = await startStack({
      config: {
        tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL, ...pool }],
        policy: { ordering: 'vtc', placement: 'least-kv' },
      },
      ...rest,
    });
    stacks.push(s);
    return s;
  }
  async function send(
    s: Stack,
    o: { stream: boolean; tokens?: number; sloClass?: string; signal?: AbortSignal },
  ): Promise<Answer> {
    const tokens = o.tokens ?? 5;
    const res = await fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEY}`,
        'content-type': 'application/json',
        ...(o.sloClass === undefined ? {} : { 'x-fairway-slo-class': o.sloClass }),
      },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'x'.repeat(36) }],
        max_tokens: tokens,
        fairway_output_tokens: tokens,
        ...(o.stream ? { stream: true } : {}),
      }),
      signal: o.signal ?? AbortSignal.timeout(30_000),
    });
    return { status: res.status, body: await res.text() };
  }
  /** Waits until nothing is reserved or running, then checks each of `ran` requests settled once. */
  async function expectSettledOnce(s: Stack, ran: number): Promise<void> {
    const runtime = s.dispatchers[0]!.dispatcher.runtime;
    const idle = async (): Promise<boolean> => {
      if (runtime.stats().running > 0) return false;
      for (const id of s.replicas) if ((await s.store.reserved(id)).seqs > 0) return false;
      return true;
    };
    await waitFor(idle, 5000, 'settlement').catch(() => undefined);
    for (const id of s.replicas) expect(await s.store.reserved(id)).toEqual({ tokens: 0, seqs: 0 });
    expect(runtime.stats().settled).toBe(ran);
    expect(runtime.stats().queued).toBe(0);
    expect((await recordedToday(s.store, KEY)).requests).toBe(ran);
  }

  it('settles answered requests once, streamed or whole', async () => {
    const s = await stack({});
    const answers = await Promise.all([send(s, { stream: true }), send(s, { stream: false })]);
    for (const a of answers) expect(a.status, a.body).toBe(200);
    await expectSettledOnce(s, 2);
  });

  it('settles once and releases the reservation when the client leaves mid-stream', async () => {
    const s = await stack({ engines: [{ speed: 1 }] });
    const leave = new AbortController();
    const res = await fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'x'.repeat(36) }],
        max_tokens: 400,
        fairway_output_tokens: 400,
        stream: true,
      }),
      signal: leave.signal,
    });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    expect((await s.store.reserved(s.replicas[0]!)).seqs).toBe(1);
    leave.abort();
    await reader.read().catch(() => undefined);
    await expectSettledOnce(s, 1);
    const used = await recordedToday(s.store, KEY);
    expect(used.outputTokens).toBeLessThan(400);
  });

  it('settles a request retried on another replica once, for the call that answered', async () => {
    const s = await stack({ engines: [{ faults: { errorRate: 1 } }, {}] });
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => send(s, { stream: i % 2 === 1 })));
    for (const a of answers) expect(a.status, a.body).toBe(200);
    expect((await s.dispatchers[0]!.dispatcher.metrics.engineRetries.get()).values[0]?.value).toBeGreaterThan(
      0,
    );
    await expectSettledOnce(s, 8);
  });

  it('settles once a request whose only engine fails, and answers it with the failure', async () => {
    const s = await stack({ engines: [{ faults: { errorRate: 1 } }] });
    const a = await send(s, { stream: false });
    expect(a.status).toBeGreaterThanOrEqual(500);
    await expectSettledOnce(s, 1);
  });

  it('settles once a stream whose engine fell silent mid-answer', async () => {
    const s = await stack({
      engines: [{ faults: { hangRate: 1, hangAfterTokens: 2 } }],
      pool: { engineTimeouts: { firstByteMs: 1000, streamIdleMs: 500, answerMs: 1500 } },
    });
    const a = await send(s, { stream: true, tokens: 20 });
    expect(a.status).toBe(200);
    expect(a.body).toContain('"error"');
    await expectSettledOnce(s, 1);
  });

  it('withdraws a request whose queue wait ran out, settling only the one that ran', async () => {
    const s = await stack({ engines: [{ speed: 1, maxNumSeqs: 1 }], options: { queueTimeoutMs: 300 } });
    const first = send(s, { stream: true, tokens: 200 });
    await waitFor(
      () => s.dispatchers[0]!.dispatcher.runtime.stats().running === 1,
      5000,
      'the first dispatch',
    );
    const second = await send(s, { stream: false });
    expect(second.status).toBe(504);
    expect((await first).status).toBe(200);
    await expectSettledOnce(s, 1);
  });

  it('settles an evicted request once, after it resumed and answered in full', async () => {
    const s = await startStack({
      config: QLM_CONFIG,
      engines: [{ speed: 2 }],
    });
    stacks.push(s);
    const runtime = s.dispatchers[0]!.dispatcher.runtime;
    const answer = send(s, { stream: true, tokens: 300, sloClass: 'batch' });
    let evicted = false;
    await waitFor(
      () => {
        const r = runtime.holdings().running[0];
        if (r === undefined || r.generated < 20) return false;
        s.infra.bus.publish('evict', {
          replicaId: r.replicaId,
          requestIds: [r.requestId],
          reason: 'test',
          at: Date.now(),
        });
        evicted = true;
        return true;
      },
      10_000,
      'a running request to evict',
    );
    expect(evicted).toBe(true);
    const a = await answer;
    expect(a.status).toBe(200);
    expect(a.body).toContain('data: [DONE]');
    expect(a.body).not.toContain('"error"');
    expect(runtime.stats().evicted).toBe(1);
    await expectSettledOnce(s, 1);
    expect((await recordedToday(s.store, KEY)).outputTokens).toBe(300);
  });
});

describe('a resumed request', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });

  /** A streamed batch request of 300 tokens through the first dispatcher; resolves to its body. */
  function sendBatch(s: Stack): Promise<string> {
    return fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEY}`,
        'content-type': 'application/json',
        'x-fairway-slo-class': 'batch',
      },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'x'.repeat(36) }],
        max_tokens: 300,
        fairway_output_tokens: 300,
        stream: true,
      }),
      signal: AbortSignal.timeout(30_000),
    }).then((r) => r.text());
  }

  /**
   * Once the request runs with 20 tokens out: takes its replica out of placement (its agent
   * stops), lets `before` act on the other one, and evicts it. Returns both replica ids.
   */
  async function evictOffItsReplica(
    s: Stack,
    before: (to: string) => Promise<void> = async () => {},
  ): Promise<{ from: string; to: string }> {
    const runtime = s.dispatchers[0]!.dispatcher.runtime;
    let first: { replicaId: string; requestId: string } | undefined;
    await waitFor(
      () => {
        const r = runtime.holdings().running[0];
        if (r !== undefined && r.generated >= 20) first = r;
        return first !== undefined;
      },
      10_000,
      'a running request',
    );
    const from = first!.replicaId;
    const to = s.replicas.find((id) => id !== from)!;
    await s.agents[s.replicas.indexOf(from)]!.stop();
    await before(to);
    s.infra.bus.publish('evict', {
      replicaId: from,
      requestIds: [first!.requestId],
      reason: 'test',
      at: Date.now(),
    });
    return { from, to };
  }

  it('holds out the replica it resumed on when its new engine fails, not the one it was evicted from', async () => {
    const s = await startStack({ config: QLM_CONFIG, engines: [{ speed: 2 }, { speed: 2 }] });
    stacks.push(s);
    const runtime = s.dispatchers[0]!.dispatcher.runtime;
    const answer = sendBatch(s);
    // The other replica answers every call with a 500.
    const { from, to } = await evictOffItsReplica(s, async (to) => {
      await fetch(`${s.sims[s.replicas.indexOf(to)]!.url}/fairway/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ errorRate: 1 }),
      });
    });
    const body = await answer;
    expect(body).toContain('"error"');
    expect(runtime.stats().evicted).toBe(1);
    expect(runtime.isSuspect(to)).toBe(true);
    expect(runtime.isSuspect(from)).toBe(false);
  });

  it('names the replica it resumed on, which answered its end, in its access log line', async () => {
    const lines: string[] = [];
    const logger = createLogger({ level: 'info', destination: { write: (l: string) => lines.push(l) } });
    const s = await startStack({ config: QLM_CONFIG, engines: [{ speed: 2 }, { speed: 2 }], logger });
    stacks.push(s);
    const answer = sendBatch(s);
    const { to } = await evictOffItsReplica(s);
    const body = await answer;
    expect(body).toContain('data: [DONE]');
    expect(body).not.toContain('"error"');
    let access: { replica?: string; completionTokens?: number } | undefined;
    await waitFor(
      () => {
        access = lines
          .map((l) => JSON.parse(l))
          .find((l) => l.msg === 'request' && l.route?.includes('chat'));
        return access !== undefined;
      },
      5000,
      'the access log line',
    );
    expect(access!.replica).toBe(to);
    expect(access!.completionTokens).toBe(300);
  });
});
