import type { Bus, KvEvents } from '@fairway/bus';
import { type Clock, kvBlockKey, type Logger, LogThrottle, silentLogger } from '@fairway/core';
import { decode } from '@msgpack/msgpack';
import type { Dealer, Subscriber } from 'zeromq';

/** One event of a `kvEvents` bus message. */
type BusEvent = KvEvents['events'][number];

/** Most block keys in one bus event (the `kvEvents` schema's bound). */
const MAX_KEYS = 4096;
/** Most events in one bus message (the `kvEvents` schema's bound). */
const MAX_EVENTS = 256;
/** Longest wait for a replay, from the request to its end marker, ms. */
export const KV_REPLAY_TIMEOUT_MS = 1000;
/** Most batches asked of one replay (vLLM keeps 10,000 by default). */
const MAX_REPLAYED = 10_000n;
/** Most bytes of batches one replay holds; past it the oldest give way. */
const MAX_REPLAYED_BYTES = 64 * 1024 * 1024;

/** A ZMQ endpoint of KV cache events: `tcp://host:port` or `ipc://path`. */
export const KV_EVENTS_ENDPOINT = /^(tcp:\/\/(\[[0-9a-fA-F:.]+\]|[^\s:/[\]]+):\d{1,5}|ipc:\/\/\S+)$/u;

/** Whether `endpoint` names a wildcard address (`*`, `0.0.0.0`, `::`), which can be bound, not connected to. */
export function isWildcardKvEventsEndpoint(endpoint: string): boolean {
  return /^tcp:\/\/(\*|0\.0\.0\.0|\[::\]|::):/u.test(endpoint);
}

/**
 * The endpoint a subscriber on the engine's host connects to for a publisher bound at `endpoint`:
 * a wildcard host (`*`, `0.0.0.0`, `::`) becomes the loopback address.
 */
export function localKvEventsEndpoint(endpoint: string): string {
  return endpoint.replace(/^tcp:\/\/(\*|0\.0\.0\.0|\[::\]|::)(?=:)/u, (_, host: string) =>
    host === '*' || host === '0.0.0.0' ? 'tcp://127.0.0.1' : 'tcp://[::1]',
  );
}

/** Options of {@link KvEventRelay}. */
export interface KvEventRelayOptions {
  readonly bus: Bus;
  /** Timestamps the bus messages. */
  readonly clock: Clock;
  readonly logger?: Logger;
  /** The replica whose engine publishes the events. */
  readonly replicaId: string;
  /** The agent run the messages belong to (`NodeAgent.epoch`). */
  readonly epoch: string;
  /** The engine's KV events endpoint, e.g. `tcp://127.0.0.1:5557` (see {@link KV_EVENTS_ENDPOINT}). */
  readonly endpoint: string;
  /**
   * Bind `endpoint` for an engine that connects to it (vLLM connects its publisher to an endpoint
   * without a wildcard), instead of connecting to an engine that binds it. @default false
   */
  readonly bind?: boolean;
  /** The engine's `topic` (`--kv-events-config`). @default '' */
  readonly topic?: string;
  /**
   * The engine's replay endpoint (vLLM's `replay_endpoint`, a ROUTER it binds), to ask for the
   * batches missed at start and in a gap. @default none: what was missed is cleared
   */
  readonly replayEndpoint?: string;
}

/**
 * Relays an engine's KV cache events (vLLM's `--kv-events-config`, ZMQ PUB) onto the bus as
 * `kvEvents` messages: a ZMQ SUB connected to the engine (or bound, for an engine that connects)
 * decodes each batch, names each block by
 * its block key (`kvBlockKey` of `@fairway/core`, for hashes sent as bytes or as integers) and
 * publishes `stored` / `removed` / `cleared` events in order, numbered 0, 1, 2, … within the
 * agent's epoch. Whenever events may have been missed — at start, when the engine's seq skips
 * (ZMQ dropped messages, or the engine restarted) or when a batch cannot be read — the next
 * message begins with `cleared`, so receivers never keep blocks the engine may have evicted.
 *
 * With the engine's replay endpoint, the relay asks it for what it missed: at start, before any
 * live batch, the whole history the engine still keeps (relayed after `cleared`, so the blocks
 * even an idle engine holds are known at once; live batches it already carried are skipped); in
 * a gap or after an engine restart (its seq went back), the batches missed, before the batch
 * that showed it. A gap replayed whole is relayed without `cleared`; otherwise the message begins
 * with `cleared` and carries the replayed batches after the last one still missing. A replay that
 * does not end within {@link KV_REPLAY_TIMEOUT_MS} counts as missing.
 *
 * Both of vLLM's encodings are read: events as tagged arrays (`["BlockStored", hashes, …]`) and as
 * maps with a `type` field; fields past the ones used are ignored. Events of another medium than
 * the GPU (offloading tiers) or another KV cache group than the first are skipped, and so are
 * events of unknown types.
 */
export class KvEventRelay {
  readonly #opts: KvEventRelayOptions;
  readonly #topic: string;
  readonly #logger: Logger;
  readonly #throttle = new LogThrottle();
  #socket: Subscriber | undefined;
  /** Asks the engine's replay endpoint; made at the first replay, dropped after one that failed. */
  #replay: Dealer | undefined;
  #loop: Promise<void> | undefined;
  /** The seq of the engine's last message, to see one skipped. */
  #engineSeq: bigint | undefined;
  /** Events may have been missed: the next message begins with `cleared`. */
  #lost = true;
  /** The last seq of the history replayed at start, while live messages up to it may still come. */
  #historyEnd: bigint | undefined;
  #seq = 0;

  constructor(options: KvEventRelayOptions) {
    this.#opts = options;
    this.#topic = options.topic ?? '';
    this.#logger = options.logger ?? silentLogger;
  }

  /** Bus messages published so far (the next message's seq). */
  get published(): number {
    return this.#seq;
  }

  /**
   * Connects to the engine (or binds the endpoint it connects to) and relays its events until
   * {@link stop}. Rejects when the endpoint cannot be bound.
   */
  async start(): Promise<void> {
    if (this.#socket) return;
    // Loaded here, so that an agent without KV events never loads the native ZeroMQ addon.
    const { Subscriber } = await import('zeromq');
    if (this.#socket) return;
    const socket = new Subscriber({ ipv6: this.#opts.endpoint.includes('[') });
    socket.subscribe(this.#topic);
    try {
      if (this.#opts.bind) await socket.bind(this.#opts.endpoint);
      else socket.connect(this.#opts.endpoint);
    } catch (err) {
      socket.close();
      throw err;
    }
    this.#socket = socket;
    this.#engineSeq = undefined;
    this.#lost = true;
    this.#historyEnd = undefined;
    this.#loop = this.#receive(socket);
  }

  /** Disconnects from the engine; once it resolves, a bound endpoint can be bound again. */
  async stop(): Promise<void> {
    const socket = this.#socket;
    if (!socket) return;
    this.#socket = undefined;
    this.#replay?.close();
    this.#replay = undefined;
    // Closing alone releases a bound address later, in ZMQ's I/O thread; unbinding releases it now.
    if (this.#opts.bind)
      await socket.unbind(socket.lastEndpoint ?? this.#opts.endpoint).catch(() => undefined);
    socket.close();
    await this.#loop;
  }

  /** Tells receivers at once that the engine's cache is empty (the engine stopped or restarted). */
  clear(): void {
    this.#publish([['cleared']]);
    this.#lost = false;
  }

  async #receive(socket: Subscriber): Promise<void> {
    try {
      if (this.#opts.replayEndpoint !== undefined) await this.#relayHistory(socket);
      // One batch at a time: a replay is relayed before the batch that asked for it.
      for await (const frames of socket) await this.#relay(frames);
    } catch (err) {
      if (!socket.closed)
        this.#warn('receive', { err: (err as Error).message }, 'agent: KV events socket failed');
    }
  }

  async #relay(frames: readonly Buffer[]): Promise<void> {
    const [topic, seqFrame, payload] = frames;
    // SUB sockets match topics by prefix; another topic that starts with this one is not ours.
    if (topic === undefined || topic.toString('utf8') !== this.#topic) return;
    if (seqFrame === undefined || seqFrame.length !== 8 || payload === undefined) {
      this.#lost = true;
      this.#warn('malformed', { frames: frames.length }, 'agent: KV events message malformed');
      return;
    }
    const seq = seqFrame.readBigInt64BE();
    if (this.#historyEnd !== undefined) {
      // Published while the history was replayed, and in it.
      if (seq <= this.#historyEnd) return;
      this.#historyEnd = undefined;
    }
    const last = this.#engineSeq;
    let replayed: BusEvent[] = [];
    if (last === undefined || seq !== last + 1n) {
      // At start or after an engine restart (its seq went back) the whole history was missed.
      const from = last === undefined || seq <= last ? 0n : last + 1n;
      if (last !== undefined) {
        this.#lost = true;
        this.#logger.info({ expected: String(last + 1n), got: String(seq) }, 'agent: KV events skipped');
      }
      if (this.#opts.replayEndpoint !== undefined && seq > from) {
        const got = await this.#replayed(from, seq);
        replayed = got.events;
        // A gap replayed whole leaves nothing missing; the first batch of a relay always clears.
        if (got.from === from && last !== undefined && seq > last) this.#lost = false;
      }
    }
    this.#engineSeq = seq;
    const read = readBatch(payload);
    if (read === undefined) {
      this.#lost = true;
      this.#warn('undecodable', { seq: String(seq) }, 'agent: KV events batch unreadable');
      return;
    }
    const all = replayed.length === 0 ? read : [...replayed, ...read];
    const events = this.#lost && all[0]?.[0] !== 'cleared' ? [['cleared'] as BusEvent, ...all] : all;
    this.#lost = false;
    for (let i = 0; i < events.length; i += MAX_EVENTS) this.#publish(events.slice(i, i + MAX_EVENTS));
  }

  /**
   * At start, before the first live batch: the engine's history as its replay endpoint still
   * keeps it, relayed after `cleared`, so that the blocks an idle engine holds are known at once.
   */
  async #relayHistory(socket: Subscriber): Promise<void> {
    const got = await this.#replayed(0n);
    if (this.#socket !== socket || got.until === undefined) return;
    this.#engineSeq = got.until - 1n;
    this.#historyEnd = this.#engineSeq;
    const events: BusEvent[] = [['cleared'], ...got.events];
    this.#lost = false;
    for (let i = 0; i < events.length; i += MAX_EVENTS) this.#publish(events.slice(i, i + MAX_EVENTS));
  }

  /**
   * The events of the batches `from` … `until − 1` (without `until`: all from `from` on) the engine
   * still keeps, asked of its replay endpoint: those after the last batch missing or unreadable,
   * the seq they start at (`until` when none is left), and `until` (without it: one past the last
   * batch answered; undefined when none was).
   */
  async #replayed(
    from: bigint,
    until?: bigint,
  ): Promise<{ from: bigint; until: bigint | undefined; events: BusEvent[] }> {
    const ask = until !== undefined && until - from > MAX_REPLAYED ? until - MAX_REPLAYED : from;
    // In seq order, as the engine answers.
    const batches = new Map<bigint, Uint8Array>();
    let bytes = 0;
    let end = until ?? -1n;
    let dealer = this.#replay;
    try {
      if (dealer === undefined) {
        const { Dealer } = await import('zeromq');
        const endpoint = this.#opts.replayEndpoint as string;
        dealer = new Dealer({
          linger: 0,
          sendTimeout: KV_REPLAY_TIMEOUT_MS,
          ipv6: endpoint.includes('['),
        });
        dealer.connect(endpoint);
        this.#replay = dealer;
      }
      const start = Buffer.alloc(8);
      start.writeBigUInt64BE(ask);
      const deadline = this.#opts.clock.now() + KV_REPLAY_TIMEOUT_MS;
      dealer.sendTimeout = KV_REPLAY_TIMEOUT_MS;
      await dealer.send(['', start]);
      for (;;) {
        dealer.receiveTimeout = Math.max(1, Math.ceil(deadline - this.#opts.clock.now()));
        const [, seqFrame, payload] = await dealer.receive();
        if (seqFrame?.length !== 8 || payload === undefined) throw new Error('malformed replay message');
        const seq = seqFrame.readBigInt64BE();
        if (seq === -1n) break;
        if (seq < ask || (until !== undefined && seq >= until) || batches.has(seq)) continue;
        batches.set(seq, payload);
        bytes += payload.length;
        if (seq >= end) end = seq + 1n;
        for (const [oldest, kept] of batches) {
          if (bytes <= MAX_REPLAYED_BYTES && BigInt(batches.size) <= MAX_REPLAYED) break;
          batches.delete(oldest);
          bytes -= kept.length;
        }
      }
    } catch (err) {
      // Late answers to this request must not be read as answers to the next one.
      if (dealer !== undefined && this.#replay === dealer) {
        dealer.close();
        this.#replay = undefined;
      }
      if (this.#socket !== undefined)
        this.#warn('replay', { err: (err as Error).message }, 'agent: KV events replay failed');
    }
    if (end < 0n) return { from, until: undefined, events: [] };
    // Back from the batch before `end` to the first missing or unreadable one.
    const runs: BusEvent[][] = [];
    let first = end;
    for (let s = end - 1n; s >= ask; s--) {
      const payload = batches.get(s);
      const read = payload === undefined ? undefined : readBatch(payload);
      if (read === undefined) break;
      runs.push(read);
      first = s;
    }
    return { from: first, until: end, events: runs.reverse().flat() };
  }

  #publish(events: BusEvent[]): void {
    if (events.length === 0) return;
    const seq = this.#seq++;
    try {
      this.#opts.bus.publish('kvEvents', {
        replicaId: this.#opts.replicaId,
        epoch: this.#opts.epoch,
        seq,
        events,
        at: this.#opts.clock.now(),
      });
    } catch (err) {
      // Its seq is used up: receivers see the gap and start over from the next message.
      this.#warn('publish', { err: (err as Error).message }, 'agent: KV events not published');
    }
  }

  #warn(kind: string, fields: object, msg: string): void {
    this.#throttle.warn(this.#logger, kind, fields, msg);
  }
}

/** A vLLM event's fields, whichever encoding it came in. */
interface EventFields {
  readonly tag: unknown;
  readonly hashes: unknown;
  readonly medium: unknown;
  readonly group: unknown;
}

/** Field positions of vLLM's array-encoded events, after the tag. */
const STORED_AT = { hashes: 1, medium: 6, group: 9 } as const;
const REMOVED_AT = { hashes: 1, medium: 2, group: 3 } as const;

function fieldsOf(e: unknown): EventFields | undefined {
  if (Array.isArray(e)) {
    const at = e[0] === 'BlockStored' ? STORED_AT : REMOVED_AT;
    return { tag: e[0], hashes: e[at.hashes], medium: e[at.medium], group: e[at.group] };
  }
  if (typeof e === 'object' && e !== null) {
    const m = e as Record<string, unknown>;
    return { tag: m.type, hashes: m.block_hashes, medium: m.medium, group: m.group_idx };
  }
  return undefined;
}

/** A block hash as an event carries it, as a block key; undefined when it is not one. */
function keyOf(hash: unknown): string | undefined {
  // Hashes of vLLM versions that used Python's `hash()` are signed: their 64 bits are the key.
  if (typeof hash === 'bigint' && hash < 0n) return kvBlockKey(BigInt.asUintN(64, hash));
  if (typeof hash === 'number' && Number.isSafeInteger(hash) && hash < 0)
    return kvBlockKey(BigInt.asUintN(64, BigInt(hash)));
  return kvBlockKey(hash);
}

/**
 * The bus events of one msgpack `KVEventBatch` (`[ts, events, …]` or `{ts, events, …}`), in order,
 * consecutive events of a kind merged; undefined when the payload is not a batch. An event that
 * cannot be read means the engine's cache is not known any more: the events before it give way to
 * a `cleared`.
 */
function readBatch(payload: Uint8Array): BusEvent[] | undefined {
  let batch: unknown;
  try {
    batch = decode(payload, { useBigInt64: true });
  } catch {
    return undefined;
  }
  const raw = Array.isArray(batch)
    ? batch[1]
    : typeof batch === 'object' && batch !== null
      ? (batch as Record<string, unknown>).events
      : undefined;
  if (!Array.isArray(raw)) return undefined;
  let out: BusEvent[] = [];
  const add = (kind: 'stored' | 'removed', keys: string[]): void => {
    const last = out[out.length - 1];
    let i = 0;
    if (last !== undefined && last[0] === kind && last[1].length < MAX_KEYS) {
      i = Math.min(keys.length, MAX_KEYS - last[1].length);
      for (let k = 0; k < i; k++) last[1].push(keys[k]!);
    }
    for (; i < keys.length; i += MAX_KEYS) out.push([kind, keys.slice(i, i + MAX_KEYS)]);
  };
  for (const e of raw) {
    const f = fieldsOf(e);
    if (f === undefined) {
      out = [['cleared']];
      continue;
    }
    if (f.tag === 'AllBlocksCleared') {
      out = [['cleared']];
      continue;
    }
    if (f.tag !== 'BlockStored' && f.tag !== 'BlockRemoved') continue;
    // Offloaded copies (CPU, disk) and the other KV cache groups of hybrid models are not what
    // the GPU's prefix cache holds.
    if (f.medium != null && f.medium !== 'GPU') continue;
    if (f.group != null && f.group !== 0) continue;
    const keys = Array.isArray(f.hashes) ? f.hashes.map(keyOf) : undefined;
    if (keys === undefined || keys.some((k) => k === undefined)) {
      out = [['cleared']];
      continue;
    }
    add(f.tag === 'BlockStored' ? 'stored' : 'removed', keys as string[]);
  }
  return out;
}
