import { type Logger, redactUrls, silentLogger } from '@fairway/core';
import {
  type Consumer,
  DeliverPolicy,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  StorageType,
  type StreamConfig,
} from '@nats-io/jetstream';
import {
  connect,
  type Msg,
  type NatsConnection,
  NoRespondersError,
  RequestError,
  type Subscription,
  TimeoutError,
} from '@nats-io/transport-node';
import type {
  AdminSubscribeOptions,
  Bus,
  DeliverOptions,
  Delivery,
  Handler,
  MessageMeta,
  RequestOptions,
  SubscribeOptions,
  Unsubscribe,
} from './bus.ts';
import {
  decodeAdminMessage,
  decodeMessage,
  encodeAdminMessage,
  encodeMessage,
  errorText,
  logMisrouted,
  logRejected,
  parseOutgoing,
  runHandler,
  toBytes,
} from './codec.ts';
import { BusError, BusErrorCode, BusMessageError, BusNoRespondersError, BusTimeoutError } from './errors.ts';
import {
  type AdminEventInput,
  type AdminEventRecord,
  type MessageInput,
  type MessageKind,
  type MessageOf,
  messageSchemas,
  type ReplyInput,
  type ReplyOf,
  type RequestInput,
  type RequestKind,
  type RequestOf,
  requestSchemas,
  type SignedAdminEnvelope,
} from './messages.ts';
import { type NatsSecurity, natsConnectionOptions } from './nats-auth.ts';
import { DEFAULT_PREFIX, requestRouteKeyOf, routeKeyOf, Subjects } from './subjects.ts';

/** JetStream's API error code for "stream not found". */
const STREAM_NOT_FOUND = 10059;
/** JetStream's API error code for "stream name already in use" (a concurrent create won). */
const STREAM_NAME_IN_USE = 10058;
/** JetStream's API error code for "insufficient resources" (e.g. more replicas than servers). */
const INSUFFICIENT_RESOURCES = 10023;
/** Most admin events one catch-up by direct gets reads (see `#directAdmin`). */
const MAX_DIRECT_GETS = 1000;

/** Limits of the admin-event stream. */
export interface AdminStreamOptions {
  /** Events older than this are dropped, ms; 0 keeps them forever. @default 0 */
  readonly maxAgeMs?: number;
  /** Events kept at most; -1 for no limit. @default -1 */
  readonly maxMsgs?: number;
  /**
   * Copies JetStream keeps of the stream, on as many servers. @default 3 when the server is part
   * of a cluster (falling back to 1, with a warning, when the cluster has fewer than 3 JetStream
   * servers), else 1
   */
  readonly replicas?: number;
}

/** Options of {@link NatsBus.connect}. */
export interface NatsBusOptions {
  /** NATS server URL(s). @default 'nats://127.0.0.1:4222' */
  readonly servers?: string | readonly string[];
  /** Subject prefix; the admin stream is named after it. @default 'fairway' */
  readonly prefix?: string;
  /** Where rejected messages, failing handlers and connection changes are reported. @default silentLogger */
  readonly logger?: Logger;
  /** Connection name shown by the NATS server's monitoring. */
  readonly name?: string;
  /** Time allowed for the first connection, ms. @default 5000 */
  readonly connectTimeoutMs?: number;
  /**
   * How often the client pings its server, ms; two pings unanswered and the connection counts as
   * dead (`disconnected`, then reconnecting, to another server of a cluster if it has one). A
   * server that is frozen or cut off by a network that drops packets keeps the connection open;
   * only the pings find it, within about three intervals. @default 1000
   */
  readonly pingIntervalMs?: number;
  /** Limits of the admin-event stream, applied when this bus creates it. */
  readonly adminStream?: AdminStreamOptions;
  /**
   * Credentials and TLS (see {@link natsConnectionOptions}); credentials may also be written in the
   * URL. @default none (an open server)
   */
  readonly security?: NatsSecurity;
}

/** Options of the {@link NatsBus} constructor (an existing connection). */
export interface NatsBusConnectionOptions {
  readonly prefix?: string;
  readonly logger?: Logger;
  readonly adminStream?: AdminStreamOptions;
  /** Whether {@link NatsBus.close} drains and closes the connection. @default false */
  readonly ownsConnection?: boolean;
}

/**
 * How often a `deliver` that found no subscriber tries again while it awaits one, ms: a client
 * reconnecting to a restarted NATS subscribes again within a few ms of its reconnect.
 */
const RESUBSCRIBE_POLL_MS = 50;

/**
 * The bus over NATS: core subjects for registrations, heartbeats, assignments, evictions and
 * commands (request/reply), and a JetStream stream for admin events so none is lost and a
 * restarted dispatcher can replay them from any sequence number. The stream is created on first
 * use, idempotently, so agents work against a server without JetStream.
 */
export class NatsBus implements Bus {
  readonly prefix: string;
  readonly #nc: NatsConnection;
  readonly #subjects: Subjects;
  readonly #logger: Logger;
  readonly #adminOptions: AdminStreamOptions;
  readonly #owns: boolean;
  readonly #subs = new Set<Subscription>();
  readonly #consumers = new Set<{ stop(): void }>();
  readonly #connectionListeners = new Set<(connected: boolean) => void>();
  #stream: Promise<JetStreamManager> | undefined;
  #js: JetStreamClient | undefined;
  #closed = false;

  constructor(nc: NatsConnection, options: NatsBusConnectionOptions = {}) {
    this.#nc = nc;
    this.#subjects = new Subjects(options.prefix ?? DEFAULT_PREFIX);
    this.prefix = this.#subjects.prefix;
    this.#logger = options.logger ?? silentLogger;
    this.#adminOptions = options.adminStream ?? {};
    this.#owns = options.ownsConnection ?? false;
    void this.#watchConnection();
  }

  onConnectionChange(listener: (connected: boolean) => void): Unsubscribe {
    this.#connectionListeners.add(listener);
    return () => {
      this.#connectionListeners.delete(listener);
    };
  }

  async #watchConnection(): Promise<void> {
    for await (const s of this.#nc.status()) {
      const connected = s.type === 'reconnect' ? true : s.type === 'disconnect' ? false : undefined;
      if (connected === undefined) continue;
      for (const l of this.#connectionListeners) {
        try {
          l(connected);
        } catch (err) {
          this.#logger.error({ err: errorText(err) }, 'bus: connection listener failed');
        }
      }
    }
  }

  /** Connects to NATS (reconnecting forever after the first success) and returns a bus that owns the connection. */
  static async connect(options: NatsBusOptions = {}): Promise<NatsBus> {
    const servers = options.servers ?? 'nats://127.0.0.1:4222';
    const logger = options.logger ?? silentLogger;
    // Credentials come out of the URLs here; only the redacted form is ever printed.
    const shown = redactUrls(typeof servers === 'string' ? servers : servers.join(','));
    const connection = natsConnectionOptions(servers, options.security);
    let nc: NatsConnection;
    try {
      nc = await connect({
        ...connection,
        timeout: options.connectTimeoutMs ?? 5000,
        pingInterval: options.pingIntervalMs ?? 1000,
        maxPingOut: 2,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
        ...(options.name === undefined ? {} : { name: options.name }),
      });
    } catch (cause) {
      throw new BusError(
        BusErrorCode.SETUP_FAILED,
        `cannot connect to NATS at ${shown}: ${redactUrls(errorText(cause))}`,
        {
          cause,
        },
      );
    }
    void watchStatus(nc, logger);
    return new NatsBus(nc, {
      ownsConnection: true,
      logger,
      ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
      ...(options.adminStream === undefined ? {} : { adminStream: options.adminStream }),
    });
  }

  publish<K extends MessageKind>(kind: K, msg: MessageInput<K>): void {
    this.#open();
    const value = parseOutgoing(kind, messageSchemas[kind], msg) as MessageOf<K>;
    const subject = this.#subjects.of(kind, routeKeyOf(kind, value));
    try {
      this.#nc.publish(subject, toBytes(value));
    } catch (cause) {
      throw transportError(`publish on ${subject}`, subject, cause);
    }
  }

  async deliver<K extends MessageKind>(
    kind: K,
    msg: MessageInput<K>,
    options: DeliverOptions = {},
  ): Promise<Delivery> {
    this.#open();
    const value = parseOutgoing(kind, messageSchemas[kind], msg) as MessageOf<K>;
    const subject = this.#subjects.of(kind, routeKeyOf(kind, value));
    const data = toBytes(value);
    const giveUpAt = performance.now() + (options.awaitSubscriberMs ?? 0);
    for (;;) {
      try {
        await this.#nc.request(subject, data, { timeout: options.timeoutMs ?? 2000 });
        return 'delivered';
      } catch (cause) {
        if (isTimeout(cause)) return 'timeout';
        if (!isNoResponders(cause)) throw transportError(`deliver on ${subject}`, subject, cause);
      }
      const left = giveUpAt - performance.now();
      if (left <= 0 || this.#closed) return 'no_responders';
      await new Promise((r) => setTimeout(r, Math.min(RESUBSCRIBE_POLL_MS, left)));
    }
  }

  subscribe<K extends MessageKind>(
    kind: K,
    handler: Handler<MessageOf<K>>,
    options: SubscribeOptions = {},
  ): Unsubscribe {
    this.#open();
    const schema = messageSchemas[kind];
    return this.#listen(this.#subjects.of(kind, options.key), kind, (m) => {
      // Sent with deliver(): acknowledge receipt (the sender wants to know someone got it).
      if (m.reply && !this.#nc.isClosed()) m.respond();
      const decoded = decodeMessage(schema, m.data);
      if (!decoded.ok) {
        logRejected(this.#logger, kind, m.subject, decoded.reason);
        return;
      }
      const expected = this.#subjects.of(kind, routeKeyOf(kind, decoded.value as MessageOf<K>));
      if (expected !== m.subject) {
        logMisrouted(this.#logger, kind, m.subject, expected);
        return;
      }
      const meta: MessageMeta = { subject: m.subject };
      runHandler(this.#logger, kind, m.subject, () => handler(decoded.value as MessageOf<K>, meta));
    });
  }

  async request<K extends RequestKind>(
    kind: K,
    msg: RequestInput<K>,
    options: RequestOptions = {},
  ): Promise<ReplyOf<K>> {
    this.#open();
    const spec = requestSchemas[kind];
    const timeoutMs = options.timeoutMs ?? 2000;
    const value = parseOutgoing(kind, spec.request, msg) as RequestOf<K>;
    const subject = this.#subjects.of(kind, requestRouteKeyOf(kind, value));
    let reply: Msg;
    try {
      reply = await this.#nc.request(subject, toBytes(value), { timeout: timeoutMs });
    } catch (cause) {
      if (isNoResponders(cause)) throw new BusNoRespondersError(subject, { cause });
      if (isTimeout(cause)) throw new BusTimeoutError(subject, timeoutMs, { cause });
      throw transportError(`request on ${subject}`, subject, cause);
    }
    const decoded = decodeMessage(spec.reply, reply.data);
    if (!decoded.ok) {
      throw new BusMessageError(`${kind} reply`, [{ path: '', message: decoded.reason }], { subject });
    }
    return decoded.value as ReplyOf<K>;
  }

  serve<K extends RequestKind>(
    kind: K,
    handler: (msg: RequestOf<K>, meta: MessageMeta) => ReplyInput<K> | Promise<ReplyInput<K>>,
    options: SubscribeOptions = {},
  ): Unsubscribe {
    this.#open();
    const spec = requestSchemas[kind];
    return this.#listen(this.#subjects.of(kind, options.key), kind, (m) => {
      const respond = (out: unknown): void => {
        if (!m.reply) return;
        let data: Uint8Array;
        try {
          data = encodeMessage(`${kind} reply`, spec.reply, out, m.subject);
        } catch (err) {
          this.#logger.error(
            { kind, subject: m.subject, err: errorText(err) },
            'bus: handler returned an invalid reply',
          );
          data = encodeMessage(`${kind} reply`, spec.reply, spec.failure(errorText(err)), m.subject);
        }
        if (!this.#nc.isClosed()) m.respond(data);
      };
      const decoded = decodeMessage(spec.request, m.data);
      if (!decoded.ok) {
        logRejected(this.#logger, kind, m.subject, decoded.reason);
        respond(spec.failure(`invalid ${kind}: ${decoded.reason}`));
        return;
      }
      const expected = this.#subjects.of(kind, requestRouteKeyOf(kind, decoded.value as RequestOf<K>));
      if (expected !== m.subject) {
        logMisrouted(this.#logger, kind, m.subject, expected);
        respond(spec.failure(`${kind} names another replica than its subject`));
        return;
      }
      const fail = (err: unknown): void => {
        this.#logger.error({ kind, subject: m.subject, err: errorText(err) }, 'bus: handler failed');
        respond(spec.failure(errorText(err)));
      };
      try {
        Promise.resolve(handler(decoded.value as RequestOf<K>, { subject: m.subject })).then(respond, fail);
      } catch (err) {
        fail(err);
      }
    });
  }

  async publishAdminEvent(event: AdminEventInput | SignedAdminEnvelope): Promise<number> {
    this.#open();
    const { type, data } = encodeAdminMessage(event);
    const subject = this.#subjects.admin(type);
    await this.#ensureStream();
    try {
      const ack = await this.#jetstream().publish(subject, data, {
        expect: { streamName: this.#subjects.adminStream },
      });
      return ack.seq;
    } catch (cause) {
      throw transportError(`publish admin event on ${subject}`, subject, cause);
    }
  }

  async replayAdminEvents(fromSeq = 1): Promise<AdminEventRecord[]> {
    this.#open();
    const jsm = await this.#ensureStream();
    const stream = this.#subjects.adminStream;
    const info = await jsm.streams.info(stream);
    const last = info.state.last_seq;
    const start = Math.max(1, fromSeq);
    if (info.state.messages === 0 || last < start) return [];
    const out: AdminEventRecord[] = [];
    let consumer: Consumer;
    try {
      consumer = await this.#jetstream().consumers.get(stream, startAt(start));
    } catch (err) {
      // No consumer now (JetStream's meta leader being elected): the same events by direct gets.
      this.#logger.warn(
        { err: errorText(err) },
        'bus: no consumer for the admin history; reading it by direct gets',
      );
      let read = start - 1;
      for await (const m of this.#directAdmin(start, last)) {
        read = m.seq;
        const rec = this.#decodeAdmin(m.subject, m.seq, m.data);
        if (rec) out.push(rec);
      }
      // A replica that answered without the end is behind: starting on part of the history would
      // authenticate and limit unlike the other dispatchers.
      if (read < last)
        throw new BusError(
          BusErrorCode.SETUP_FAILED,
          `admin history read up to ${read} of ${last} by direct gets, and no consumer can be started: ${errorText(err)}`,
          { cause: err },
        );
      return out;
    }
    const messages = await consumer.consume();
    try {
      for await (const m of messages) {
        const rec = this.#decodeAdmin(m.subject, m.seq, m.data);
        if (rec) out.push(rec);
        if (m.seq >= last) break;
      }
    } finally {
      messages.stop();
    }
    return out;
  }

  /**
   * The admin stream's messages from `from` through `last` (without it: up to
   * {@link MAX_DIRECT_GETS} of them, those there are now), read one at a time by direct gets,
   * which any current replica of the stream answers without the stream's or JetStream's leader
   * (the stream allows them).
   */
  async *#directAdmin(
    from: number,
    last?: number,
  ): AsyncGenerator<{ seq: number; subject: string; data: Uint8Array }> {
    const jsm = await jetstreamManager(this.#nc, { timeout: 1000, checkAPI: false });
    const end = last ?? from + MAX_DIRECT_GETS - 1;
    for (let seq = from; seq <= end && !this.#closed; ) {
      const m = await jsm.direct.getMessage(this.#subjects.adminStream, {
        seq,
        next_by_subj: this.#subjects.adminPattern,
      });
      if (m === null || m.seq < seq || m.seq > end) return;
      yield { seq: m.seq, subject: m.subject, data: m.data };
      seq = m.seq + 1;
    }
  }

  async subscribeAdminEvents(
    handler: Handler<AdminEventRecord>,
    options: AdminSubscribeOptions = {},
  ): Promise<Unsubscribe> {
    this.#open();
    await this.#ensureStream();
    // The next sequence to apply: a consumer started again (after a reconnect, or when the one in
    // use ended, e.g. the stream's leader died with it) resumes here, so nothing is missed or
    // applied twice.
    let next = Math.max(1, options.fromSeq ?? 1);
    let stopped = false;
    let current: { stop: () => void } | undefined;
    const handle = {
      stop: () => {
        stopped = true;
        current?.stop();
      },
    };
    this.#consumers.add(handle);
    // Consecutive failed starts: each JetStream request of a start may wait twice as long as the
    // one before (1 s, 2 s, 4 s, then 5 s). After a server dies its stream and the cluster each
    // elect a leader, and a request sent before then waits out its whole timeout: short waits
    // first resume within a second or two of the election, not in steps of the default 5 s.
    let failedStarts = 0;
    /** Applies the stream's message `seq` once, in order; `next` moves past it either way. */
    const apply = async (seq: number, subject: string, data: Uint8Array): Promise<void> => {
      if (seq < next) return;
      next = seq + 1;
      const rec = this.#decodeAdmin(subject, seq, data);
      if (!rec) return;
      // Awaited on purpose: admin events must be applied one at a time, in order.
      try {
        await handler(rec, { subject });
      } catch (err) {
        this.#logger.error({ kind: 'admin', subject, err: errorText(err) }, 'bus: handler failed');
      }
    };
    // While no consumer can be started — JetStream's meta leader is being elected after a server
    // died, and a consumer needs it — the events from `next` on are read by direct gets, so admin
    // changes published meanwhile still apply within a retry.
    const catchUp = async (): Promise<void> => {
      for await (const m of this.#directAdmin(next)) {
        if (stopped) return;
        await apply(m.seq, m.subject, m.data);
      }
    };
    const follow = async (): Promise<void> => {
      const js = jetstream(this.#nc, { timeout: Math.min(5000, 1000 * 2 ** failedStarts) });
      failedStarts++;
      const consumer = await js.consumers.get(this.#subjects.adminStream, startAt(next));
      // Heartbeats every second: a consumer whose server died (or whose stream leader moved) is
      // noticed within two missed beats and started again from `next`.
      const messages = await consumer.consume({ idle_heartbeat: 1000 });
      failedStarts = 0;
      current = { stop: () => messages.stop() };
      if (stopped) messages.stop();
      void (async () => {
        for await (const s of messages.status())
          if (s.type === 'heartbeats_missed' && s.count >= 2) {
            messages.stop();
            break;
          }
      })().catch(() => undefined);
      for await (const m of messages) await apply(m.seq, m.subject, m.data);
    };
    // Follows until unsubscribed or closed: a consumer that ends or fails is started again from
    // `next` after a short pause; a reconnect restarts it at once (its old server may be gone).
    let restart: (() => void) | undefined;
    void (async () => {
      while (!stopped && !this.#closed) {
        try {
          await follow();
        } catch (err) {
          if (!stopped && !this.#closed) {
            this.#logger.warn({ err: errorText(err), next }, 'bus: admin subscription interrupted; resuming');
            await catchUp().catch(() => undefined);
          }
        }
        if (stopped || this.#closed) break;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 250);
          restart = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        restart = undefined;
      }
    })();
    const unwatch = this.onConnectionChange((up) => {
      if (!up || stopped) return;
      if (restart !== undefined) restart();
      else current?.stop();
    });
    return () => {
      unwatch();
      this.#consumers.delete(handle);
      handle.stop();
    };
  }

  async flush(): Promise<void> {
    this.#open();
    await this.#nc.flush();
  }

  /**
   * Closes the connection at once, without draining: for a shutdown whose graceful part ran out of
   * time, when the server may not answer a drain. Also ends a drain that is still waiting.
   */
  async closeNow(): Promise<void> {
    this.#closed = true;
    for (const c of this.#consumers) c.stop();
    this.#consumers.clear();
    if (this.#owns && !this.#nc.isClosed()) await this.#nc.close();
    this.#subs.clear();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const c of this.#consumers) c.stop();
    this.#consumers.clear();
    if (this.#owns) {
      if (!this.#nc.isClosed()) await this.#nc.drain();
    } else {
      for (const s of this.#subs) s.unsubscribe();
    }
    this.#subs.clear();
  }

  #listen(subject: string, kind: string, onMsg: (m: Msg) => void): Unsubscribe {
    let sub: Subscription;
    try {
      sub = this.#nc.subscribe(subject, {
        callback: (err, m) => {
          if (err) {
            this.#logger.error({ kind, subject, err: errorText(err) }, 'bus: subscription error');
            return;
          }
          onMsg(m);
        },
      });
    } catch (cause) {
      throw transportError(`subscribe to ${subject}`, subject, cause);
    }
    this.#subs.add(sub);
    return () => {
      if (!this.#subs.delete(sub)) return;
      if (!this.#nc.isClosed() && !sub.isClosed()) sub.unsubscribe();
    };
  }

  #decodeAdmin(subject: string, seq: number, data: Uint8Array): AdminEventRecord | undefined {
    const decoded = decodeAdminMessage(data);
    if (!decoded.ok) {
      logRejected(this.#logger, 'admin', subject, decoded.reason);
      return undefined;
    }
    return { seq, subject, ...decoded.value };
  }

  #jetstream(): JetStreamClient {
    this.#js ??= jetstream(this.#nc);
    return this.#js;
  }

  #ensureStream(): Promise<JetStreamManager> {
    this.#stream ??= this.#createStream().catch((err: unknown) => {
      this.#stream = undefined;
      throw err;
    });
    return this.#stream;
  }

  async #createStream(): Promise<JetStreamManager> {
    const name = this.#subjects.adminStream;
    const pattern = this.#subjects.adminPattern;
    try {
      const jsm = await jetstreamManager(this.#nc);
      const existing = await streamConfig(jsm, name);
      if (existing === undefined) {
        const clustered = this.#nc.info?.cluster !== undefined;
        const wanted = this.#adminOptions.replicas ?? (clustered ? 3 : 1);
        const add = (replicas: number) =>
          jsm.streams.add({
            name,
            subjects: [pattern],
            storage: StorageType.File,
            max_age: (this.#adminOptions.maxAgeMs ?? 0) * 1_000_000,
            max_msgs: this.#adminOptions.maxMsgs ?? -1,
            num_replicas: replicas,
            // Any replica answers reads by sequence, without the stream's or JetStream's leader.
            allow_direct: true,
          });
        try {
          await add(wanted).catch(async (err: unknown) => {
            // A cluster with fewer JetStream servers than copies asked for: keep one, say so.
            if (!(err instanceof JetStreamApiError && err.code === INSUFFICIENT_RESOURCES) || wanted === 1)
              throw err;
            this.#logger.warn(
              { stream: name, replicas: wanted },
              'bus: too few JetStream servers for the admin stream’s copies; keeping one copy (losing that server’s disk loses the admin history)',
            );
            await add(1);
          });
        } catch (err) {
          if (!(err instanceof JetStreamApiError && err.code === STREAM_NAME_IN_USE)) throw err;
        }
      } else if (!(existing.subjects ?? []).includes(pattern)) {
        throw new BusError(
          BusErrorCode.SETUP_FAILED,
          `stream ${name} exists but does not capture ${pattern} (it captures ${(existing.subjects ?? []).join(', ')})`,
        );
      } else {
        this.#warnIfForgetful(existing);
        if (existing.allow_direct !== true)
          this.#logger.info(
            { stream: name },
            'bus: the admin stream does not allow direct gets, so dispatchers wait for a consumer to read it after a NATS server dies; allow them with `nats stream edit --allow-direct`',
          );
        if (this.#nc.info?.cluster !== undefined && (existing.num_replicas ?? 1) < 3)
          this.#logger.warn(
            { stream: name, replicas: existing.num_replicas },
            'bus: the admin stream keeps fewer than 3 copies on a NATS cluster; raise it with `nats stream edit --replicas 3`',
          );
      }
      return jsm;
    } catch (cause) {
      if (cause instanceof BusError) throw cause;
      throw new BusError(
        BusErrorCode.SETUP_FAILED,
        `cannot set up admin stream ${name}: ${errorText(cause)}`,
        {
          cause,
        },
      );
    }
  }

  /**
   * Warns when the admin stream found on the server forgets history this bus did not ask it to
   * (someone created it first with limits): dispatchers refuse a replayed signed event by its
   * nonce only while the original is still in the stream.
   */
  #warnIfForgetful(config: StreamConfig): void {
    const wanted = this.#adminOptions;
    const limits = {
      max_msgs: config.max_msgs,
      max_age: config.max_age,
      max_bytes: config.max_bytes,
      max_msgs_per_subject: config.max_msgs_per_subject,
    };
    const unasked =
      (config.max_msgs > 0 && config.max_msgs !== (wanted.maxMsgs ?? -1)) ||
      (config.max_age > 0 && config.max_age !== (wanted.maxAgeMs ?? 0) * 1_000_000) ||
      config.max_bytes > 0 ||
      (config.max_msgs_per_subject ?? 0) > 0;
    if (unasked)
      this.#logger.warn(
        { stream: config.name, ...limits },
        'bus: the admin stream drops old events; a signed admin event dropped from it could be replayed unnoticed',
      );
  }

  #open(): void {
    if (this.#closed) throw new BusError(BusErrorCode.CLOSED, 'the bus is closed');
  }
}

async function streamConfig(jsm: JetStreamManager, name: string): Promise<StreamConfig | undefined> {
  try {
    return (await jsm.streams.info(name)).config;
  } catch (err) {
    if (err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND) return undefined;
    throw err;
  }
}

function startAt(seq: number): { deliver_policy: DeliverPolicy; opt_start_seq?: number } {
  return seq <= 1
    ? { deliver_policy: DeliverPolicy.All }
    : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: seq };
}

function isNoResponders(err: unknown): boolean {
  if (err instanceof NoRespondersError) return true;
  if (err instanceof RequestError) return err.isNoResponders();
  return false;
}

function isTimeout(err: unknown): boolean {
  return err instanceof TimeoutError || (err instanceof Error && err.cause instanceof TimeoutError);
}

function transportError(what: string, subject: string, cause: unknown): BusError {
  return new BusError(BusErrorCode.TRANSPORT, `${what} failed: ${errorText(cause)}`, { subject, cause });
}

async function watchStatus(nc: NatsConnection, logger: Logger): Promise<void> {
  for await (const s of nc.status()) {
    if (s.type === 'disconnect') logger.warn({ server: s.server }, 'bus: disconnected from NATS');
    else if (s.type === 'reconnect') logger.info({ server: s.server }, 'bus: reconnected to NATS');
  }
}
