import { type Logger, LogThrottle } from '@fairway/core';
import { closeRedis, type InternalCompletions } from '@fairway/dispatcher';
import { type Job, Queue, Worker } from 'bullmq';
import { Cluster, type Redis } from 'ioredis';
import { BatchInputError, BatchInputParser } from './batch-input.ts';
import type { BatchKeys } from './batch-keys.ts';
import type { BatchLimits } from './batch-limits.ts';
import type { BatchErrorEntry } from './batch-objects.ts';
import type { BatchStore, LineCounter } from './batch-store.ts';

/** Options of the batch runner. */
export interface BatchRunnerOptions {
  /**
   * Lines this dispatcher runs at once (each waits in the fair queue like a client's request). A
   * running line is not preempted, so keep lines in flight below the free sequence slots of the
   * fleet: an interactive request then finds a slot at once. @default 8
   */
  readonly concurrency?: number;
  /**
   * How long a worker's hold on a line lasts without renewal, ms: a line held by a dispatcher that
   * died runs again elsewhere after about this long (BullMQ's `lockDuration`). @default 30_000
   */
  readonly lockMs?: number;
  /** Wait before a line refused for capacity (429, 503, 504) is tried again, ms. @default 1000 */
  readonly retryDelayMs?: number;
}

/** The data of a BullMQ job: which batch, and for a line, which one. */
interface JobData {
  readonly batch: string;
  readonly index?: number;
}

/** A line's outcome as recorded: `o` goes to the output file, `e` to the error file, `s` nowhere. */
type Outcome = `${'o' | 'e' | 's'}${string}`;

/** Statuses a client's request gets when there is no room now; the line is tried again later. */
const RETRY_LATER: ReadonlySet<number> = new Set([408, 429, 502, 503, 504]);
/** BullMQ's largest priority: lines past it share it. */
const MAX_PRIORITY = 2_097_151;
/** The BullMQ queue every dispatcher of the fleet takes batch jobs from. */
export const BATCH_QUEUE = 'batch';

/**
 * A connection of BullMQ's own to what `redis` connects to: its blocking reads need connections
 * that retry forever and wait as long as they block (no command timeout: BullMQ bounds its own
 * waits). A Cluster takes per-node options under `redisOptions` (its `duplicate` merges options
 * shallowly, hence the copy), and BullMQ's cluster connections are not auto-pipelined, as its
 * connections to one Redis are not.
 */
function bullConnection(redis: Redis | Cluster): Redis | Cluster {
  if (!(redis instanceof Cluster))
    return redis.duplicate({ maxRetriesPerRequest: null, commandTimeout: undefined });
  return redis.duplicate([], {
    enableAutoPipelining: false,
    redisOptions: { ...redis.options.redisOptions, maxRetriesPerRequest: null, commandTimeout: undefined },
  });
}

/**
 * Runs batches on BullMQ. A batch becomes a `start` job (read and check the input file, store its
 * lines, queue one `line` job per line), its `line` jobs (each line sent through the dispatcher's
 * public route, so it is admitted, queued fairly and dispatched like a client's request, in the
 * batch SLO class and as the batch's tenant) and one `finalize` job (write the output and error
 * files). Any dispatcher takes any job; a job held by a dispatcher that died is taken again by
 * BullMQ's stalled-job check. A line's outcome is recorded once (by index, in one Lua call with
 * its count), so a line run twice — sent to the engine again after its first run's dispatcher
 * died before recording it — appears once in the output: engines see a line at least once,
 * output files hold it exactly once.
 */
export class BatchRunner {
  readonly #store: BatchStore;
  readonly #internal: InternalCompletions;
  readonly #limits: BatchLimits;
  readonly #logger: Logger;
  readonly #newId: () => string;
  readonly #queue: Queue<JobData>;
  readonly #worker: Worker<JobData>;
  readonly #connections: (Redis | Cluster)[];
  readonly #retryDelayMs: number;

  constructor(deps: {
    /** One Redis or a Redis Cluster client: BullMQ gets duplicates of it. */
    redis: Redis | Cluster;
    keys: BatchKeys;
    store: BatchStore;
    internal: InternalCompletions;
    limits: BatchLimits;
    logger: Logger;
    newId: () => string;
    options?: BatchRunnerOptions | undefined;
  }) {
    const o = deps.options ?? {};
    this.#store = deps.store;
    this.#internal = deps.internal;
    this.#limits = deps.limits;
    this.#logger = deps.logger;
    this.#newId = deps.newId;
    this.#retryDelayMs = o.retryDelayMs ?? 1000;
    const queueConn = bullConnection(deps.redis);
    const workerConn = bullConnection(deps.redis);
    this.#connections = [queueConn, workerConn];
    const prefix = deps.keys.bullPrefix;
    this.#queue = new Queue<JobData>(BATCH_QUEUE, { connection: queueConn, prefix });
    const lockMs = o.lockMs ?? 30_000;
    this.#worker = new Worker<JobData>(BATCH_QUEUE, (job) => this.#process(job), {
      connection: workerConn,
      prefix,
      autorun: false,
      concurrency: o.concurrency ?? 8,
      lockDuration: lockMs,
      stalledInterval: lockMs,
      // A line may be taken again after many dispatcher deaths: its outcome is recorded once anyway.
      maxStalledCount: 1000,
      removeOnComplete: { count: 0 },
      removeOnFail: { count: 1000 },
    });
    // While Redis is away each connection fails several times a second: one line per interval.
    const throttle = new LogThrottle();
    this.#worker.on('error', (err) =>
      throttle.warn(this.#logger, 'worker', { err: err.message }, 'batch: worker error'),
    );
    this.#queue.on('error', (err) =>
      throttle.warn(this.#logger, 'queue', { err: err.message }, 'batch: queue error'),
    );
    this.#worker.on('failed', (job, err) => {
      // BullMQ reports every failed attempt; only the last one is for good.
      if (job !== undefined && job.attemptsMade < (job.opts.attempts ?? 1)) return;
      this.#logger.error({ job: job?.id, err: err.message }, 'batch: job failed for good');
    });
  }

  /** Starts taking jobs. */
  start(): void {
    void this.#worker
      .run()
      .catch((err: unknown) => this.#logger.error({ err: (err as Error).message }, 'batch: worker stopped'));
  }

  /** Stops taking jobs, lets the lines in hand finish, closes its connections. */
  async close(): Promise<void> {
    await this.#worker.close();
    await this.#queue.close();
    await Promise.all(this.#connections.map(closeRedis));
  }

  /** Queues the start of a created batch. */
  async enqueueStart(batch: string): Promise<void> {
    await this.#queue.add('start', { batch }, { jobId: `start-${batch}`, ...this.#retrying() });
  }

  #retrying() {
    return {
      attempts: 1_000_000,
      backoff: { type: 'fixed' as const, delay: this.#retryDelayMs },
    };
  }

  #process(job: Job<JobData>): Promise<void> {
    switch (job.name) {
      case 'start':
        return this.#startBatch(job.data.batch);
      case 'line':
        return this.#runLine(job.data.batch, job.data.index ?? 0);
      case 'finalize':
        return this.#finalize(job.data.batch);
      default:
        this.#logger.warn({ job: job.id, name: job.name }, 'batch: unknown job');
        return Promise.resolve();
    }
  }

  async #fail(batch: string, errors: BatchErrorEntry[]): Promise<void> {
    await this.#store.setBatchFields(batch, { errors: JSON.stringify(errors) });
    await this.#store.moveStatus(batch, 'failed', 'failed_at', ['validating']);
  }

  /**
   * Reads and checks the input file, stores its lines, moves the batch in progress, then queues
   * its lines. A re-run (its dispatcher died) queues them again: lines already recorded are skipped.
   */
  async #startBatch(batch: string): Promise<void> {
    const f = await this.#store.batchFields(batch);
    if (f === undefined) return;
    if (f.status === 'validating' && !(await this.#validate(batch, f))) {
      // Cancelled while validating: nothing was queued, so nothing else will finish it.
      await this.#store.moveStatus(batch, 'cancelled', 'cancelled_at', ['cancelling']);
      return;
    }
    const now = await this.#store.batchFields(batch);
    const total = Number.parseInt(now?.total ?? '0', 10);
    if (now?.status === 'cancelling' && total === 0) {
      await this.#store.moveStatus(batch, 'cancelled', 'cancelled_at', ['cancelling']);
      return;
    }
    // Line k of every batch before line k+1 of any: a new batch is not stuck behind a long one.
    for (let from = 0; from < total; from += 1000) {
      await this.#queue.addBulk(
        Array.from({ length: Math.min(1000, total - from) }, (_, k) => ({
          name: 'line',
          data: { batch, index: from + k },
          opts: {
            jobId: `${batch}-${from + k}`,
            priority: Math.min(from + k + 1, MAX_PRIORITY),
            ...this.#retrying(),
          },
        })),
      );
    }
  }

  /**
   * Checks a validating batch's input file and stores its lines, reading the file piece by piece
   * (a dispatcher holds about a thousand lines of it at a time); false if the batch failed (or
   * moved on).
   */
  async #validate(batch: string, f: Record<string, string>): Promise<boolean> {
    const chunks = await this.#store.fileChunks(f.tenant ?? '', f.input_file_id ?? '');
    if (chunks === undefined) {
      await this.#fail(batch, [
        {
          code: 'invalid_file',
          message: `input file ${f.input_file_id} was deleted`,
          param: 'input_file_id',
          line: null,
        },
      ]);
      return false;
    }
    let pending: string[] = [];
    let stored = 0;
    let mismatch: BatchErrorEntry | undefined;
    const parser = new BatchInputParser(this.#limits, (l) => {
      if (l.url !== f.endpoint) {
        const n = stored + pending.length + 1;
        mismatch = {
          code: 'mismatched_endpoint',
          message: `line ${n}: url ${l.url} differs from the batch's endpoint ${f.endpoint}`,
          param: 'url',
          line: n,
        };
        throw new BatchInputError(n, mismatch.message);
      }
      pending.push(JSON.stringify(l));
    });
    const flush = async () => {
      await this.#store.putLineRange(batch, stored, pending);
      stored += pending.length;
      pending = [];
    };
    try {
      for await (const chunk of chunks) {
        parser.push(chunk);
        if (pending.length >= 1000) await flush();
      }
      parser.end();
    } catch (err) {
      if (!(err instanceof BatchInputError)) throw err;
      await this.#store.dropWorkingSet(batch);
      await this.#fail(batch, [
        mismatch ?? { code: 'invalid_request', message: err.message, param: 'input_file_id', line: err.line },
      ]);
      return false;
    }
    await flush();
    await this.#store.setLineTotal(batch, stored);
    // Lines are queued only once the batch is in progress, so no line job sees it validating.
    return this.#store.moveStatus(batch, 'in_progress', 'in_progress_at', ['validating']);
  }

  async #record(batch: string, index: number, outcome: Outcome, counter: LineCounter): Promise<void> {
    const left = await this.#store.recordLine(batch, index, outcome, counter);
    if (left === 0) await this.#queueFinalize(batch);
  }

  async #queueFinalize(batch: string): Promise<void> {
    await this.#queue.add('finalize', { batch }, { jobId: `finalize-${batch}`, ...this.#retrying() });
  }

  /** Runs one line through the dispatcher and records its outcome (unless recorded already). */
  async #runLine(batch: string, index: number): Promise<void> {
    const f = await this.#store.batchFields(batch);
    if (f === undefined || (f.status !== 'in_progress' && f.status !== 'cancelling')) return;
    if (await this.#store.recorded(batch, index)) {
      // A run of a line whose dispatcher died after recording it, perhaps before queueing the
      // finalize job: queue it again if every line is settled (finalizing twice is harmless).
      if (f.total !== undefined && f.settled === f.total) await this.#queueFinalize(batch);
      return;
    }
    const src = await this.#store.line(batch, index);
    if (src === undefined) return;
    const line = JSON.parse(src) as { custom_id: string; url: string; body: unknown };
    if (f.status === 'cancelling') {
      await this.#record(batch, index, 's', 'skipped');
      return;
    }
    const expiresAtS = Number.parseInt(f.expires_at ?? '0', 10);
    const expired = (): Outcome =>
      `e${JSON.stringify({
        id: `batch_req_${this.#newId()}`,
        custom_id: line.custom_id,
        response: null,
        error: {
          code: 'batch_expired',
          message: 'This request could not be executed before the completion window expired.',
        },
      })}`;
    if (this.#store.nowS() >= expiresAtS) {
      await this.#record(batch, index, expired(), 'expired');
      return;
    }
    const answer = await this.#internal.complete(f.key_id ?? '', {
      url: line.url,
      body: line.body,
      sloClass: f.slo_class ?? '',
    });
    if (RETRY_LATER.has(answer.status)) {
      if (this.#store.nowS() >= expiresAtS) {
        await this.#record(batch, index, expired(), 'expired');
        return;
      }
      // No room now (queue timeout, rate limit, no replica): BullMQ tries it again after a delay.
      throw new Error(`line ${index} answered ${answer.status}; trying again`);
    }
    let body: unknown;
    try {
      body = JSON.parse(answer.body);
    } catch {
      body = answer.body;
    }
    const ok = answer.status >= 200 && answer.status < 300;
    const out = JSON.stringify({
      id: `batch_req_${this.#newId()}`,
      custom_id: line.custom_id,
      response: { status_code: answer.status, request_id: answer.requestId, body },
      error: null,
    });
    await this.#record(batch, index, ok ? `o${out}` : `e${out}`, ok ? 'completed' : 'failed');
  }

  /** Writes the output and error files (in line order) and moves the batch to its final status. */
  async #finalize(batch: string): Promise<void> {
    const f = await this.#store.batchFields(batch);
    if (f === undefined) return;
    const cancelling = f.status === 'cancelling';
    if (f.status === 'in_progress')
      await this.#store.moveStatus(batch, 'finalizing', 'finalizing_at', ['in_progress']);
    else if (f.status !== 'finalizing' && !cancelling) return;
    const tenant = f.tenant ?? '';
    const results = await this.#store.results(batch);
    const output: string[] = [];
    const errors: string[] = [];
    for (const [, outcome] of [...results].sort((a, b) => a[0] - b[0])) {
      if (outcome.startsWith('o')) output.push(outcome.slice(1));
      else if (outcome.startsWith('e')) errors.push(outcome.slice(1));
    }
    const fields: Record<string, string> = {};
    const outputId = await this.#writeFile(tenant, batch, 'output', output);
    if (outputId !== undefined) fields.output_file_id = outputId;
    const errorId = await this.#writeFile(tenant, batch, 'errors', errors);
    if (errorId !== undefined) fields.error_file_id = errorId;
    if (Object.keys(fields).length > 0) await this.#store.setBatchFields(batch, fields);
    if (cancelling) await this.#store.moveStatus(batch, 'cancelled', 'cancelled_at', ['cancelling']);
    else if (Number.parseInt(f.expired ?? '0', 10) > 0)
      await this.#store.moveStatus(batch, 'expired', 'expired_at', ['finalizing']);
    else await this.#store.moveStatus(batch, 'completed', 'completed_at', ['finalizing']);
    await this.#store.dropWorkingSet(batch);
    this.#logger.info({ batch, completed: output.length, errors: errors.length }, 'batch: finished');
  }

  /** Stores one of a batch's result files (JSONL); its id follows from the batch, so a re-run rewrites it. */
  async #writeFile(
    tenant: string,
    batch: string,
    kind: 'output' | 'errors',
    lines: readonly string[],
  ): Promise<string | undefined> {
    if (lines.length === 0) return undefined;
    const id = `file-${batch.replace(/^batch_/, '')}-${kind}`;
    await this.#store.putFile(tenant, {
      id,
      filename: `${batch}_${kind}.jsonl`,
      purpose: 'batch_output',
      content: `${lines.join('\n')}\n`,
    });
    return id;
  }
}
