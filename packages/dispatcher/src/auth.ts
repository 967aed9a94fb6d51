import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { type FairwayConfig, hashApiKey } from '@fairway/core';
import { ApiError } from './errors.ts';
import { bearerToken } from './request-headers.ts';
import { type Grants, grantsOf, type TenantDirectory } from './tenant-directory.ts';

/** Who a request authenticates as. */
export interface Principal {
  readonly tenant: string;
  /** The key's id, `sha256:<hex>` (usage accounting and key budgets). */
  readonly keyId?: string | undefined;
  readonly weight: number;
  /** App bound to the key, if any; else taken from `x-fairway-app`. */
  readonly app: string | undefined;
  /** Default SLO class for the key (or tenant), if any. */
  readonly sloClass: string | undefined;
  /** The key's own grants, then its tenant's (either may be undefined). */
  readonly grants?: readonly [Grants | undefined, Grants | undefined] | undefined;
}

/** Whether a principal may choose SLO class `name` per request beyond those below its own. */
export function mayChooseClass(p: Principal, name: string): boolean {
  return p.grants?.some((g) => g?.sloClasses?.has(name) === true) === true;
}

/** Whether a principal may send the restricted engine field `field`. */
export function mayUseEngineField(p: Principal, field: string): boolean {
  return p.grants?.some((g) => g?.engineFields?.has(field) === true) === true;
}

/** `sha256:<hex>` of an API key (defined in core, beside the config that checks keys). */
export { hashApiKey };

interface Entry {
  readonly digest: Buffer;
  readonly tenant: string;
  /** App the key is bound to, if any. */
  readonly app: string | undefined;
  /** SLO class the key itself names; else the tenant's applies. */
  readonly sloClass: string | undefined;
  /** When the key stops authenticating, ms since the epoch. */
  readonly expiresAt: number | undefined;
  readonly grants: Grants | undefined;
}

/** What a key is issued for: its tenant, and optionally an app and an SLO class of its own. */
export interface KeyGrant {
  readonly tenant: string;
  readonly app?: string | undefined;
  readonly sloClass?: string | undefined;
  /** When the key stops authenticating, ms since the epoch. @default never */
  readonly expiresAt?: number | undefined;
  /** Classes and restricted engine fields the key may use beyond its tenant's. @default none */
  readonly grants?: Grants | undefined;
}

/** A key as operators may see it: its hash (the id to revoke it by) and grant, never the secret. */
export interface KeyInfo {
  /** `sha256:<hex>` of the key. */
  readonly id: string;
  readonly tenant: string;
  readonly app: string | undefined;
  readonly sloClass: string | undefined;
  readonly expiresAt: number | undefined;
}

/** What presenting a key found: its principal, or why it does not authenticate. */
export type KeyCheck =
  | { readonly ok: true; readonly principal: Principal }
  | { readonly ok: false; readonly reason: 'unknown' | 'expired' };

/**
 * API keys → principals. Keys are held only as SHA-256 digests; a lookup hashes the presented key
 * and compares digests in constant time, so neither timing nor memory reveals a key. A key's
 * tenant is looked up in the {@link TenantDirectory} on every request, so a weight or SLO class
 * changed by an admin event applies at once, and keys of a tenant that no longer exists fail.
 */
export class KeyRing {
  readonly #byHash = new Map<string, Entry>();
  readonly #tenants: TenantDirectory;

  constructor(tenants: TenantDirectory) {
    this.#tenants = tenants;
  }

  /** The tenant a key (by its hash) belongs to, if it is on the ring. */
  ownerOf(hash: string): string | undefined {
    return this.#byHash.get(hash.slice('sha256:'.length))?.tenant;
  }

  /** Adds (or re-issues) a key by its stored hash (`sha256:<hex>`). */
  add(hash: string, grant: KeyGrant): void {
    const hex = hash.slice('sha256:'.length);
    this.#byHash.set(hex, {
      digest: Buffer.from(hex, 'hex'),
      tenant: grant.tenant,
      app: grant.app,
      sloClass: grant.sloClass,
      expiresAt: grant.expiresAt,
      grants: grant.grants,
    });
  }

  /** Revokes a key by its hash; true if it was present. */
  revoke(hash: string): boolean {
    return this.#byHash.delete(hash.slice('sha256:'.length));
  }

  /** Revokes every key of a tenant; returns how many. */
  revokeTenant(tenant: string): number {
    let n = 0;
    for (const [hex, e] of this.#byHash) {
      if (e.tenant !== tenant) continue;
      this.#byHash.delete(hex);
      n++;
    }
    return n;
  }

  /**
   * What a presented key is at `nowMs`: its principal, `unknown` (not on the ring, or its tenant
   * is gone) or `expired`.
   */
  check(key: string, nowMs: number): KeyCheck {
    const digest = createHash('sha256').update(key, 'utf8').digest();
    const entry = this.#byHash.get(digest.toString('hex'));
    // The map lookup already matched; the constant-time check guards against a future change of lookup.
    if (!entry || !timingSafeEqual(entry.digest, digest)) return UNKNOWN;
    return this.#checked(entry, nowMs);
  }

  /** What the key with id (hash) `sha256:<hex>` is at `nowMs`, as {@link check} says of a presented key. */
  checkId(id: string, nowMs: number): KeyCheck {
    const entry = this.#byHash.get(id.slice('sha256:'.length));
    return entry === undefined ? UNKNOWN : this.#checked(entry, nowMs);
  }

  #checked(entry: Entry, nowMs: number): KeyCheck {
    const tenant = this.#tenants.get(entry.tenant);
    if (tenant === undefined) return UNKNOWN;
    if (entry.expiresAt !== undefined && nowMs >= entry.expiresAt) return EXPIRED;
    return {
      ok: true,
      principal: {
        tenant: tenant.id,
        keyId: `sha256:${entry.digest.toString('hex')}`,
        weight: tenant.weight,
        app: entry.app,
        sloClass: entry.sloClass ?? tenant.sloClass,
        ...(entry.grants !== undefined || tenant.grants !== undefined
          ? { grants: [entry.grants, tenant.grants] as const }
          : {}),
      },
    };
  }

  /** The principal for a presented key at `nowMs` (default: no expiry checked), or undefined. */
  authenticate(key: string, nowMs = Number.NEGATIVE_INFINITY): Principal | undefined {
    const c = this.check(key, nowMs);
    return c.ok ? c.principal : undefined;
  }

  /** The keys on the ring, of one tenant or all, ordered by tenant then id; never a secret. */
  list(tenant?: string): KeyInfo[] {
    const out: KeyInfo[] = [];
    for (const [hex, e] of this.#byHash) {
      if (tenant !== undefined && e.tenant !== tenant) continue;
      out.push({
        id: `sha256:${hex}`,
        tenant: e.tenant,
        app: e.app,
        sloClass: e.sloClass,
        expiresAt: e.expiresAt,
      });
    }
    return out.sort((a, b) =>
      a.tenant === b.tenant ? (a.id < b.id ? -1 : 1) : a.tenant < b.tenant ? -1 : 1,
    );
  }

  /** Whether a key (by its hash) is on the ring. */
  holds(hash: string): boolean {
    return this.#byHash.has(hash.slice('sha256:'.length));
  }

  get size(): number {
    return this.#byHash.size;
  }
}

const UNKNOWN: KeyCheck = { ok: false, reason: 'unknown' };
const EXPIRED: KeyCheck = { ok: false, reason: 'expired' };

/** Header an in-process caller (the Batch API) names its key by: `<process secret>.<key id>`. */
export const INTERNAL_KEY_HEADER = 'x-fairway-internal-key';

/**
 * Who a request is: the key in its `Authorization: Bearer <key>`, or — for requests this process
 * makes itself (batch lines, through `app.inject`) — the key named by id in
 * {@link INTERNAL_KEY_HEADER} with a random secret only this process knows. Either way the key is
 * checked on the ring at the request's time, so a revoked or expired key stops its batches too,
 * and usage is charged to the key that made them; no key is ever added for internal use.
 */
export class Authenticator {
  readonly #keys: KeyRing;
  readonly #now: () => number;
  readonly #secret = randomBytes(32).toString('hex');

  constructor(keys: KeyRing, now: () => number) {
    this.#keys = keys;
    this.#now = now;
  }

  /** The principal of a request; throws the 401 a client sees for a missing, unknown or expired key. */
  principal(headers: Record<string, string | string[] | undefined>): Principal {
    const internal = headers[INTERNAL_KEY_HEADER];
    if (internal !== undefined) return this.#internal(internal);
    const key = bearerToken(headers);
    if (key === undefined)
      throw new ApiError('MISSING_API_KEY', 'missing API key: send "Authorization: Bearer <key>"');
    return principalOf(this.#keys.check(key, this.#now()));
  }

  /** The header that makes an in-process request authenticate as the key with id `keyId`. */
  internalHeader(keyId: string): Record<string, string> {
    return { [INTERNAL_KEY_HEADER]: `${this.#secret}.${keyId}` };
  }

  #internal(value: string | string[]): Principal {
    const text = Array.isArray(value) ? '' : value;
    const dot = text.indexOf('.');
    const given = Buffer.from(dot < 0 ? '' : text.slice(0, dot));
    const expected = Buffer.from(this.#secret);
    if (given.length !== expected.length || !timingSafeEqual(given, expected))
      throw new ApiError('INVALID_API_KEY', 'invalid API key');
    return principalOf(this.#keys.checkId(text.slice(dot + 1), this.#now()));
  }
}

function principalOf(c: KeyCheck): Principal {
  if (c.ok) return c.principal;
  throw new ApiError('INVALID_API_KEY', c.reason === 'expired' ? 'API key expired' : 'invalid API key');
}

const UNIT_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * When a key expires, from ms since the epoch, an ISO-8601 time or a duration from `nowMs` (`30d`,
 * `12h`, `90m`): the time in ms, or why it cannot be one (`invalid`, or `past` when not after
 * `nowMs`). The admin API and `fairway admin key-add --expires` read expiries alike.
 */
export function keyExpiry(value: number | string, nowMs: number): number | 'invalid' | 'past' {
  const d = typeof value === 'string' ? /^(\d+)([mhd])$/.exec(value) : null;
  const at =
    typeof value === 'number'
      ? value
      : d
        ? nowMs + Number(d[1]) * UNIT_MS[d[2] as keyof typeof UNIT_MS]
        : Date.parse(value);
  if (!Number.isFinite(at)) return 'invalid';
  return at <= nowMs ? 'past' : at;
}

/** A new API key: `sk-fw-` and 32 random bytes in base64url. */
export function newApiKey(): string {
  return `sk-fw-${randomBytes(32).toString('base64url')}`;
}

/**
 * A check of a shared bearer token (operator or admin token) in constant time: true when the
 * request's `Authorization: Bearer <token>` is `token`.
 */
export function bearerTokenCheck(
  token: string,
): (headers: Record<string, string | string[] | undefined>) => boolean {
  const expected = sha256(token);
  return (headers) => {
    const given = bearerToken(headers);
    return given !== undefined && timingSafeEqual(sha256(given), expected);
  };
}

const sha256 = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

/**
 * The key ring of a config file: every tenant's keys, stored by hash (plain demo keys are hashed
 * here and not kept). A key's app defaults to none and its SLO class to its tenant's.
 */
export function keyRingFromConfig(config: FairwayConfig, tenants: TenantDirectory): KeyRing {
  const ring = new KeyRing(tenants);
  for (const t of config.tenants) {
    for (const k of t.keys)
      ring.add(k.hash ?? hashApiKey(k.key ?? ''), {
        tenant: t.id,
        app: k.app,
        sloClass: k.sloClass,
        grants: grantsOf(k),
      });
  }
  return ring;
}
