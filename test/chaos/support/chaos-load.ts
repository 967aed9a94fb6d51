import { LOAD_TENANTS, MODEL } from './chaos-fleet.ts';

/**
 * How one request ended, as its client saw it:
 * - `completed`: 200 and a stream that ended with `data: [DONE]` (no error event);
 * - `http-error`: an HTTP error status, before any byte of a stream (a 429 of the capped tenant
 *   is its limit working, counted apart);
 * - `stream-error-event`: 200, then an SSE event carrying `error` (the documented mid-stream end);
 * - `stream-broken`: 200, then the connection closed or reset without `[DONE]` or an error event;
 * - `lost-no-response`: the connection was reset or closed before any response (no status);
 * - `lost-timeout`: no end before the client timeout (a hanging request, with or without bytes).
 */
export type Outcome =
  | 'completed'
  | 'http-error'
  | 'stream-error-event'
  | 'stream-broken'
  | 'lost-no-response'
  | 'lost-timeout';

/** What one request did. Times are ms since the experiment's origin. */
export interface RequestRecord {
  readonly kind: 'load' | 'probe';
  /** The `x-request-id` sent: the dispatchers' logs name the request by it. */
  readonly requestId: string;
  readonly tenant: string;
  /** Index of the dispatcher that answered (or was tried last). */
  readonly dispatcher: number;
  /** Dispatchers that refused the connection first (the load balancer moved on). */
  readonly refused: number;
  readonly sentMs: number;
  readonly headersMs: number | undefined;
  readonly endMs: number;
  readonly outcome: Outcome;
  readonly status: number | undefined;
  /** The OpenAI error code of an error body or event, or the network error code. */
  readonly code: string | undefined;
  /** The error message of an error body or event (for `--records` and test failures). */
  readonly message?: string;
}

/** Options of {@link runLoad}. */
export interface LoadOptions {
  /** Dispatcher base URLs, spread round-robin. */
  readonly urls: () => readonly string[];
  /** Streamed requests per second. */
  readonly rate: number;
  /** How long requests are started, ms. */
  readonly durationMs: number;
  /** Output tokens of request `i` (engine-sim emits exactly `fairway_output_tokens`). */
  readonly tokens: (i: number) => number;
  /** A request not ended after this long is lost, ms. */
  readonly clientTimeoutMs: number;
  /**
   * The capped tenant's probes: a burst of `rpm + burstExtra` first, then one per `intervalMs`.
   */
  readonly probe: {
    readonly tenant: { readonly id: string; readonly key: string };
    readonly rpm: number;
    readonly burstExtra: number;
    readonly intervalMs: number;
  };
  /**
   * A burst of `count` long requests at `atMs`, just before the fault: more than the free engine
   * slots, so the gateway holds queued requests when the fault strikes.
   */
  readonly burst: { readonly atMs: number; readonly count: number; readonly tokens: number };
  /** performance.now() of time 0. */
  readonly origin: number;
}

const PROMPT = 'Tell me about fault tolerance in distributed gateways.';

/**
 * Open-loop load: streamed chat completions (`stream_options.include_usage`) started at a fixed
 * rate for a fixed time, tenants and dispatchers round-robin, a burst that queues just before the
 * fault, and the capped tenant's probes:
 * a burst that fills its RPM window, then one small request per interval, so whatever it is
 * admitted beyond the limit shows. Resolves with every request's record once all have ended
 * (each is bounded by the client timeout).
 */
export async function runLoad(o: LoadOptions): Promise<RequestRecord[]> {
  const pending: Promise<RequestRecord>[] = [];
  const now = (): number => performance.now() - o.origin;
  // Each kind spreads over the dispatchers on its own, so the probes do not skew the load's spread.
  const rr = { load: 0, probe: 0 };
  // Unique per run, so a lost request can be found in the dispatchers' logs of that run.
  const run = Math.round(o.origin).toString(36);
  const send = (kind: 'load' | 'probe', tenant: { id: string; key: string }, body: object): void => {
    pending.push(sendOne(kind, `chaos-${run}-${kind}-${rr[kind]}`, tenant, body, rr[kind]++, o, now));
  };
  for (let i = 0; i < o.probe.rpm + o.probe.burstExtra; i++) send('probe', o.probe.tenant, probeBody());
  const count = Math.round((o.rate * o.durationMs) / 1000);
  const interval = 1000 / o.rate;
  let nextProbe = o.probe.intervalMs;
  let burstSent = false;
  for (let i = 0; i < count; i++) {
    const at = i * interval;
    const wait = at - now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    while (nextProbe <= at) {
      send('probe', o.probe.tenant, probeBody());
      nextProbe += o.probe.intervalMs;
    }
    if (!burstSent && at >= o.burst.atMs) {
      burstSent = true;
      for (let b = 0; b < o.burst.count; b++)
        send('load', LOAD_TENANTS[b % LOAD_TENANTS.length]!, streamed(o.burst.tokens));
    }
    send('load', LOAD_TENANTS[i % LOAD_TENANTS.length]!, streamed(o.tokens(i)));
  }
  return Promise.all(pending);
}

function streamed(tokens: number): object {
  return {
    model: MODEL,
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: tokens,
    fairway_output_tokens: tokens,
    stream: true,
    stream_options: { include_usage: true },
  };
}

function probeBody(): object {
  return {
    model: MODEL,
    messages: [{ role: 'user', content: 'probe' }],
    max_tokens: 1,
    fairway_output_tokens: 1,
  };
}

function networkCode(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown } }).cause;
  if (typeof cause?.code === 'string') return cause.code;
  return err instanceof Error ? err.name : 'unknown';
}

/**
 * One request, through dispatcher `rr mod n`; a refused connection moves to the next dispatcher
 * (nothing was sent, so a load balancer retries it), anything else is recorded as it happened.
 */
async function sendOne(
  kind: 'load' | 'probe',
  requestId: string,
  tenant: { id: string; key: string },
  body: object,
  rr: number,
  o: LoadOptions,
  now: () => number,
): Promise<RequestRecord> {
  const sentMs = now();
  const signal = AbortSignal.timeout(o.clientTimeoutMs);
  const urls = o.urls();
  let refused = 0;
  let dispatcher = rr % urls.length;
  let headersMs: number | undefined;
  const record = (outcome: Outcome, status?: number, code?: string, message?: string): RequestRecord => ({
    kind,
    requestId,
    tenant: tenant.id,
    dispatcher,
    refused,
    sentMs,
    headersMs,
    endMs: now(),
    outcome,
    status,
    code,
    ...(message === undefined ? {} : { message }),
  });
  for (;;) {
    let res: Response;
    try {
      res = await fetch(`${urls[dispatcher]}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${tenant.key}`,
          'content-type': 'application/json',
          'x-request-id': requestId,
        },
        body: JSON.stringify(body),
        signal,
      });
    } catch (err) {
      if (signal.aborted) return record('lost-timeout', undefined, 'client_timeout');
      const code = networkCode(err);
      if (code === 'ECONNREFUSED' && refused < urls.length - 1) {
        refused++;
        dispatcher = (dispatcher + 1) % urls.length;
        continue;
      }
      return record('lost-no-response', undefined, code);
    }
    headersMs = now();
    try {
      if (res.status !== 200) {
        const text = await res.text();
        const error = errorOf(text);
        return record('http-error', res.status, error?.code, error?.message);
      }
      return await readStream(res, record);
    } catch (err) {
      if (signal.aborted) return record('lost-timeout', res.status, 'client_timeout');
      return record('stream-broken', res.status, networkCode(err));
    }
  }
}

/** The code and message of an OpenAI-style error body or event, if it is one. */
function errorOf(text: string): { code?: string; message?: string } | undefined {
  try {
    const error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
    if (typeof error !== 'object' || error === null) return undefined;
    return {
      ...(typeof error.code === 'string' ? { code: error.code } : {}),
      ...(typeof error.message === 'string' ? { message: error.message.slice(0, 300) } : {}),
    };
  } catch {
    return undefined;
  }
}

/** Reads a 200 answer: SSE events until `[DONE]`, an error event or the end of the body. */
async function readStream(
  res: Response,
  record: (outcome: Outcome, status?: number, code?: string, message?: string) => RequestRecord,
): Promise<RequestRecord> {
  if (!(res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    await res.arrayBuffer();
    return record('completed', 200);
  }
  const decoder = new TextDecoder();
  let buffer = '';
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return record('stream-broken', 200, 'no_done');
    buffer += decoder.decode(value, { stream: true });
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') {
          await reader.cancel().catch(() => undefined);
          return record('completed', 200);
        }
        const error = data.includes('"error"') ? errorOf(data) : undefined;
        if (error !== undefined) {
          await reader.cancel().catch(() => undefined);
          return record('stream-error-event', 200, error.code, error.message);
        }
      }
    }
  }
}
