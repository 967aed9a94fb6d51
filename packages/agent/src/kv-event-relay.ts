import type { Bus, KvEvents } from '@fairway/bus';
import { type Clock, kvBlockKey, type Logger, LogThrottle, silentLogger } from '@fairway/core';
import { decode } from '@msgpack/msgpack';
import type { Subscriber } from 'zeromq';

/** One event of a `kvEvents` bus message. */
type BusEvent = KvEvents['events'][number];

/** Most block keys in one bus event (the `kvEvents` schema's bound). */
const MAX_KEYS = 4096;
/** Most events in one bus message (the `kvEvents` schema's bound). */
const MAX_EVENTS = 256;

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
  #loop: Promise<void> | undefined;
  /** The seq of the engine's last message, to see one skipped. */
  #engineSeq: bigint | undefined;
  /** Events may have been missed: the next message begins with `cleared`. */
  #lost = true;
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
    this.#loop = this.#receive(socket);
  }

  /** Disconnects from the engine; once it resolves, a bound endpoint can be bound again. */
  async stop(): Promise<void> {
    const socket = this.#socket;
    if (!socket) return;
    this.#socket = undefined;
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
      for await (const frames of socket) this.#relay(frames);
    } catch (err) {
      if (!socket.closed)
        this.#warn('receive', { err: (err as Error).message }, 'agent: KV events socket failed');
    }
  }

  #relay(frames: readonly Buffer[]): void {
    const [topic, seqFrame, payload] = frames;
    // SUB sockets match topics by prefix; another topic that starts with this one is not ours.
    if (topic === undefined || topic.toString('utf8') !== this.#topic) return;
    if (seqFrame === undefined || seqFrame.length !== 8 || payload === undefined) {
      this.#lost = true;
      this.#warn('malformed', { frames: frames.length }, 'agent: KV events message malformed');
      return;
    }
    const seq = seqFrame.readBigInt64BE();
    if (this.#engineSeq !== undefined && seq !== this.#engineSeq + 1n) {
      this.#lost = true;
      this.#logger.info(
        { expected: String(this.#engineSeq + 1n), got: String(seq) },
        'agent: KV events skipped',
      );
    }
    this.#engineSeq = seq;
    const read = readBatch(payload);
    if (read === undefined) {
      this.#lost = true;
      this.#warn('undecodable', { seq: String(seq) }, 'agent: KV events batch unreadable');
      return;
    }
    const events = this.#lost && read[0]?.[0] !== 'cleared' ? [['cleared'] as BusEvent, ...read] : read;
    this.#lost = false;
    for (let i = 0; i < events.length; i += MAX_EVENTS) this.#publish(events.slice(i, i + MAX_EVENTS));
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
