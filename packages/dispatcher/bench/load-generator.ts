// The load generator of overhead.bench.ts, run in its own process so that sending and timing
// requests never shares an event loop with the dispatcher or the engine under test. It takes one
// phase at a time from its parent over IPC, sends requests open-loop (at fixed, precomputed send
// times, whatever the responses do) through an undici pool, and reports every latency back.
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

/** One phase of load, sent by the parent. */
export interface PhaseRequest {
  readonly kind: 'phase';
  readonly url: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  /** Request bodies, used in turn (e.g. one per tenant). */
  readonly bodies: readonly string[];
  /** Requests per second. */
  readonly rate: number;
  readonly durationMs: number;
  readonly stream: boolean;
  /** Most connections the pool opens. */
  readonly connections: number;
  /** How long to wait for stragglers after the last send, ms. */
  readonly drainMs: number;
}

/** What a phase measured; times in ms. */
export interface PhaseReport {
  readonly kind: 'report';
  readonly sent: number;
  readonly completed: number;
  readonly errors: number;
  readonly statuses: Readonly<Record<string, number>>;
  readonly firstError?: string;
  /** Send to last byte of the response, per completed request. */
  readonly latencies: number[];
  /** Send to first body byte (streaming: the first SSE event), per completed request. */
  readonly firstBytes: number[];
  /** The dispatcher's own `x-fairway-overhead-ms` header, when present. */
  readonly selfOverheads: number[];
  /** The dispatcher's `x-fairway-queue-ms` header (time held waiting for capacity), when present. */
  readonly queueTimes: number[];
  /** How late each send left after its scheduled time (generator lag). */
  readonly lags: number[];
  /** Wall time from the first send to the last response, ms. */
  readonly elapsedMs: number;
}

async function runPhase(p: PhaseRequest): Promise<PhaseReport> {
  const pool = new Pool(p.url, {
    connections: p.connections,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  });
  const total = Math.max(1, Math.round((p.rate * p.durationMs) / 1000));
  const gap = 1000 / p.rate;
  const latencies: number[] = [];
  const firstBytes: number[] = [];
  const selfOverheads: number[] = [];
  const queueTimes: number[] = [];
  const lags: number[] = [];
  const statuses: Record<string, number> = {};
  let completed = 0;
  let errors = 0;
  let firstError: string | undefined;
  let lastDone = 0;
  const inflight = new Set<Promise<void>>();

  const one = async (i: number, scheduled: number): Promise<void> => {
    const t0 = performance.now();
    lags.push(t0 - scheduled);
    try {
      const res = await pool.request({
        path: p.path,
        method: 'POST',
        headers: p.headers,
        body: p.bodies[i % p.bodies.length] as string,
      });
      const status = String(res.statusCode);
      statuses[status] = (statuses[status] ?? 0) + 1;
      let first: number | undefined;
      for await (const _chunk of res.body) first ??= performance.now();
      const end = performance.now();
      if (res.statusCode !== 200) {
        errors++;
        firstError ??= `HTTP ${res.statusCode}`;
        return;
      }
      completed++;
      latencies.push(end - t0);
      firstBytes.push((first ?? end) - t0);
      const own = res.headers['x-fairway-overhead-ms'];
      if (typeof own === 'string') selfOverheads.push(Number(own));
      const queued = res.headers['x-fairway-queue-ms'];
      if (typeof queued === 'string') queueTimes.push(Number(queued));
      lastDone = end;
    } catch (err) {
      errors++;
      firstError ??= (err as Error).message;
    }
  };

  const start = performance.now() + 20;
  let next = 0;
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = performance.now();
      while (next < total && start + next * gap <= now) {
        const pr = one(next, start + next * gap);
        inflight.add(pr);
        void pr.finally(() => inflight.delete(pr));
        next++;
      }
      if (next >= total) {
        resolve();
        return;
      }
      // setImmediate when the next send is due within a millisecond: timers cannot wait less.
      const wait = start + next * gap - performance.now();
      if (wait > 1) setTimeout(tick, wait - 0.5);
      else setImmediate(tick);
    };
    setTimeout(tick, 20);
  });
  const drain = new Promise<void>((r) => setTimeout(r, p.drainMs));
  await Promise.race([Promise.all(inflight), drain]);
  await pool.destroy();
  return {
    kind: 'report',
    sent: total,
    completed,
    errors: errors + inflight.size,
    statuses,
    ...(firstError !== undefined ? { firstError } : {}),
    latencies,
    firstBytes,
    selfOverheads,
    queueTimes,
    lags,
    elapsedMs: Math.max(0, lastDone - start),
  };
}

process.on('message', (msg: PhaseRequest | { kind: 'exit' }) => {
  if (msg.kind === 'exit') {
    process.exit(0);
  }
  runPhase(msg).then(
    (report) => process.send?.(report),
    (err: unknown) => process.send?.({ kind: 'failed', message: (err as Error).message }),
  );
});
process.send?.({ kind: 'ready' });
