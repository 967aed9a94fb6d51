/**
 * Every NATS subject fairway uses, built in one place under a configurable prefix:
 *
 * Every message whose subject names a route key (replica, dispatcher, pool) is delivered only if
 * its payload names the same key, so NATS subject permissions per identity bind the payload too.
 *
 * | kind | subject | routed by |
 * |---|---|---|
 * | registration | `<p>.replica.<replicaId>.register` | replica |
 * | heartbeat | `<p>.replica.<replicaId>.heartbeat` | replica |
 * | discover | `<p>.replica.discover` | — |
 * | replicaUnavailable | `<p>.replica.<replicaId>.unavailable` | replica |
 * | kvEvents | `<p>.replica.<replicaId>.kv` | replica |
 * | assignment | `<p>.dispatcher.<dispatcherId>.assign` | dispatcher that holds the connection |
 * | evict | `<p>.replica.<replicaId>.evict` | replica whose requests go (every dispatcher listens) |
 * | desiredReplicas | `<p>.pool.<pool>.desired` | pool |
 * | controlReport | `<p>.control.<dispatcherId>.report` | dispatcher that reports |
 * | controlRoutes | `<p>.control.routes` | — (every dispatcher) |
 * | appSamples | `<p>.control.<dispatcherId>.samples` | dispatcher that learned them |
 * | quotaAlert | `<p>.quota.alert` | — |
 * | prefixRoute | `<p>.dispatcher.<dispatcherId>.prefix` | dispatcher that placed the request |
 * | command (request/reply) | `<p>.node.<replicaId>.command` | replica |
 * | admin (JetStream) | `<p>.admin.<type>` in stream `<p>_admin` | — |
 */
import { BusError, BusErrorCode } from './errors.ts';
import type { MessageKind, MessageOf, RequestKind, RequestOf } from './messages.ts';

/** The default subject prefix. */
export const DEFAULT_PREFIX = 'fairway';

const PREFIX_RE = /^[^\s.*>]+(\.[^\s.*>]+)*$/;

/**
 * Encodes an id as one subject token: ids may hold `.` (a token separator) or other characters
 * NATS gives meaning to, so everything but letters, digits, `_`, `-` and `:` is percent-encoded.
 */
export function subjectToken(value: string): string {
  if (value.length === 0) {
    throw new BusError(BusErrorCode.INVALID_SUBJECT, 'a subject token must not be empty');
  }
  return value.replace(/[^A-Za-z0-9_:-]/gu, (ch) =>
    Array.from(new TextEncoder().encode(ch), (b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join(
      '',
    ),
  );
}

/** Checks a subject prefix (`fairway`, `t-1a2b.fleet`): dot-separated tokens, no wildcards or spaces. */
export function validatePrefix(prefix: string): string {
  if (!PREFIX_RE.test(prefix)) {
    throw new BusError(
      BusErrorCode.INVALID_SUBJECT,
      `prefix "${prefix}" is not a valid NATS subject prefix: use dot-separated tokens without spaces, "*" or ">"`,
    );
  }
  return prefix;
}

/** The route key of a message: the id its subject is addressed to, or `undefined` for broadcasts. */
export function routeKeyOf<K extends MessageKind>(kind: K, msg: MessageOf<K>): string | undefined {
  switch (kind) {
    case 'registration':
    case 'heartbeat':
    case 'evict':
    case 'replicaUnavailable':
    case 'kvEvents':
      return (msg as MessageOf<'registration' | 'heartbeat' | 'evict' | 'replicaUnavailable' | 'kvEvents'>)
        .replicaId;
    case 'assignment':
      return (msg as MessageOf<'assignment'>).dispatcherId;
    case 'desiredReplicas':
      return (msg as MessageOf<'desiredReplicas'>).pool;
    case 'controlReport':
      return (msg as MessageOf<'controlReport'>).dispatcherId;
    case 'appSamples':
      return (msg as MessageOf<'appSamples'>).dispatcherId;
    case 'prefixRoute':
      return (msg as MessageOf<'prefixRoute'>).dispatcherId;
    case 'sequenceReport':
      return (msg as MessageOf<'sequenceReport'>).dispatcherId;
    case 'discover':
    case 'controlRoutes':
    case 'quotaAlert':
      return undefined;
    default:
      return assertNever(kind);
  }
}

/** The route key of a request: the replica a node command is for. */
export function requestRouteKeyOf<K extends RequestKind>(_kind: K, msg: RequestOf<K>): string {
  return msg.replicaId;
}

function assertNever(x: never): never {
  throw new BusError(BusErrorCode.INVALID_SUBJECT, `unknown message kind ${String(x)}`);
}

/** Builds the subjects of one prefix. */
export class Subjects {
  readonly prefix: string;

  constructor(prefix: string = DEFAULT_PREFIX) {
    this.prefix = validatePrefix(prefix);
  }

  /**
   * The subject of a message of `kind` routed to `key`; with `key` undefined, the pattern matching
   * every key of that kind (`*`).
   */
  of(kind: MessageKind | RequestKind, key?: string): string {
    const p = this.prefix;
    const k = key === undefined ? '*' : subjectToken(key);
    switch (kind) {
      case 'registration':
        return `${p}.replica.${k}.register`;
      case 'heartbeat':
        return `${p}.replica.${k}.heartbeat`;
      case 'discover':
        return `${p}.replica.discover`;
      case 'replicaUnavailable':
        return `${p}.replica.${k}.unavailable`;
      case 'kvEvents':
        return `${p}.replica.${k}.kv`;
      case 'assignment':
        return `${p}.dispatcher.${k}.assign`;
      case 'evict':
        return `${p}.replica.${k}.evict`;
      case 'desiredReplicas':
        return `${p}.pool.${k}.desired`;
      case 'controlReport':
        return `${p}.control.${k}.report`;
      case 'controlRoutes':
        return `${p}.control.routes`;
      case 'appSamples':
        return `${p}.control.${k}.samples`;
      case 'quotaAlert':
        return `${p}.quota.alert`;
      case 'prefixRoute':
        return `${p}.dispatcher.${k}.prefix`;
      case 'sequenceReport':
        return `${p}.dispatcher.${k}.sequences`;
      case 'command':
        return `${p}.node.${k}.command`;
      default:
        return assertNever(kind);
    }
  }

  /** The subject an admin event of `type` is published on. */
  admin(type: string): string {
    return `${this.prefix}.admin.${subjectToken(type)}`;
  }

  /** The pattern the admin stream captures. */
  get adminPattern(): string {
    return `${this.prefix}.admin.>`;
  }

  /** The JetStream stream holding admin events (stream names cannot contain dots). */
  get adminStream(): string {
    return `${this.prefix.replace(/[^A-Za-z0-9_-]/gu, '_')}_admin`;
  }
}

/**
 * Whether a NATS subject matches a pattern with `*` (one token) and `>` (one or more trailing
 * tokens) wildcards; the in-process bus routes with it exactly as NATS does.
 */
export function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split('.');
  const s = subject.split('.');
  for (let i = 0; i < p.length; i++) {
    const tok = p[i];
    if (tok === '>') return s.length > i;
    if (i >= s.length) return false;
    if (tok !== '*' && tok !== s[i]) return false;
  }
  return p.length === s.length;
}
