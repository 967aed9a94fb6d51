import { type Logger, silentLogger } from '@fairway/core';
import type {
  AdminSubscribeOptions,
  Bus,
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
import { DEFAULT_PREFIX, requestRouteKeyOf, routeKeyOf, Subjects, subjectMatches } from './subjects.ts';

/** Options of {@link MemoryBus}. */
export interface MemoryBusOptions {
  /** Subject prefix. @default 'fairway' */
  readonly prefix?: string;
  /** Where rejected messages and failing handlers are reported. @default silentLogger */
  readonly logger?: Logger;
}

type Reply = (data: Uint8Array) => void;

interface Subscription {
  readonly pattern: string;
  receive(subject: string, data: Uint8Array, reply: Reply | undefined): void;
}

interface AdminSubscription {
  nextSeq: number;
  running: boolean;
  readonly handler: Handler<AdminEventRecord>;
}

/**
 * The bus in one process, for embedded mode and unit tests: same subjects, same JSON encoding and
 * the same validation on receive as {@link NatsBus}, with asynchronous in-order delivery and an
 * in-memory admin history.
 */
export class MemoryBus implements Bus {
  readonly prefix: string;
  readonly #subjects: Subjects;
  readonly #logger: Logger;
  readonly #subs = new Set<Subscription>();
  readonly #queue: (() => void)[] = [];
  readonly #admin: Uint8Array[] = [];
  readonly #adminSubs = new Set<AdminSubscription>();
  #scheduled = false;
  #idle: (() => void)[] = [];
  #closed = false;

  constructor(options: MemoryBusOptions = {}) {
    this.#subjects = new Subjects(options.prefix ?? DEFAULT_PREFIX);
    this.prefix = this.#subjects.prefix;
    this.#logger = options.logger ?? silentLogger;
  }

  publish<K extends MessageKind>(kind: K, msg: MessageInput<K>): void {
    this.#open();
    const value = parseOutgoing(kind, messageSchemas[kind], msg) as MessageOf<K>;
    this.#route(this.#subjects.of(kind, routeKeyOf(kind, value)), toBytes(value), undefined);
  }

  subscribe<K extends MessageKind>(
    kind: K,
    handler: Handler<MessageOf<K>>,
    options: SubscribeOptions = {},
  ): Unsubscribe {
    this.#open();
    const schema = messageSchemas[kind];
    const sub: Subscription = {
      pattern: this.#subjects.of(kind, options.key),
      receive: (subject, data) => {
        const decoded = decodeMessage(schema, data);
        if (!decoded.ok) {
          logRejected(this.#logger, kind, subject, decoded.reason);
          return;
        }
        const expected = this.#subjects.of(kind, routeKeyOf(kind, decoded.value as MessageOf<K>));
        if (expected !== subject) {
          logMisrouted(this.#logger, kind, subject, expected);
          return;
        }
        const meta: MessageMeta = { subject };
        runHandler(this.#logger, kind, subject, () => handler(decoded.value as MessageOf<K>, meta));
      },
    };
    this.#subs.add(sub);
    return () => {
      this.#subs.delete(sub);
    };
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
    const data = toBytes(value);
    if (![...this.#subs].some((s) => subjectMatches(s.pattern, subject))) {
      throw new BusNoRespondersError(subject);
    }
    return new Promise<ReplyOf<K>>((resolve, reject) => {
      let done = false;
      const timer = setTimeout(() => {
        if (done) return;
        done = true;
        reject(new BusTimeoutError(subject, timeoutMs));
      }, timeoutMs);
      this.#route(subject, data, (replyData) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        const decoded = decodeMessage(spec.reply, replyData);
        if (decoded.ok) resolve(decoded.value as ReplyOf<K>);
        else
          reject(new BusMessageError(`${kind} reply`, [{ path: '', message: decoded.reason }], { subject }));
      });
    });
  }

  serve<K extends RequestKind>(
    kind: K,
    handler: (msg: RequestOf<K>, meta: MessageMeta) => ReplyInput<K> | Promise<ReplyInput<K>>,
    options: SubscribeOptions = {},
  ): Unsubscribe {
    this.#open();
    const spec = requestSchemas[kind];
    const sub: Subscription = {
      pattern: this.#subjects.of(kind, options.key),
      receive: (subject, data, reply) => {
        const respond = (out: unknown): void => {
          if (!reply) return;
          try {
            reply(encodeMessage(`${kind} reply`, spec.reply, out, subject));
          } catch (err) {
            this.#logger.error(
              { kind, subject, err: errorText(err) },
              'bus: handler returned an invalid reply',
            );
            reply(encodeMessage(`${kind} reply`, spec.reply, spec.failure(errorText(err)), subject));
          }
        };
        const decoded = decodeMessage(spec.request, data);
        if (!decoded.ok) {
          logRejected(this.#logger, kind, subject, decoded.reason);
          respond(spec.failure(`invalid ${kind}: ${decoded.reason}`));
          return;
        }
        const expected = this.#subjects.of(kind, requestRouteKeyOf(kind, decoded.value as RequestOf<K>));
        if (expected !== subject) {
          logMisrouted(this.#logger, kind, subject, expected);
          respond(spec.failure(`${kind} names another replica than its subject`));
          return;
        }
        const fail = (err: unknown): void => {
          this.#logger.error({ kind, subject, err: errorText(err) }, 'bus: handler failed');
          respond(spec.failure(errorText(err)));
        };
        try {
          Promise.resolve(handler(decoded.value as RequestOf<K>, { subject })).then(respond, fail);
        } catch (err) {
          fail(err);
        }
      },
    };
    this.#subs.add(sub);
    return () => {
      this.#subs.delete(sub);
    };
  }

  async publishAdminEvent(event: AdminEventInput | SignedAdminEnvelope): Promise<number> {
    this.#open();
    const { data } = encodeAdminMessage(event);
    this.#admin.push(data);
    this.#pumpAdmin();
    return this.#admin.length;
  }

  async replayAdminEvents(fromSeq = 1): Promise<AdminEventRecord[]> {
    this.#open();
    const out: AdminEventRecord[] = [];
    for (let seq = Math.max(1, fromSeq); seq <= this.#admin.length; seq++) {
      const rec = this.#decodeAdmin(seq);
      if (rec) out.push(rec);
    }
    return out;
  }

  async subscribeAdminEvents(
    handler: Handler<AdminEventRecord>,
    options: AdminSubscribeOptions = {},
  ): Promise<Unsubscribe> {
    this.#open();
    const sub: AdminSubscription = { nextSeq: Math.max(1, options.fromSeq ?? 1), running: false, handler };
    this.#adminSubs.add(sub);
    this.#pumpAdmin();
    return () => {
      this.#adminSubs.delete(sub);
    };
  }

  /**
   * Delivers raw bytes on a subject as if a foreign publisher had sent them (tests of the
   * validation boundary). With `onReply`, the bytes are a request and the reply bytes go there.
   */
  injectRaw(subject: string, data: Uint8Array | string, onReply?: (data: Uint8Array) => void): void {
    this.#route(subject, typeof data === 'string' ? new TextEncoder().encode(data) : data, onReply);
  }

  async flush(): Promise<void> {
    if (this.#queue.length === 0 && !this.#scheduled) return;
    await new Promise<void>((resolve) => this.#idle.push(resolve));
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#subs.clear();
    this.#adminSubs.clear();
    this.#queue.length = 0;
  }

  #open(): void {
    if (this.#closed) throw new BusError(BusErrorCode.CLOSED, 'the bus is closed');
  }

  #route(subject: string, data: Uint8Array, reply: Reply | undefined): void {
    for (const sub of this.#subs) {
      if (subjectMatches(sub.pattern, subject)) {
        this.#enqueue(() => {
          if (this.#subs.has(sub)) sub.receive(subject, data, reply);
        });
      }
    }
  }

  #pumpAdmin(): void {
    for (const sub of this.#adminSubs) {
      if (sub.running || sub.nextSeq > this.#admin.length) continue;
      sub.running = true;
      this.#enqueue(() => void this.#deliverAdmin(sub));
    }
  }

  /** Delivers one subscription's pending events one at a time, awaiting each handler, in order. */
  async #deliverAdmin(sub: AdminSubscription): Promise<void> {
    while (this.#adminSubs.has(sub) && sub.nextSeq <= this.#admin.length) {
      const rec = this.#decodeAdmin(sub.nextSeq++);
      if (!rec) continue;
      const subject = this.#subjects.admin(rec.event.type);
      try {
        await sub.handler(rec, { subject });
      } catch (err) {
        this.#logger.error({ kind: 'admin', subject, err: errorText(err) }, 'bus: handler failed');
      }
    }
    sub.running = false;
  }

  #decodeAdmin(seq: number): AdminEventRecord | undefined {
    const data = this.#admin[seq - 1];
    if (!data) return undefined;
    const decoded = decodeAdminMessage(data);
    if (!decoded.ok) {
      logRejected(this.#logger, 'admin', this.#subjects.adminPattern, decoded.reason);
      return undefined;
    }
    return { seq, subject: this.#subjects.admin(decoded.value.event.type), ...decoded.value };
  }

  #enqueue(task: () => void): void {
    this.#queue.push(task);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.#drain());
  }

  #drain(): void {
    // Tasks enqueued while draining run in the same pass, preserving publication order.
    for (let task = this.#queue.shift(); task; task = this.#queue.shift()) task();
    this.#scheduled = false;
    const idle = this.#idle;
    this.#idle = [];
    for (const resolve of idle) resolve();
  }
}
