// The load generator of overhead.bench.ts, run in its own process so that sending and timing
// requests never shares an event loop with the dispatcher or the engine under test. It takes one
// phase at a time from its parent over IPC and reports every latency back.
//
// Open loop: requests leave at fixed, precomputed send times whatever the responses do. The
// generator sleeps on a timer until the next send is due and then sends every request whose time
// has come — it never spins (`setImmediate`) waiting for a send time, so it does not take the CPU
// the dispatcher under test needs. Latency is measured from the *intended* send time, so a late
// send (the generator or the machine fell behind) is counted against the request, not hidden:
// coordinated omission stays visible. How late each send left is reported apart (`lags`).
//
// Closed loop (`concurrency`): that many clients each send a request as soon as their previous one
// is answered, for `durationMs`; what a process sustains flat out.
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

/** One phase of load, sent by the parent. */
export interface PhaseRequest {
  readonly kind: 'phase';
  readonly url: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  /**
   * Header sets used in turn instead of `headers` (request i sends `headerSets[i % length]`), e.g.
   * one per tenant's API key, so one client's requests spread over several tenants.
   * @default undefined (every request sends `headers`)
   */
  readonly headerSets?: readonly Readonly<Record<string, string>>[];
  /** Request bodies, used in turn (e.g. one per tenant). */
  readonly bodies: readonly string[];
  /** Requests per second (open loop); ignored with `concurrency`. */
  readonly rate: number;
  readonly durationMs: number;
  readonly stream: boolean;
  /** Most connections the pool opens. */
  readonly connections: number;
  /** How long to wait for stragglers after the last send, ms. */
  readonly drainMs: number;
  /**
   * Closed loop: this many clients, each sending its next request when the last one is answered.
   * @default undefined (open loop at `rate`)
   */
  readonly concurrency?: number;
}

/** What a phase measured; times in ms. */
export interface PhaseReport {
  readonly kind: 'report';
  readonly sent: number;
  readonly completed: number;
  readonly errors: number;
  readonly statuses: Readonly<Record<string, number>>;
  readonly firstError?: string;
  /**
   * Intended send time to last byte of the response, per completed request (closed loop: from the
   * actual send, which is also the intended one).
   */
  readonly latencies: number[];
  /** Intended send time to first body byte (streaming: the first SSE event), per completed request. */
  readonly firstBytes: number[];
  /** The dispatcher's own `x-fairway-overhead-ms` header, when present. */
  readonly selfOverheads: number[];
  /** The dispatcher's `x-fairway-queue-ms` header (time held waiting for capacity), when present. */
  readonly queueTimes: number[];
  /** How late each send left after its intended time (generator or machine lag). */
  readonly lags: number[];
  /** Wall time from the first send to the last response, ms. */
  readonly elapsedMs: number;
}

/** Collects one phase's measurements. */
class PhaseResults {
  readonly latencies: number[] = [];
  readonly firstBytes: number[] = [];
  readonly selfOverheads: number[] = [];
  readonly queueTimes: number[] = [];
  readonly lags: number[] = [];
  readonly statuses: Record<string, number> = {};
  completed = 0;
  errors = 0;
  firstError: string | undefined;
  lastDone = 0;

  report(sent: number, unanswered: number, start: number): PhaseReport {
    return {
      kind: 'report',
      sent,
      completed: this.completed,
      errors: this.errors + unanswered,
      statuses: this.statuses,
      ...(this.firstError !== undefined ? { firstError: this.firstError } : {}),
      latencies: this.latencies,
      firstBytes: this.firstBytes,
      selfOverheads: this.selfOverheads,
      queueTimes: this.queueTimes,
      lags: this.lags,
      elapsedMs: Math.max(0, this.lastDone - start),
    };
  }
}

/** Sends request `i` of a phase, intended to leave at `intended` (performance.now() ms), and records it. */
async function send(
  pool: Pool,
  p: PhaseRequest,
  out: PhaseResults,
  i: number,
  intended: number,
): Promise<void> {
  out.lags.push(performance.now() - intended);
  try {
    const res = await pool.request({
      path: p.path,
      method: 'POST',
      headers: p.headerSets?.[i % p.headerSets.length] ?? p.headers,
      body: p.bodies[i % p.bodies.length] as string,
    });
    const status = String(res.statusCode);
    out.statuses[status] = (out.statuses[status] ?? 0) + 1;
    let first: number | undefined;
    for await (const _chunk of res.body) first ??= performance.now();
    const end = performance.now();
    if (res.statusCode !== 200) {
      out.errors++;
      out.firstError ??= `HTTP ${res.statusCode}`;
      return;
    }
    out.completed++;
    out.latencies.push(end - intended);
    out.firstBytes.push((first ?? end) - intended);
    const own = res.headers['x-fairway-overhead-ms'];
    if (typeof own === 'string') out.selfOverheads.push(Number(own));
    const queued = res.headers['x-fairway-queue-ms'];
    if (typeof queued === 'string') out.queueTimes.push(Number(queued));
    out.lastDone = end;
  } catch (err) {
    out.errors++;
    out.firstError ??= (err as Error).message;
  }
}

function newPool(p: PhaseRequest): Pool {
  return new Pool(p.url, {
    connections: p.connections,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  });
}

/**
 * Open loop: request k is intended to leave at `start + k / rate`. The generator sleeps on a timer
 * until the next intended time and then sends every request that is due — several in one wake-up
 * when the timer fired late or the gap is below the timer's 1 ms resolution.
 */
async function openLoop(p: PhaseRequest): Promise<PhaseReport> {
  const pool = newPool(p);
  const out = new PhaseResults();
  const total = Math.max(1, Math.round((p.rate * p.durationMs) / 1000));
  const gap = 1000 / p.rate;
  const inflight = new Set<Promise<void>>();
  const start = performance.now() + 20;
  let next = 0;
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = performance.now();
      while (next < total && start + next * gap <= now) {
        const pr = send(pool, p, out, next, start + next * gap);
        inflight.add(pr);
        void pr.finally(() => inflight.delete(pr));
        next++;
      }
      if (next >= total) {
        resolve();
        return;
      }
      // Never spins: a wait under 1 ms sleeps 1 ms (the timer's resolution) and sends what is due then.
      setTimeout(tick, Math.max(1, start + next * gap - performance.now()));
    };
    setTimeout(tick, 20);
  });
  let drainTimer: NodeJS.Timeout | undefined;
  const drain = new Promise<void>((r) => {
    drainTimer = setTimeout(r, p.drainMs);
  });
  await Promise.race([Promise.all(inflight), drain]);
  clearTimeout(drainTimer);
  const report = out.report(total, inflight.size, start);
  await pool.destroy();
  return report;
}

/** Closed loop: `concurrency` clients, each sending again as soon as its last request was answered. */
async function closedLoop(p: PhaseRequest, concurrency: number): Promise<PhaseReport> {
  const pool = newPool(p);
  const out = new PhaseResults();
  const start = performance.now();
  const until = start + p.durationMs;
  let sent = 0;
  const client = async (): Promise<void> => {
    while (performance.now() < until) {
      const i = sent++;
      await send(pool, p, out, i, performance.now());
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  const report = out.report(sent, 0, start);
  await pool.destroy();
  return report;
}

function runPhase(p: PhaseRequest): Promise<PhaseReport> {
  return p.concurrency === undefined ? openLoop(p) : closedLoop(p, p.concurrency);
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
