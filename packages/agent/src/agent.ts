import { randomUUID } from 'node:crypto';
import type { Bus, CommandReply, NodeCommand, Registration, ReplicaState, Unsubscribe } from '@fairway/bus';
import { type Clock, type Logger, parseWith, silentLogger } from '@fairway/core';
import {
  type Engine,
  type HistogramTotals,
  histogramOf,
  VLLM_METRIC,
  type VllmMetrics,
} from '@fairway/engine';
import { z } from 'zod';
import { isWildcardHost } from './advertise-url.ts';
import { argsWithModel, type EngineProcess, type EngineProcessEvent } from './engine-process.ts';
import { AgentError, AgentErrorCode } from './errors.ts';
import { isWildcardKvEventsEndpoint, KV_EVENTS_ENDPOINT, KvEventRelay } from './kv-event-relay.ts';

const optionsSchema = z
  .object({
    replicaId: z.string().min(1, 'must not be empty'),
    pool: z.string().min(1, 'must not be empty'),
    model: z.string().min(1, 'must not be empty'),
    url: z.url({ message: 'must be an http(s) URL' }).optional(),
    gpu: z.string().min(1).optional(),
    tp: z.number().int().positive().default(1),
    maxNumSeqs: z.number().int().positive().default(256),
    kvCapacityTokens: z.number().int().positive().optional(),
    heartbeatIntervalMs: z.number().min(10, 'must be at least 10 ms').max(60_000).default(200),
    failuresBeforeGone: z.number().int().positive().default(2),
    evictTimeoutMs: z.number().positive().default(5000),
    evictPollMs: z.number().positive().default(25),
    epoch: z.string().min(1).optional(),
    kvEventsEndpoint: z
      .string()
      .regex(KV_EVENTS_ENDPOINT, 'must be a ZMQ endpoint such as tcp://127.0.0.1:5557 or ipc:///path')
      .optional(),
    kvEventsTopic: z.string().default(''),
    kvEventsBind: z.boolean().default(false),
  })
  .superRefine((o, ctx) => {
    if (o.kvEventsEndpoint !== undefined && !o.kvEventsBind && isWildcardKvEventsEndpoint(o.kvEventsEndpoint))
      ctx.addIssue({
        code: 'custom',
        path: ['kvEventsEndpoint'],
        message:
          "names a wildcard address the agent cannot connect to: give the engine host's address, e.g. tcp://127.0.0.1:5557 (or bind it: kvEventsBind)",
      });
  });

/** Options of {@link NodeAgent}. */
export interface NodeAgentOptions {
  readonly bus: Bus;
  /** Client of the engine beside this agent. */
  readonly engine: Engine;
  /**
   * Timestamps heartbeats and times the eviction and drain deadlines; the agent runs in real time,
   * so pass `systemClock` outside tests.
   */
  readonly clock: Clock;
  readonly logger?: Logger;
  /** The replica's id, unique in the fleet. */
  readonly replicaId: string;
  /** Pool the replica serves in. */
  readonly pool: string;
  /** Model the engine serves (its served model name). */
  readonly model: string;
  /**
   * URL dispatchers use to reach the engine, from other hosts too (see `chooseAdvertiseUrl`); a
   * wildcard address (`0.0.0.0`, `::`) is refused. @default the engine client's URL
   */
  readonly url?: string;
  /** GPU type, e.g. `A100-80GB`. */
  readonly gpu?: string;
  /** Tensor-parallel degree. @default 1 */
  readonly tp?: number;
  /** The engine's `--max-num-seqs` (vLLM does not export it). @default 256 */
  readonly maxNumSeqs?: number;
  /** KV capacity in tokens, used only when the engine exports no `vllm:cache_config_info`. */
  readonly kvCapacityTokens?: number;
  /** Spacing of heartbeats, ms (100–250 recommended; the registry's staleness limit is 1 s). @default 200 */
  readonly heartbeatIntervalMs?: number;
  /** Consecutive failed metric scrapes after which the replica announces itself gone. @default 2 */
  readonly failuresBeforeGone?: number;
  /** How long an eviction may take to show in the engine's request counts, ms. @default 5000 */
  readonly evictTimeoutMs?: number;
  /** Spacing of metric polls while confirming an eviction, ms. @default 25 */
  readonly evictPollMs?: number;
  /** Identifies this agent run; a new one per start tells a restarted agent apart. @default a random UUID */
  readonly epoch?: string;
  /** The engine process, when this agent runs it: enables crash handling and full model swaps. */
  readonly process?: EngineProcess;
  /**
   * The engine's KV cache events endpoint (vLLM's `--kv-events-config` `endpoint`, as this host
   * reaches it, e.g. `tcp://127.0.0.1:5557`): the agent relays the events onto the bus as
   * `kvEvents` messages (see {@link KvEventRelay}). @default not relayed
   */
  readonly kvEventsEndpoint?: string;
  /** The engine's KV events `topic`. @default '' */
  readonly kvEventsTopic?: string;
  /**
   * Bind `kvEventsEndpoint` instead of connecting to it: for an engine whose endpoint has no
   * wildcard, which vLLM connects its publisher to. @default false
   */
  readonly kvEventsBind?: boolean;
  /** Arguments that make the engine serve `model` (full swap). @default {@link argsWithModel} on the process's arguments */
  readonly swapArgs?: (model: string, extra: readonly string[], current: readonly string[]) => string[];
}

/** Options of {@link NodeAgent.stop}. */
export interface AgentStopOptions {
  /**
   * Drain first and wait up to this long for requests in flight to finish, ms; 0 stops at once.
   * @default 0
   */
  readonly drainTimeoutMs?: number;
  /** Stop the engine process too (only when this agent runs it). @default true */
  readonly stopEngine?: boolean;
}

/** A histogram's totals from a scrape (see `histogramOf`), if usable on the wire. */
function histogram(m: VllmMetrics | undefined, ...names: string[]): HistogramTotals | undefined {
  const h = m === undefined ? undefined : histogramOf(m, ...names);
  return h !== undefined && Number.isFinite(h.sum) && h.sum >= 0 && h.count >= 0 ? h : undefined;
}

/**
 * The node agent beside one engine: registers the replica on the bus, heartbeats its load and
 * capacity scraped from the engine's `/metrics`, and serves commands (drain, resume, evict,
 * sleep/wake, LoRA load/unload, model swap). When the engine stops answering it announces the
 * replica `gone` so dispatchers stop placing work there, and registers again once it is back.
 *
 * Eviction: vLLM aborts a request only when its HTTP connection closes, and only the dispatcher
 * holding that connection can close it. So the agent publishes an `evict` event naming the
 * requests, dispatchers close those connections, and the agent confirms by watching the engine's
 * in-flight count (running + waiting) drop by that many.
 */
export class NodeAgent {
  readonly #bus: Bus;
  readonly #engine: Engine;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #opts: z.output<typeof optionsSchema>;
  readonly #process: EngineProcess | undefined;
  readonly #swapArgs: (model: string, extra: readonly string[], current: readonly string[]) => string[];
  readonly #epoch: string;
  readonly #unsubs: Unsubscribe[] = [];
  readonly #relay: KvEventRelay | undefined;
  #model: string;
  #pool: string;
  #registration: Registration | undefined;
  #adapters: string[] = [];
  #draining = false;
  #sleeping = false;
  #engineUp = false;
  /** Set while a model swap restarts the engine, so the heartbeat loop does not re-register the old one. */
  #swapping = false;
  #running = false;
  #failures = 0;
  #announceFailures = 0;
  #seq = 0;
  #lastMetrics: VllmMetrics | undefined;
  #timer: NodeJS.Timeout | undefined;
  #tick: Promise<void> = Promise.resolve();
  #commands: Promise<unknown> = Promise.resolve();

  constructor(options: NodeAgentOptions) {
    this.#opts = parseWith(optionsSchema, options, 'NodeAgent options');
    const advertised = this.#opts.url ?? options.engine.url;
    if (URL.canParse(advertised) && isWildcardHost(new URL(advertised).hostname))
      throw new AgentError(
        AgentErrorCode.ADVERTISE_URL_INVALID,
        `${advertised} names a wildcard address no dispatcher can connect to; give the agent the URL to advertise (url)`,
        { replicaId: this.#opts.replicaId },
      );
    this.#bus = options.bus;
    this.#engine = options.engine;
    this.#clock = options.clock;
    this.#logger = (options.logger ?? silentLogger).child({ replicaId: this.#opts.replicaId });
    this.#process = options.process;
    this.#swapArgs = options.swapArgs ?? ((model, extra, current) => argsWithModel(current, model, extra));
    this.#epoch = this.#opts.epoch ?? randomUUID();
    this.#model = this.#opts.model;
    this.#pool = this.#opts.pool;
    const endpoint = this.#opts.kvEventsEndpoint;
    this.#relay =
      endpoint === undefined
        ? undefined
        : new KvEventRelay({
            bus: this.#bus,
            clock: this.#clock,
            logger: this.#logger,
            replicaId: this.#opts.replicaId,
            epoch: this.#epoch,
            endpoint,
            topic: this.#opts.kvEventsTopic,
            bind: this.#opts.kvEventsBind,
          });
  }

  /** The replica's id. */
  get replicaId(): string {
    return this.#opts.replicaId;
  }

  /** This agent run's epoch. */
  get epoch(): string {
    return this.#epoch;
  }

  /** The state heartbeats report now (`gone` while the engine is down). */
  get state(): ReplicaState {
    return this.#engineUp ? this.#reportedState() : 'gone';
  }

  /** The model the engine serves now. */
  get model(): string {
    return this.#model;
  }

  /**
   * Starts the engine process (when this agent runs it), registers the replica and starts
   * heartbeating and serving commands. If the engine does not answer yet, the agent keeps trying
   * and registers once it does.
   */
  async start(): Promise<void> {
    if (this.#running) return;
    // First, so that an endpoint it cannot bind leaves nothing started.
    await this.#relay?.start();
    this.#running = true;
    if (this.#process) {
      this.#unsubs.push(this.#process.on((e) => this.#onProcessEvent(e)));
      await this.#process.start();
    }
    this.#unsubs.push(
      this.#bus.subscribe('discover', () => {
        if (this.#engineUp && this.#registration && !this.#swapping) {
          this.#bus.publish('registration', { ...this.#registration, at: this.#clock.now() });
        }
      }),
    );
    this.#unsubs.push(
      this.#bus.serve('command', (cmd) => this.#serialize(() => this.#handle(cmd)), {
        key: this.#opts.replicaId,
      }),
    );
    await this.#bus.flush();
    await this.#beat();
    this.#schedule();
  }

  /**
   * Leaves the fleet: optionally drains first, then announces the replica `gone`, stops
   * heartbeating and serving commands, and stops the engine process if this agent runs it.
   */
  async stop(options: AgentStopOptions = {}): Promise<void> {
    if (!this.#running) return;
    const drainTimeoutMs = options.drainTimeoutMs ?? 0;
    if (drainTimeoutMs > 0 && this.#engineUp) {
      this.#draining = true;
      this.#publishHeartbeat();
      await this.#waitIdle(drainTimeoutMs);
    }
    this.#running = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#tick;
    for (const u of this.#unsubs.splice(0)) u();
    if (this.#registration) this.#publishGone('agent stopping');
    await this.#relay?.stop();
    await this.#bus.flush();
    if (this.#process && (options.stopEngine ?? true)) await this.#process.stop();
  }

  #schedule(): void {
    if (!this.#running) return;
    this.#timer = setTimeout(() => {
      this.#tick = this.#beat().finally(() => this.#schedule());
    }, this.#opts.heartbeatIntervalMs);
  }

  /** One heartbeat: register if needed, scrape, publish; announce `gone` after repeated failures. */
  async #beat(): Promise<void> {
    if (!this.#running || this.#swapping) return;
    if (!this.#engineUp) {
      await this.#announce();
      return;
    }
    try {
      this.#lastMetrics = await this.#engine.metrics();
      this.#failures = 0;
      if (this.#running && !this.#swapping && this.#engineUp) this.#publishHeartbeat();
    } catch (err) {
      this.#failures++;
      this.#logger.warn({ err: errText(err), failures: this.#failures }, 'agent: metrics scrape failed');
      if (this.#failures >= this.#opts.failuresBeforeGone) this.#engineDown('engine does not answer');
    }
  }

  /** Reads the engine's capacity, adapters and sleep state, then publishes the registration and a heartbeat. */
  async #announce(): Promise<boolean> {
    try {
      const metrics = await this.#engine.metrics();
      const kvCapacityTokens = metrics.kvCapacityTokens ?? this.#opts.kvCapacityTokens;
      if (kvCapacityTokens === undefined) {
        throw new AgentError(
          AgentErrorCode.ENGINE_METRICS_INCOMPLETE,
          'the engine exports no vllm:cache_config_info and no kvCapacityTokens option is set',
          { replicaId: this.#opts.replicaId },
        );
      }
      await this.#refreshAdapters();
      try {
        this.#sleeping = await this.#engine.isSleeping();
      } catch {
        // vLLM serves /is_sleeping only in dev mode; keep what the agent knows.
      }
      if (!this.#running || this.#swapping) return false;
      this.#lastMetrics = metrics;
      this.#registration = {
        replicaId: this.#opts.replicaId,
        epoch: this.#epoch,
        url: this.#opts.url ?? this.#engine.url,
        pool: this.#pool,
        model: this.#model,
        ...(this.#opts.gpu === undefined ? {} : { gpu: this.#opts.gpu }),
        tp: this.#opts.tp,
        kvCapacityTokens,
        blockSize: metrics.blockSize ?? 16,
        maxNumSeqs: this.#opts.maxNumSeqs,
        adapters: [...this.#adapters],
        at: this.#clock.now(),
      };
      this.#bus.publish('registration', this.#registration);
      this.#engineUp = true;
      this.#failures = 0;
      this.#announceFailures = 0;
      this.#publishHeartbeat();
      this.#logger.info(
        { model: this.#model, pool: this.#pool, kvCapacityTokens },
        'agent: replica registered',
      );
      return true;
    } catch (err) {
      // Logged once per outage: the loop retries every heartbeat interval.
      if (this.#announceFailures++ === 0) {
        this.#logger.warn({ err: errText(err) }, 'agent: engine not ready for registration');
      }
      return false;
    }
  }

  #onProcessEvent(e: EngineProcessEvent): void {
    if (e.type === 'exit') this.#engineDown(`engine process exited (code ${e.code}, signal ${e.signal})`);
    else if (e.type === 'ready' && this.#running && !this.#swapping) {
      this.#tick = this.#tick.then(() => this.#beat());
    }
  }

  #engineDown(reason: string): void {
    if (!this.#engineUp) return;
    this.#engineUp = false;
    this.#logger.warn({ reason }, 'agent: replica leaves the pool');
    this.#publishGone(reason);
  }

  #reportedState(): ReplicaState {
    if (this.#sleeping) return 'sleeping';
    return this.#draining ? 'draining' : 'ready';
  }

  /** Publishes a heartbeat with the last scraped metrics, in the current state or `state`. */
  #publishHeartbeat(state: ReplicaState = this.state): void {
    const reg = this.#registration;
    if (!reg) return;
    const m = this.#lastMetrics;
    const kvUsage = Math.min(1, Math.max(0, m?.kvCacheUsage ?? 0));
    const itl = histogram(m, VLLM_METRIC.interTokenLatency, VLLM_METRIC.timePerOutputToken);
    const prefill = histogram(m, VLLM_METRIC.prefillTime);
    this.#bus.publish('heartbeat', {
      replicaId: reg.replicaId,
      epoch: this.#epoch,
      seq: ++this.#seq,
      ts: this.#clock.now(),
      state,
      running: Math.round(m?.running ?? 0),
      waiting: Math.round(m?.waiting ?? 0),
      kvUsage,
      kvUsedTokens: Math.round(kvUsage * reg.kvCapacityTokens),
      promptTokensTotal: Math.round(m?.promptTokensTotal ?? 0),
      generationTokensTotal: Math.round(m?.generationTokensTotal ?? 0),
      preemptionsTotal: Math.round(m?.preemptionsTotal ?? 0),
      requestsFinishedTotal: Math.round(m?.requestSuccessTotal ?? 0),
      interTokenSecondsTotal: itl?.sum ?? 0,
      interTokensTotal: Math.round(itl?.count ?? 0),
      prefillSecondsTotal: prefill?.sum ?? 0,
      prefillsTotal: Math.round(prefill?.count ?? 0),
      adapters: [...this.#adapters],
    });
  }

  #publishGone(reason: string): void {
    this.#publishHeartbeat('gone');
    // Whatever the engine cached is gone with it (or no longer reachable through this replica).
    this.#relay?.clear();
    this.#logger.info({ reason }, 'agent: announced gone');
  }

  /** Runs commands one at a time, so e.g. a sleep and a wake never interleave. */
  #serialize<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#commands.then(fn, fn);
    this.#commands = next.catch(() => undefined);
    return next;
  }

  async #handle(cmd: NodeCommand): Promise<CommandReply> {
    this.#logger.info({ command: cmd.type }, 'agent: command');
    try {
      switch (cmd.type) {
        case 'drain':
          this.#draining = true;
          break;
        case 'resume':
          this.#draining = false;
          break;
        case 'evict':
          await this.#evict(cmd.requestIds);
          break;
        case 'sleep':
          await this.#requireIdle('sleep');
          await this.#engine.sleep(cmd.level);
          this.#sleeping = true;
          break;
        case 'wake':
          await this.#engine.wakeUp();
          this.#sleeping = false;
          break;
        case 'loadLora':
          await this.#engine.loadLoraAdapter(cmd.name, cmd.path);
          await this.#refreshAdapters(cmd.name);
          break;
        case 'unloadLora':
          await this.#engine.unloadLoraAdapter(cmd.name);
          await this.#refreshAdapters();
          this.#adapters = this.#adapters.filter((a) => a !== cmd.name);
          break;
        case 'swapModel':
          await this.#swapModel(cmd.model, cmd.args);
          break;
        default:
          return assertNever(cmd);
      }
      if (this.#engineUp) this.#publishHeartbeat();
      return { ok: true, state: this.state };
    } catch (err) {
      this.#logger.warn({ command: cmd.type, err: errText(err) }, 'agent: command failed');
      return { ok: false, error: errText(err), state: this.state };
    }
  }

  async #evict(requestIds: readonly string[]): Promise<void> {
    const before = await this.#engine.metrics();
    const inFlightBefore = before.running + before.waiting;
    const target = Math.max(0, inFlightBefore - requestIds.length);
    this.#bus.publish('evict', {
      replicaId: this.#opts.replicaId,
      requestIds: [...requestIds],
      reason: 'evict command',
      at: this.#clock.now(),
    });
    await this.#bus.flush();
    const deadline = this.#clock.now() + this.#opts.evictTimeoutMs;
    let inFlight = inFlightBefore;
    for (;;) {
      const m = await this.#engine.metrics();
      this.#lastMetrics = m;
      inFlight = m.running + m.waiting;
      if (inFlight <= target) return;
      if (this.#clock.now() >= deadline) break;
      await delay(this.#opts.evictPollMs);
    }
    throw new AgentError(
      AgentErrorCode.EVICT_UNCONFIRMED,
      `requests in flight went from ${inFlightBefore} to ${inFlight}, not to ${target} or fewer, within ${this.#opts.evictTimeoutMs} ms`,
      { replicaId: this.#opts.replicaId },
    );
  }

  async #swapModel(model: string, extra: readonly string[]): Promise<void> {
    // Nothing to restart when the engine already serves the model, itself or as a LoRA adapter.
    if (model === this.#model || this.#adapters.includes(model)) return;
    const proc = this.#process;
    if (!proc) {
      throw new AgentError(
        AgentErrorCode.ENGINE_NOT_MANAGED,
        `swapping to ${model} needs an engine restart, but this agent does not run the engine process`,
        { replicaId: this.#opts.replicaId },
      );
    }
    await this.#requireIdle('swapModel');
    this.#swapping = true;
    try {
      this.#engineUp = false;
      this.#publishGone(`model swap to ${model}`);
      await proc.restart(this.#swapArgs(model, extra, proc.args));
      this.#model = model;
      this.#sleeping = false;
      this.#adapters = [];
    } finally {
      this.#swapping = false;
    }
    if (!(await this.#announce())) {
      throw new AgentError(
        AgentErrorCode.ENGINE_METRICS_INCOMPLETE,
        `engine restarted with ${model} but could not register`,
        {
          replicaId: this.#opts.replicaId,
        },
      );
    }
  }

  async #requireIdle(what: string): Promise<void> {
    const m = await this.#engine.metrics();
    this.#lastMetrics = m;
    const inFlight = m.running + m.waiting;
    if (inFlight > 0) {
      throw new AgentError(
        AgentErrorCode.COMMAND_REJECTED,
        `${what} needs an idle engine but ${inFlight} requests are in flight: drain (or evict) first`,
        { replicaId: this.#opts.replicaId },
      );
    }
  }

  async #waitIdle(timeoutMs: number): Promise<void> {
    const deadline = this.#clock.now() + timeoutMs;
    while (this.#clock.now() < deadline) {
      try {
        const m = await this.#engine.metrics();
        this.#lastMetrics = m;
        if (m.running + m.waiting === 0) return;
        this.#publishHeartbeat();
      } catch {
        return;
      }
      await delay(this.#opts.evictPollMs);
    }
  }

  async #refreshAdapters(loaded?: string): Promise<void> {
    try {
      const cards = await this.#engine.models();
      this.#adapters = cards.filter((c) => c.parent !== undefined && c.parent !== null).map((c) => c.id);
    } catch (err) {
      this.#logger.warn({ err: errText(err) }, 'agent: cannot list models');
    }
    if (loaded !== undefined && !this.#adapters.includes(loaded)) this.#adapters.push(loaded);
  }
}

function assertNever(x: never): never {
  throw new AgentError(AgentErrorCode.COMMAND_REJECTED, `unknown command ${JSON.stringify(x)}`);
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
