import { readFileSync } from 'node:fs';
import {
  type AdminEvent,
  type AdminEventRecord,
  type Bus,
  OperatorSigner,
  OperatorVerifier,
  type Unsubscribe,
} from '@fairway/bus';
import { configIdSchema, type Logger, LogThrottle } from '@fairway/core';
import type { KeyRing } from './auth.ts';
import { DispatcherError, DispatcherErrorCode } from './errors.ts';
import type { AdminApiSettings } from './routes/admin-api.ts';
import type { TenantDirectory } from './tenant-directory.ts';

/** What applying one admin event did. */
export type AdminOutcome =
  | { readonly applied: true }
  /** The event was valid on the bus but names something this dispatcher cannot act on. */
  | { readonly applied: false; readonly reason: string };

/**
 * Which admin events a dispatcher believes:
 * - `signed`: only events signed by one of the verifier's operator keys (any bus, the default
 *   whenever a public key is configured);
 * - `none`: no event at all — a dispatcher on NATS without an operator public key, so that bus
 *   credentials alone never change tenants, keys or limits; the config file still applies;
 * - `in-process`: unsigned events too, only for the in-process bus of `fairway up`, which nothing
 *   outside the process can publish on (the process already holds the key ring it would protect).
 */
export type AdminTrust =
  | { readonly kind: 'signed'; readonly verifier: OperatorVerifier }
  | { readonly kind: 'none' }
  | { readonly kind: 'in-process' };

/**
 * The trust of a dispatcher: the operator public keys in `publicKeyFiles` when there are any,
 * otherwise `in-process` on the in-process bus and `none` on NATS (secure by default: bus
 * credentials alone never change tenants, keys or limits). Throws a `DispatcherError` naming an
 * unreadable or invalid key file.
 */
export function adminTrustOf(busKind: 'nats' | 'memory', publicKeyFiles: readonly string[]): AdminTrust {
  if (publicKeyFiles.length === 0) return busKind === 'memory' ? { kind: 'in-process' } : { kind: 'none' };
  const pems = publicKeyFiles.map((file) => readSecretFile(file, 'operator public key'));
  try {
    return { kind: 'signed', verifier: OperatorVerifier.fromPems(pems, publicKeyFiles) };
  } catch (cause) {
    throw new DispatcherError(
      DispatcherErrorCode.OPERATOR_KEY_INVALID,
      publicKeyFiles.join(','),
      cause instanceof Error ? cause.message : String(cause),
      { cause },
    );
  }
}

function readSecretFile(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (cause) {
    throw new DispatcherError(
      DispatcherErrorCode.OPERATOR_KEY_INVALID,
      file,
      `cannot read ${what} ${file}: ${(cause as NodeJS.ErrnoException).code ?? 'unreadable'}`,
      { cause },
    );
  }
}

/**
 * The admin API's settings from its files: the bearer token (trimmed; at least 16 characters) and
 * the operator private key that signs its writes. Throws a `DispatcherError` naming a file that
 * is unreadable or holds no usable secret (never quoting it).
 */
export function adminApiSettingsOf(
  tokenFile: string | undefined,
  operatorKeyFile: string | undefined,
): AdminApiSettings {
  let token: string | undefined;
  if (tokenFile !== undefined) {
    token = readSecretFile(tokenFile, 'admin token file').toString('utf8').trim();
    if (token.length < 16)
      throw new DispatcherError(
        DispatcherErrorCode.OPERATOR_KEY_INVALID,
        tokenFile,
        `admin token file ${tokenFile} must hold a token of at least 16 characters`,
      );
  }
  let signer: OperatorSigner | undefined;
  if (operatorKeyFile !== undefined) {
    const pem = readSecretFile(operatorKeyFile, 'operator private key');
    try {
      signer = OperatorSigner.fromPem(pem, operatorKeyFile);
    } catch (cause) {
      throw new DispatcherError(
        DispatcherErrorCode.OPERATOR_KEY_INVALID,
        operatorKeyFile,
        cause instanceof Error ? cause.message : String(cause),
        { cause },
      );
    }
  }
  return { token, signer };
}

/** Options of {@link AdminEventApplier}. */
export interface AdminEventApplierOptions {
  /** Whose events are applied; anything else is refused and logged. */
  readonly trust: AdminTrust;
  /** This fleet's subject prefix: signed events must name it. */
  readonly fleet: string;
  readonly keys: KeyRing;
  readonly tenants: TenantDirectory;
  /** SLO classes a key may name. */
  readonly sloClasses: ReadonlySet<string>;
  /** Called with every tenant an event adds (bounded metric labels). @default none */
  readonly onTenant?: ((tenant: string) => void) | undefined;
  readonly logger: Logger;
}

const APPLIED: AdminOutcome = { applied: true };

/**
 * Applies operator changes — tenants, keys and limits — to one dispatcher's key ring and tenant
 * directory, in stream order. Every dispatcher applies the same events in the same order, so all
 * of them authenticate, weigh and limit alike; an event that cannot apply (a key for a tenant that
 * does not exist) is skipped with a warning on every dispatcher alike.
 */
export class AdminEventApplier {
  readonly #o: AdminEventApplierOptions;
  #lastSeq = 0;
  /** Nonces of the events applied so far: each signed event applies once. */
  readonly #nonces = new Set<string>();
  /** Anyone allowed on the stream can publish refused events: their lines are throttled. */
  readonly #refusals = new LogThrottle();
  /** Key hashes revoked so far: a revoked key is never added again (issue a new key instead). */
  readonly #revoked = new Set<string>();

  constructor(options: AdminEventApplierOptions) {
    this.#o = options;
  }

  /** Logs, once at start, what this dispatcher will believe — loudly when it believes nothing. */
  announce(): void {
    const trust = this.#o.trust;
    const log = this.#o.logger;
    if (trust.kind === 'none')
      log.warn(
        {},
        'admin: no operator public key configured (FAIRWAY_OPERATOR_PUBLIC_KEY_FILE or bus.operatorPublicKeyFiles): every admin event on the bus is refused; tenants and keys come from the config file only',
      );
    else if (trust.kind === 'signed')
      log.info(
        { keyIds: trust.verifier.keyIds },
        'admin: applying admin events signed by these operator keys',
      );
    else log.info({}, 'admin: in-process bus, admin events are applied unsigned');
  }

  /** Sequence number of the last event applied or skipped; 0 before the first. */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /**
   * Applies one event of the stream; events at or below `lastSeq` (redeliveries) are ignored. An
   * event the trust setting refuses — unsigned, signed by an unknown key, a bad signature, or a
   * copy of one already applied (same nonce) — is logged with its subject and reason and skipped.
   * Every dispatcher reads the same stream in the same order, so all refuse the same events.
   */
  apply(record: AdminEventRecord): AdminOutcome {
    if (record.seq <= this.#lastSeq)
      return { applied: false, reason: `sequence ${record.seq} already applied` };
    this.#lastSeq = record.seq;
    const log = this.#o.logger;
    const refusal = this.#refusal(record);
    if (refusal !== undefined) {
      this.#refusals.warn(
        log,
        // The event type and the reason's fixed opening ("bad signature for"): one line per kind.
        `${record.event.type} ${refusal.split(/[ "]/, 3).join(' ')}`,
        {
          seq: record.seq,
          type: record.event.type,
          subject: record.subject,
          keyId: record.signed?.keyId,
          by: record.event.by,
          reason: refusal,
        },
        'admin: event refused',
      );
      return { applied: false, reason: refusal };
    }
    if (record.event.nonce !== undefined) this.#nonces.add(record.event.nonce);
    const outcome = this.#apply(record.event);
    if (outcome.applied) log.info({ seq: record.seq, type: record.event.type }, 'admin: event applied');
    else
      log.warn({ seq: record.seq, type: record.event.type, reason: outcome.reason }, 'admin: event skipped');
    return outcome;
  }

  #refusal(record: AdminEventRecord): string | undefined {
    const trust = this.#o.trust;
    if (trust.kind === 'none') return 'no operator public key is configured, so admin events are not applied';
    if (trust.kind === 'signed') {
      if (record.signed === undefined) return 'unsigned';
      const check = trust.verifier.check(record.signed, record.event, this.#o.fleet);
      if (!check.ok) return check.reason;
    }
    const nonce = record.event.nonce;
    if (nonce !== undefined && this.#nonces.has(nonce))
      return 'replayed: an event with this nonce was already applied';
    return undefined;
  }

  #apply(e: AdminEvent): AdminOutcome {
    const { keys, tenants } = this.#o;
    switch (e.type) {
      case 'tenantUpsert': {
        // Tenant ids scope users, windows and metric labels: the config file's alphabet only.
        if (!configIdSchema.safeParse(e.tenant.id).success)
          return { applied: false, reason: 'tenant id must be 1-64 letters, digits, ".", "_", ":" or "-"' };
        if (e.tenant.sloClass !== undefined && !this.#o.sloClasses.has(e.tenant.sloClass))
          return { applied: false, reason: `unknown SLO class "${e.tenant.sloClass}"` };
        tenants.upsertTenant({
          id: e.tenant.id,
          weight: e.tenant.weight,
          sloClass: e.tenant.sloClass,
          limits: e.tenant.limits,
        });
        this.#o.onTenant?.(e.tenant.id);
        return APPLIED;
      }
      case 'tenantDelete':
        if (!tenants.deleteTenant(e.tenantId)) return { applied: false, reason: `no tenant "${e.tenantId}"` };
        keys.revokeTenant(e.tenantId);
        return APPLIED;
      case 'keyAdd':
        if (!tenants.has(e.tenantId)) return { applied: false, reason: `no tenant "${e.tenantId}"` };
        if (e.sloClass !== undefined && !this.#o.sloClasses.has(e.sloClass))
          return { applied: false, reason: `unknown SLO class "${e.sloClass}"` };
        {
          // A key authenticates as one tenant; re-issuing it to another would hand that tenant
          // the first one's traffic and bill. The owner must revoke it first.
          const owner = keys.ownerOf(e.keyHash);
          if (owner !== undefined && owner !== e.tenantId)
            return {
              applied: false,
              reason: `key already belongs to tenant "${owner}"; refused for tenant "${e.tenantId}"`,
            };
        }
        if (this.#revoked.has(e.keyHash))
          return { applied: false, reason: 'this key was revoked; issue a new key' };
        keys.add(e.keyHash, { tenant: e.tenantId, app: e.app, sloClass: e.sloClass, expiresAt: e.expiresAt });
        return APPLIED;
      case 'keyRevoke':
        this.#revoked.add(e.keyHash);
        return keys.revoke(e.keyHash) ? APPLIED : { applied: false, reason: 'no such key' };
      case 'limitsSet':
        return tenants.setLimits(e.scope, e.id, e.limits)
          ? APPLIED
          : { applied: false, reason: `no ${e.scope} "${e.id ?? ''}"` };
      case 'quotaSet':
        return tenants.setQuotas(e.scope, e.id, e.quotas)
          ? APPLIED
          : { applied: false, reason: `no ${e.scope} "${e.id ?? ''}"` };
    }
  }
}

/**
 * Brings `applier` up to date with the bus's admin history (every stored event, in order), then
 * keeps applying new events as they are published. Resolves once the stored history is applied,
 * so a dispatcher that awaits it before serving starts with the same view as the others.
 */
export async function followAdminEvents(bus: Bus, applier: AdminEventApplier): Promise<Unsubscribe> {
  applier.announce();
  for (const record of await bus.replayAdminEvents(applier.lastSeq + 1)) applier.apply(record);
  return bus.subscribeAdminEvents(
    (record) => {
      applier.apply(record);
    },
    { fromSeq: applier.lastSeq + 1 },
  );
}
