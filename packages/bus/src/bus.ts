import type {
  AdminEventInput,
  AdminEventRecord,
  MessageInput,
  MessageKind,
  MessageOf,
  ReplyInput,
  ReplyOf,
  RequestInput,
  RequestKind,
  RequestOf,
  SignedAdminEnvelope,
} from './messages.ts';

/** Stops a subscription; calling it twice is harmless. */
export type Unsubscribe = () => void;

/** Where a received message came from. */
export interface MessageMeta {
  readonly subject: string;
}

/** Receives validated messages; a throw or rejection is logged and the subscription survives. */
export type Handler<T> = (msg: T, meta: MessageMeta) => void | Promise<void>;

/** Options of {@link Bus.subscribe} and {@link Bus.serve}. */
export interface SubscribeOptions {
  /**
   * Only messages routed to this id: the replica for registrations, heartbeats and commands, the
   * dispatcher for assignments, the pool for desired-replica signals. @default every id
   */
  readonly key?: string;
}

/**
 * How a {@link Bus.deliver} ended: a subscriber received it; nobody subscribed to its subject for
 * `awaitSubscriberMs` (its addressee is gone — NATS knows at once); or no answer in time (the bus
 * may be reconnecting: the message may still arrive).
 */
export type Delivery = 'delivered' | 'no_responders' | 'timeout';

/** Options of {@link Bus.request}. */
export interface RequestOptions {
  /** How long to wait for the reply, ms. @default 2000 */
  readonly timeoutMs?: number;
}

/** Options of {@link Bus.deliver}. */
export interface DeliverOptions extends RequestOptions {
  /**
   * How long a subject nobody subscribes to is tried again before `no_responders` is answered, ms.
   * A subscriber that is alive may have no subscription for a moment: after a NATS restart every
   * client reconnects on its own schedule and subscribes again only then, so a sender back first
   * finds its addressee missing. @default 0 (answered at once)
   */
  readonly awaitSubscriberMs?: number;
}

/** Options of {@link Bus.subscribeAdminEvents}. */
export interface AdminSubscribeOptions {
  /** First stream sequence to deliver; earlier events are skipped. @default 1 (the whole history) */
  readonly fromSeq?: number;
}

/**
 * fairway's event bus: typed publish/subscribe and request/reply between dispatchers, node agents
 * and operators, plus the durable, replayable admin-event history. {@link NatsBus} runs it over
 * NATS and JetStream; {@link MemoryBus} runs it in one process (embedded mode, unit tests). Every
 * received message is validated against its schema before a handler sees it.
 */
export interface Bus {
  /** The subject prefix this bus publishes and subscribes under. */
  readonly prefix: string;

  /** Publishes a message; throws `BusMessageError` if it fails its schema. Fire-and-forget. */
  publish<K extends MessageKind>(kind: K, msg: MessageInput<K>): void;

  /**
   * Publishes a message and waits for a subscriber to acknowledge receiving it, so a sender learns
   * when its addressee is gone (`no_responders`). Absent on a bus whose subscribers cannot vanish
   * one by one (the in-process one): `publish` there.
   */
  deliver?<K extends MessageKind>(kind: K, msg: MessageInput<K>, options?: DeliverOptions): Promise<Delivery>;

  /**
   * Delivers every valid message of `kind` (optionally only those routed to `options.key`); a
   * message sent with {@link Bus.deliver} is acknowledged on receipt.
   */
  subscribe<K extends MessageKind>(
    kind: K,
    handler: Handler<MessageOf<K>>,
    options?: SubscribeOptions,
  ): Unsubscribe;

  /**
   * Sends a request and resolves with the validated reply; rejects with `BusTimeoutError`,
   * `BusNoRespondersError` or `BusMessageError` (invalid reply).
   */
  request<K extends RequestKind>(
    kind: K,
    msg: RequestInput<K>,
    options?: RequestOptions,
  ): Promise<ReplyOf<K>>;

  /**
   * Answers requests of `kind`. An invalid request is answered with a failure reply naming the
   * offending fields; a handler that throws is answered with a failure reply carrying its message.
   */
  serve<K extends RequestKind>(
    kind: K,
    handler: (msg: RequestOf<K>, meta: MessageMeta) => ReplyInput<K> | Promise<ReplyInput<K>>,
    options?: SubscribeOptions,
  ): Unsubscribe;

  /**
   * Appends an admin event — signed by an operator key (`OperatorSigner.sign`) or bare — to the
   * durable history; resolves with its stream sequence number. Dispatchers on NATS apply only
   * signed events from a key they trust.
   */
  publishAdminEvent(event: AdminEventInput | SignedAdminEnvelope): Promise<number>;

  /** The admin events with sequence ≥ `fromSeq` stored now, in order. @default fromSeq 1 */
  replayAdminEvents(fromSeq?: number): Promise<AdminEventRecord[]>;

  /**
   * Delivers stored admin events from `options.fromSeq`, then new ones as they are published, in
   * sequence order. Resolves once the subscription is in place.
   */
  subscribeAdminEvents(
    handler: Handler<AdminEventRecord>,
    options?: AdminSubscribeOptions,
  ): Promise<Unsubscribe>;

  /**
   * Calls `listener` with false when the connection to the server is lost and with true when it is
   * back, so consumers can tell "the bus is down" from "a sender went silent". Absent on a bus that
   * cannot disconnect (the in-process one).
   */
  onConnectionChange?(listener: (connected: boolean) => void): Unsubscribe;

  /** Resolves once everything published so far has reached the server (or the in-process queue). */
  flush(): Promise<void>;

  /** Stops all subscriptions and releases the connection. */
  close(): Promise<void>;
}
