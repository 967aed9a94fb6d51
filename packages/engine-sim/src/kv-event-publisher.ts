import { type Clock, type Logger, LogThrottle, silentLogger, systemClock } from '@fairway/core';
import type { PrefixCacheListener } from '@fairway/perf';
import { Encoder } from '@msgpack/msgpack';
import type { Publisher } from 'zeromq';
import { bindsEndpoint, type KvEventsConfig } from './kv-events-config.ts';

/** A block hash on the wire: 32 bytes, or the integer of its low 64 bits. */
type WireHash = Uint8Array | number | bigint;

/** vLLM's KV cache events as msgspec writes them (`array_like`, `tag`): the class name first. */
type WireEvent =
  | [
      'BlockStored',
      hashes: WireHash[],
      parent: WireHash | null,
      tokenIds: number[],
      blockSize: number,
      loraId: null,
      medium: 'GPU',
    ]
  | ['BlockRemoved', hashes: WireHash[], medium: 'GPU']
  | ['AllBlocksCleared'];

/** Options of {@link KvEventPublisher.open}. */
export interface KvEventPublisherOptions {
  /** `--kv-events-config`, enabled with the `zmq` publisher. */
  readonly config: KvEventsConfig;
  /** Tokens per KV block, reported in every `BlockStored`. */
  readonly blockSize: number;
  /**
   * Block hashes as the integer of their low 64 bits (vLLM's `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`)
   * rather than their 32 bytes.
   */
  readonly intHashes: boolean;
  /** Most blocks whose token ids are kept for `BlockStored` events; blocks past it are sent without. */
  readonly maxTrackedBlocks: number;
  /** Wall clock of the batches' timestamps. @default systemClock */
  readonly clock?: Clock;
  readonly logger?: Logger;
}

/**
 * Publishes the engine's KV cache events as vLLM's `ZmqEventPublisher` does: a ZMQ PUB socket
 * whose messages are `[topic, seq (8 bytes, big-endian, from 0), msgpack KVEventBatch]`, one batch
 * per engine step that stored or evicted blocks. The prefix cache reports blocks by hash
 * ({@link listener}); the token ids a `BlockStored` carries come from the prompts of the requests
 * in the engine ({@link track}). A failed send is logged and the engine carries on.
 */
export class KvEventPublisher {
  /** Where the socket is bound (with the port it got) or connected. */
  readonly endpoint: string;
  /** The topic every message starts with. */
  readonly topic: string;
  /** Told what the engine's prefix cache stores and evicts (`EngineModel.watchCache`). */
  readonly listener: PrefixCacheListener;
  /** Whether the socket is bound at {@link endpoint}, else connected to it. */
  readonly bound: boolean;
  readonly #socket: Publisher;
  readonly #opts: KvEventPublisherOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #throttle = new LogThrottle();
  readonly #encoder = new Encoder({ useBigInt64: true });
  /** Token ids of the blocks of requests in the engine, by block hash, with how many requests hold each. */
  readonly #blocks = new Map<string, { readonly ids: readonly number[]; refs: number }>();
  /** The block hashes each request counted in {@link #blocks}. */
  readonly #requests = new Map<string, readonly string[]>();
  #pending: WireEvent[] = [];
  /** The last pending event when it is a `BlockStored`, and the hash its chain ends with. */
  #open: { readonly event: WireEvent & { 0: 'BlockStored' }; last: string } | undefined;
  #seq = 0n;
  #queued = 0;
  #sending: Promise<void> = Promise.resolve();
  #closed = false;

  private constructor(socket: Publisher, endpoint: string, bound: boolean, opts: KvEventPublisherOptions) {
    this.#socket = socket;
    this.endpoint = endpoint;
    this.bound = bound;
    this.topic = opts.config.topic;
    this.#opts = opts;
    this.#clock = opts.clock ?? systemClock;
    this.#logger = opts.logger ?? silentLogger;
    this.listener = {
      stored: (hash, parent) => this.#stored(hash, parent),
      removed: (hash) => this.#removed(hash),
    };
  }

  /**
   * Opens the PUB socket at `config.endpoint`: bound when the endpoint has a wildcard or is
   * `ipc://`, connected to otherwise (vLLM's rule). Rejects when the endpoint cannot be bound.
   */
  static async open(opts: KvEventPublisherOptions): Promise<KvEventPublisher> {
    const { endpoint, hwm } = opts.config;
    // Loaded here, so that an engine without KV events never loads the native ZeroMQ addon.
    const { Publisher } = await import('zeromq');
    const socket = new Publisher({ sendHighWaterMark: hwm, linger: 0, ipv6: endpoint.includes('[') });
    try {
      if (bindsEndpoint(endpoint)) await socket.bind(endpoint);
      else socket.connect(endpoint);
    } catch (err) {
      socket.close();
      throw new Error(`cannot open the KV events endpoint ${endpoint}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const bound = bindsEndpoint(endpoint);
    return new KvEventPublisher(socket, bound ? (socket.lastEndpoint ?? endpoint) : endpoint, bound, opts);
  }

  /**
   * Keeps the token ids of a request's blocks (`hashes[i]` names `tokenIds` block i) while it is in
   * the engine, for the `BlockStored` events of the blocks it computes.
   */
  track(requestId: string, hashes: readonly string[], tokenIds: readonly number[]): void {
    if (this.#requests.has(requestId)) return;
    const size = this.#opts.blockSize;
    const counted: string[] = [];
    for (let i = 0; i < hashes.length; i++) {
      const hash = hashes[i]!;
      const known = this.#blocks.get(hash);
      if (known) known.refs++;
      else if (this.#blocks.size < this.#opts.maxTrackedBlocks)
        this.#blocks.set(hash, { ids: tokenIds.slice(i * size, (i + 1) * size), refs: 1 });
      else continue;
      counted.push(hash);
    }
    this.#requests.set(requestId, counted);
  }

  /** Forgets a request's blocks once it has left the engine. */
  untrack(requestId: string): void {
    const hashes = this.#requests.get(requestId);
    if (hashes === undefined) return;
    this.#requests.delete(requestId);
    for (const hash of hashes) {
      const b = this.#blocks.get(hash);
      if (b && --b.refs === 0) this.#blocks.delete(hash);
    }
  }

  /** Publishes the events gathered since the last call as one batch (nothing when there are none). */
  flush(): void {
    if (this.#pending.length === 0 || this.#closed) return;
    const events = this.#pending;
    this.#pending = [];
    this.#open = undefined;
    const seq = this.#seq++;
    // A batch that cannot be queued is dropped with its seq: subscribers see the gap.
    if (this.#queued >= this.#opts.config.max_queue_size) {
      this.#warn('KV events queue full: batch dropped', { seq: Number(seq) });
      return;
    }
    const payload = this.#encoder.encode([this.#clock.now() / 1000, events]);
    const seqBytes = Buffer.alloc(8);
    seqBytes.writeBigInt64BE(seq);
    this.#queued++;
    // One send at a time: a ZMQ socket refuses a send while another is pending.
    this.#sending = this.#sending.then(async () => {
      try {
        if (!this.#closed) await this.#socket.send([this.topic, seqBytes, payload]);
      } catch (err) {
        this.#warn('KV events batch not sent', { seq: Number(seq), err: (err as Error).message });
      } finally {
        this.#queued--;
      }
    });
  }

  /** Sends what is queued, then closes the socket; once it resolves, the endpoint can be bound again. */
  async close(): Promise<void> {
    if (this.#closed) return;
    await this.#sending;
    this.#closed = true;
    this.#pending = [];
    // Closing alone releases a bound address later, in ZMQ's I/O thread; unbinding releases it now.
    if (this.bound) await this.#socket.unbind(this.endpoint).catch(() => undefined);
    this.#socket.close();
  }

  #stored(hash: string, parent: string | undefined): void {
    const ids = this.#blocks.get(hash)?.ids ?? [];
    const open = this.#open;
    // A request's consecutive blocks go in one event, as vLLM sends them.
    if (open !== undefined && parent === open.last) {
      open.event[1].push(this.#wireHash(hash));
      for (const id of ids) open.event[3].push(id);
      open.last = hash;
      return;
    }
    const event: WireEvent & { 0: 'BlockStored' } = [
      'BlockStored',
      [this.#wireHash(hash)],
      parent === undefined ? null : this.#wireHash(parent),
      [...ids],
      this.#opts.blockSize,
      null,
      'GPU',
    ];
    this.#pending.push(event);
    this.#open = { event, last: hash };
  }

  #removed(hash: string): void {
    this.#pending.push(['BlockRemoved', [this.#wireHash(hash)], 'GPU']);
    this.#open = undefined;
  }

  /** A hash (hex of its 32 bytes) as vLLM sends it: the bytes, or `int.from_bytes(…) & (2**64 − 1)`. */
  #wireHash(hex: string): WireHash {
    if (!this.#opts.intHashes) return Buffer.from(hex, 'hex');
    const low = BigInt(`0x${hex.slice(-16)}`);
    // msgpack's smallest form for the integer, as msgspec writes it.
    return low <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(low) : low;
  }

  #warn(msg: string, fields: Record<string, unknown>): void {
    this.#throttle.warn(this.#logger, msg, fields, `engine-sim: ${msg}`);
  }
}
