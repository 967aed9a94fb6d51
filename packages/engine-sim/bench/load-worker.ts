// A load generator process for engine-sim.bench.ts: keeps `streams` chat streams open against the
// given engines (closed loop: a finished stream is replaced at once), reading them through
// VllmClient, and reports received tokens to its parent every second.
import type { EngineStream } from '@fairway/engine';
import { VllmClient } from '@fairway/engine';

interface WorkerConfig {
  readonly urls: readonly string[];
  readonly streams: number;
  readonly outputTokens: number;
  readonly promptChars: number;
}

/** What the worker reports every second. */
export interface WorkerReport {
  /** Wall-clock time of the report, ms since the Unix epoch. */
  readonly atMs: number;
  readonly tokens: number;
  readonly open: number;
  readonly completed: number;
  readonly errors: number;
  readonly firstError?: string;
}

const config = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
// A saturated engine accepts connections late; a stream is what is measured, not the handshake.
const clients = config.urls.map(
  (url) => new VllmClient({ url, connections: config.streams + 16, connectTimeoutMs: 15_000 }),
);
const live = new Set<EngineStream>();
let finishedTokens = 0;
let completed = 0;
let errors = 0;
let firstError: string | undefined;
let stopping = false;
/** Streams requested and not yet finished (including those still waiting for headers). */
let active = 0;
const body = {
  messages: [{ role: 'user', content: 'x'.repeat(config.promptChars) }],
  max_tokens: config.outputTokens,
  ignore_eos: true,
};

async function loop(i: number): Promise<void> {
  const client = clients[i % clients.length]!;
  while (!stopping) {
    let s: EngineStream | undefined;
    active++;
    try {
      s = await client.stream('chat', body);
      live.add(s);
      for await (const _chunk of s);
      completed++;
    } catch (err) {
      if (!stopping) {
        errors++;
        firstError ??= (err as Error).message;
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      active--;
      if (s) {
        live.delete(s);
        finishedTokens += s.completionTokens;
      }
    }
  }
}

function report(): WorkerReport {
  let tokens = finishedTokens;
  for (const s of live) tokens += s.completionTokens;
  return {
    atMs: performance.timeOrigin + performance.now(),
    tokens,
    open: active,
    completed,
    errors,
    ...(firstError ? { firstError } : {}),
  };
}

const timer = setInterval(() => {
  if (process.connected) process.send?.(report());
}, 1000);
// The parent went away: stop rather than load engines nobody measures.
process.on('disconnect', () => process.exit(0));
process.on('message', (msg) => {
  if (msg !== 'stop') return;
  stopping = true;
  clearInterval(timer);
  process.send?.(report());
  for (const s of live) s.abort();
  void Promise.all(clients.map((c) => c.close())).finally(() => process.exit(0));
});
// Open the streams over the first second rather than in one burst of connects.
for (let i = 0; i < config.streams; i++) setTimeout(() => void loop(i), (i * 1000) / config.streams);
